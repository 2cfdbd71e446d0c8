"""Thermal steadiness: a point is measured once its card has stopped heating (or cooling).

A card still moving towards its temperature at a new cap biases the point: under a cap a cooler
card runs faster (about 1% per 5 °C: less leakage leaves more of the cap to the clock), and its
draw and energy per token follow the temperature (ML.ENERGY saw the same in energy figures). The
temperature of a card approaches its new level exponentially, so what is still to come when the
slope is ``s`` is ``s * tau``, ``tau`` the card's thermal time constant (tens of seconds to about a
minute and a half for a heatsink under a fan). :data:`STEADY_TEMP_C_PER_MIN` keeps it under 5 °C
(a bias under 1%) for a time constant up to 100 s.

The slope is a least-squares fit over the hottest card's readings of the trailing
:data:`THERMAL_TRAIL_S` run seconds since the point was set: NVML reads whole degrees, and a fit
over twenty readings (every 0.5 s) resolves a fraction of a degree per minute, where a shorter
one would not tell 3 °C/min from noise. The wait is bounded in run seconds (never wall seconds),
so a card that never steadies delays a point by at most the bound, and the window's own drift
(``temp_drift_c_per_min`` in caps.csv) shows how steady the measured card was.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from powersweep.clock import Clock

# The slope under which a card counts as steady, °C per minute (the warm-up's own bound, 0.05
# °C/s, is the same figure).
STEADY_TEMP_C_PER_MIN = 3.0
# The trailing window the slope is fitted over, run seconds.
THERMAL_TRAIL_S = 10.0
# The longest the protocol waits for a steady temperature after a point settled, run seconds.
DEFAULT_THERMAL_WAIT_S = 10.0


class TempSlopes(Protocol):
    """What the wait reads: the sampler's fit of the hottest card's temperature."""

    def temp_slope_c_per_s(self, t0_s: float, t1_s: float) -> float:
        """The hottest card's temperature slope between two run times, °C/s (NaN: unknown)."""
        ...


@dataclass(frozen=True)
class ThermalWait:
    """How a point's wait for a steady temperature ended.

    Attributes:
        waited_s: Run seconds waited (after the point settled).
        slope_c_per_min: The last trailing slope fitted, °C/min (NaN: not readable).
        steady: The slope fell under :data:`STEADY_TEMP_C_PER_MIN`; False when the bound ended
            the wait or no temperature could be read.
    """

    waited_s: float
    slope_c_per_min: float
    steady: bool


async def wait_thermal(
    slopes: TempSlopes,
    clock: Clock,
    *,
    set_at_s: float,
    max_s: float,
    poll_s: float,
    trail_s: float = THERMAL_TRAIL_S,
    steady_c_per_min: float = STEADY_TEMP_C_PER_MIN,
) -> ThermalWait:
    """Wait until the temperature's trailing slope is under ``steady_c_per_min``, at most
    ``max_s`` run seconds from now.

    Args:
        slopes: The sampler (its readings since ``set_at_s`` not yet drained).
        clock: Run clock.
        set_at_s: When the point was set: readings before it belong to the previous one.
        max_s: The bound of the wait, run seconds (0: no wait).
        poll_s: Run seconds between looks (the sampler's interval: a new reading each time).
        trail_s: The trailing window of the fit, run seconds.
        steady_c_per_min: The slope under which the card is steady.

    Returns:
        How long it waited and the slope it ended on.
    """
    start = clock.now()
    slope = math.nan
    while True:
        now = clock.now()
        if now - set_at_s >= trail_s - 1e-9:
            slope = 60.0 * slopes.temp_slope_c_per_s(max(set_at_s, now - trail_s), now)
            if not math.isfinite(slope):
                # no temperature to judge by: waiting would not make one readable
                return ThermalWait(now - start, slope, False)
            if abs(slope) <= steady_c_per_min:
                return ThermalWait(now - start, slope, True)
        if now - start >= max_s - 1e-9:
            return ThermalWait(now - start, slope, False)
        await clock.asleep(max(1e-3, min(poll_s, start + max_s - now)))


def slope_c_per_min(points: Iterable[tuple[float, float]]) -> float:
    """Least-squares slope of ``(run seconds, °C)`` points, °C/min (NaN under three finite
    points or without a spread in time)."""
    pts = [(t, c) for t, c in points if math.isfinite(t) and math.isfinite(c)]
    if len(pts) < 3:
        return math.nan
    mt = math.fsum(t for t, _ in pts) / len(pts)
    mc = math.fsum(c for _, c in pts) / len(pts)
    stt = math.fsum((t - mt) ** 2 for t, _ in pts)
    if not stt > 0:
        return math.nan
    return 60.0 * math.fsum((t - mt) * (c - mc) for t, c in pts) / stt
