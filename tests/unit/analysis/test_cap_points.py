"""powersweep.analysis.cap_points: the usual cap step, the curve's noise from second
differences, how tightly a binding cap is held, and the per-cap questions (power-limited, under-
loaded, thermal, eligible for a region, adjacent)."""

from __future__ import annotations

import math

import pytest

from powersweep.analysis.cap_points import (
    MIN_BINDING_MARGIN_W,
    CapPoint,
    adjacent,
    binding_margin_w,
    estimate_noise,
    is_eligible,
    is_thermal,
    is_under_loaded,
    power_limited,
    typical_step_w,
)

SCALE = 1.4826 / math.sqrt(6.0)


def _p(cap: float, power: float, tps: float = 10.0, n: int = 1, **kw: float) -> CapPoint:
    return CapPoint(cap_w=cap, cap_total_w=cap * n, power_w=power, tps=tps, **kw)


def test_typical_step_is_the_median_positive_gap_of_the_distinct_caps() -> None:
    assert typical_step_w([200, 210, 220, 240, 250]) == 10.0
    assert typical_step_w([300, 200, 250, 250]) == 50.0  # unsorted, a repeat is no gap
    assert typical_step_w([200, 220, 260]) == 30.0  # median of 20 and 40
    assert math.isnan(typical_step_w([250, 250]))
    assert math.isnan(typical_step_w([]))


def test_a_straight_curve_has_the_noise_floors() -> None:
    points = [_p(c, c - 1.0, tps=0.1 * c) for c in (200, 210, 220, 230, 240)]
    noise = estimate_noise(points, 10.0)
    assert noise.power_w == 0.25
    assert noise.tps_rel == 0.002


def test_noise_is_the_scaled_median_second_difference() -> None:
    # draw alternates 2 W above a straight line: every second difference is 4 W
    power = [100.0, 112.0, 120.0, 132.0, 140.0]
    tps = [10.0, 10.0 * math.exp(0.1), 10.0, 10.0 * math.exp(0.1), 10.0]
    points = [_p(200 + 10 * k, w, t) for k, (w, t) in enumerate(zip(power, tps, strict=True))]
    noise = estimate_noise(points, 10.0)
    assert noise.power_w == pytest.approx(SCALE * 4.0)
    assert noise.tps_rel == pytest.approx(SCALE * 0.2)


def test_noise_skips_triples_across_a_hole() -> None:
    # the 230 -> 300 W hole splits the curve: only 200/210/220 and 210/220/230 count
    power = [100.0, 112.0, 120.0, 132.0, 500.0]
    points = [_p(c, w) for c, w in zip((200, 210, 220, 230, 300), power, strict=True)]
    assert estimate_noise(points, 10.0).power_w == pytest.approx(SCALE * 4.0)
    # fewer than three adjacent caps: nothing to learn, the floor
    assert estimate_noise(points[:2], 10.0).power_w == 0.25


def test_binding_margin_floors_at_a_watt_per_gpu_without_enough_binding_caps() -> None:
    assert binding_margin_w([], 10.0) == MIN_BINDING_MARGIN_W
    two_gpus = [_p(c, 0.5 * c, n=2) for c in (200, 210, 220)]  # flat draw: nothing binds
    assert binding_margin_w(two_gpus, 10.0) == 2 * MIN_BINDING_MARGIN_W


def test_binding_margin_learns_from_caps_with_the_power_bit_set() -> None:
    # headrooms 0.5, 1.5, 2.5, 3.5 W: median 2, MAD 1 -> 2 + 4 * 1.4826
    points = [
        _p(c, c - h, pwr_throttle_pct=100.0)
        for c, h in ((200, 0.5), (210, 1.5), (220, 2.5), (230, 3.5))
    ]
    assert binding_margin_w(points, 10.0) == pytest.approx(2.0 + 4 * 1.4826)


def test_binding_margin_without_bits_learns_where_draw_follows_the_cap() -> None:
    # draw follows the cap 0.2 W under it: tight, so the floor wins
    follow = [_p(c, c - 0.2) for c in (200, 210, 220, 230)]
    assert binding_margin_w(follow, 10.0) == MIN_BINDING_MARGIN_W
    # headroom of 5% of the lowest cap or more teaches nothing (that is no held cap)
    loose = [_p(c, c - 12.0, pwr_throttle_pct=100.0) for c in (200, 210, 220, 230)]
    assert binding_margin_w(loose, 10.0) == MIN_BINDING_MARGIN_W


def test_power_limited_by_the_bit_or_a_draw_within_the_margin() -> None:
    assert power_limited(_p(300, 250.0, pwr_throttle_pct=50.0), 1.0)
    assert not power_limited(_p(300, 250.0, pwr_throttle_pct=49.9), 1.0)
    assert power_limited(_p(300, 299.0), 1.0)
    assert not power_limited(_p(300, 298.9), 1.0)
    assert power_limited(_p(300, 290.0, n=2), 310.0)  # the whole set's cap (600 W) counts


def test_under_loaded_needs_a_measured_utilization_under_half() -> None:
    assert is_under_loaded(_p(300, 100.0, util_pct=49.0))
    assert not is_under_loaded(_p(300, 100.0, util_pct=50.0))
    assert not is_under_loaded(_p(300, 100.0))  # unknown: not under-loaded


def test_thermal_by_bit_or_by_temperature_under_the_cap() -> None:
    # the thermal bit on 20% of ticks: thermal whatever the temperature
    assert is_thermal(_p(300, 299.0, thermal_throttle_pct=20.0), math.nan)
    # bits unknown: within 3 C of slowdown and drawing under 98% of the cap
    assert is_thermal(_p(300, 250.0, temp_max_c=80.0), 83.0)
    assert not is_thermal(_p(300, 250.0, temp_max_c=79.9), 83.0)
    assert not is_thermal(_p(300, 295.0, temp_max_c=83.0), 83.0)  # at its cap: the cap holds it
    # bits read and clear: only within 1 C of slowdown
    assert not is_thermal(_p(300, 250.0, temp_max_c=81.0, thermal_throttle_pct=0.0), 83.0)
    assert is_thermal(_p(300, 250.0, temp_max_c=82.0, thermal_throttle_pct=0.0), 83.0)
    # no slowdown threshold known and no bit: never thermal
    assert not is_thermal(_p(300, 250.0, temp_max_c=95.0), math.nan)


def test_eligible_is_neither_under_loaded_nor_thermal() -> None:
    assert is_eligible(_p(300, 250.0, util_pct=99.0, temp_max_c=60.0), 83.0)
    assert not is_eligible(_p(300, 250.0, util_pct=10.0), 83.0)
    assert not is_eligible(_p(300, 250.0, temp_max_c=82.0), 83.0)


def test_adjacent_is_one_and_a_half_steps_upward() -> None:
    a = _p(200, 0.0)
    assert adjacent(a, _p(215, 0.0), 10.0)
    assert not adjacent(a, _p(215.1, 0.0), 10.0)
    assert adjacent(a, _p(225, 0.0), 10.0, max_steps=2.5)  # one missing cap tolerated
    assert not adjacent(a, _p(200, 0.0), 10.0)  # the same cap
    assert not adjacent(_p(210, 0.0), a, 10.0)  # order matters
