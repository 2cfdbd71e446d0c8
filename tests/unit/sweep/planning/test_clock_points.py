"""Which clock-lock points a clock sweep measures (``sweep/planning/clock_points.py``): the
``--sm-clocks`` / ``--mem-clocks`` lists, the memory tiers a load runs at, the thinned SM locks,
each axis's plan, its measuring order, and the adaptive coarse pass and refinement."""

from __future__ import annotations

import pytest

from powersweep.errors import UsageError
from powersweep.sweep.gpu import SupportedClocks
from powersweep.sweep.planning.clock_points import (
    DEFAULT_SM_STEPS,
    SweepPoint,
    coarse_points,
    load_mem_tiers,
    measure_order,
    parse_clocks,
    plan_clock_points,
    refine_points,
    sm_step_mhz,
    thin_sm_clocks,
)

SM = tuple(float(f) for f in range(2100, 209, -15))
SUPPORTED = SupportedClocks(
    (9751.0, 9501.0, 5001.0, 810.0, 405.0),
    {9751.0: SM, 9501.0: SM, 5001.0: SM[10:], 810.0: (1005.0, 600.0), 405.0: (600.0,)},
)


def test_parse_clocks_drops_repeats_and_empty_entries_and_keeps_the_order() -> None:
    assert parse_clocks("1500, 900,,1500 MHz, 1200mhz", "--sm-clocks") == (1500.0, 900.0, 1200.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (" , ", "--mem-clocks is empty; give MHz like --mem-clocks 900,1200,1500"),
        ("9501,fast", "--mem-clocks: 'fast' is not a number of MHz"),
        ("0", "--mem-clocks: '0' must be a positive number of MHz"),
        ("inf", "--mem-clocks: 'inf' must be a positive number of MHz"),
    ],
)
def test_parse_clocks_refuses_in_one_line_naming_the_flag(text: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_clocks(text, "--mem-clocks")
    assert str(info.value) == message


def test_load_tiers_leave_out_the_idle_ones() -> None:
    assert load_mem_tiers(SUPPORTED) == (9751.0, 9501.0, 5001.0)
    assert load_mem_tiers(SupportedClocks((), {})) == ()
    # 40% of the top is still a load tier
    assert load_mem_tiers(SupportedClocks((1000.0, 400.0, 399.0), {})) == (1000.0, 400.0)


def test_thinning_keeps_few_clocks_whole_and_snaps_targets_to_listed_ones() -> None:
    assert thin_sm_clocks([]) == ()
    assert thin_sm_clocks([1500.0, 900.0, 1200.0, 1500.0]) == (900.0, 1200.0, 1500.0)
    # clocks under 35% of the top are left out; none left above: the top alone
    assert thin_sm_clocks([100.0, 200.0, 2000.0]) == (2000.0,)
    thinned = thin_sm_clocks(SM, steps=5)
    # targets 735, 1076.25, 1417.5 (a tie: the lower clock), 1758.75, 2100
    assert thinned == (735.0, 1080.0, 1410.0, 1755.0, 2100.0)
    assert set(thinned) <= set(SM)
    assert len(thin_sm_clocks(SM)) <= DEFAULT_SM_STEPS


def test_an_sm_axis_holds_the_first_memory_clock_given_or_none() -> None:
    points = plan_clock_points(
        "sm-clock", None, sm_clocks=(1500.0, 900.0, 1500.0), mem_clocks=None, cap_w=300.0
    )
    assert points == [SweepPoint(300.0, 900.0, None), SweepPoint(300.0, 1500.0, None)]
    held = plan_clock_points(
        "sm-clock", None, sm_clocks=(900.0,), mem_clocks=(9501.0, 5001.0), cap_w=None
    )
    assert held == [SweepPoint(None, 900.0, 9501.0)]


def test_a_memory_axis_takes_every_load_tier_with_the_first_sm_lock_given() -> None:
    points = plan_clock_points("mem-clock", SUPPORTED, sm_clocks=None, mem_clocks=None, cap_w=None)
    assert points == [SweepPoint(None, None, m) for m in (5001.0, 9501.0, 9751.0)]
    given = plan_clock_points(
        "mem-clock", None, sm_clocks=(1400.0, 1200.0), mem_clocks=(9501.0, 5001.0), cap_w=250.0
    )
    assert given == [SweepPoint(250.0, 1400.0, 5001.0), SweepPoint(250.0, 1400.0, 9501.0)]


def test_a_grid_thins_each_tiers_own_sm_clocks() -> None:
    points = plan_clock_points("grid", SUPPORTED, sm_clocks=None, mem_clocks=(5001.0,), cap_w=None)
    assert {p.mem_lock_mhz for p in points} == {5001.0}
    assert max(p.sm_lock_mhz or 0 for p in points) == SM[10]  # that tier's own top


def test_a_tier_the_card_does_not_list_takes_the_top_tiers_sm_clocks() -> None:
    points = plan_clock_points("grid", SUPPORTED, sm_clocks=None, mem_clocks=(7000.0,), cap_w=None)
    assert max(p.sm_lock_mhz or 0 for p in points) == 2100.0


@pytest.mark.parametrize(
    ("axis", "supported", "sm", "mem", "message"),
    [
        ("mem-clock", None, None, None, "the card lists no memory clocks: give --mem-clocks"),
        ("grid", SupportedClocks((), {}), None, None, "give --mem-clocks"),
        ("sm-clock", None, None, None, "the card lists no SM clocks: give --sm-clocks"),
        ("grid", SupportedClocks((9501.0,), {9501.0: ()}), None, None, "give --sm-clocks"),
    ],
)
def test_clocks_that_cannot_be_planned_ask_for_the_flag(
    axis: str,
    supported: SupportedClocks | None,
    sm: tuple[float, ...] | None,
    mem: tuple[float, ...] | None,
    message: str,
) -> None:
    with pytest.raises(UsageError, match=message):
        plan_clock_points(axis, supported, sm_clocks=sm, mem_clocks=mem, cap_w=None)


def test_measuring_goes_top_down_with_unlocked_clocks_first() -> None:
    points = [
        SweepPoint(None, 900.0, 5001.0),
        SweepPoint(None, 1500.0, 9501.0),
        SweepPoint(None, 900.0, 9501.0),
        SweepPoint(None, None, 9501.0),
        SweepPoint(None, 1200.0, None),
    ]
    assert measure_order(points) == [
        SweepPoint(None, 1200.0, None),
        SweepPoint(None, None, 9501.0),
        SweepPoint(None, 1500.0, 9501.0),
        SweepPoint(None, 900.0, 9501.0),
        SweepPoint(None, 900.0, 5001.0),
    ]


def test_the_sm_step_is_the_median_gap() -> None:
    points = [SweepPoint(None, f) for f in (900.0, 1000.0, 1300.0, 1400.0, 1500.0)]
    assert sm_step_mhz(points) == 100.0
    assert sm_step_mhz([SweepPoint(None, 900.0), SweepPoint(300.0)]) is None


def test_the_coarse_pass_keeps_every_other_lock_and_each_tiers_top() -> None:
    tier = [SweepPoint(None, float(f), 9501.0) for f in (900, 1000, 1100, 1200)]
    assert coarse_points(tier) == [tier[0], tier[2], tier[3]]
    odd = tier[:3]
    assert coarse_points(odd) == [odd[0], odd[2]]


def test_refinement_asks_for_the_unmeasured_neighbours_of_a_tiers_peak() -> None:
    tier = [SweepPoint(None, float(f), None) for f in (900, 1000, 1100, 1200, 1300)]
    # TPS per W peaks at 1100 MHz
    measured = {tier[0]: (20.0, 200.0), tier[2]: (30.0, 220.0), tier[4]: (32.0, 300.0)}
    assert refine_points(tier, measured) == [tier[3], tier[1]]
    assert refine_points(tier, {}) == []
    everything = {p: (float(i), 100.0 + i) for i, p in enumerate(tier)}
    assert refine_points(tier, everything) == []


def test_on_a_grid_the_pareto_front_is_refined_too() -> None:
    low = [SweepPoint(None, float(f), 5001.0) for f in (900, 1000, 1100)]
    high = [SweepPoint(None, float(f), 9501.0) for f in (900, 1000, 1100)]
    measured = {
        low[0]: (20.0, 150.0),  # the best TPS per W of its tier
        low[2]: (24.0, 240.0),
        high[0]: (22.0, 200.0),  # on the front (more TPS than low[0]), but not its tier's peak
        high[2]: (40.0, 260.0),  # its tier's peak
    }
    assert set(refine_points(low + high, measured)) == {low[1], high[1]}
