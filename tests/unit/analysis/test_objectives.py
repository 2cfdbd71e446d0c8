"""The recommendation's selectors: each picks the cap its objective names, ties to the lower cap."""

from __future__ import annotations

import math

import pytest

from powersweep.analysis.cap_points import CapPoint
from powersweep.analysis.objectives import (
    OBJECTIVES,
    Cost,
    NearPeak,
    SelectionContext,
    TpsPerW,
    objective_named,
    pick_sweet_spot,
)
from powersweep.errors import UsageError

# TPS/W: 0.40, 0.45, 0.44, 0.40 -- the sweet spot is 250 W, TPS rises to the top cap
POINTS = [
    CapPoint(200.0, 200.0, 200.0, 80.0),
    CapPoint(250.0, 250.0, 240.0, 108.0),
    CapPoint(300.0, 300.0, 270.0, 118.8),
    CapPoint(350.0, 350.0, 300.0, 120.0),
]
CONTEXT = SelectionContext(near_peak_cap_w=300.0, max_limit_w=350.0, n_gpus=1)


def test_tps_per_w_picks_the_highest_measured_ratio() -> None:
    assert TpsPerW().select(POINTS, CONTEXT).point.cap_w == 250.0
    assert TpsPerW().select(POINTS, CONTEXT).weighed is None


def test_an_exact_tie_goes_to_the_lower_cap() -> None:
    tied = [CapPoint(300.0, 300.0, 200.0, 90.0), CapPoint(200.0, 200.0, 100.0, 45.0)]
    assert pick_sweet_spot(tied).cap_w == 200.0


def test_near_peak_takes_the_cap_the_analysis_found() -> None:
    assert NearPeak().select(POINTS, CONTEXT).point.cap_w == 300.0


def test_cost_with_energy_only_is_the_sweet_spot_and_time_only_the_fastest() -> None:
    assert Cost(1.0).select(POINTS, CONTEXT).point.cap_w == 250.0
    fastest = Cost(0.0).select(POINTS, CONTEXT)
    assert fastest.point.cap_w == 350.0
    assert fastest.weighed is not None and fastest.weighed.eta == 0.0
    assert fastest.weighed.max_power_w == 350.0
    assert fastest.weighed.cost == pytest.approx(350.0 / 120.0)


def test_cost_normalises_time_by_the_highest_cap_when_the_limit_is_unknown() -> None:
    context = SelectionContext(300.0, math.nan, 2)
    weighed = Cost(0.5).select(POINTS, context).weighed
    assert weighed is not None and weighed.max_power_w == 350.0
    known = Cost(0.5).select(POINTS, SelectionContext(300.0, 400.0, 2)).weighed
    assert known is not None and known.max_power_w == 800.0


def test_objective_named_builds_each_selector_and_refuses_others() -> None:
    assert [objective_named(n).name for n in OBJECTIVES] == list(OBJECTIVES)
    assert objective_named("cost", eta=0.25) == Cost(0.25)
    with pytest.raises(UsageError, match="unknown objective 'fastest'"):
        objective_named("fastest")
    with pytest.raises(UsageError, match="--eta must be between 0 and 1"):
        objective_named("cost", eta=1.5)
