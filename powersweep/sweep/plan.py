"""Before anything changes: pick the GPUs, plan the caps, estimate the time, print a dry run."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from powersweep.clock import Clock
from powersweep.errors import GpuError, PowersweepError, UsageError
from powersweep.sweep.estimate import bound_run_s, estimate_run_s
from powersweep.sweep.gpu import Gpu, GpuBackend, GpuProcess, PowerEnvelope, SupportedClocks
from powersweep.sweep.options import MAX_PLANNED_CAPS, SweepOptions, validate
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
    what = "points" if options.clock_axis else "caps"
    raise UsageError(
        f"this plan measures {n_points} {what} and may take up to "
        f"{estimate_s / 3600:.1f} h (more than a day, up to {options.target_cap_seconds:g} s of "
        f"load per prompt each): measure fewer {what} "
        + (
            "(--sm-clocks / --mem-clocks)"
            if options.clock_axis
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
    if options.observe_only:
        currents = sorted({g.envelope().current_w for g in gpus})
        if len(currents) > 1:
            warn(
                "the GPUs run at different limits ("
                + ", ".join(f"{c:g}" for c in currents)
                + f" W); the run is labelled with the lowest, {currents[0]:g} W"
            )
        return [currents[0]]
    caps = (
        clamp_caps(options.caps, envelope, warn)
        if options.caps
        else default_caps(envelope, options.step_size_w)
    )
    if len(caps) > MAX_PLANNED_CAPS:
        raise UsageError(
            f"--step-size {options.step_size_w:g} W plans {len(caps)} caps from "
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
    if options.observe_only:
        locks = gpus[0].locked_clocks()
        return [SweepPoint(None, locks.sm_mhz, locks.mem_mhz)]
    need_sm = options.axis != "mem-clock" and not options.sm_clocks
    need_mem = options.axis != "sm-clock" and not options.mem_clocks
    supported: SupportedClocks | None = None
    if need_sm or need_mem:
        try:
            supported = gpus[0].supported_clocks()
        except GpuError as exc:
            raise GpuError(f"cannot plan --axis {options.axis}: {exc}") from exc
    cap = options.hold_cap_w
    if cap is not None:
        cap = clamp_caps([cap], uniform_envelope([g.envelope() for g in gpus]), warn)[0]
    points = measure_order(
        plan_clock_points(
            options.axis,
            supported,
            sm_clocks=options.sm_clocks,
            mem_clocks=options.mem_clocks,
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


def gpu_meta(gpu: Gpu) -> dict[str, Any]:
    """``run.json`` facts of one GPU: identity, envelope, limit in force, slowdown threshold."""
    ident = gpu.identity()
    env = gpu.envelope()
    return {
        "index": ident.index,
        "name": ident.name,
        "uuid": ident.uuid,
        "vram_mib": ident.vram_mib,
        "driver_version": ident.driver_version,
        "vendor": ident.vendor,
        "min_limit_w": env.min_w,
        "default_limit_w": env.default_w,
        "max_limit_w": env.max_w,
        "original_limit_w": env.current_w,
        "slowdown_temp_c": gpu.slowdown_temp_c(),
        "power_source": getattr(gpu, "power_source", "simulated"),
    }


def check_settable(gpus: list[Gpu]) -> None:
    """Fail before any change when a GPU's limit cannot be set at all.

    Reading the envelope already refuses GPUs without power management (laptops, some VMs).
    Permission (root, or a container without CAP_SYS_ADMIN) shows only when setting, so each
    GPU is set to the limit already in force: that changes nothing, whatever happens.

    Raises:
        GpuError: One line naming the GPU and the cause.
    """
    for g in gpus:
        current = g.envelope().current_w
        g.set_power_limit(current)


# A card whose utilization stays under this through the warm-up does not serve the model.
WARMUP_BUSY_PCT = 10.0
# A card outside the set whose utilization rises this much in the warm-up looks like it serves.
UNSWEPT_RISE_PCT = 40.0


@dataclass(frozen=True)
class GpuChoice:
    """The GPUs a sweep caps, and why those.

    Attributes:
        gpus: The GPU set, in index order.
        how: ``given`` (``--gpus`` list), ``all`` (``--gpus all``), ``only`` (one GPU),
            ``server`` (the server's process runs there), ``memory`` (a process holds memory
            there) or ``fallback`` (nothing found: every GPU).
        reason: One line for the dry run and ``run.json``.
        processes: Compute processes seen per GPU index (empty when not looked at; None where
            NVML could not list them).
        serving: Indices of the set's GPUs that serve the model (empty: all of them): a tick is
            under load when these are busy, whatever the others do.
    """

    gpus: list[Gpu]
    how: str
    reason: str
    processes: dict[int, tuple[GpuProcess, ...] | None] = field(default_factory=dict)
    serving: tuple[int, ...] = ()

    @property
    def busy_gpus(self) -> tuple[int, ...]:
        """The GPUs whose utilization says a tick is under load."""
        return self.serving or tuple(g.index for g in self.gpus)

    def meta(self) -> dict[str, Any]:
        """``run.json``'s ``gpu_selection``."""
        return {
            "picked": [g.index for g in self.gpus],
            "how": self.how,
            "reason": self.reason,
            "serving": list(self.busy_gpus),
            "processes": {
                str(i): None if procs is None else [asdict(p) for p in procs]
                for i, procs in self.processes.items()
            },
        }


