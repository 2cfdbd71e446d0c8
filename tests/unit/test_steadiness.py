"""Issue 24's checks of a measured point: the energy counter against the sampled draw (3%), the
wait for a steady temperature (bounded in run seconds), the window's drift and its finding."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from powersweep.analysis.steadiness import (
    COUNTER_PERIOD_MAX_S,
    DRIFT_C_PER_MIN,
    ENERGY_MISMATCH_FRAC,
    energy_findings,
    thermal_findings,
)
from powersweep.clock import ManualClock, ScaledClock
from powersweep.report import build_report
from powersweep.sweep.sampling.thermal import (
    STEADY_TEMP_C_PER_MIN,
    THERMAL_TRAIL_S,
    slope_c_per_min,
    wait_thermal,
)


def _label(row: dict) -> str:
    return f"{row['cap_w']:g} W"


def _row(cap: float, counter: float, sampled: float, window: float = 20.0) -> dict:
    return {"cap_w": cap, "energy_j": counter, "energy_sampled_j": sampled, "window_s": window}


# --- energy: counter against the sampled integral -------------------------------------------


def test_energy_agreeing_within_3_percent_is_no_finding() -> None:
    assert ENERGY_MISMATCH_FRAC == 0.03
    assert energy_findings([_row(290, 1020.0, 1000.0), _row(300, 980.0, 1000.0)], _label) == []


def test_a_counter_off_by_more_than_3_percent_is_named_with_its_cap() -> None:
    found = energy_findings([_row(290, 1040.0, 1000.0), _row(300, 1001.0, 1000.0)], _label)
    assert len(found) == 1 and found[0].code == "energy_mismatch"
    assert "290 W (+4.0%)" in found[0].message and "300 W" not in found[0].message


def test_the_counters_update_period_is_allowed_over_a_short_window() -> None:
    # over 2 s, a 100 ms update period alone can move the delta by 5%
    allowance = COUNTER_PERIOD_MAX_S / 2.0
    near = 1000.0 * (1 + ENERGY_MISMATCH_FRAC + allowance * 0.9)
    assert energy_findings([_row(290, near, 1000.0, window=2.0)], _label) == []
    assert energy_findings([_row(290, near, 1000.0, window=60.0)], _label)


def test_missing_energy_figures_are_no_finding() -> None:
    rows = [_row(290, math.nan, 1000.0), {"cap_w": 300.0}]
    assert energy_findings(rows, _label) == []


# --- temperature: the drift over the window -------------------------------------------------


def test_a_point_measured_while_heating_or_cooling_is_named() -> None:
    rows = [
        {"cap_w": 250.0, "temp_drift_c_per_min": 7.5},
        {"cap_w": 290.0, "temp_drift_c_per_min": 4.0},  # what the wait lets through, slowing
        {"cap_w": 330.0, "temp_drift_c_per_min": -8.0},
        {"cap_w": 370.0},  # an older run: no column
    ]
    found = thermal_findings(rows, _label)
    assert len(found) == 1 and found[0].code == "still_heating"
    message = found[0].message
    assert DRIFT_C_PER_MIN == 2 * STEADY_TEMP_C_PER_MIN
    assert "still heating at 250 W (+7.5 C/min)" in message
    assert "still cooling at 330 W (-8.0 C/min)" in message
    assert "290 W" not in message and "370 W" not in message


def test_slope_is_a_least_squares_fit_in_c_per_minute() -> None:
    pts = [(t * 0.5, 60.0 + 0.05 * t * 0.5) for t in range(40)]  # 0.05 C/s
    assert slope_c_per_min(pts) == pytest.approx(3.0)
    assert math.isnan(slope_c_per_min(pts[:2]))
    assert math.isnan(slope_c_per_min([(1.0, 60.0)] * 5))  # no spread in time


# --- the wait before the window --------------------------------------------------------------


class _Slopes:
    """A card heating at ``c_per_s`` until ``steady_at_s`` run seconds, steady after."""

    def __init__(self, clock: ManualClock | ScaledClock, c_per_s: float, steady_at_s: float):
        self.clock, self.c_per_s, self.steady_at_s = clock, c_per_s, steady_at_s
        self.asked: list[tuple[float, float]] = []

    def temp_slope_c_per_s(self, t0_s: float, t1_s: float) -> float:
        self.asked.append((t0_s, t1_s))
        return self.c_per_s if t1_s < self.steady_at_s else 0.0


def _wait(clock: ManualClock, slopes: _Slopes, max_s: float) -> tuple[float, bool]:
    result = asyncio.run(wait_thermal(slopes, clock, set_at_s=clock.now(), max_s=max_s, poll_s=0.5))
    return result.waited_s, result.steady


def test_a_steady_card_waits_only_for_its_trailing_window() -> None:
    clock = ManualClock()
    slopes = _Slopes(clock, 0.0, 0.0)
    waited, steady = _wait(clock, slopes, 30.0)
    assert steady and waited == pytest.approx(THERMAL_TRAIL_S)
    # the fit never reaches back before the point was set
    assert all(t0 >= 0.0 for t0, _ in slopes.asked)


def test_a_heating_card_is_measured_once_it_steadies() -> None:
    clock = ManualClock()
    waited, steady = _wait(clock, _Slopes(clock, 0.2, 17.0), 30.0)
    assert steady and waited == pytest.approx(17.0)


def test_the_wait_is_bounded_in_run_seconds() -> None:
    clock = ManualClock()
    hot = STEADY_TEMP_C_PER_MIN / 60.0 * 2
    waited, steady = _wait(clock, _Slopes(clock, hot, 1e9), 12.0)
    assert not steady and waited == pytest.approx(12.0) and clock.now() == pytest.approx(12.0)


def test_the_bound_is_the_same_at_any_time_scale() -> None:
    # run seconds, never wall seconds: a hundred times faster clock waits the same run time
    clock = ScaledClock(100.0)
    slopes = _Slopes(clock, 1.0, 1e9)
    start = clock.now()
    result = asyncio.run(wait_thermal(slopes, clock, set_at_s=start, max_s=4.0, poll_s=0.5))
    assert not result.steady
    # a bound in wall seconds would wait 400 run seconds here; the margin is the event loop's
    # wake-up latency (a few wall ms on a busy machine), times the scale
    assert result.waited_s == pytest.approx(4.0, abs=1.0)


def test_an_unreadable_temperature_does_not_hold_the_point() -> None:
    clock = ManualClock()
    waited, steady = _wait(clock, _Slopes(clock, math.nan, 1e9), 30.0)
    assert not steady and waited == pytest.approx(THERMAL_TRAIL_S)


# --- a hand-edited caps.csv -----------------------------------------------------------------


def test_a_planted_counter_drift_in_caps_csv_is_flagged_by_analyze(tmp_path: Path) -> None:
    lines = ["cap_w,narr_tps,power_w,energy_j,energy_sampled_j,window_s,temp_drift_c_per_min"]
    for i, cap in enumerate((250, 270, 290, 310)):
        sampled = 20.0 * cap
        counter = sampled * (1.06 if cap == 290 else 1.0)  # the planted drift
        drift = 9.0 if cap == 250 else 0.5
        lines.append(f"{cap},{30 + i},{cap - 10},{counter},{sampled},20,{drift}")
    (tmp_path / "caps.csv").write_text("\n".join(lines) + "\n")
    report = build_report(tmp_path / "caps.csv", charts=False)
    by_code = {f["code"]: f["message"] for f in report.analysis["findings"]}
    assert "290 W (+6.0%)" in by_code["energy_mismatch"]
    assert "250 W" not in by_code["energy_mismatch"]
    assert "still heating at 250 W" in by_code["still_heating"]
    assert "still heating at 250 W" in report.summary


def test_a_nearby_point_after_a_steady_one_carries_its_steadiness() -> None:
    from powersweep.sweep.sampling.thermal import CARRY_DRAW_W, Previous, carried

    steady = Previous(330.0, -2.5, 340.0, (None, None))
    # one 10 W step down on the same locks: the limit bounds the draw's move
    kept = carried(steady, math.nan, 330.0)
    assert kept is not None and kept.waited_s == 0.0 and kept.steady
    # a jump (the confirm phase going back up), nothing before: they wait
    assert carried(steady, math.nan, 340.0 + CARRY_DRAW_W + 10.0) is None
    assert carried(None, 330.0, 330.0) is None
    # a card still drifting a step away carries too: its drift is the point's stated bias
    # (drift_bias_pct), which a bounded wait could not remove in a sweep stepping down
    drifting = carried(Previous(330.0, -12.0, 340.0), math.nan, 330.0)
    assert drifting is not None and drifting.waited_s == 0.0
    # a lock change is judged by the draw the readings show since the set
    locked = Previous(300.0, 1.0, 700.0, (1410.0, None))
    assert carried(locked, 310.0, 700.0, (1395.0, None)) is not None
    assert carried(locked, 360.0, 700.0, (1980.0, None)) is None
    assert carried(locked, math.nan, 700.0, (1980.0, None)) is None


def test_the_energy_tolerance_counts_the_sampled_draws_own_precision() -> None:
    from powersweep.analysis.steadiness import energy_findings, energy_tolerance

    # prefill's bursty draw: the sampled mean is known to 8%, so a 9% gap is no warning
    bursty = {"energy_j": 1090.0, "energy_sampled_j": 1000.0, "window_s": 10.0,
              "power_u95_pct": 8.0}  # fmt: skip
    assert energy_tolerance(bursty) == pytest.approx(0.08 + 0.01)
    assert energy_findings([bursty], lambda r: "300 W") == []
    # a steady decode draw known to 0.3%: the same gap is a sensor to distrust
    steady = {**bursty, "power_u95_pct": 0.3}
    (found,) = energy_findings([steady], lambda r: "300 W")
    assert "300 W (+9.0%)" in found.message
