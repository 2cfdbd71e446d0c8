"""Before anything changes: pick the GPUs, plan the caps, estimate the time, print a dry run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powersweep.sweep.axes import axis_named
from powersweep.sweep.estimate import bound_run_s, estimate_wall_s, planned_spacing_w
from powersweep.sweep.gpu import PowerEnvelope
from powersweep.sweep.gpu_choice import gpu_meta, select_gpus
from powersweep.sweep.options import SweepOptions
from powersweep.sweep.options_check import validate
from powersweep.sweep.planning.caps import uniform_envelope
from powersweep.sweep.planning.clock_points import SweepPoint
from powersweep.sweep.planning.undervolt_steps import UndervoltPlan
from powersweep.sweep.records.journal import Journal, default_state_dir
from powersweep.sweep.rig import RigFactory
from powersweep.sweep.server.discovery import DEFAULT_PORTS
from powersweep.sweep.server.local import local_server_pids


@dataclass(frozen=True)
class DryRun:
    """What a sweep would do (``--dry-run``): nothing was changed to find it out.

    Attributes:
        gpus: ``run.json``-style facts of each GPU (envelope and limit in force).
        selection: Why these GPUs (``run.json``'s ``gpu_selection.reason``).
        envelope: The envelope every GPU shares (the intersection of theirs).
        caps_w: Caps in the order they would be measured.
        estimated_wall_s: Rough wall time of the sweep (None on virtual time, which passes as
            fast as the CPU allows).
        journal_path: Where the restore journal would go (None: not needed).
        points: Clock-lock points in measuring order (empty on the power axis).
        axis: The sweep's axis.
        estimated_run_s: Rough run time of the sweep (as on real hardware).
        bound_run_s: The most run time it may take (every point to its maximum window).
        undervolt: The undervolt search's steps (``--axis undervolt``).
    """

    gpus: tuple[dict[str, Any], ...]
    selection: str
    envelope: PowerEnvelope
    caps_w: tuple[float, ...]
    estimated_wall_s: float | None
    journal_path: Path | None
    points: tuple[SweepPoint, ...] = ()
    axis: str = "power"
    estimated_run_s: float | None = None
    bound_run_s: float | None = None
    undervolt: UndervoltPlan | None = None

    def lines(self) -> list[str]:
        """The plan as the CLI prints it."""
        out = ["dry run: nothing will be changed"]
        for g in self.gpus:
            out.append(
                f"GPU {g['index']}: {g['name']} ({g['uuid']}), limits {g['min_limit_w']:g}-"
                f"{g['max_limit_w']:g} W, default {g['default_limit_w']:g} W, "
                f"now {g['original_limit_w']:g} W"
            )
        out.append(
            f"GPUs picked: {', '.join(str(g['index']) for g in self.gpus)} ({self.selection})"
        )
        e = self.envelope
        shared = "shared by the GPUs" if len(self.gpus) > 1 else "GPU"
        out.append(f"envelope ({shared}): {e.min_w:g}-{e.max_w:g} W")
        if self.undervolt is not None:
            out += _undervolt_lines(self.undervolt)
        elif self.points:
            out += _points_lines(self.axis, self.points, self.caps_w)
        else:
            caps = ", ".join(f"{c:g}" for c in self.caps_w)
            out.append(f"caps ({len(self.caps_w)}, W per GPU): {caps}")
        if self.estimated_wall_s is not None:
            out.append(f"estimated wall time: {_duration(self.estimated_wall_s)}")
        if self.estimated_run_s is not None and self.estimated_wall_s != self.estimated_run_s:
            virtual = " (virtual time: the simulated run takes only the CPU it needs)"
            extra = virtual if self.estimated_wall_s is None else ""
            out.append(f"estimated run time: {_duration(self.estimated_run_s)}{extra}")
        if self.bound_run_s is not None:
            out.append(
                f"at most: {_duration(self.bound_run_s)} of run time (every point measured to "
                "--target-cap-seconds, every wait to its bound)"
            )
        if self.journal_path is not None:
            out.append(f"restore journal: {self.journal_path}")
        return out


def _points_lines(
    axis: str, points: tuple[SweepPoint, ...], caps_w: tuple[float, ...]
) -> list[str]:
    sms = sorted({p.sm_lock_mhz for p in points if p.sm_lock_mhz is not None})
    mems = sorted({p.mem_lock_mhz for p in points if p.mem_lock_mhz is not None}, reverse=True)
    held = points[0].cap_w
    limit = f"{held:g} W held (--cap)" if held is not None else f"{caps_w[0]:g} W (in force)"
    noun = "point" if len(points) == 1 else "points"
    out = [f"axis: {axis}, {len(points)} {noun} under a {limit} power limit"]
    out.append(
        "SM locks (MHz): " + (", ".join(f"{f:g}" for f in sms) if sms else "none (unlocked)")
    )
    out.append(
        "memory locks (MHz): " + (", ".join(f"{m:g}" for m in mems) if mems else "none (unlocked)")
    )
    return out


def _undervolt_lines(plan: UndervoltPlan) -> list[str]:
    """The undervolt search's steps, as far as they are known before it starts."""
    lock = (
        f"SM {plan.lock_mhz:g} MHz (--sm-clocks)"
        if plan.lock_mhz is not None
        else f"the SM clock the {plan.cap_w:g} W cap holds (measured first)"
    )
    offsets = [k * plan.step_mhz for k in range(plan.max_steps + 1)]
    shown = ", ".join(f"{o:+g}" for o in offsets[:8]) + (", ..." if len(offsets) > 8 else "")
    soak = f"soaked {plan.soak_s:g} s" if plan.soak_s > 0 else "not soaked (--soak-seconds 0)"
    refine = (
        "then 15 MHz steps between the last stable and the first unstable one; "
        if plan.refine_steps
        else ""
    )
    return [
        f"axis: undervolt, at most {plan.max_points} points under a {plan.cap_w:g} W limit",
        f"baseline: the {plan.cap_w:g} W cap, unlocked, offset 0 (the answer is compared with it)",
        f"then locked at {lock}, SM clock offsets (MHz): {shown} up to {plan.max_mhz:+g}",
        f"each step checked for stability; the first unstable one ends the coarse search; "
        f"{refine}the answer is {plan.margin_mhz:g} MHz below the last stable offset (on the "
        f"15 MHz grid) and is {soak}",
    ]


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def journal_for(options: SweepOptions) -> Journal:
    """The restore journal these options use (``--state-dir``, env, or the default)."""
    return Journal(options.safety.state_dir or default_state_dir())


def dry_run(
    options: SweepOptions, rigs: RigFactory, warn: Callable[[str], None] = lambda _m: None
) -> DryRun:
    """Plan a sweep without changing anything (no root needed: it only reads).

    Args:
        options: The sweep's options.
        rigs: Builds the rig the sweep would run on (the composition root's).
        warn: Where warnings go.

    Raises:
        PowersweepError: Bad options, no GPU, or a GPU without power management.
    """
    validate(options)
    with rigs(options) as rig:
        # no server is contacted: the processes listening on --url's port (or on the ports a
        # sweep would probe) still name the server's process
        urls = (
            [options.server.url]
            if options.server.url
            else [f"http://127.0.0.1:{p}" for p, _ in DEFAULT_PORTS]
        )
        pids = frozenset().union(*(local_server_pids(u) for u in urls))
        choice = select_gpus(
            rig.backend, options.cards.gpus, warn, all_gpus=options.cards.all_gpus, server_pids=pids
        )
        gpus = choice.gpus
        envelope = uniform_envelope([g.envelope() for g in gpus])
        planned = axis_named(options.points.axis).plan(options, gpus, warn, rig.clock)
        caps, points = planned.caps_w, planned.points
        n = len(points) or len(caps)
        extra_s = 0.0
        uv = planned.undervolt
        if uv is not None:
            # every point the search may measure, and one soak's hold
            n, extra_s = uv.max_points, uv.soak_s
        return DryRun(
            gpus=tuple(gpu_meta(g) for g in gpus),
            selection=choice.reason,
            envelope=envelope,
            caps_w=tuple(sorted(caps, reverse=True)),
            estimated_wall_s=rig.clock.wall_s(estimate_wall_s(options, n, 1.0, caps) + extra_s),
            journal_path=journal_for(options).path
            if options.safety.changes_limits and rig.limits_outlive_process
            else None,
            points=tuple(points),
            axis=options.points.axis,
            estimated_run_s=estimate_wall_s(options, n, 1.0, caps) + extra_s,
            bound_run_s=bound_run_s(options, n, planned_spacing_w(caps)) + extra_s,
            undervolt=planned.undervolt,
        )
