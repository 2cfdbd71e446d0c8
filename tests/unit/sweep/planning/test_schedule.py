"""The strategies (``sweep/planning/schedule.py``): which points, in what batches, until when.

Each schedule is driven as the driver drives it (``next`` with the rows of the points measured
ok so far, until an empty batch), on rows made from a known curve, but without the driver's
guard against a point asked for twice, so a repeat shows. The adaptive planner's own rules are
tested in ``test_strategy.py``; here, what the schedules make of them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from powersweep.sweep.planning.clock_points import coarse_points, measure_order
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.planning.schedule import (
    REFINE_CLOCKS,
    AdaptiveClockSchedule,
    AdaptivePowerSchedule,
    DenseSchedule,
    Schedule,
)
from powersweep.sweep.planning.strategy import COARSE, AdaptivePlanner

GRID = [190.0 + 10 * i for i in range(21)]
Row = dict[str, Any]


def drive(
    schedule: Schedule,
    row_of: Callable[[SweepPoint], Row | None],
    max_batches: int = 100,
) -> tuple[list[list[tuple[SweepPoint, str]]], dict[SweepPoint, Row]]:
    """Every batch the schedule hands out until an empty one, and the rows it was given
    (``row_of`` None: the point failed, and is left out as the driver leaves it out)."""
    batches: list[list[tuple[SweepPoint, str]]] = []
    measured: dict[SweepPoint, Row] = {}
    for _ in range(max_batches):
        batch = schedule.next(measured)
        if not batch:
            return batches, measured
        batches.append(batch)
        for point, _ in batch:
            row = row_of(point)
            if row is not None:
                measured[point] = row
    pytest.fail(f"the schedule did not stop after {max_batches} batches")


def asked(batches: list[list[tuple[SweepPoint, str]]]) -> Counter[SweepPoint]:
    return Counter(p for batch in batches for p, _ in batch)


def power_row(cap: float) -> Row:
    """A card that binds below 330 W and draws 330 W above it; TPS/W peaks near 250 W."""
    draw = min(cap, 330.0)
    tps = 40.0 * (1.0 - math.exp(-draw / 120.0)) - 0.02 * max(0.0, 250.0 - draw)
    return {"narr_tps": tps, "power_w": draw, "sm_clock_mhz": 1000.0 + draw, "status": "ok"}


def staircase_row(cap: float) -> Row:
    """A curve of plateaus: more structure than half the grid can pin down."""
    draw = cap
    for level in (230.0, 290.0, 330.0):
        if level - 10 <= cap <= level + 20:
            draw = min(cap, level)
    return {"narr_tps": 0.1 * draw**0.8, "power_w": draw, "sm_clock_mhz": 1000.0 + draw}


def test_dense_gives_every_point_once_in_order() -> None:
    points = [SweepPoint(c) for c in (300.0, 280.0, 260.0)] + [SweepPoint(250.0, 1410.0, 9501.0)]
    schedule = DenseSchedule(points, reason="retry")
    batches, _ = drive(schedule, lambda p: {"status": "ok"})
    assert batches == [[(p, "retry") for p in points]]
    assert schedule.next({}) == [] and schedule.record() is None
    assert DenseSchedule(points).next({})[0][1] == "dense"


@pytest.mark.parametrize("row_of", [power_row, staircase_row])
def test_adaptive_power_stops_within_its_budget_and_never_asks_twice(
    row_of: Callable[[float], Row],
) -> None:
    planner = AdaptivePlanner(GRID, 10.0)
    schedule = AdaptivePowerSchedule(planner, "narr_tps")
    batches, _ = drive(schedule, lambda p: row_of(p.cap_w or math.nan))
    counts = asked(batches)
    assert max(counts.values()) == 1
    assert len(batches) > 1  # it refined
    assert len(counts) <= planner.max_caps < len(GRID)
    assert {p.cap_w for p in counts} <= set(GRID)
    # the coarse pass first, bottom up; every refinement batch top down, with its reasons
    assert batches[0] == [(SweepPoint(c), COARSE) for c in sorted(planner.initial_caps())]
    for batch in batches[1:]:
        caps = [p.cap_w or 0.0 for p, _ in batch]
        assert caps == sorted(caps, reverse=True)
        assert all(reason and reason != COARSE for _, reason in batch)
    record = schedule.record()
    assert record is not None and record["max_caps"] == planner.max_caps
    assert not {c["cap_w"] for c in record["left_out"]} & {p.cap_w for p in counts}


def test_the_staircase_is_left_out_past_the_budget_and_named() -> None:
    planner = AdaptivePlanner(GRID, 10.0)
    schedule = AdaptivePowerSchedule(planner, "narr_tps")
    batches, _ = drive(schedule, lambda p: staircase_row(p.cap_w or math.nan))
    assert len(asked(batches)) == planner.max_caps
    record = schedule.record()
    assert record is not None and record["left_out"]


def test_adaptive_power_judges_the_metric_it_is_given() -> None:
    def prefill_row(point: SweepPoint) -> Row:
        row = power_row(point.cap_w or math.nan)
        return {**row, "prefill_tps": 50.0 * row["narr_tps"], "narr_tps": math.nan}

    refined, _ = drive(
        AdaptivePowerSchedule(AdaptivePlanner(GRID, 10.0), "prefill_tps"), prefill_row
    )
    assert len(refined) > 1
    # judged by the wrong column, nothing measured is usable: no refinement
    wrong, _ = drive(AdaptivePowerSchedule(AdaptivePlanner(GRID, 10.0), "narr_tps"), prefill_row)
    assert len(wrong) == 1


def test_adaptive_power_does_not_ask_again_for_a_failed_coarse_cap() -> None:
    planner = AdaptivePlanner(GRID, 10.0)
    failed = planner.initial_caps()[1]
    schedule = AdaptivePowerSchedule(planner, "narr_tps")
    batches, _ = drive(schedule, lambda p: None if p.cap_w == failed else power_row(p.cap_w or 0))
    assert asked(batches)[SweepPoint(failed)] == 1
    assert len(batches) > 1  # the refinement still ran


# --- adaptive clock ---------------------------------------------------------------------------

SM = [1200.0 + 60 * i for i in range(11)]
TIERS = (9501.0, 5001.0)


def clock_points() -> list[SweepPoint]:
    return measure_order(SweepPoint(300.0, s, m) for m in TIERS for s in SM)


def clock_row(point: SweepPoint) -> Row:
    """TPS/W peaks at 1500 MHz on each tier; the low memory tier is slower and draws less."""
    sm = point.sm_lock_mhz or math.nan
    low = point.mem_lock_mhz == TIERS[1]
    tps = 0.05 * sm * (0.8 if low else 1.0)
    power = (100.0 + 100.0 * (sm / 1500.0) ** 2) * (0.9 if low else 1.0)
    return {"narr_tps": tps, "power_w": power, "status": "ok"}


def tpw(row: Mapping[str, Any]) -> float:
    return float(row["narr_tps"]) / float(row["power_w"])


def test_adaptive_clock_refines_each_tiers_peak_never_asks_twice_and_stops() -> None:
    points = clock_points()
    schedule = AdaptiveClockSchedule(points, "narr_tps")
    batches, measured = drive(schedule, clock_row)
    counts = asked(batches)
    assert max(counts.values()) == 1
    assert set(counts) <= set(points) and len(batches) > 1
    assert batches[0] == [(p, COARSE) for p in measure_order(coarse_points(points))]
    assert all(reason == REFINE_CLOCKS for batch in batches[1:] for _, reason in batch)
    for mem in TIERS:
        tier = [p for p in points if p.mem_lock_mhz == mem]
        best = max((p for p in tier if p in measured), key=lambda p: tpw(measured[p]))
        assert best.sm_lock_mhz == 1500.0
        # both SM neighbours of the peak measured: it is bracketed
        assert {SweepPoint(300.0, s, mem) for s in (1440.0, 1560.0)} <= set(measured)
    assert schedule.record() is None


def test_adaptive_clock_never_asks_again_for_a_failed_point() -> None:
    points = clock_points()
    failed = SweepPoint(300.0, 1440.0, TIERS[0])
    assert failed in coarse_points(points)
    schedule = AdaptiveClockSchedule(points, "narr_tps")
    batches, _ = drive(schedule, lambda p: None if p == failed else clock_row(p))
    assert asked(batches)[failed] == 1


def test_the_driver_measures_a_point_a_schedule_asks_for_again_never_and_counts_it() -> None:
    from powersweep.sweep.driver import Sweep
    from powersweep.sweep.verdict import FaultLog

    sweep = object.__new__(Sweep)
    sweep._faults = FaultLog()  # type: ignore[attr-defined]
    tried = {SweepPoint(290.0)}
    batch = [(SweepPoint(290.0), "bracket peak"), (SweepPoint(280.0), "bracket peak")]
    assert sweep._new(batch, tried) == [(SweepPoint(280.0), "bracket peak")]
    (fault,) = sweep._faults.to_list()  # type: ignore[attr-defined]
    assert fault["kind"] == "planner_repeat" and fault["examples"] == ["290 W (bracket peak)"]
