"""Which GPUs a sweep caps: the cards serving the model (the server's processes), or those
asked for, checked against the cards' load during the warm-up; their ``run.json`` facts; and
whether their limit can be set at all, before anything changes."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from powersweep.errors import PowersweepError, UsageError
from powersweep.sweep.gpu import Gpu, GpuBackend, GpuProcess


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
            was = f"{before:.0f}%" if math.isfinite(before) else "no reading"
            warn(
                f"GPU {i} got busy during the warm-up ({was} -> {peak:.0f}% utilization) "
                "but is not swept: it may serve the model too; use --gpus to include it"
            )
    return {
        "not_swept_warmup_util_pct": {
            str(i): {"before": before_pct.get(i), "peak": peak_pct[i]} for i in sorted(peak_pct)
        }
    }