def select_gpus(
    backend: GpuBackend,
    wanted: tuple[int, ...] | None,
    warn: Callable[[str], None],
    *,
    all_gpus: bool = False,
    server_pids: frozenset[int] = frozenset(),
) -> GpuChoice:
    """The GPUs a sweep caps: ``wanted`` indices, every GPU with ``all_gpus``, else the ones that
    serve the model.

    The serving GPUs are those the driver lists the server's process on (``server_pids``: a
    local server), else those where any process holds memory. When nothing is found every GPU is
    taken, with a warning. A set given by ``--gpus`` still records which of its GPUs serve.

    Raises:
        PowersweepError: No GPU at all.
        UsageError: An index that is not there, or a die whose draw another die reports (the
            second die of an MI250X) without that die.
    """
    choice = _select_gpus(backend, wanted, warn, all_gpus=all_gpus, server_pids=server_pids)
    picked = {g.index for g in choice.gpus}
    for g in choice.gpus:
        # the AMD backend names the die whose reading includes this one's (MI250X)
        partner = getattr(g, "power_reported_by", None)
        if isinstance(partner, int) and partner not in picked:
            raise UsageError(
                f"GPU {g.index} reads 0 W: its module's draw is reported by GPU {partner} (the "
                f"two dies of an MI250X); sweep both dies together, e.g. --gpus {partner},{g.index}"
            )
    return choice


def _select_gpus(
    backend: GpuBackend,
    wanted: tuple[int, ...] | None,
    warn: Callable[[str], None],
    *,
    all_gpus: bool,
    server_pids: frozenset[int],
) -> GpuChoice:
    count = backend.device_count()
    if count == 0:
        raise PowersweepError("no GPU found")
    if wanted is not None:
        for i in wanted:
            if i >= count:
                raise UsageError(f"there is no GPU {i}: found {count} (0-{count - 1})")
    if count == 1 and not wanted:
        return GpuChoice([backend.gpu(0)], "only", "the only GPU")
    every = [backend.gpu(i) for i in range(count)]
    procs = {g.index: g.compute_processes() for g in every}
    serving, found = _serving(every, procs, server_pids)
    if wanted is not None or all_gpus:
        unique = list(dict.fromkeys(wanted)) if wanted is not None else list(range(count))
        gpus = [backend.gpu(i) for i in unique]
        picked_serving = tuple(g.index for g in serving if g.index in unique)
        if wanted is not None:
            how, reason = "given", f"--gpus {','.join(map(str, unique))}"
        else:
            how, reason = "all", f"--gpus all: every GPU ({count})"
        return GpuChoice(gpus, how, reason, procs, picked_serving)
    if serving:
        return GpuChoice(serving, *found, procs, tuple(g.index for g in serving))
    unreadable = all(p is None for p in procs.values())
    cause = "NVML cannot list GPU processes" if unreadable else "no process runs on any GPU"
    names = ", ".join(f"{g.index}: {g.identity().name}" for g in every)
    warn(f"{cause}: sweeping all {count} GPUs together ({names}); use --gpus to pick")
    return GpuChoice(every, "fallback", f"{cause}: every GPU", procs)


