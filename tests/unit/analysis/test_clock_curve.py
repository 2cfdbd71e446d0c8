"""powersweep.analysis.clock_curve: a clock-lock curve as points (usable rows, repeats pooled,
sorted by memory lock then SM lock), the axis it sweeps, its Pareto front and knee, where the SM
clock stops paying, and its memory tiers."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from powersweep.analysis.clock_curve import (
    ClockPoint,
    clock_points,
    infer_axis,
    is_clock_curve,
    pareto_front,
    pareto_knee,
    saturation,
    tier_summaries,
)
from powersweep.analysis.load import load_curve
from powersweep.analysis.result_types import PointFigures
from powersweep.analysis.run_record import RunRecord
from powersweep.errors import UsageError

NAN = math.nan


def _pt(sm: float, tps: float, power: float, mem: float = NAN) -> ClockPoint:
    return ClockPoint(sm_lock_mhz=sm, mem_lock_mhz=mem, cap_w=NAN, tps=tps, power_w=power)


def test_a_point_s_tps_per_w_and_json_form() -> None:
    served = PointFigures(j_per_token=6.7)
    p = ClockPoint(1500.0, 9001.0, 350.0, 36.0, 240.0, served=served)
    assert p.tps_per_w == 0.15
    d = p.record().to_json()
    # a figure not measured (NaN clocks, the per-token figures not given) is null
    assert {k for k, v in d.items() if v is None} >= {
        "sm_clock_mhz",
        "mem_clock_mhz",
        "ttft_p95_ms",
    }
    assert {k: v for k, v in d.items() if v is not None} == {
        "sm_lock_mhz": 1500.0,
        "mem_lock_mhz": 9001.0,
        "cap_w": 350.0,
        "tps": 36.0,
        "power_w": 240.0,
        "tps_per_w": 0.15,
        "j_per_token": 6.7,
    }


def test_is_clock_curve_needs_a_lock_value_not_just_the_column() -> None:
    assert is_clock_curve(pl.DataFrame({"cap_w": [1.0], "sm_lock_mhz": [1500.0]}))
    assert is_clock_curve(pl.DataFrame({"mem_lock_mhz": [None, 9001.0]}))
    assert not is_clock_curve(pl.DataFrame({"cap_w": [1.0], "sm_lock_mhz": [None]}))
    assert not is_clock_curve(pl.DataFrame({"cap_w": [1.0]}))


def test_clock_points_keep_usable_rows_pool_repeats_and_sort(tmp_path: Path) -> None:
    path = tmp_path / "clocks.csv"
    path.write_text(
        "sm_lock_mhz,mem_lock_mhz,narr_tps,power_w,status,reason,window_s\n"
        "1800,7001,28,230,ok,,\n"
        "1200,9001,30,200,ok,,10\n"
        "1200,9001,34,204,ok,confirm,30\n"
        "1500,9001,36,220,ok,,\n"
        "1500,9001,,,failed,,\n"  # its recheck failed: no point
        "2100,9001,0,250,ok,,\n"  # no TPS: not usable
        "1650,9001,37,225,failed,,\n"
    )
    points = clock_points(load_curve(path).caps, "narr_tps")
    assert [(p.mem_lock_mhz, p.sm_lock_mhz) for p in points] == [(9001.0, 1200.0), (7001.0, 1800.0)]
    pooled = points[0]
    assert pooled.tps == pytest.approx((30 * 10 + 34 * 30) / 40)
    assert pooled.power_w == pytest.approx(202.0)
    assert pooled.served.j_per_token is None
    assert clock_points(load_curve(path).caps.filter(pl.col("status") != "ok"), "narr_tps") == []


def test_unlocked_memory_sorts_last_and_an_unlocked_sm_first() -> None:
    caps = pl.DataFrame(
        {
            "sm_lock_mhz": [1500.0, None, 1200.0],
            "mem_lock_mhz": [None, 9001.0, 9001.0],
            "narr_tps": [30.0, 31.0, 28.0],
            "power_w": [200.0, 210.0, 190.0],
            "status": ["ok", "ok", "ok"],
        }
    )
    points = clock_points(caps, "narr_tps")
    assert [p.tps for p in points] == [31.0, 28.0, 30.0]
    assert math.isnan(points[0].sm_lock_mhz) and points[1].sm_lock_mhz == 1200.0
    assert math.isnan(points[2].mem_lock_mhz) and points[2].sm_lock_mhz == 1500.0


def test_the_axis_is_what_run_json_says_else_what_the_data_shows() -> None:
    sm_only = [_pt(1200, 30, 200), _pt(1500, 36, 220)]
    mem_only = [_pt(NAN, 30, 200, 7001), _pt(NAN, 36, 220, 9001)]
    grid = [_pt(1200, 30, 200, 7001), _pt(1500, 36, 220, 9001)]

    def run(doc: dict[str, Any]) -> RunRecord:
        return RunRecord.from_json(doc)

    assert infer_axis(sm_only, None) == "sm-clock"
    assert infer_axis(mem_only, run({})) == "mem-clock"
    assert infer_axis(grid, None) == "grid"
    assert infer_axis([], None) == "sm-clock"
    assert infer_axis(grid, run({"options": {"axis": "mem-clock"}})) == "mem-clock"
    # a grid that fell back to the SM axis says so; an unknown axis is not believed
    fallback = run({"axis_fallback": "sm-clock", "options": {"axis": "grid"}})
    assert infer_axis(grid, fallback) == "sm-clock"
    assert infer_axis(sm_only, run({"options": {"axis": "power"}})) == "sm-clock"
    # options that are no object: the run.json is refused, naming the key
    with pytest.raises(UsageError, match=r"run\.json does not follow its schema: .*\$\.options"):
        run({"options": "grid"})


def test_pareto_front_drops_dominated_points_and_sorts_by_draw() -> None:
    a, b, c = _pt(1200, 30, 200), _pt(1500, 36, 220), _pt(1800, 38, 260)
    dominated = _pt(1350, 29, 210)  # less TPS for more watts than a
    same = _pt(1400, 30, 200)  # equal to a on both: neither dominates
    assert pareto_front([c, dominated, b, a, same]) == [a, same, b, c]
    assert pareto_front([]) == []


def test_the_knee_is_farthest_above_the_chord_or_none() -> None:
    a, b, c = _pt(1200, 30, 200), _pt(1500, 36, 220), _pt(1800, 38, 260)
    assert pareto_knee([a, b, c]) is b
    assert pareto_knee([a, c]) is None  # fewer than three points
    straight = [_pt(1200, 30, 200), _pt(1500, 34, 230), _pt(1800, 38, 260)]
    assert pareto_knee(straight) is None  # on the chord: no knee
    flat = [_pt(1200, 30, 200), _pt(1500, 30, 230), _pt(1800, 30, 260)]
    assert pareto_knee(flat) is None  # no TPS range to scale


def test_saturation_is_the_lowest_sm_lock_within_three_percent_of_the_top() -> None:
    points = [_pt(sm, t, 200) for sm, t in ((1200, 30), (1500, 36.2), (1800, 37.2), (2100, 37.0))]
    sat = saturation(points)
    assert sat is not None and sat.sm_lock_mhz == 1500.0  # 36.2 >= 0.97 * 37.2 = 36.08
    rising = [_pt(sm, t, 200) for sm, t in ((1200, 30), (1500, 33), (1800, 37))]
    assert saturation(rising) is None  # only the top lock reaches the top
    assert saturation(points[:2]) is None  # fewer than three locks


def test_tier_summaries_describe_each_memory_tier_against_the_fastest() -> None:
    fast = [_pt(1200, 30, 200, 9001), _pt(1500, 36, 220, 9001), _pt(1800, 37, 260, 9001)]
    slow = [_pt(1200, 29, 190, 7001), _pt(1500, 30, 205, 7001)]
    top, low = tier_summaries(slow + fast)
    assert top.mem_lock_mhz == 9001.0 and low.mem_lock_mhz == 7001.0
    assert top.n_points == 3 and top.top_tps == 37.0 and top.top_tps_sm_lock_mhz == 1800
    assert top.peak is not None
    assert top.peak.sm_lock_mhz == 1500.0  # 36/220 is the best TPS/W of the tier
    assert top.tps_stops_rising_at_sm_mhz == 1500.0
    assert top.below_fastest_tier_pct == 0.0 and top.caps_tps is False
    assert low.below_fastest_tier_pct == pytest.approx(100 * 7 / 37)
    assert low.caps_tps is True and low.tps_stops_rising_at_sm_mhz is None
    assert [p.sm_lock_mhz for p in low.points] == [1200.0, 1500.0]
    # one tier alone never caps TPS
    (only,) = tier_summaries(slow)
    assert only.caps_tps is False and only.below_fastest_tier_pct == 0.0
    assert tier_summaries([]) == []
