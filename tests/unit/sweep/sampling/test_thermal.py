"""Thermal steadiness (``sweep/sampling/thermal.py``): the bounded wait on the trailing readings'
drift, the wait a fitted thermal model asks for, the goal and trigger against what
``still_heating`` names, and the least-squares slope and level of a card's temperature."""

from __future__ import annotations

import asyncio
import math

import pytest

from powersweep.analysis.precision import ThermalModel
from powersweep.analysis.steadiness import STILL_HEATING_BIAS_REL
from powersweep.clock import ManualClock, ScaledClock
from powersweep.sweep.sampling.thermal import (
    STEADY_TEMP_C_PER_MIN,
    ThermalWait,
    fitted_wait_s,
    level_c,
    slope_c_per_min,
    steady_slope_c_per_min,
    still_to_come_c_per_min,
    wait_drift,
    wait_goal_rel,
    wait_trigger_rel,
)

SET_S = 30.0


class _Card:
    """Readings every 0.5 s from run second 0 of a card steady at ``start_c`` until the point is
    set at :data:`SET_S`, then approaching ``level`` with time constant ``tau_s`` (no noise), up
    to the clock's now; records the asks."""

    def __init__(self, clock: ManualClock, start_c: float, level: float, tau_s: float) -> None:
        self.clock, self.start_c, self.level, self.tau_s = clock, start_c, level, tau_s
        self.asked: list[float] = []

    def temp_at(self, t: float) -> float:
        if t <= SET_S:
            return self.start_c
        return self.level + (self.start_c - self.level) * math.exp(-(t - SET_S) / self.tau_s)

    def readings(self, since_s: float) -> list[tuple[float, float]]:
        self.asked.append(since_s)
        now = self.clock.now()
        ticks = [0.5 * k for k in range(int(now / 0.5) + 1)]
        return [(t, self.temp_at(t)) for t in ticks if t >= since_s]


def _wait_drift(card: _Card, clock: ManualClock, steady: float, max_s: float = 60.0) -> ThermalWait:
    return asyncio.run(
        wait_drift(
            card.readings,
            clock,
            max_s=max_s,
            poll_s=0.5,
            steady_c_per_min=lambda: steady,
            trail_s=20.0,
        )
    )


def test_a_card_whose_trailing_readings_are_steady_does_not_wait() -> None:
    clock = ManualClock(SET_S + 1.0)
    card = _Card(clock, 60.0, 60.2, 25.0)
    got = _wait_drift(card, clock, 1.0)
    assert got.waited_s == 0.0 and got.steady
    # the fit reaches back across the set: the last point's end is in it
    assert card.asked == [pytest.approx(SET_S + 1.0 - 20.0)]


def test_a_cooling_card_waits_until_its_trailing_slope_prices_under_the_goal() -> None:
    # set 20 s ago, 6 °C to fall with tau 25 s: its trailing fit reads it cooling, and the wait
    # lasts until that fit (the one its row will read) is under the goal
    clock = ManualClock(SET_S + 20.0)
    card = _Card(clock, 66.0, 60.0, 25.0)
    got = _wait_drift(card, clock, 2.0)
    assert got.steady and abs(got.slope_c_per_min) <= 2.0
    assert 10.0 < got.waited_s < 60.0
    # what the row's fit over the same trailing seconds reads at that moment
    now = clock.now()
    assert abs(slope_c_per_min(card.readings(now - 20.0))) <= 2.0
    # a jump from a steady card is the fitted model's to see (its trailing readings are still
    # flat): the drift wait alone lets it go
    fresh = ManualClock(SET_S + 1.0)
    assert _wait_drift(_Card(fresh, 64.0, 60.0, 25.0), fresh, 2.0).waited_s == 0.0


def test_the_drift_wait_is_bounded_in_run_seconds_at_any_time_scale() -> None:
    clock = ManualClock(SET_S + 1.0)
    card = _Card(clock, 90.0, 40.0, 300.0)
    got = _wait_drift(card, clock, 0.1, max_s=12.0)
    assert not got.steady and got.waited_s == pytest.approx(12.0)
    assert clock.now() == pytest.approx(SET_S + 13.0)
    fast = ScaledClock(100.0)
    start = fast.now()

    def hot(since_s: float) -> list[tuple[float, float]]:
        now = fast.now()
        return [(now - k, 90.0 - k) for k in range(20)]

    result = asyncio.run(
        wait_drift(hot, fast, max_s=4.0, poll_s=0.5, steady_c_per_min=lambda: 1.0, trail_s=20.0)
    )
    assert not result.steady
    # a bound in wall seconds would wait 400 run seconds; the margin is the loop's wake-up
    assert fast.now() - start == pytest.approx(4.0, abs=1.0)


def test_an_unreadable_temperature_does_not_hold_the_point() -> None:
    clock = ManualClock()
    got = asyncio.run(
        wait_drift(
            lambda since: [], clock, max_s=30.0, poll_s=0.5, steady_c_per_min=lambda: 1.0,
            trail_s=20.0,
        )
    )  # fmt: skip
    # it looked for a trailing window's worth of run seconds, and no longer
    assert got.waited_s == pytest.approx(20.0) and not got.steady
    assert math.isnan(got.slope_c_per_min)


