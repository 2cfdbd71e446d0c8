"""Thermal steadiness (``sweep/sampling/thermal.py``): the bounded wait for a steady temperature,
the wait a fitted thermal model asks for, the steadiness a nearby point carries, and the
least-squares slope of a card's temperature."""

from __future__ import annotations

import asyncio
import math

import pytest

from powersweep.analysis.precision import ThermalModel
from powersweep.clock import ManualClock
from powersweep.sweep.sampling.thermal import (
    CARRY_DRAW_W,
    THERMAL_TRAIL_S,
    Previous,
    ThermalWait,
    carried,
    fitted_wait_s,
    slope_c_per_min,
    wait_thermal,
)


class _Cooling:
    """A slope (°C/s) that decays from ``start`` by ``per_s`` each run second; records asks."""

    def __init__(self, clock: ManualClock, start: float, per_s: float = 0.0) -> None:
        self.clock, self.start, self.per_s = clock, start, per_s
        self.asked: list[tuple[float, float]] = []

    def temp_slope_c_per_s(self, t0_s: float, t1_s: float) -> float:
        self.asked.append((t0_s, t1_s))
        return max(0.0, self.start - self.per_s * self.clock.now())


def _wait(slopes: _Cooling, clock: ManualClock, **kw: float) -> ThermalWait:
    args = dict(set_at_s=0.0, max_s=30.0, poll_s=0.5)
    return asyncio.run(wait_thermal(slopes, clock, **{**args, **kw}))  # type: ignore[arg-type]


def test_a_steady_card_waits_only_for_its_trailing_window() -> None:
    clock = ManualClock()
    slopes = _Cooling(clock, 0.01)  # 0.6 °C/min
    got = _wait(slopes, clock)
    assert got == ThermalWait(THERMAL_TRAIL_S, pytest.approx(0.6), True)
    assert slopes.asked == [(0.0, THERMAL_TRAIL_S)]


def test_a_card_still_heating_is_measured_once_its_slope_falls_under_the_bound() -> None:
    clock = ManualClock()
    slopes = _Cooling(clock, 0.2, per_s=0.0105)  # 3.18 °C/min at 14 s, 2.865 at 14.5 s
    got = _wait(slopes, clock)
    assert got.steady and got.waited_s == pytest.approx(14.5)
    assert got.slope_c_per_min == pytest.approx(2.865)
    # the fit is always over the trailing window, and looks once per reading
    assert slopes.asked[-1] == (pytest.approx(4.5), pytest.approx(14.5))
    assert len(slopes.asked) == 10


def test_the_wait_is_bounded_and_a_point_set_earlier_waits_less() -> None:
    clock = ManualClock()
    got = _wait(_Cooling(clock, 1.0), clock, max_s=12.0)
    assert (got.waited_s, got.steady) == (pytest.approx(12.0), False)
    assert got.slope_c_per_min == pytest.approx(60.0)
    later = ManualClock(100.0)
    got = _wait(_Cooling(later, 0.0), later, set_at_s=95.0)
    assert got.waited_s == pytest.approx(5.0) and got.steady


def test_no_bound_and_an_unreadable_temperature_do_not_wait() -> None:
    clock = ManualClock()
    got = _wait(_Cooling(clock, 1.0), clock, max_s=0.0)
    assert got.waited_s == 0.0 and not got.steady and math.isnan(got.slope_c_per_min)

    class Unreadable:
        def temp_slope_c_per_s(self, t0_s: float, t1_s: float) -> float:
            return math.nan

    clock = ManualClock()
    got = asyncio.run(wait_thermal(Unreadable(), clock, set_at_s=-20.0, max_s=30.0, poll_s=0.5))
    assert (got.waited_s, got.steady) == (0.0, False) and math.isnan(got.slope_c_per_min)


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


def test_a_nearby_point_under_the_same_locks_carries_by_the_limits_step() -> None:
    before = Previous(power_w=280.0, drift_c_per_min=-2.5, cap_total_w=600.0)
    got = carried(before, math.nan, cap_total_w=600.0 - CARRY_DRAW_W)
    assert got == ThermalWait(0.0, -2.5, True)  # the drift is carried, whatever it was
    assert carried(before, 280.0, cap_total_w=600.0 - CARRY_DRAW_W - 1.0) is None
    assert carried(None, 280.0, 600.0) is None
    assert carried(before, 280.0) is None  # the new limit unknown: wait


def test_a_lock_change_carries_by_the_draws_step() -> None:
    before = Previous(280.0, 1.0, 600.0, locks=(1500.0, None))
    assert carried(before, 300.0, 600.0, locks=(1410.0, None)) == ThermalWait(0.0, 1.0, True)
    assert carried(before, 320.0, 600.0, locks=(1410.0, None)) is None
    assert carried(before, math.nan, 600.0, locks=(1410.0, None)) is None


def test_the_slope_is_a_least_squares_fit_in_degrees_per_minute() -> None:
    points = [(t, 50.0 + 0.05 * t) for t in range(0, 20)]
    assert slope_c_per_min(points) == pytest.approx(3.0)
    noisy = [(0.0, 50.0), (1.0, 52.0), (2.0, 50.0), (3.0, 52.0)]
    assert slope_c_per_min(noisy) == pytest.approx(60.0 * 0.4)
    with_gaps = [(0.0, 50.0), (1.0, math.nan), (2.0, 51.0), (math.inf, 99.0), (4.0, 52.0)]
    assert slope_c_per_min(with_gaps) == pytest.approx(30.0)
    assert math.isnan(slope_c_per_min([(0.0, 50.0), (1.0, 51.0)]))
    assert math.isnan(slope_c_per_min([(5.0, 50.0), (5.0, 51.0), (5.0, 52.0)]))
