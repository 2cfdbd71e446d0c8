"""The undervolt search's memory phase (issue 45): at the SM answer, the memory clock offset
stepped up from 0 while TPS rises beyond the two readings' noise, then the best offset less the
margin, soaked.

The reasoning: docs/undervolt.md, "powersweep.sweep.planning.memory_steps".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from powersweep.analysis.undervolt_memory import rose_beyond_noise
from powersweep.runformat import as_float
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.planning.soaks import SoakLadder

Batch = list[tuple[SweepPoint, str]]
MEM_REFERENCE = "mem reference"
MEM_SEARCH = "mem search"
MEM_SOAK = "mem soak"


@dataclass(frozen=True)
class MemoryPlan:
    """What the memory phase steps (NVML's unit: twice the MHz Afterburner shows on GDDR6X).

    Attributes:
        step_mhz: Between memory offsets.
        max_mhz: The highest to try.
        margin_mhz: What the answer stays below the best offset.
    """

    step_mhz: float
    max_mhz: float
    margin_mhz: float

    @property
    def max_steps(self) -> int:
        """Offsets above 0 the phase may step to."""
        return max(0, math.floor(self.max_mhz / self.step_mhz + 1e-9))

    @property
    def max_soaks(self) -> int:
        """Soaks at most (each failed one backs off by the margin)."""
        return math.floor(self.max_mhz / max(self.margin_mhz, self.step_mhz) + 1e-9) + 1

    @property
    def max_points(self) -> int:
        """Every point it may measure: offset 0, the steps, the soaks."""
        return 1 + self.max_steps + self.max_soaks


class MemorySearch:
    """One step at a time at the SM answer ``(cap, lock, sm offset)``.

    Args:
        plan: The phase.
        at: The SM answer's point, to which each step adds its memory offset.
        status_of: A point's latest status (None: not measured).
        tps_of: A measured point's ``(TPS, its stated 95% half-width %)`` (NaN where unknown).
        soak_s: Run seconds a soak holds the answer before it is measured (0: none).
    """

    def __init__(
        self,
        plan: MemoryPlan,
        at: SweepPoint,
        status_of: Callable[[SweepPoint], str | None],
        tps_of: Callable[[SweepPoint], tuple[float, float]],
        soak_s: float,
    ) -> None:
        self.plan = plan
        self.base = at
        self.status_of = status_of
        self.tps_of = tps_of
        self.soak_s = soak_s
        self._at_mhz: float | None = None
        self.best_mhz: float | None = None
        self.stopped_mhz: float | None = None
        self.ended = ""
        self.ladder = SoakLadder(max(plan.margin_mhz, plan.step_mhz))

    def at(self, mhz: float) -> SweepPoint:
        """The SM answer with memory offset ``mhz``."""
        b = self.base
        return SweepPoint(b.cap_w, b.sm_lock_mhz, b.mem_lock_mhz, b.sm_offset_mhz, mhz)

    def next(self) -> Batch:
        """The next step (empty: the phase is over)."""
        if self.ended:
            return []
        if self._at_mhz is None:
            self._at_mhz = 0.0
            return [(self.at(0.0), MEM_REFERENCE)]
        status = self.status_of(self.at(self._at_mhz))
        if status != "ok":
            self.stopped_mhz = self._at_mhz
            self.ended = f"memory {self._at_mhz:+g} MHz was {status or 'not measured'}"
            return []
        if self.best_mhz is not None and not self._rose(self._at_mhz, self.best_mhz):
            self.stopped_mhz = self._at_mhz
            self.ended = f"TPS stopped rising beyond noise at memory {self._at_mhz:+g} MHz"
            return []
        self.best_mhz = self._at_mhz
        nxt = self._at_mhz + self.plan.step_mhz
        if nxt > self.plan.max_mhz + 1e-9:
            self.ended = f"reached the highest memory offset, {self._at_mhz:+g} MHz"
            return []
        self._at_mhz = nxt
        return [(self.at(nxt), MEM_SEARCH)]

    def _rose(self, mhz: float, best_mhz: float) -> bool:
        """Whether ``mhz``'s TPS is above the best's beyond both readings' stated noise (the
        analysis derives the answer again by the same rule)."""
        (tps, u95), (best, best_u95) = self.tps_of(self.at(mhz)), self.tps_of(self.at(best_mhz))
        return rose_beyond_noise(tps, u95, best, best_u95)

    @property
    def chosen_mhz(self) -> float | None:
        """The memory answer, once its soak held (or none was needed)."""
        return self.ladder.chosen_mhz

    @property
    def soaks(self) -> list[tuple[float, str]]:
        """Each soak's memory offset and status."""
        return self.ladder.soaks

    def soak(self) -> SweepPoint | None:
        """The next offset to soak (None: none left): the best less the margin first."""
        if not self.ended or self.best_mhz is None:
            return None
        mhz = self.ladder.next(
            self.best_mhz - self.plan.margin_mhz,
            lambda o: self.status_of(self.at(o)) == "ok",
            self.soak_s,
        )
        return None if mhz is None else self.at(mhz)

    def soaked(self, status: str) -> None:
        """Take the soak's status: ok chooses it, anything else backs off by the margin."""
        self.ladder.took(status)

    def record(self) -> dict[str, Any]:
        """``run.json``'s ``undervolt.memory``."""
        return {
            "sm_offset_mhz": self.base.sm_offset_mhz,
            "step_mhz": self.plan.step_mhz,
            "max_mhz": self.plan.max_mhz,
            "margin_mhz": self.plan.margin_mhz,
            "best_mhz": self.best_mhz,
            "stopped_mhz": self.stopped_mhz,
            "chosen_mhz": self.chosen_mhz,
            "soaks": [{"mem_offset_mhz": o, "status": s} for o, s in self.soaks],
            "ended": self.ended,
        }


def tps_from(row: Mapping[str, Any] | None, metric: str) -> tuple[float, float]:
    """A caps.csv row's ``(metric TPS, tps_u95_pct)`` (NaN where absent)."""

    given = row or {}
    return as_float(given.get(metric)), as_float(given.get("tps_u95_pct"))
