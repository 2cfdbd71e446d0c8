"""Thermal steadiness: a point is measured once the temperature still to come no longer biases it.

A card still moving towards its temperature at a new cap biases the point: under a cap a cooler
card runs faster (less leakage leaves more of the cap to the clock), and its draw and energy per
token follow the temperature.

The reasoning: docs/reference.md, "powersweep.sweep.sampling.thermal".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from powersweep.analysis.precision import DRIFT_SENSITIVITY_PER_C, ThermalModel
from powersweep.analysis.steadiness import STILL_HEATING_BIAS_REL, WAIT_SHARE_OF_FINDING
from powersweep.clock import Clock

# A point waits when its drift would bias it beyond this share of what ``still_heating`` names
# (then down to :func:`wait_goal_rel`): one that would not be named does not pay for a wait. The
# readings before the set show the last point's drift, and the set adds to it, so the share is
# under one.
WAIT_TRIGGER_SHARE = 0.8
# The slope under which a card counts as steady where a degree's worth is unknown, °C per minute
# (the warm-up's own bound, 0.05 °C/s, is the same figure).
STEADY_TEMP_C_PER_MIN = 3.0
# The trailing run seconds the card's temperature now is read over (a line through whole-degree
# readings: ten of them place the level within a few tenths of a degree, where one reading is
# off by up to half a degree, a share of a percent of TPS/W at a card's voltage floor).
LEVEL_TRAIL_S = 5.0


def wait_trigger_rel() -> float:
    """The bias of the temperature still to come beyond which a point waits: a share of the
    bias ``still_heating`` names (:data:`WAIT_TRIGGER_SHARE`)."""
    return WAIT_TRIGGER_SHARE * STILL_HEATING_BIAS_REL


def wait_goal_rel(precision_goal_rel: float) -> float:
    """The bias of the temperature still to come under which a point need not wait: a share of
    the bias ``still_heating`` names (:data:`WAIT_SHARE_OF_FINDING`), or the run's precision
    goal where that is looser (a point's stated precision carries the bias anyway)."""
    return max(precision_goal_rel, WAIT_SHARE_OF_FINDING * STILL_HEATING_BIAS_REL)


@dataclass(frozen=True)
class ThermalWait:
    """How a point's wait for a steady temperature ended.

    Attributes:
        waited_s: Run seconds waited (after the point settled).
        slope_c_per_min: The last trailing slope fitted, °C/min (NaN: not readable).
        steady: The drift fell under what the wait aimed at; False when the bound ended the
            wait or no temperature could be read.
    """

    waited_s: float
    slope_c_per_min: float
    steady: bool


def steady_slope_c_per_min(goal_rel: float, sensitivity_per_c: float, tau_s: float) -> float:
    """The temperature slope under which a card's drift biases a point by no more than
    ``goal_rel``: what is still to come is the slope times ``tau_s``, each degree worth
    ``sensitivity_per_c`` (:data:`STEADY_TEMP_C_PER_MIN` where a degree's worth is unknown)."""
    if not (sensitivity_per_c > 0 and tau_s > 0):
        return STEADY_TEMP_C_PER_MIN
    return 60.0 * goal_rel / (sensitivity_per_c * tau_s)


async def wait_drift(
    readings: Callable[[float], list[tuple[float, float]]],
    clock: Clock,
    *,
    max_s: float,
    poll_s: float,
    steady_c_per_min: Callable[[], float],
    trail_s: float,
) -> ThermalWait:
    """Wait until the slope over the trailing ``trail_s`` of readings is under
    ``steady_c_per_min``, at most ``max_s`` run seconds from now.

    The trailing readings reach back across the set into the last point's end, as the point's
    own drift will (``temp_drift_c_per_min``): a point the wait lets through reads no more drift
    than it waited for, and a card still moving from the last point waits.

    Args:
        readings: The hottest card's ``(run s, °C)`` readings from a run time on.
        clock: Run clock.
        max_s: The bound of the wait, run seconds (0: look once).
        poll_s: Run seconds between looks (the sampler's interval).
        steady_c_per_min: The slope under which the card is steady enough, asked at each look
            (the card's time constant that prices it may be fitted meanwhile).
        trail_s: The trailing window of the fit, run seconds.
    """
    start = clock.now()
    while True:
        now = clock.now()
        slope = slope_c_per_min(readings(now - trail_s))
        if not math.isfinite(slope) and now - start >= min(trail_s, max_s) - 1e-9:
            # no temperature to judge by after a trailing window's wait: waiting would not make
            # one readable
            return ThermalWait(now - start, slope, False)
        if math.isfinite(slope) and abs(slope) <= steady_c_per_min():
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


def level_c(points: Iterable[tuple[float, float]], at_s: float) -> float:
    """The temperature at ``at_s`` on the least-squares line through ``(run s, °C)`` points: a
    level finer than one whole-degree reading (NaN under three finite points or without a
    spread in time)."""
    pts = [(t, c) for t, c in points if math.isfinite(t) and math.isfinite(c)]
    slope = slope_c_per_min(pts)
    if not math.isfinite(slope):
        return math.nan
    mt = math.fsum(t for t, _ in pts) / len(pts)
    mc = math.fsum(c for _, c in pts) / len(pts)
    return mc + slope / 60.0 * (at_s - mt)


def still_to_come_c_per_min(
    slope: float,
    model: ThermalModel | None,
    readings: Iterable[tuple[float, float]],
    draw_w: float,
    at_s: float,
) -> float:
    """The temperature still to come, as the slope that prices it (``slope * tau``): the larger
    of the readings' own ``slope`` and what the fitted model says (its steady level under the
    point's mean ``draw_w`` less the level at ``at_s``, over ``tau``).

    A card's heat leaves through a die and a heatsink with different time constants: just after
    a cap step the trailing slope still carries the last point's trend (a card that heated up
    to the step and cools after it reads flat) while it is degrees off its new level; the model
    fitted over the run sees where it settles. Either alone misses what the other sees.
    """
    if model is None or not (math.isfinite(draw_w) and model.tau_s > 0):
        return slope
    level = level_c(readings, at_s)
    if not math.isfinite(level):
        return slope
    fitted = 60.0 * (model.steady_c(draw_w) - level) / model.tau_s
    return fitted if not math.isfinite(slope) or abs(fitted) > abs(slope) else slope


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
