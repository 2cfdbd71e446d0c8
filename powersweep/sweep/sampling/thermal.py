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

from powersweep.analysis.precision import DRIFT_SENSITIVITY_PER_C, ThermalModel
from powersweep.clock import Clock

# The slope under which a card counts as steady, °C per minute (the warm-up's own bound, 0.05
# °C/s, is the same figure).
STEADY_TEMP_C_PER_MIN = 3.0
# The trailing window the slope is fitted over, run seconds.
THERMAL_TRAIL_S = 10.0
# The longest the protocol waits for a steady temperature after a point settled, run seconds.
DEFAULT_THERMAL_WAIT_S = 10.0
# A point whose draw is within this of the last point measured carries its steadiness:
# the card's temperature is continuous across a set, and a step this size moves its level by
# R_th * dP (about 0.15 °C/W for an air-cooled card under load: 4-5 °C at most, approached over
# the card's time constant, well under a 3 °C/min slope). A bigger jump (the first point, a
# confirm re-measure, an adaptive or grid jump) waits.
CARRY_DRAW_W = 30.0
# A nearby point carries the steadiness whatever drift the last point showed: a dense sweep
# stepping down cools its card by a few °C/min at every point (each step lowers the level by
# R_th * dP, approached over a time constant longer than a point), a drift a bounded wait could
# not remove (it decays with that time constant and the next step restarts it). Each point states
# the bias that drift leaves instead (``drift_bias_pct``, powersweep.analysis.precision).


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


def fitted_wait_s(
    model: ThermalModel | None,
    temp_now_c: float,
    draw_w: float,
    goal_rel: float,
    max_s: float,
    sensitivity_per_c: float = DRIFT_SENSITIVITY_PER_C,
) -> float | None:
    """Run seconds a point set just now must wait, by the card's fitted thermal model, for the
    bias of the temperature still to come to fall under ``goal_rel`` (None: no model to say).

    The card approaches its steady level under ``draw_w`` exponentially: what is still to come
    shrinks by ``exp(-t / tau)``, so the wait is ``tau * ln(bias / goal)``, at most ``max_s``;
    what is left after it is the point's stated drift bias.
    """
    if model is None or not (math.isfinite(temp_now_c) and math.isfinite(draw_w)):
        return None
    bias = abs(sensitivity_per_c * (model.steady_c(draw_w) - temp_now_c))
    if goal_rel <= 0 or bias <= goal_rel:
        return 0.0
    return min(max_s, model.tau_s * math.log(bias / goal_rel))


@dataclass(frozen=True)
class Previous:
    """The last point measured on this card, as the next one's wait reads it.

    Attributes:
        power_w: Its median combined draw, W.
        drift_c_per_min: Its window's temperature drift, °C/min (NaN: unknown).
        cap_total_w: Its combined power limit, W.
        locks: Its clock locks (SM, memory; None: unlocked).
    """

    power_w: float
    drift_c_per_min: float
    cap_total_w: float = math.nan
    locks: tuple[float | None, float | None] = (None, None)


def carried(
    previous: Previous | None,
    draw_now_w: float,
    cap_total_w: float = math.nan,
    locks: tuple[float | None, float | None] = (None, None),
) -> ThermalWait | None:
    """The steadiness a point inherits from the last one measured, or None when it must wait.

    A card whose draw moved less than :data:`CARRY_DRAW_W` at the set is already near its
    level: waiting would cost the bound and change little (the remaining drift decays with the
    card's own time constant, tens of seconds), and the point's stated precision carries the
    bias of what is still to come. Anything unknown waits: the first point, a jump, a point after
    a failed one.

    Under the same clock locks the draw moves by no more than the limit does (a card draws the
    lesser of its limit and its demand), so the step is the limit's; a lock change moves the draw
    by what the readings since the set show.

    Args:
        previous: The last point measured ok (None: none yet, or the last one failed).
        draw_now_w: The settled draw at the new point, W (combined; NaN: no reading yet).
        cap_total_w: The new point's combined limit, W.
        locks: The new point's clock locks.
    """
    if previous is None:
        return None
    same_locks = locks == previous.locks
    step = abs(cap_total_w - previous.cap_total_w if same_locks else draw_now_w - previous.power_w)
    if math.isfinite(step) and step <= CARRY_DRAW_W:
        return ThermalWait(0.0, previous.drift_c_per_min, True)
    return None


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
