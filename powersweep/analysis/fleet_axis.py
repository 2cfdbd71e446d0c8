"""What a fleet group sweeps: the power cap, or clock locks (one lock, or a grid of two).

The reasoning: docs/fleets.md, "powersweep.analysis.fleet_axis".
"""

from __future__ import annotations

from dataclasses import dataclass

from powersweep.analysis.clock_result_types import ClockAnalysis, LockPoint
from powersweep.analysis.result_types import CapRow, Pick, PowerAnalysis

POWER = "power"
CLOCK_AXES = ("sm-clock", "mem-clock", "grid")


@dataclass(frozen=True)
class FleetAxis:
    """One axis a fleet group can be swept on.

    Attributes:
        name: ``power``, ``sm-clock``, ``mem-clock`` or ``grid``.
        setting_key: The row column that is a card's setting (``cap_w``, ``sm_lock_mhz`` or
            ``mem_lock_mhz``).
        tier_key: A grid's second lock (``mem_lock_mhz``); None on a one-axis sweep.
        unit: ``W`` or ``MHz``.
        noun: What one setting is called (``cap``, ``SM lock``, ``memory lock``).
        answer_key: The group's key of the fleet's answer (``fleet_cap`` or ``fleet_lock``).
        reference: What savings are counted against, in words.
    """

    name: str
    setting_key: str
    tier_key: str | None
    unit: str
    noun: str
    answer_key: str
    reference: str

    @property
    def suffix(self) -> str:
        """The unit as a key suffix: ``w`` or ``mhz``."""
        return self.unit.lower()

    @property
    def is_clock(self) -> bool:
        """True for clock locks (not the power cap)."""
        return self.name != POWER

    def key(self, stem: str) -> str:
        """A report key with this axis's unit: ``sweet_spot`` -> ``sweet_spot_w``."""
        return f"{stem}_{self.suffix}"

    def answer(self) -> str:
        """``fleet cap`` or ``fleet lock``: the answer's name in words."""
        return self.answer_key.replace("_", " ")


_TOP_LOCK = "the highest lock each card measured (the nearest to running unlocked)"
AXES: dict[str, FleetAxis] = {
    POWER: FleetAxis(POWER, "cap_w", None, "W", "cap", "fleet_cap", "the default limit"),
    "sm-clock": FleetAxis(
        "sm-clock", "sm_lock_mhz", None, "MHz", "SM lock", "fleet_lock", _TOP_LOCK
    ),
    "mem-clock": FleetAxis(
        "mem-clock", "mem_lock_mhz", None, "MHz", "memory lock", "fleet_lock", _TOP_LOCK
    ),
    "grid": FleetAxis(
        "grid", "sm_lock_mhz", "mem_lock_mhz", "MHz", "SM lock", "fleet_lock", _TOP_LOCK
    ),
}


def axis_of_analysis(result: PowerAnalysis | ClockAnalysis) -> FleetAxis:
    """The axis an analysis (analysis.json) was made on: a clock analysis names its own."""
    if isinstance(result, ClockAnalysis):
        return AXES.get(result.axis, AXES["sm-clock"])
    return AXES[POWER]


def rows_of(result: PowerAnalysis | ClockAnalysis) -> list[CapRow] | list[LockPoint]:
    """An analysis's measured settings, one row each: the caps (status ok) of a power run, the
    usable points (repeats pooled) of a clock run."""
    if isinstance(result, ClockAnalysis):
        return list(result.points)
    return [r for r in result.caps if r.figures.status == "ok"]


def best_of(result: PowerAnalysis | ClockAnalysis) -> Pick | LockPoint | None:
    """The card's own best: its sweet spot (a power run) or efficiency peak (a clock run)."""
    return result.peak if isinstance(result, ClockAnalysis) else result.sweet_spot
