"""Before anything changes: pick the GPUs, plan the caps, estimate the time, print a dry run."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powersweep.clock import Clock
from powersweep.errors import GpuError, UsageError
from powersweep.sweep.estimate import bound_run_s, estimate_run_s
from powersweep.sweep.gpu import Gpu, PowerEnvelope, SupportedClocks
from powersweep.sweep.gpu_choice import gpu_meta, select_gpus
from powersweep.sweep.options import MAX_PLANNED_CAPS, SweepOptions
from powersweep.sweep.options_check import validate
from powersweep.sweep.planning.caps import clamp_caps, default_caps, uniform_envelope
from powersweep.sweep.planning.clock_points import SweepPoint, measure_order, plan_clock_points
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
        if self.points:
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
    out = [f"axis: {axis}, {len(points)} points under a {limit} power limit"]
    out.append(
        "SM locks (MHz): " + (", ".join(f"{f:g}" for f in sms) if sms else "none (unlocked)")
    )
    out.append(
        "memory locks (MHz): " + (", ".join(f"{m:g}" for m in mems) if mems else "none (unlocked)")
    )
    return out


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def estimate_wall_s(
    options: SweepOptions,
    n_points: int,
    time_scale: float = 1.0,
    caps_w: Sequence[float] = (),
) -> float:
    """Wall time of a sweep of ``n_points`` points at ``time_scale``
    (:func:`~powersweep.sweep.estimate.estimate_run_s`; ``caps_w``: the planned caps)."""
    return estimate_run_s(options, n_points, _spacing(caps_w)) / max(time_scale, 1e-9)


def bound_wall_s(
    options: SweepOptions,
    n_points: int,
    time_scale: float = 1.0,
    caps_w: Sequence[float] = (),
) -> float:
    """The most wall time a sweep of ``n_points`` points may take at ``time_scale``
    (:func:`~powersweep.sweep.estimate.bound_run_s`: every point measured to its maximum)."""
    return bound_run_s(options, n_points, _spacing(caps_w)) / max(time_scale, 1e-9)


def _spacing(caps_w: Sequence[float]) -> float | None:
    """The median step between the planned caps (None: fewer than two)."""
    caps = sorted(set(caps_w))
    steps = sorted(b - a for a, b in itertools.pairwise(caps))
    return steps[len(steps) // 2] if steps else None


# The longest plan a sweep takes on: past a day (in run time, as on real hardware) the card,
# the server or the machine changes under it, and nobody means it.
MAX_PLAN_S = 24 * 3600.0


def check_plan_time(options: SweepOptions, n_points: int, clock: Clock | None = None) -> None:
    """Refuse a plan whose run time may pass :data:`MAX_PLAN_S` (its bound, :func:`bound_wall_s`
    at real speed: every point measured to its maximum window), whatever its axis: caps and clock
    points alike; and one whose wall time on ``clock`` does (a simulated rig slowed far below real
    time).

    Raises:
        UsageError: One line with the plan's size, its bound and what to change.
    """
    estimate_s = bound_wall_s(options, n_points, 1.0)
    wall_s = clock.wall_s(estimate_s) if clock is not None else None
    if estimate_s <= MAX_PLAN_S and wall_s is not None and wall_s > MAX_PLAN_S:
        raise UsageError(
            f"this plan's {estimate_s / 3600:.1f} h of run time would take about "
            f"{wall_s / 3600:.3g} h of wall time on the simulated rig's clock (more than a day): "
            "raise --time-scale or --sim-pace, or drop it"
        )
    if estimate_s <= MAX_PLAN_S:
        return
    what = "points" if options.points.clock_axis else "caps"
    raise UsageError(
        f"this plan measures {n_points} {what} and may take up to "
        f"{estimate_s / 3600:.1f} h (more than a day, up to {options.measure.windows.max_s:g} s of "
        f"load per prompt each): measure fewer {what} "
        + (
            "(--sm-clocks / --mem-clocks)"
            if options.points.clock_axis
            else "(--caps, a larger --step-size)"
        )
        + " or shorter windows (--target-cap-seconds)"
    )


def plan_caps(
    options: SweepOptions,
    gpus: list[Gpu],
    warn: Callable[[str], None],
    clock: Clock | None = None,
) -> list[float]:
    """The caps to measure for this GPU set (ascending); ``clock``: the rig's, whose wall time
    bounds the plan too.

    Raises:
        UsageError: More than :data:`MAX_PLANNED_CAPS` caps, or a plan longer than a day.
    """
    envelope = uniform_envelope([g.envelope() for g in gpus])
    if options.safety.observe_only:
        currents = sorted({g.envelope().current_w for g in gpus})
        if len(currents) > 1:
            warn(
                "the GPUs run at different limits ("
                + ", ".join(f"{c:g}" for c in currents)
                + f" W); the run is labelled with the lowest, {currents[0]:g} W"
            )
        return [currents[0]]
    caps = (
        clamp_caps(options.points.caps, envelope, warn)
        if options.points.caps
        else default_caps(envelope, options.points.step_size_w)
    )
    if len(caps) > MAX_PLANNED_CAPS:
        raise UsageError(
            f"--step-size {options.points.step_size_w:g} W plans {len(caps)} caps from "
            f"{envelope.min_w:g} to {envelope.max_w:g} W; at most {MAX_PLANNED_CAPS} "
            "(use a larger --step-size or --caps)"
        )
    check_plan_time(options, len(caps), clock)
    return caps


def plan_points(
    options: SweepOptions,
    gpus: list[Gpu],
    warn: Callable[[str], None],
    clock: Clock | None = None,
) -> list[SweepPoint]:
    """The clock-lock points of a clock sweep (``--axis sm-clock|mem-clock|grid``).

    Set-points come from ``--sm-clocks`` / ``--mem-clocks`` or the first GPU's supported clocks;
    ``--cap`` is clamped into the envelope. ``--observe-only`` measures one point: the locks in
    force (unknown on NVML, so unlocked as far as the run says).

    Raises:
        GpuError: The card cannot list its clocks and none were given.
        UsageError: No clock to sweep, or a plan longer than a day.
    """
    if options.safety.observe_only:
        locks = gpus[0].locked_clocks()
        return [SweepPoint(None, locks.sm_mhz, locks.mem_mhz)]
    need_sm = options.points.axis != "mem-clock" and not options.points.sm_clocks
    need_mem = options.points.axis != "sm-clock" and not options.points.mem_clocks
    supported: SupportedClocks | None = None
    if need_sm or need_mem:
        try:
            supported = gpus[0].supported_clocks()
        except GpuError as exc:
            raise GpuError(f"cannot plan --axis {options.points.axis}: {exc}") from exc
    cap = options.points.hold_cap_w
    if cap is not None:
        cap = clamp_caps([cap], uniform_envelope([g.envelope() for g in gpus]), warn)[0]
    points = measure_order(
        plan_clock_points(
            options.points.axis,
            supported,
            sm_clocks=options.points.sm_clocks,
            mem_clocks=options.points.mem_clocks,
            cap_w=cap,
        )
    )
    check_plan_time(options, len(points), clock)
    return points


def point_caps(options: SweepOptions, gpus: list[Gpu], points: list[SweepPoint]) -> list[float]:
    """The limit a clock sweep runs under, as the one-entry cap list the rest of a sweep uses."""
    if points and points[0].cap_w is not None:
        return [points[0].cap_w]
    return [min(g.envelope().current_w for g in gpus)]


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
        points = plan_points(options, gpus, warn, rig.clock) if options.points.clock_axis else []
        caps = (
            point_caps(options, gpus, points)
            if points
            else plan_caps(options, gpus, warn, rig.clock)
        )
        n = len(points) or len(caps)
        return DryRun(
            gpus=tuple(gpu_meta(g) for g in gpus),
            selection=choice.reason,
            envelope=envelope,
            caps_w=tuple(sorted(caps, reverse=True)),
            estimated_wall_s=rig.clock.wall_s(estimate_wall_s(options, n, 1.0, caps)),
            journal_path=journal_for(options).path
            if options.safety.changes_limits and rig.limits_outlive_process
            else None,
            points=tuple(points),
            axis=options.points.axis,
            estimated_run_s=estimate_wall_s(options, n, 1.0, caps),
            bound_run_s=bound_run_s(options, n, _spacing(caps)),
        )