def test_the_steady_slope_is_the_goal_priced_by_the_time_constant() -> None:
    # 0.6% at 0.5% per degree: 1.2 °C still to come; over tau 25 s that is 2.88 °C/min
    assert steady_slope_c_per_min(0.006, 0.005, 25.0) == pytest.approx(2.88)
    # a card under its cap takes the watts instead: a degree is worth less, a steeper slope
    assert steady_slope_c_per_min(0.006, 0.0015, 25.0) == pytest.approx(9.6)
    assert steady_slope_c_per_min(0.006, 0.0, 25.0) == STEADY_TEMP_C_PER_MIN


def test_a_point_waits_beyond_the_trigger_and_down_to_the_goal_under_the_finding() -> None:
    # a point the wait let through must not be named: goal < trigger < what still_heating names
    assert wait_goal_rel(0.005) < wait_trigger_rel() < STILL_HEATING_BIAS_REL
    # a looser precision goal is a looser wait; never tighter than the share of the finding
    assert wait_goal_rel(0.02) == 0.02
    assert wait_goal_rel(0.001) == wait_goal_rel(0.005)


def test_the_level_now_is_the_line_through_the_trailing_readings() -> None:
    whole = [(0.5 * k, float(round(60.0 - 0.05 * 0.5 * k))) for k in range(11)]
    assert level_c(whole, 5.0) == pytest.approx(59.75, abs=0.3)
    assert math.isnan(level_c(whole[:2], 5.0))


MODEL = ThermalModel(ambient_c=30.0, r_c_per_w=0.1, tau_s=40.0)


def test_the_fitted_wait_lets_the_bias_to_come_fall_under_the_goal() -> None:
    # steady at 300 W: 60 °C; at 50 °C the bias is 10 °C times the sensitivity
    sensitivity = 0.002
    bias = sensitivity * 10.0
    got = fitted_wait_s(MODEL, 50.0, 300.0, 0.005, 600.0, sensitivity)
    assert got == pytest.approx(40.0 * math.log(bias / 0.005))
    assert fitted_wait_s(MODEL, 50.0, 300.0, 0.005, 30.0, sensitivity) == 30.0
    assert fitted_wait_s(MODEL, 59.9, 300.0, 0.005, 600.0, sensitivity) == 0.0
    assert fitted_wait_s(MODEL, 50.0, 300.0, 0.0, 600.0, sensitivity) == 0.0


def test_no_model_or_no_reading_gives_no_fitted_wait() -> None:
    assert fitted_wait_s(None, 50.0, 300.0, 0.005, 60.0) is None
    assert fitted_wait_s(MODEL, math.nan, 300.0, 0.005, 60.0) is None
    assert fitted_wait_s(MODEL, 50.0, math.inf, 0.005, 60.0) is None


def test_the_slope_is_a_least_squares_fit_in_degrees_per_minute() -> None:
    points = [(t, 50.0 + 0.05 * t) for t in range(0, 20)]
    assert slope_c_per_min(points) == pytest.approx(3.0)
    noisy = [(0.0, 50.0), (1.0, 52.0), (2.0, 50.0), (3.0, 52.0)]
    assert slope_c_per_min(noisy) == pytest.approx(60.0 * 0.4)
    with_gaps = [(0.0, 50.0), (1.0, math.nan), (2.0, 51.0), (math.inf, 99.0), (4.0, 52.0)]
    assert slope_c_per_min(with_gaps) == pytest.approx(30.0)
    assert math.isnan(slope_c_per_min([(0.0, 50.0), (1.0, 51.0)]))
    assert math.isnan(slope_c_per_min([(5.0, 50.0), (5.0, 51.0), (5.0, 52.0)]))


def test_what_is_still_to_come_is_the_larger_of_the_slope_and_the_model() -> None:
    # issue 44: a descending sweep's card heated up to the step and cools after it, so its
    # trailing readings read flat while it sits 1.6 C above its new level; the fitted model
    # (the run's own readings) says where it settles
    model = ThermalModel(ambient_c=30.0, r_c_per_w=0.12, tau_s=60.0)  # 320 W: 68.4 C
    flat = [(float(t), 70.0) for t in range(20)]
    still = still_to_come_c_per_min(0.0, model, flat, 320.0, 19.0)
    assert still == pytest.approx(60.0 * (68.4 - 70.0) / 60.0)
    # the readings' own slope wins where it is the larger: a model is only a fit
    assert still_to_come_c_per_min(-3.0, model, flat, 320.0, 19.0) == -3.0
    # no model, or no level to read: the slope as it was
    assert still_to_come_c_per_min(0.5, None, flat, 320.0, 19.0) == 0.5
    assert still_to_come_c_per_min(0.5, model, [], 320.0, 19.0) == 0.5
    assert still_to_come_c_per_min(0.5, model, flat, math.nan, 19.0) == 0.5
