"""The undervolt search's steps (issue 36): the baseline cap, then offsets up from 0 at one locked
SM clock until the first unstable step, then the chosen offset's soak.

The search is sequential by nature (each step is only worth taking once the one before it held),
so :class:`UndervoltSchedule` hands the driver one point per batch. It is bounded: at most
``max_mhz / step_mhz + 1`` steps, and at most one soak per stable step (a soak that fails backs
off one step more).

Pure: no I/O and no clock (the driver reports each step's status).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from powersweep.sweep.planning.points import SweepPoint

Batch = list[tuple[SweepPoint, str]]
BASELINE = "baseline"
REFERENCE = "reference"
SEARCH = "search"
# Where no supported clock is listed, a lock lands on the 15 MHz grid every NVIDIA card's
# clocks sit on.
CLOCK_GRID_MHZ = 15.0
# A measured clock within this below a supported one is taken as that clock (a reading's
# rounding); a median between two bins (a clock dithering under the cap) takes the lower bin,
# which the cap held the card at or above.
SNAP_TOLERANCE_MHZ = 1.0


@dataclass(frozen=True)
class UndervoltPlan:
    """What the undervolt search steps.

    Attributes:
        cap_w: The baseline cap (the best cap to compare with); held at every step.
        lock_mhz: The SM clock to lock (None: the clock the card holds at the baseline cap).
        sm_clocks_mhz: The SM clocks the card supports (where a measured clock is snapped).
        step_mhz: Step between offsets.
        max_mhz: The highest offset to try.
        backoff_steps: Steps the answer backs off from the last stable offset.
        soak_s: Run seconds the chosen offset is held before it is measured once more.
    """

    cap_w: float
    lock_mhz: float | None
    sm_clocks_mhz: tuple[float, ...]
    step_mhz: float
    max_mhz: float
    backoff_steps: int
    soak_s: float

    @property
    def max_steps(self) -> int:
        """Offsets the search may step to above 0."""
        return max(0, math.floor(self.max_mhz / self.step_mhz + 1e-9))


def snap_lock(measured_mhz: float, supported: Sequence[float]) -> float | None:
    """The lock for a measured SM clock: the highest supported clock not above it (within
    :data:`SNAP_TOLERANCE_MHZ`), else the 15 MHz grid's (None: no clock was measured)."""
    if not (math.isfinite(measured_mhz) and measured_mhz > 0):
        return None
    clocks = sorted(c for c in supported if c > 0)
    if not clocks:
        return math.floor(measured_mhz / CLOCK_GRID_MHZ + 1e-9) * CLOCK_GRID_MHZ
    i = bisect.bisect_right(clocks, measured_mhz + SNAP_TOLERANCE_MHZ)
    return clocks[max(0, i - 1)]


class UndervoltSchedule:
    """One step at a time: the baseline, offset 0 (the reference), then up by one step while
    each holds.

    Args:
        plan: The search.
        status_of: A measured point's status (``ok``, ``unstable``, ``failed``...; None: not
            measured).
    """

    def __init__(self, plan: UndervoltPlan, status_of: Callable[[SweepPoint], str | None]) -> None:
        self.plan = plan
        self.status_of = status_of
        self.baseline = SweepPoint(plan.cap_w, sm_offset_mhz=0.0)
        self.lock_mhz = plan.lock_mhz
        self._stage = BASELINE
        self._k = 0
        self.last_stable_k: int | None = None
        self.first_unstable_k: int | None = None
        self.ended = ""
        self._soak_k: int | None = None
        self.soaks: list[tuple[float, str]] = []
        self.chosen_k: int | None = None

    def step(self, k: int) -> SweepPoint:
        """The point of offset step ``k`` at the locked clock."""
        return SweepPoint(self.plan.cap_w, self.lock_mhz, None, k * self.plan.step_mhz)

    def next(self, measured: Mapping[SweepPoint, Mapping[str, Any]]) -> Batch:
        """The next step (empty: the search is over)."""
        if self._stage == BASELINE:
            self._stage = REFERENCE
            return [(self.baseline, BASELINE)]
        if self._stage == REFERENCE:
            self._stage = SEARCH
            if self.lock_mhz is None:
                row = measured.get(self.baseline)
                clock = float(row.get("sm_clock_mhz", math.nan)) if row else math.nan
                self.lock_mhz = snap_lock(clock, self.plan.sm_clocks_mhz)
            if self.lock_mhz is None:
                self.ended = (
                    "the baseline cap gave no SM clock to lock (it failed): give --sm-clocks"
                )
                return []
            return [(self.step(0), REFERENCE)]
        if self._stage != SEARCH:
            return []
        status = self.status_of(self.step(self._k))
        if status == "ok":
            self.last_stable_k = self._k
            if self._k + 1 <= self.plan.max_steps:
                self._k += 1
                return [(self.step(self._k), SEARCH)]
            self.ended = f"reached the highest offset, {self._k * self.plan.step_mhz:+g} MHz"
        elif self._k == 0:
            self.ended = f"offset 0 itself was {status or 'not measured'}: nothing to search from"
        else:
            self.first_unstable_k = self._k
            self.ended = f"{self.step(self._k).label()} was {status}"
        self._stage = "done"
        return []

    def soak(self) -> SweepPoint | None:
        """The next offset to soak (None: no soak is left). The first is the last stable step
        less the back-off; offset 0 needs none (it is the card's own curve, measured already)."""
        if self._stage != "done" or self.last_stable_k is None or self.chosen_k is not None:
            return None
        if self._soak_k is None:
            self._soak_k = max(0, self.last_stable_k - self.plan.backoff_steps)
        if self._soak_k <= 0 or self.plan.soak_s <= 0:
            self.chosen_k = self._soak_k
            return None
        return self.step(self._soak_k)

    def soaked(self, status: str) -> None:
        """Take the soak's status: ok chooses its offset, anything else backs off one step."""
        if self._soak_k is None:
            return
        self.soaks.append((self._soak_k * self.plan.step_mhz, status))
        if status == "ok":
            self.chosen_k = self._soak_k
        else:
            self._soak_k -= 1

    def record(self) -> dict[str, Any] | None:
        """``run.json``'s ``undervolt``: the lock, the steps' outcome and the chosen offset."""
        step = self.plan.step_mhz

        def mhz(k: int | None) -> float | None:
            return None if k is None else k * step

        return {
            "cap_w": self.plan.cap_w,
            "sm_lock_mhz": self.lock_mhz,
            "step_mhz": step,
            "max_mhz": self.plan.max_mhz,
            "backoff_steps": self.plan.backoff_steps,
            "soak_s": self.plan.soak_s,
            "last_stable_mhz": mhz(self.last_stable_k),
            "first_unstable_mhz": mhz(self.first_unstable_k),
            "chosen_mhz": mhz(self.chosen_k),
            "soaks": [{"sm_offset_mhz": o, "status": s} for o, s in self.soaks],
            "ended": self.ended,
        }
