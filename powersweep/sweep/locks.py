"""Clock locks during a sweep: remember what was in force, lock each point, check that the card
followed, and put everything back.

A point's SM lock is a range (issue 45): its clock is the top, the card's idle floor (or
``--sm-clock-min``) the bottom, so the card runs at the clock under load and still clocks down
idle (:mod:`powersweep.sweep.gpu.lock_range`).

The reasoning: docs/clocks.md, "powersweep.sweep.locks".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from powersweep.errors import PowersweepError
from powersweep.runformat import as_float
from powersweep.sweep.gpu import Gpu, LockedClocks
from powersweep.sweep.gpu.lock_range import card_idle_floor_mhz, range_min_mhz
from powersweep.sweep.planning.clock_points import measure_order
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.records.journal import put_back_locks

# A measured SM clock this far from its lock (MHz, or relative) means the card did not follow.
SM_TOLERANCE_MHZ = 30.0
SM_TOLERANCE_FRAC = 0.02
MEM_TOLERANCE_MHZ = 50.0
MEM_TOLERANCE_FRAC = 0.02
# Below the lock is fine while a power or thermal limit holds the clock down this often (%).
THROTTLE_EXPLAINS_PCT = 50.0


@dataclass(frozen=True)
class MemLockProbe:
    """Whether the cards take memory locks (probed once, at the first point that has one).

    Attributes:
        ok: Every card took the lock.
        message: The first refusal, one line (empty when ok).
    """

    ok: bool
    message: str = ""


class ClockLocker:
    """The clock locks of a sweep's GPUs.

    Args:
        gpus: The GPU set.
        warn: Where warnings go.
        sm_min_mhz: The SM locks' bottom (``--sm-clock-min``); None: each card's idle floor.
    """

    def __init__(
        self, gpus: Sequence[Gpu], warn: Callable[[str], None], sm_min_mhz: float | None = None
    ) -> None:
        self.gpus = list(gpus)
        self.warn = warn
        self.sm_min_mhz = sm_min_mhz
        # each card's idle floor, read at its first SM lock
        self._floors: dict[int, float] = {}
        self.originals: dict[int, LockedClocks] = {g.index: g.locked_clocks() for g in self.gpus}
        self.touched: set[int] = set()
        unknown = [i for i, lk in self.originals.items() if not lk.known]
        if unknown:
            held = [i for i in unknown if self.originals[i].user_clock_setting_active]
            why = (
                f"GPU {', '.join(map(str, held))} reports a user clock setting in force now; "
                if held
                else ""
            )
            warn(
                f"{why}NVML cannot read clock locks, so GPU {', '.join(map(str, unknown))} ends "
                "the sweep unlocked: re-apply any locks of your own (nvidia-smi -lgc / -lmc)"
            )

    def probe_mem_locks(self, mem_mhz: float) -> MemLockProbe:
        """Try a memory lock on every card (after the journal is written)."""
        for g in self.gpus:
            self.touched.add(g.index)
            r = g.lock_mem_clock(mem_mhz)
            if not r.accepted:
                return MemLockProbe(False, f"GPU {g.index}: {r.message or 'refused'}")
        return MemLockProbe(True)

    def apply(self, point: SweepPoint) -> str | None:
        """Lock every card at the point's clocks; the reason if a card refused.

        Raises:
            GpuError: No permission, or NVML failed (the sweep stops and restores).
        """
        problems = []
        for g in self.gpus:
            if point.sm_lock_mhz is not None:
                self.touched.add(g.index)
                low = self.sm_range(g, point.sm_lock_mhz)[0]
                r = g.lock_sm_clock(point.sm_lock_mhz, low)
                if not r.accepted:
                    problems.append(
                        f"GPU {g.index}: SM {low:g}-{point.sm_lock_mhz:g} MHz: "
                        f"{r.message or 'refused'}"
                    )
            mem = point.mem_lock_mhz
            if mem is not None:
                self.touched.add(g.index)
                r = g.lock_mem_clock(mem)
                if not r.accepted:
                    problems.append(f"GPU {g.index}: memory {mem:g} MHz: {r.message or 'refused'}")
        return "; ".join(problems) or None

    def sm_range(self, gpu: Gpu, top_mhz: float) -> tuple[float, float]:
        """The SM lock range a point locked at ``top_mhz`` sets on ``gpu``: (min, max) MHz."""
        if gpu.index not in self._floors:
            self._floors[gpu.index] = card_idle_floor_mhz(gpu)
        return range_min_mhz(top_mhz, self.sm_min_mhz, self._floors[gpu.index]), top_mhz

    def put_back(self) -> dict[int, tuple[bool, str]]:
        """Reset the locks of every card touched, relocking what it had before.

        Never raises: ``{gpu index: (ok, what was done or why not)}``.
        """
        out: dict[int, tuple[bool, str]] = {}
        for g in self.gpus:
            if g.index not in self.touched:
                continue
            orig = self.originals[g.index]
            try:
                back = put_back_locks(g, orig.sm_mhz, orig.mem_mhz, orig.known, orig.sm_min_mhz)
                out[g.index] = (True, back)
            except Exception as exc:  # keep putting the other cards back
                if not isinstance(exc, PowersweepError):
                    exc = PowersweepError(f"{type(exc).__name__}: {exc}")
                self.warn(
                    f"could not put back the clock locks of GPU {g.index}: {exc}; run: sudo "
                    f"nvidia-smi -i {g.index} -rgc && sudo nvidia-smi -i {g.index} -rmc"
                )
                out[g.index] = (False, str(exc))
        return out


def usable_points(
    points: list[SweepPoint],
    locker: ClockLocker,
    before_change: Callable[[], None],
    warn: Callable[[str], None],
) -> list[SweepPoint]:
    """The points the cards can take: memory locks are probed once (``before_change`` first: a
    probe changes a setting); when a card refuses them a grid falls back to its SM axis (a new
    list, in measuring order), said in a warning. The same list when nothing changes.

    Raises:
        PowersweepError: Memory locks refused and nothing but memory locks to sweep.
    """
    mem = next((p.mem_lock_mhz for p in points if p.mem_lock_mhz is not None), None)
    if mem is None:
        return points
    before_change()
    probe = locker.probe_mem_locks(mem)
    if probe.ok:
        return points
    if not any(p.sm_lock_mhz is not None for p in points):
        raise PowersweepError(
            f"memory clock locks refused ({probe.message}); --axis mem-clock has nothing else "
            "to sweep"
        )
    warn(
        f"memory clock locks refused ({probe.message}); the grid falls back to the SM axis "
        "(memory at the clock the card picks)"
    )
    kept = dict.fromkeys(SweepPoint(p.cap_w, p.sm_lock_mhz, None) for p in points)
    return measure_order(kept)


def verify(point: SweepPoint, row: Mapping[str, Any]) -> str | None:
    """Why the measured clocks show the card did not follow the point's locks (None: it did).

    An SM clock above its lock, or below it without a power or thermal limit holding it down,
    means the lock was clamped or ignored; a memory clock off its lock likewise.
    """
    problems = []
    sm = as_float(row.get("sm_clock_mhz"))
    if point.sm_lock_mhz is not None and math.isfinite(sm):
        lock = point.sm_lock_mhz
        tol = max(SM_TOLERANCE_MHZ, SM_TOLERANCE_FRAC * lock)
        held_down = max(
            as_float(row.get("pwr_throttle_pct"), 0.0),
            as_float(row.get("thermal_throttle_pct"), 0.0),
        )
        if sm > lock + tol or (sm < lock - tol and held_down < THROTTLE_EXPLAINS_PCT):
            problems.append(f"SM ran at {sm:.0f} MHz under a {lock:g} MHz lock")
    mem = as_float(row.get("mem_clock_mhz"))
    if point.mem_lock_mhz is not None and math.isfinite(mem):
        lock = point.mem_lock_mhz
        if abs(mem - lock) > max(MEM_TOLERANCE_MHZ, MEM_TOLERANCE_FRAC * lock):
            problems.append(f"memory ran at {mem:.0f} MHz under a {lock:g} MHz lock")
    if not problems:
        return None
    return "; ".join(problems) + " (the card clamped or ignored the lock)"
