"""powersweep.analysis.curve_noise: a bare curve's reading noise from the scatter physics forbids
(falls, flat stretches, repeats), the floor where it shows none, and outliers named on a line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from powersweep.analysis import curve_noise
from powersweep.analysis.curve_noise import FLOOR_SIGMA_REL, Line, estimate, outliers
from powersweep.analysis.precision import TYPICAL_READING_U95_REL, t_quantile


def _line(x: list[float], tps: list[float], power: list[float] | None = None) -> Line:
    return Line(
        tuple(x),
        tuple((v,) for v in tps),
        tuple((v,) for v in power) if power is not None else tuple(() for _ in x),
    )


def test_a_flat_noisy_curve_states_its_own_scatter() -> None:
    rng = np.random.default_rng(3)
    found = []
    for _ in range(200):
        tps = list(100.0 * np.exp(0.03 * rng.standard_normal(15)))
        found.append(estimate([_line(list(range(15)), tps)]))
    # the isotonic fit's residuals over their degrees of freedom: close to the true 3%
    assert np.median([n.measured_tps_rel for n in found]) == pytest.approx(0.03, rel=0.15)
    # pooled with the typical repeatability's 4 degrees of freedom, a little under it
    pooled = np.median([n.tps_rel for n in found])
    assert FLOOR_SIGMA_REL < pooled < 0.03


def test_a_steep_curve_that_never_falls_shows_no_noise_and_keeps_the_floor() -> None:
    noise = estimate([_line([200, 210, 220, 230], [20.0, 21.0, 22.5, 23.0], [199, 209, 219, 229])])
    assert noise.measured_tps_rel != noise.measured_tps_rel  # NaN: nothing to measure
    assert noise.tps_rel == noise.power_rel == FLOOR_SIGMA_REL
    assert noise.from_floor and noise.u95_rel() == TYPICAL_READING_U95_REL
    # two readings 1.5% apart are within the floor's two readings (1.41%)? no; 1.2% are
    assert noise.tied(0.1012, 0.1) and not noise.tied(0.1015, 0.1)


def test_the_published_3090_plateau_is_one_operating_point_read_four_times() -> None:
    tps = [32.26, 32.96, 33.57, 34.06, 34.57, 34.66, 34.67, 34.66, 34.66, 35.56, 36.26]
    x = [290.0 + 10 * k for k in range(len(tps))]
    noise = estimate([_line(x, tps)])
    # the plateau's 0.01 TPS spread is far under the floor: the floor stands
    assert noise.measured_tps_rel < 2e-4 and noise.from_floor


def test_repeats_of_one_setting_count_as_scatter() -> None:
    line = Line((1.0, 2.0), ((100.0, 104.0), (110.0,)), ((), ()))
    noise = estimate([line])
    # two readings of one setting, 4% apart: sigma = the difference over sqrt(2)
    measured = math.log(1.04) / math.sqrt(2)
    assert noise.measured_tps_rel == pytest.approx(measured, rel=1e-9)
    assert noise.tps_dof == 5 and noise.power_dof == 4 and not noise.from_floor
    # one degree of freedom is pooled with the prior's four: neither 1.96 on the one reading
    # nor Student's t at 1 dof (12.7)
    pooled = math.sqrt((4 * FLOOR_SIGMA_REL**2 + measured**2) / 5)
    assert noise.tps_rel == pytest.approx(pooled, rel=1e-9)
    assert noise.u95_rel() == pytest.approx(
        t_quantile(noise.dof) * math.hypot(pooled, FLOOR_SIGMA_REL), rel=1e-9
    )


def test_a_fall_counts_as_noise_where_a_rise_is_the_curves_own() -> None:
    flat_fall = estimate([_line([1, 2, 3, 4, 5], [100.0, 102.0, 99.0, 101.0, 100.0])])
    rising = estimate([_line([1, 2, 3, 4, 5], [100.0, 102.0, 104.0, 106.0, 108.0])])
    assert flat_fall.measured_tps_rel > 0.005
    assert rising.from_floor


def test_the_robust_first_estimate_needs_three_falls_and_shrugs_off_one_wild_reading() -> None:
    assert math.isnan(curve_noise.robust_fall_sigma([[1.0, 2.0, 1.5, 3.0]]))
    falls = [100.0, 98.0, 101.0, 99.0, 102.0, 100.0, 250.0, 101.0, 99.0]
    sigma = curve_noise.robust_fall_sigma([falls])
    assert 0.005 < sigma < 0.03


def test_outliers_are_named_worst_first_and_their_neighbours_judged_again() -> None:
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    sigma = [0.01] * 5
    assert outliers(x, [100.0, 101.0, 150.0, 102.0, 103.0], sigma) == [2]
    assert outliers(x, [100.0, 101.0, 60.0, 102.0, 103.0], sigma) == [2]
    assert outliers(x, [100.0, 101.0, 103.0, 102.0, 103.0], sigma) == []
    # two wild readings side by side: each is found once the other is set aside
    assert outliers([*x, 6.0], [100.0, 101.0, 300.0, 30.0, 103.0, 104.0], [*sigma, 0.01]) == [2, 3]
    # a reading that cannot be read (NaN, zero) is skipped, never named: the rest are judged
    assert outliers(x, [100.0, math.nan, 150.0, 0.0, 103.0], sigma) == [2]
    assert outliers(x, [100.0, math.nan, 101.0, 0.0, 103.0], sigma) == []


def test_a_runs_curve_shows_the_scatter_between_its_points_beyond_their_own() -> None:
    rng = np.random.default_rng(5)
    # points 3% apart between readings (a stall some windows met), each stating 0.3%
    found = []
    for _ in range(100):
        tps = 100.0 * np.exp(0.03 * rng.standard_normal(12))
        var, dof = curve_noise.excess_scatter([[(float(v), 0.003**2) for v in tps]])
        found.append(var)
        assert dof > 0
    assert math.sqrt(float(np.median(found))) == pytest.approx(0.03, rel=0.25)
    # a clean rising curve, or scatter within the readings' own, shows none
    rising = [(100.0 + 5 * k, 0.01**2) for k in range(10)]
    assert curve_noise.excess_scatter([rising]) == (0.0, 0)
    within = 100.0 * np.exp(0.01 * rng.standard_normal(12))
    var, _ = curve_noise.excess_scatter([[(float(v), 0.01**2) for v in within]])
    assert var < 0.01**2


def test_a_fall_beyond_four_sigmas_of_a_difference_is_named_by_its_lower_setting() -> None:
    assert curve_noise.falls([100.0, 110.0, 104.0, 112.0], [0.005] * 4) == [1]
    assert curve_noise.falls([100.0, 110.0, 108.0, 112.0], [0.005] * 4) == []  # 1.8%: within
    assert curve_noise.falls([100.0, 110.0, 104.0], [0.02] * 3) == []  # noisier readings
