"""What the adaptive planner reads of a measured cap, and the order caps are measured in.

Kept apart from :mod:`.strategy` (the planner's rules): the schedules, the driver and the
benchmarks build measurements and order batches without the planner's machinery.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from powersweep.runformat import as_float

# Why a cap was asked for (the planned caps' ``reason``, shown by the dry run and the progress).
COARSE = "coarse pass"
BRACKET_PEAK = "bracket peak"
NEAR_PEAK_EDGE = "near-peak edge"
PLATEAU_EDGE = "plateau edge"
CEILING_EDGE = "ceiling edge"
PLATEAU_FILL = "plateau fill"
CEILING_FILL = "ceiling fill"


@dataclass(frozen=True)
class CapMeasurement:
    """What the planner needs of one measured cap.

    Attributes:
        power_w: Median combined draw.
        tps: The metric's TPS (decode or prefill).
        sm_clock_mhz: Median SM clock (NaN if unknown).
        temp_max_c: Hottest reading during the load (NaN if unknown).
        thermal_throttle_pct: Share of load samples with the thermal clock-event bit (NaN if
            unknown); with ``temp_max_c`` it tells a thermally held cap from a draw ceiling.
        util_pct: Median utilization (NaN if unknown).
    """

    power_w: float
    tps: float
    sm_clock_mhz: float = math.nan
    temp_max_c: float = math.nan
    thermal_throttle_pct: float = math.nan
    util_pct: float = math.nan

    @property
    def tps_per_w(self) -> float:
        """TPS per watt (NaN without a positive draw)."""
        return self.tps / self.power_w if self.power_w > 0 else math.nan

    @classmethod
    def from_row(cls, row: Mapping[str, Any], metric: str = "narr_tps") -> CapMeasurement:
        """Build from a caps.csv-like row (``power_w``, the metric or ``tps``, ``sm_clock_mhz``,
        ``temp_max_c``, ``thermal_throttle_pct``, ``util_pct``; missing ones NaN)."""

        def num(key: str) -> float:
            return as_float(row.get(key))

        tps = num(metric) if metric in row else num("tps")
        return cls(
            power_w=num("power_w"),
            tps=tps,
            sm_clock_mhz=num("sm_clock_mhz"),
            temp_max_c=num("temp_max_c"),
            thermal_throttle_pct=num("thermal_throttle_pct"),
            util_pct=num("util_pct"),
        )


@dataclass(frozen=True)
class PlannedCap:
    """A cap the planner asks for and why."""

    cap_w: float
    reason: str


def coarse_order(caps_w: Iterable[float]) -> list[float]:
    """The order to measure the coarse pass in: ascending, so the card ends it hot.

    A card's draw at a cap depends on its temperature (leakage), and where a cap sits at the edge
    of a boost state (the 3090's 370 W: the next state fits a card a few degrees cooler) the
    temperature decides the state. A dense sweep measures every cap right after the cap 10 W
    above it, so each cap starts at or slightly above its own steady temperature. Measured top
    down, the coarse pass would end at the bottom cap on a cold card and the refinement round
    would jump straight to the top caps on that cold card; bottom up it ends at the top, and the
    refinement round (descending, :func:`plan_order`) then meets its caps from above, as dense
    does.
    """
    return sorted(set(caps_w))


def plan_order(caps_w: Iterable[float], last_cap_w: float | None = None) -> list[float]:
    """The order to measure a batch of caps in: descending, the driver's convention.

    Descending keeps the card cooling rather than heating between caps. With ``last_cap_w`` (the
    cap in force), a batch entirely below it is still measured top down.
    """
    del last_cap_w  # descending is right from any starting cap; kept for future heuristics
    return sorted(set(caps_w), reverse=True)


def usable(m: CapMeasurement) -> bool:
    """A measurement with a positive draw and a finite, non-negative rate."""
    return math.isfinite(m.power_w) and m.power_w > 0 and math.isfinite(m.tps) and m.tps >= 0