def _serving(
    every: list[Gpu],
    procs: dict[int, tuple[GpuProcess, ...] | None],
    server_pids: frozenset[int],
) -> tuple[list[Gpu], tuple[str, str]]:
    """The GPUs that serve the model, with how they were found and why (empty: none found)."""
    by_server = [g for g in every if any(p.pid in server_pids for p in procs[g.index] or ())]
    if by_server:
        pids = sorted(
            {p.pid for g in by_server for p in procs[g.index] or () if p.pid in server_pids}
        )
        return by_server, (
            "server",
            f"the server's process (PID {', '.join(map(str, pids))}) runs on GPU "
            f"{_indices(by_server)}",
        )

    def holders(index: int) -> list[GpuProcess]:
        # memory NVML cannot report (NaN) counts as held: the process is there
        return [p for p in procs[index] or () if not p.used_memory_mib <= 0]

    holding = [g for g in every if holders(g.index)]
    if not holding:
        return [], ("", "")
    pids = sorted({p.pid for g in holding for p in holders(g.index)})
    why = "the server's process was not found on any GPU; " if server_pids else ""
    return holding, (
        "memory",
        f"{why}processes holding GPU memory (PID {', '.join(map(str, pids))}) run on GPU "
        f"{_indices(holding)}",
    )


def _indices(gpus: list[Gpu]) -> str:
    return ", ".join(str(g.index) for g in gpus)


def confirm_serving(
    warmup_util_pct: dict[int, float], warn: Callable[[str], None]
) -> dict[str, Any]:
    """Check the picked GPUs got busy during the warm-up: a card that stayed idle does not serve
    the model (a stale process, a wrong ``--gpus``). Returns ``run.json`` facts."""
    idle = sorted(i for i, u in warmup_util_pct.items() if not u >= WARMUP_BUSY_PCT)
    for i in idle:
        u = warmup_util_pct[i]
        seen = f"{u:.0f}%" if u == u else "no reading"
        warn(
            f"GPU {i} stayed idle during the warm-up ({seen} utilization at most): it may not "
            "serve the model; use --gpus to choose the cards"
        )
    return {
        "warmup_util_pct": {str(i): u for i, u in sorted(warmup_util_pct.items())},
        "confirmed": not idle,
    }


def not_swept_busy(
    before_pct: dict[int, float], peak_pct: dict[int, float], warn: Callable[[str], None]
) -> dict[str, Any]:
    """GPUs outside the set whose utilization rose during the warm-up may serve the model too:
    warn about each. Returns ``run.json`` facts."""
    for i in sorted(peak_pct):
        before, peak = before_pct.get(i, math.nan), peak_pct[i]
        rise = peak - (before if math.isfinite(before) else 0.0)
        if math.isfinite(rise) and rise >= UNSWEPT_RISE_PCT:
            warn(
                f"GPU {i} got busy during the warm-up ({before:.0f}% -> {peak:.0f}% utilization) "
                "but is not swept: it may serve the model too; use --gpus to include it"
            )
    return {
        "not_swept_warmup_util_pct": {
            str(i): {"before": before_pct.get(i), "peak": peak_pct[i]} for i in sorted(peak_pct)
        }
    }


def journal_for(options: SweepOptions) -> Journal:
    """The restore journal these options use (``--state-dir``, env, or the default)."""
    return Journal(options.state_dir or default_state_dir())


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
        urls = [options.url] if options.url else [f"http://127.0.0.1:{p}" for p, _ in DEFAULT_PORTS]
        pids = frozenset().union(*(local_server_pids(u) for u in urls))
        choice = select_gpus(
            rig.backend, options.gpus, warn, all_gpus=options.all_gpus, server_pids=pids
        )
        gpus = choice.gpus
        envelope = uniform_envelope([g.envelope() for g in gpus])
        points = plan_points(options, gpus, warn, rig.clock) if options.clock_axis else []
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
            if options.changes_limits and rig.limits_outlive_process
            else None,
            points=tuple(points),
            axis=options.axis,
            estimated_run_s=estimate_wall_s(options, n, 1.0, caps),
            bound_run_s=bound_run_s(options, n, _spacing(caps)),
        )
