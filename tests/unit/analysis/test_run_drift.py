"""The run's drift from readings of one point taken apart (analysis.run_drift), how a reading
carries it (RunToRun.drift_at) and which point is read again to measure it (best_reference)."""

from __future__ import annotations

import math

import pytest

from powersweep.analysis.precision import DRIFT_SHAPE_SD, Reading, RunToRun, t_quantile
from powersweep.analysis.run_drift import DriftFit, PairGap, fit_drift
from powersweep.sweep.measurement.run_to_run import best_reference


def test_one_pair_is_spent_on_the_rate() -> None:
    # 2% over 100 s, each reading +-0.2% (SD): a rate of 0.02%/s, nothing left for the term
    fit = fit_drift([PairGap(0.02, 100.0, 2 * 0.002**2, 20.0)])
    assert fit.rate_per_s == pytest.approx(0.0002)
    assert fit.rate_var == pytest.approx(2 * 0.002**2 / 100.0**2)
    assert fit.rate_dof == 20.0 and fit.between_dof == 0.0 and fit.between_var == 0.0
    assert fit.shown


def test_pairs_that_disagree_beyond_the_rate_show_a_term_between_readings() -> None:
    own = 2 * 0.001**2
    # one pair says +2% over 100 s, the other -2% over 100 s: no rate, a wide term between
    fit = fit_drift([PairGap(0.02, 100.0, own), PairGap(-0.02, 100.0, own)])
    assert fit.rate_per_s == pytest.approx(0.0)
    assert not fit.shown
    assert math.sqrt(fit.between_var) > 0.01
    assert fit.between_dof == pytest.approx(1.0)
    # their disagreement widens the rate's own variance (Birge), on one degree of freedom
    assert fit.rate_var > own / (2 * 100.0**2) and fit.rate_dof == 1.0


def test_a_rate_within_its_noise_is_none() -> None:
    # 0.1% over 100 s from readings +-0.5%: shown only beyond its own SD (the method of moments)
    fit = fit_drift([PairGap(0.001, 100.0, 2 * 0.005**2)])
    assert not fit.shown
    term = RunToRun(drift=fit, tps_drift=fit, t_ref_s=50.0)
    assert term.drift_at(150.0) == ((0.0, 0.0), (0.0, 0.0))


def test_untimed_pairs_go_to_the_term_between_readings() -> None:
    fit = fit_drift([PairGap(0.03, math.nan, 2 * 0.001**2)])
    assert fit.rate_per_s == 0.0 and not fit.shown
    # the method of moments: (d^2 - own) / 2
    assert fit.between_var == pytest.approx((0.03**2 - 2 * 0.001**2) / 2)


def test_a_reading_carries_the_drift_from_the_runs_middle() -> None:
    fit = DriftFit(rate_per_s=0.0002, rate_var=0.00001**2)
    term = RunToRun(drift=fit, tps_drift=fit, t_ref_s=100.0)
    (bias, var), (tps_bias, _) = term.drift_at(160.0)
    # 60 s after the middle: +1.2%, the rate's SD times 60 s as its variance, and half the
    # drift as the SD of its unmeasured path (DRIFT_SHAPE_SD)
    assert bias == pytest.approx(0.012) and tps_bias == pytest.approx(0.012)
    assert var == pytest.approx((0.00001 * 60.0) ** 2 + (DRIFT_SHAPE_SD * 0.012) ** 2)
    assert term.drift_at(40.0)[0][0] == pytest.approx(-0.012)  # before it: reads low
    assert term.drift_at(math.nan) == ((0.0, 0.0), (0.0, 0.0))
    # the rate is what its pairs measured between: outside their span a reading carries the
    # drift of the nearest end, not the rate drawn out
    spanned = RunToRun(drift=fit, tps_drift=fit, t_ref_s=100.0, span_s=(90.0, 130.0))
    assert spanned.drift_at(160.0)[0][0] == pytest.approx(0.0002 * 30.0)
    assert spanned.drift_at(20.0)[0][0] == pytest.approx(-0.0002 * 10.0)
    # ... and the rate over its own distance outside the span as a variance: the drift went on
    # or stopped there, which no pair measured (issue 44: a drifting run's first points, read
    # before its pairs, missed at TPS 83% over 24 seeds)
    (_, far_var), _ = spanned.drift_at(20.0)
    path = (DRIFT_SHAPE_SD * 0.0002 * 10.0) ** 2
    assert far_var == pytest.approx(
        0.00001**2 * 10.0**2 + (0.0002**2 + 0.00001**2) * 70.0**2 + path
    )
    (_, in_var), _ = spanned.drift_at(120.0)
    assert in_var == pytest.approx((0.00001 * 20.0) ** 2 + (DRIFT_SHAPE_SD * 0.0002 * 20.0) ** 2)
    # a middle outside the span (a one-cap run's two readings, late in a run that began with
    # its warm-up) is moved into it too
    late = RunToRun(drift=fit, tps_drift=fit, t_ref_s=10.0, span_s=(13.0, 21.0))
    assert late.drift_at(13.0)[0][0] == 0.0
    assert late.drift_at(21.0)[0][0] == pytest.approx(0.0002 * 8.0)

    # two points 0.9% apart, each +-0.5%: read 10 s apart their drift nearly cancels (not
    # tied), read two minutes apart it may be what parts them (tied)
    def pair(t_a: float, t_b: float) -> tuple[Reading, Reading]:
        a = Reading(0.100, 0.005, 0.0, run_drift_rel=term.drift_at(t_a)[0][0])
        b = Reading(0.1009, 0.005, 0.0, run_drift_rel=term.drift_at(t_b)[0][0])
        return a, b

    near_a, near_b = pair(150.0, 160.0)
    assert not near_a.tied_with(near_b)
    far_a, far_b = pair(40.0, 160.0)
    assert far_a.tied_with(far_b)


