"""Each point's own precision (powersweep.analysis.precision)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from powersweep.analysis import precision as P


def test_ratio_se_matches_the_spread_of_many_repeated_points() -> None:
    # blocks of a 30 TPS stream, 2% noise per block: the stated 95% interval of each simulated
    # point covers the true rate about 95% of the time
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(400):
        secs = rng.uniform(0.4, 0.6, 20)
        toks = 30.0 * secs * (1 + rng.normal(0, 0.02, 20))
        se, dof = P.ratio_se_rel(list(zip(toks, secs, strict=True)))
        rate = toks.sum() / secs.sum()
        hits += abs(rate / 30.0 - 1) <= P.t_quantile(dof) * se
    assert 0.92 <= hits / 400 <= 0.98


def test_batch_means_see_correlated_draw_that_a_naive_se_misses() -> None:
    # a slow wander of the draw (neighbouring ticks alike): batches as long as the series'
    # own autocorrelation widen the error, and fewer of them count
    rng = np.random.default_rng(2)
    wander = np.cumsum(rng.normal(0, 0.3, 40)) + 250
    se, dof = P.batch_se_rel(wander.tolist())
    naive = wander.std(ddof=1) / math.sqrt(len(wander)) / wander.mean()
    assert se > naive and dof < 39
    assert P.batch_se_rel([250.0, 251.0, 249.0]) == (pytest.approx(math.nan, nan_ok=True),) * 2


def test_too_few_units_state_no_precision() -> None:
    assert math.isnan(P.ratio_se_rel([(10.0, 0.5)])[0])
    pr = P.point_precision([(10.0, 0.5)], [250.0] * 10, 0.0, math.nan)
    assert not pr.known and math.isnan(pr.u95_rel)


def test_the_fitted_thermal_model_is_the_cards() -> None:
    # a first-order card (tau 25 s, 0.12 C/W, 30 C ambient) stepped through draws, whole-degree
    # readings every 0.5 s
    rng = np.random.default_rng(3)
    t, temp, power, T = [], [], [], 35.0
    for k in range(900):
        p = [380.0, 300.0, 250.0, 330.0][(k // 200) % 4] + rng.normal(0, 2)
        T += 0.5 * ((30 + 0.12 * p) - T) / 25.0
        t.append(0.5 * k)
        temp.append(float(round(T)))
        power.append(p)
    model = P.fit_thermal(t, temp, power)
    assert model is not None
    assert model.tau_s == pytest.approx(25.0, rel=0.15)
    assert model.r_c_per_w == pytest.approx(0.12, rel=0.1)
    assert P.fit_thermal(t[:10], temp[:10], power[:10]) is None
    # a flat trace fits nothing believable
    assert P.fit_thermal(t, [60.0] * len(t), [300.0] * len(t)) is None


def test_drift_bias_has_the_sign_of_what_is_still_to_come() -> None:
    # cooling at 6 C/min with tau 20 s: 2 C still to come, read low by 1%
    assert P.drift_bias_rel(-6.0, 20.0) == pytest.approx(-0.01)
    assert P.drift_bias_rel(6.0, math.nan) == pytest.approx(0.005 * 6.0)  # 60 s default
    assert P.drift_bias_rel(math.nan, 20.0) == 0.0


def test_ties_test_the_difference_and_cancel_a_common_drift() -> None:
    # both read 1% low while the card cooled alike: their 0.8% gap is real
    assert not P.tied(0.110, 0.003, -0.01, 0.10912, 0.003, -0.01)
    # the same gap with one point drifting and the other steady is within noise
    assert P.tied(0.110, 0.003, -0.01, 0.10912, 0.003, 0.0)
    assert not P.tied(0.110, math.nan, 0.0, 0.11, 0.001, 0.0)


def test_readings_pool_a_confirmed_point() -> None:
    r = P.Reading.of({"tps_per_w": 0.11, "tps_per_w_stat_u95_pct": 0.4, "drift_bias_pct": -0.2})
    assert (r.stat_u95_rel, r.bias_rel, r.known) == (pytest.approx(0.004), -0.002, True)
    pooled = P.Reading.pooled([r, r], 0.111)
    assert pooled.stat_u95_rel == pytest.approx(0.004 / math.sqrt(2))
    assert pooled.tps_per_w == 0.111
    assert not P.Reading.of({"tps_per_w": "x"}).known


def test_the_draw_is_known_no_better_than_its_two_sensors_agree() -> None:
    # issue 44: under a bursty load a window's few instant readings fell mostly in bursts, read
    # 10-20% high and stated +-5% from their small spread; the energy counter over the same
    # seconds, which integrates every burst, read the difference
    blocks, ticks = [(4.0, 0.12)] * 20, [300.0 + (k % 3) for k in range(30)]
    alone = P.point_precision(blocks, ticks, 0.0, 60.0)
    told = P.point_precision(blocks, ticks, 0.0, 60.0, power_sensors_rel=-0.12)
    assert told.power_sensors_rel == -0.12
    assert told.power_u95_rel == pytest.approx(math.hypot(alone.power_u95_rel, 0.12))
    # TPS/W's interval holds the readings' scatter already: its draw is the readings' mean
    assert told.u95_rel == alone.u95_rel
    assert told.tps_u95_rel == alone.tps_u95_rel
    # a point read back and restated carries it
    row = {"tps_per_w": 1.0, "power_w": 300.0, "tps_per_w_stat_u95_pct": 1.0,
           "power_u95_pct": 100 * told.power_u95_rel, "power_sensors_pct": -12.0}  # fmt: skip
    assert P.Reading.of(row).restated(P.RunToRun()).power_sensors_rel == -0.12


def test_a_heating_cards_draw_rises_no_further_than_its_cap() -> None:
    # issue 44: the first point of a descending sweep (the card 6 C under its level, 1% under
    # its cap) drew 0.8% less than once warm while its draw stated +-0.2%; its leakage adds
    # draw up to the cap and no further
    blocks, ticks = [(4.0, 0.12)] * 20, [356.0 + (k % 3) * 0.1 for k in range(30)]
    free = P.point_precision(blocks, ticks, 6.0, 60.0, power_sensitivity_per_c=0.5 / 356)
    held = P.point_precision(
        blocks, ticks, 6.0, 60.0, power_sensitivity_per_c=0.5 / 356, power_headroom_rel=0.005
    )
    assert free.power_bias_rel == pytest.approx(0.5 / 356 * 6.0)
    assert held.power_bias_rel == pytest.approx(0.005)
    assert held.power_u95_rel < free.power_u95_rel
    # a cooling card's draw falls whatever its headroom
    cool = P.point_precision(
        blocks, ticks, -6.0, 60.0, power_sensitivity_per_c=0.5 / 356, power_headroom_rel=0.0
    )
    assert cool.power_bias_rel == pytest.approx(-0.5 / 356 * 6.0)
