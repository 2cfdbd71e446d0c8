"""powersweep.analysis.fleet_axis: what a fleet group sweeps (the power cap, an SM or memory lock,
a grid of both): its keys, units and names, the axis an analysis was made on, its measured rows
and its own best."""

from __future__ import annotations

import pytest

from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.analysis.fleet_axis import AXES, POWER, axis_of_analysis, best_of, rows_of
from powersweep.analysis.fleet_result_types import AxisInfo
from powersweep.analysis.result_types import PowerAnalysis


def test_each_axis_names_its_setting_unit_and_answer() -> None:
    power, sm, mem, grid = (AXES[k] for k in (POWER, "sm-clock", "mem-clock", "grid"))
    assert (power.setting_key, power.tier_key, power.unit, power.noun) == (
        "cap_w",
        None,
        "W",
        "cap",
    )
    assert (sm.setting_key, sm.tier_key, sm.noun) == ("sm_lock_mhz", None, "SM lock")
    assert (mem.setting_key, mem.tier_key, mem.noun) == ("mem_lock_mhz", None, "memory lock")
    assert (grid.setting_key, grid.tier_key) == ("sm_lock_mhz", "mem_lock_mhz")
    assert not power.is_clock and sm.is_clock and mem.is_clock and grid.is_clock
    assert power.key("sweet_spot") == "sweet_spot_w" and grid.key("step") == "step_mhz"
    assert power.answer() == "fleet cap" and mem.answer() == "fleet lock"
    assert power.reference == "the default limit"
    assert sm.reference.startswith("the highest lock each card measured")


def test_axis_info_is_what_fleet_json_says_about_the_axis() -> None:
    assert AxisInfo.of(AXES["grid"]).to_json() == {
        "name": "grid",
        "setting_key": "sm_lock_mhz",
        "tier_key": "mem_lock_mhz",
        "unit": "MHz",
        "noun": "SM lock",
        "answer_key": "fleet_lock",
        "suffix": "mhz",
        "reference": AXES["grid"].reference,
    }
    assert AxisInfo.of(AXES[POWER]).suffix == "w"


POWER_DOC = {
    "sweet_spot": {"cap_w": 250.0, "tps_per_w": 0.125},
    "caps": [
        {"cap_w": 200.0, "status": "ok", "tps": 20.0},
        {"cap_w": 250.0, "status": "ok", "tps": 30.0},
        {"cap_w": 300.0, "status": "failed"},
    ],
}
CLOCK_DOC = {
    "kind": "clocks",
    "axis": "mem-clock",
    "points": [{"mem_lock_mhz": 7001.0, "tps": 30.0}, {"mem_lock_mhz": 9001.0, "tps": 36.0}],
    "rows": [{"mem_lock_mhz": 11001.0, "status": "failed"}],
    "peak": {"mem_lock_mhz": 9001.0, "tps": 36.0},
}


def test_a_power_analysis_gives_its_ok_caps_and_sweet_spot() -> None:
    power = PowerAnalysis.from_json(POWER_DOC)
    assert axis_of_analysis(power) is AXES[POWER]
    assert [r.cap_w for r in rows_of(power)] == [200.0, 250.0]
    best = best_of(power)
    assert best is not None and best.cap_w == 250.0
    assert best_of(PowerAnalysis.from_json({})) is None


@pytest.mark.parametrize(
    ("axis", "expected"), [("mem-clock", "mem-clock"), ("grid", "grid"), ("bogus", "sm-clock")]
)
def test_a_clock_analysis_names_its_own_axis(axis: str, expected: str) -> None:
    clocks = ClockAnalysis.from_json({**CLOCK_DOC, "axis": axis})
    assert axis_of_analysis(clocks) is AXES[expected]


def test_a_clock_analysis_gives_its_points_and_peak() -> None:
    clocks = ClockAnalysis.from_json(CLOCK_DOC)
    assert [p.mem_lock_mhz for p in rows_of(clocks)] == [7001.0, 9001.0]  # not the failed row
    best = best_of(clocks)
    assert best is not None and best.mem_lock_mhz == 9001.0
