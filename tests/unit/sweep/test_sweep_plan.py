"""The sweep's plan (``sweep/driver.py``'s :class:`SweepPlan`): every planned point in measuring
order. The driver's loop itself runs end to end in the integration tests."""

from __future__ import annotations

from powersweep.sweep.options import SafetyOptions
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.planning.undervolt_steps import UndervoltPlan
from powersweep.sweep.sweep_plan import SweepPlan


def test_caps_are_measured_from_the_highest_down() -> None:
    plan = SweepPlan(caps_w=(250.0, 350.0, 300.0))
    assert plan.all_points() == [SweepPoint(350.0), SweepPoint(300.0), SweepPoint(250.0)]


def test_clock_points_are_measured_top_tier_and_top_lock_first() -> None:
    points = (
        SweepPoint(300.0, 900.0, 5001.0),
        SweepPoint(300.0, 1500.0, 9501.0),
        SweepPoint(300.0, 900.0, 9501.0),
    )
    plan = SweepPlan(caps_w=(300.0,), clock_points=points)
    assert plan.all_points() == [points[1], points[2], points[0]]


def test_an_observe_only_sweep_measures_the_limit_in_force_once() -> None:
    plan = SweepPlan(caps_w=(280.0, 300.0), safety=SafetyOptions(observe_only=True))
    assert plan.all_points() == [SweepPoint(None)]
    assert SweepPlan(caps_w=(), safety=SafetyOptions(observe_only=True)).all_points() == []


def test_an_undervolt_plan_measures_its_baseline_first() -> None:
    baseline = SweepPoint(300.0, sm_offset_mhz=0.0)
    search = UndervoltPlan(300.0, None, (), 30.0, 300.0, 2, 120.0)
    plan = SweepPlan(caps_w=(300.0,), clock_points=(baseline,), undervolt=search)
    assert plan.all_points() == [baseline] and plan.undervolt is search
