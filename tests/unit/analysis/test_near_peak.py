"""powersweep.analysis.near_peak: a region's caps as index ranges, their TPS judged by the
region's median, and the near-peak cap as the last floor crossing below the best TPS."""

from __future__ import annotations

import pytest

from powersweep.analysis.cap_points import Region
from powersweep.analysis.near_peak import judged_tps, near_peak_index, region_groups


def _region(start: float, end: float) -> Region:
    return Region("boost_plateau", start, end, 0.0, 0.0, (), (), None)


def test_region_groups_are_index_ranges_of_the_measured_caps_inside() -> None:
    caps = [200.0, 210.0, 220.0, 230.0, 240.0, 250.0]
    groups = region_groups(caps, [_region(210.0, 230.0), _region(245.0, 300.0)])
    assert groups == [(1, 3), (5, 5)]
    # a region no measured cap falls in gives no group
    assert region_groups(caps, [_region(201.0, 209.0)]) == []
    assert region_groups(caps, []) == []


def test_judged_tps_replaces_a_region_by_its_median_and_keeps_the_rest() -> None:
    tps = [10.0, 20.0, 23.0, 21.0, 30.0]
    assert judged_tps(tps, [(1, 3)]) == [10.0, 21.0, 21.0, 21.0, 30.0]
    assert judged_tps(tps, []) == tps
    assert judged_tps([1.0, 3.0], [(0, 1)]) == [2.0, 2.0]  # even count: the mean of the middle two
    assert tps == [10.0, 20.0, 23.0, 21.0, 30.0]  # the input is not changed


def test_near_peak_is_the_lowest_cap_of_the_unbroken_run_above_the_floor() -> None:
    # best 100 at index 4; floor at 5% is 95: 96 and 97 hold it, 90 breaks it
    tps = [80.0, 90.0, 96.0, 97.0, 100.0]
    assert near_peak_index(tps, [], 5.0) == 2
    assert near_peak_index(tps, [], 0.0) == 4
    assert near_peak_index(tps, [], 100.0) == 0


def test_a_lucky_reading_below_a_dip_does_not_become_the_near_peak() -> None:
    # index 1 is above the floor, but index 2 falls under it: the crossing is above index 2
    assert near_peak_index([50.0, 99.0, 90.0, 98.0, 100.0], [], 5.0) == 3


def test_caps_above_the_best_do_not_count_and_ties_take_the_lower_cap() -> None:
    # a hot top end (falling TPS) is not searched; the best is the first of equal readings
    assert near_peak_index([90.0, 100.0, 100.0, 70.0], [], 0.0) == 1
    assert near_peak_index([42.0], [], 5.0) == 0


def test_a_region_is_judged_as_one_operating_point() -> None:
    # alone, index 2 (94) is under 95% of 100; the plateau 2..4 reads as its median 97
    tps = [80.0, 90.0, 94.0, 97.0, 100.0]
    assert near_peak_index(tps, [], 5.0) == 3
    assert near_peak_index(tps, [(2, 4)], 5.0) == 2


@pytest.mark.parametrize("loss", [1.0, 5.0, 10.0])
def test_near_peak_never_lies_above_the_best(loss: float) -> None:
    tps = [10.0, 20.0, 30.0, 29.0, 28.0]
    k = near_peak_index(tps, [], loss)
    assert k <= 2 and tps[k] >= 30.0 * (1 - loss / 100)