def _reading(t_s: float, temp_c: float, bias: float = 0.0) -> Reading:
    return Reading(0.1, 0.005, bias, within_u95_rel=0.005, within_dof=30.0, t_s=t_s, temp_c=temp_c)


def test_the_reference_is_the_point_that_measures_the_drift_best() -> None:
    # a steady card: the earliest point, the longest baseline
    steady = [("a", _reading(10.0, 60.0)), ("b", _reading(20.0, 60.0)), ("c", _reading(30.0, 60.0))]
    assert best_reference(steady) == "a"
    # a first point read while the card still heated: its bias would read as the run's drift
    heating = [("a", _reading(10.0, 60.0, bias=0.05)), *steady[1:]]
    assert best_reference(heating) == "b"
    # a sweep's hot end read again after its cool end would measure the degrees between them
    cooling = [
        ("a", _reading(10.0, 75.0)),
        ("b", _reading(20.0, 61.0)),
        ("c", _reading(30.0, 60.0)),
    ]
    assert best_reference(cooling) == "b"
    # no times (an older run's rows): the first measured
    assert best_reference([("a", Reading(0.1, 0.005, 0.0)), ("b", None)]) == "a"
    assert best_reference([]) is None


def test_a_reading_on_a_bending_drift_is_within_its_stated_interval() -> None:
    # issue 44: the world model's drift is a sine of ten minutes; a pair at 30 s and 150 s of a
    # 180 s run measures its chord, and readings between them sit on the curve (1.4 times the
    # chord's estimate where the 24-seed runs missed). The path's term holds them against the
    # run's mean state (the truth). A drift that turns between the pairs (its peak inside)
    # reads as no drift on the chord: nothing built from one pair holds that. Near the middle
    # the run's mean state sits off the middle's by the bend (0.18% here): the reading's own
    # noise carries that, as on the coverage bench.
    def drift(t: float) -> float:
        return 0.03 * math.sin(2.0 * math.pi * t / 600.0 - 0.5)

    t_a, t_b = 30.0, 150.0
    fit = fit_drift([PairGap(drift(t_b) - drift(t_a), t_b - t_a, 2 * 0.0005**2, 40.0)])
    assert fit.shown
    mean = sum(drift(t / 10.0) for t in range(1801)) / 1801
    term = RunToRun(drift=fit, tps_drift=fit, t_ref_s=90.0, span_s=(t_a, t_b))
    times = (40.0, 60.0, 120.0, 145.0)
    for t in times:
        (bias, var), _ = term.drift_at(t)
        stated = math.hypot(t_quantile(fit.rate_dof) * math.sqrt(var), bias)
        assert abs(drift(t) - mean) <= stated, t
    # the chord's estimate alone leaves some of them out
    assert any(abs(drift(t) - mean) > abs(term.drift_at(t)[0][0]) for t in times)
