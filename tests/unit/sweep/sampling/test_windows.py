"""Sequential windows: when a point stops measuring (powersweep.sweep.sampling.windows)."""

from __future__ import annotations

import math

import pytest

from powersweep.analysis.precision import Reading
from powersweep.sweep.sampling import windows as W

POLICY = W.WindowPolicy(min_s=3.0, max_s=10.0, precision_pct=0.5)


def test_a_precise_point_stops_after_its_first_round() -> None:
    assert W.stop_reason(POLICY, 3.0, Reading(0.1, 0.004, 0.0), None) == W.STOP_PRECISE


def test_a_point_clearly_under_the_best_stops_as_separated() -> None:
    best = Reading(0.11, 0.004, 0.0)
    far = Reading(0.09, 0.02, 0.0)
    assert W.stop_reason(POLICY, 3.0, far, best) == W.STOP_SEPARATED
    # near the best and not precise: it measures on
    near = Reading(0.1095, 0.02, 0.0)
    assert W.stop_reason(POLICY, 3.0, near, best) is None


def test_the_maximum_bounds_every_point() -> None:
    near = Reading(0.1095, 0.02, 0.0)
    best = Reading(0.11, 0.004, 0.0)
    assert W.stop_reason(POLICY, 10.0, near, best) == W.STOP_MAX
    # what is left is shorter than a round is worth
    assert W.stop_reason(POLICY, 9.0, near, best) == W.STOP_MAX
    # a load whose prompt needs 5 s cannot use 3 s left
    assert W.stop_reason(POLICY, 6.5, near, best, load_min_s=10.0) == W.STOP_MAX
    assert W.stop_reason(POLICY, 3.0, Reading(math.nan, math.nan, 0.0), best) == W.STOP_MAX
    one = W.WindowPolicy(min_s=10.0, max_s=10.0)
    assert W.stop_reason(one, 10.0, near, best) == W.STOP_ONE_ROUND


def test_the_next_round_is_what_the_missing_precision_predicts_within_bounds() -> None:
    # 1% after 3 s: a quarter of that half-width needs 4x the time, 9 s more; 7 s are left
    assert W.next_round_s(POLICY, 3.0, Reading(0.1, 0.01, 0.0)) == pytest.approx(7.0)
    # nearly there: at least half the minimum window
    assert W.next_round_s(POLICY, 3.0, Reading(0.1, 0.0051, 0.0)) == pytest.approx(1.5)
    # a prefill-heavy prompt of 4 s: at least one whole prompt
    assert W.next_round_s(POLICY, 3.0, Reading(0.1, 0.0051, 0.0), 8.0) == pytest.approx(4.0)
    assert POLICY.first_s(8.0) == 8.0
    assert POLICY.first_s(20.0) == 10.0
