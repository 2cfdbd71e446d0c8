"""What the adaptive planner reads of a measured cap (``sweep/planning/measured.py``): a
measurement from a caps.csv row, its TPS per watt, whether it is usable, and the order caps are
measured in."""

from __future__ import annotations

import math

import pytest

from powersweep.sweep.planning.measured import (
    CapMeasurement,
    coarse_order,
    plan_order,
    usable,
)


def test_a_row_gives_the_metric_and_the_readings_the_planner_uses() -> None:
    row = {
        "power_w": "250.5",
        "narr_tps": 30.0,
        "code_tps": 40.0,
        "sm_clock_mhz": 1695,
        "temp_max_c": "71",
        "thermal_throttle_pct": None,
        "util_pct": "not a number",
    }
    m = CapMeasurement.from_row(row)
    assert (m.power_w, m.tps, m.sm_clock_mhz, m.temp_max_c) == (250.5, 30.0, 1695.0, 71.0)
    assert math.isnan(m.thermal_throttle_pct) and math.isnan(m.util_pct)
    assert CapMeasurement.from_row(row, metric="code_tps").tps == 40.0


def test_a_row_without_the_metric_falls_back_to_tps() -> None:
    m = CapMeasurement.from_row({"power_w": 200.0, "tps": 25.0}, metric="prefill_tps")
    assert m.tps == 25.0
    assert math.isnan(CapMeasurement.from_row({"power_w": 200.0}).tps)


def test_tps_per_w_needs_a_positive_draw() -> None:
    assert CapMeasurement(250.0, 30.0).tps_per_w == pytest.approx(0.12)
    assert math.isnan(CapMeasurement(0.0, 30.0).tps_per_w)
    assert math.isnan(CapMeasurement(-5.0, 30.0).tps_per_w)


@pytest.mark.parametrize(
    ("m", "ok"),
    [
        (CapMeasurement(250.0, 30.0), True),
        (CapMeasurement(250.0, 0.0), True),
        (CapMeasurement(0.0, 30.0), False),
        (CapMeasurement(math.nan, 30.0), False),
        (CapMeasurement(250.0, math.nan), False),
        (CapMeasurement(250.0, -1.0), False),
        (CapMeasurement(math.inf, 30.0), False),
    ],
)
def test_usable_needs_a_positive_draw_and_a_finite_rate(m: CapMeasurement, ok: bool) -> None:
    assert usable(m) is ok


def test_the_coarse_pass_goes_up_and_a_batch_comes_down_without_repeats() -> None:
    caps = [300.0, 200.0, 250.0, 200.0]
    assert coarse_order(caps) == [200.0, 250.0, 300.0]
    assert plan_order(caps) == [300.0, 250.0, 200.0]
    # a batch below the cap in force is still measured top down
    assert plan_order([210.0, 220.0], last_cap_w=400.0) == [220.0, 210.0]
    assert plan_order([]) == [] and coarse_order(iter([250.0])) == [250.0]
