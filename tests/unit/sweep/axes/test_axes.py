"""The axis seam (sweep/axes): each saved curve finds its axis, and the axis reads it whole --
analysis, answer, summary, outputs, charts and the confirm phase's ties -- with no ``if`` on
the axis left to the caller."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest

from powersweep.analysis import load_curve
from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.analysis.load import Curve
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.analysis.serving import ServingOptions
from powersweep.errors import UsageError
from powersweep.report import build_report
from powersweep.sweep.axes import AXES, AnalysisSettings, axis_named, axis_of
from powersweep.sweep.axes.power_axis import PowerAxis
from powersweep.sweep.gpu import PowerEnvelope
from powersweep.sweep.options import Axis, MeasureOptions, PointOptions, SweepOptions
from powersweep.sweep.planning.caps import default_caps
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.sampling.windows import WindowPolicy
from tests.fakes.fake_gpu import FakeGpu
from tests.helpers.options import point_options


def _power_csv(tmp_path: Path) -> Path:
    # TPS/W peaks at 250 W (0.45), 300 W is within 2.5% of it
    lines = ["cap_w,narr_tps,power_w"]
    for cap, tps, draw in ((200, 80.0, 200.0), (250, 108.0, 240.0), (300, 118.8, 270.0)):
        lines.append(f"{cap},{tps},{draw}")
    path = tmp_path / "power" / "caps.csv"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n")
    return path


def _clock_csv(tmp_path: Path, mems: tuple[int, ...] = (10001,), run: dict | None = None) -> Path:
    lines = ["sm_lock_mhz,mem_lock_mhz,narr_tps,power_w"]
    for mem in mems:
        for sm, tps, draw in ((1200, 30.0, 200.0), (1500, 36.0, 220.0), (1800, 38.0, 260.0)):
            lines.append(f"{sm},{mem},{tps},{draw + mem / 1000}")
    folder = tmp_path / f"clocks-{len(mems)}"
    folder.mkdir()
    (folder / "caps.csv").write_text("\n".join(lines) + "\n")
    if run is not None:
        (folder / "run.json").write_text(json.dumps(run))
    return folder / "caps.csv"


def test_every_axis_the_cli_offers_is_registered_under_its_name() -> None:
    assert list(AXES) == [a.value for a in Axis]
    assert all(AXES[name].name == name for name in AXES)
    assert axis_named("grid") is AXES["grid"]
    with pytest.raises(UsageError, match="unknown axis 'volts'; use one of power, sm-clock"):
        axis_named("volts")


def test_a_power_curve_is_read_by_the_power_axis(tmp_path: Path) -> None:
    curve = load_curve(_power_csv(tmp_path))
    axis = axis_of(curve)
    assert axis.name == "power" and axis.noun == "cap" and not axis.locks_clocks
    result = axis.analyze(curve, AnalysisSettings(bootstrap=0))
    answer = axis.answer(result)
    assert answer is not None and answer.to_json()["cap_w"] == 250.0
    assert "| Sweet spot | 250 W |" in axis.summary(curve, result)


def test_clock_curves_find_their_axis_from_the_data_or_from_run_json(tmp_path: Path) -> None:
    assert axis_of(load_curve(_clock_csv(tmp_path))).name == "sm-clock"
    assert axis_of(load_curve(_clock_csv(tmp_path, (10001, 7001)))).name == "grid"
    # a grid whose card refused memory locks fell back to the SM axis, and says so
    recorded = {"options": {"axis": "grid"}, "axis_fallback": "sm-clock"}
    fallback = tmp_path / "fb"
    fallback.mkdir()
    assert axis_of(load_curve(_clock_csv(fallback, (10001,), recorded))).name == "sm-clock"


def test_the_clock_axis_answers_with_the_peak_and_matches_ties_by_locks(tmp_path: Path) -> None:
    curve = load_curve(_clock_csv(tmp_path))
    axis = axis_of(curve)
    result = axis.analyze(curve, AnalysisSettings(bootstrap=0))
    peak = axis.answer(result)
    assert peak is not None and peak.to_json()["sm_lock_mhz"] == 1500
    assert "1500" in axis.summary(curve, result)
    tied = ClockAnalysis.from_json(
        {"peak": {"tied_points": [{"sm_lock_mhz": 1500.0, "mem_lock_mhz": 10001.0}]}}
    )
    assert axis.tied(tied, SweepPoint(300.0, sm_lock_mhz=1500.0, mem_lock_mhz=10001.0))
    assert not axis.tied(tied, SweepPoint(300.0, sm_lock_mhz=1800.0, mem_lock_mhz=10001.0))
    locks = {"sm_lock_mhz": 1500.0, "mem_lock_mhz": None}
    after = {"sweet_spot": {"cap_w": 300.0, "tied_points": [locks]}}
    record = axis.confirm_record(ClockAnalysis.from_json(after))
    assert record == {
        "best_after_w": 300.0,
        "tied_after": None,
        "tied_points_after": [{"sm_lock_mhz": 1500.0, "mem_lock_mhz": None}],
    }


def test_the_power_axis_matches_ties_by_cap_and_records_no_points() -> None:
    axis = AXES["power"]
    result = PowerAnalysis.from_json({"sweet_spot": {"cap_w": 250.0, "tied_caps": [250.0, 300.0]}})
    assert axis.tied(result, SweepPoint(300.0))
    assert not axis.tied(result, SweepPoint(200.0))
    assert axis.confirm_record(result) == {"best_after_w": 250.0, "tied_after": [250.0, 300.0]}


def test_a_curve_with_no_usable_point_has_no_answer_on_either_axis(tmp_path: Path) -> None:
    power = tmp_path / "caps.csv"
    power.write_text("cap_w,narr_tps,power_w,status\n200,80,200,failed\n")
    curve = load_curve(power)
    assert axis_of(curve).answer(axis_of(curve).analyze(curve, AnalysisSettings())) is None
    with pytest.raises(UsageError, match="nothing to analyse"):
        build_report(power, charts=False, write_analysis=False, require_answer=True)


def test_the_report_reads_each_axis_through_its_own_outputs(tmp_path: Path) -> None:
    settings = ServingOptions(max_itl_ms=1000.0)
    power = build_report(_power_csv(tmp_path), charts=False, serving=settings)
    assert power.result.to_json()["sweet_spot"]["cap_w"] == 250.0
    assert [p.name for p in power.paths] == ["analysis.json", "summary.md"]
    clocks = build_report(_clock_csv(tmp_path), charts=False)
    doc = clocks.result.to_json()
    assert doc["kind"] == "clocks" and doc["peak"]["sm_lock_mhz"] == 1500
    assert {p.name for p in clocks.paths} == {"analysis.json", "summary.md"}


def test_each_axis_draws_its_own_charts(tmp_path: Path) -> None:
    for csv, names in (
        (_power_csv(tmp_path), {"efficiency.png", "power.png"}),
        (_clock_csv(tmp_path), {"clock-efficiency.png", "clock-pareto.png"}),
    ):
        curve = load_curve(csv)
        axis = axis_of(curve)
        result = axis.analyze(curve, AnalysisSettings(bootstrap=0))
        drawn = axis.charts(curve, result, csv.parent / "charts", formats=("png",), title=None)
        assert names <= {p.name for p in drawn}
        assert all(p.stat().st_size > 0 for p in drawn)


def test_the_power_axis_plans_its_caps_in_steps_or_as_given() -> None:
    gpus = [FakeGpu(0, min_w=100.0, max_w=400.0), FakeGpu(1, min_w=150.0, max_w=350.0)]
    power = AXES["power"]
    planned = power.plan(point_options(step_size_w=50.0), gpus, lambda _m: None)
    # within both cards' envelopes, from the tighter top down in steps
    assert planned.caps_w == default_caps(PowerEnvelope(150.0, 350.0, 350.0, 350.0), 50.0)
    assert planned.caps_w[-1] == 350.0 and planned.points == []
    warned: list[str] = []
    given = power.plan(point_options(caps=(120.0, 300.0)), gpus, warned.append)
    assert given.caps_w == [150.0, 300.0] and warned  # clamped into both cards' envelope
    assert power.sets_limit(point_options())


def test_a_clock_axis_plans_locks_under_the_limit_in_force_or_the_one_held() -> None:
    gpus = [FakeGpu(0, max_w=400.0)]
    sm = AXES["sm-clock"]
    planned = sm.plan(point_options(axis=Axis.SM_CLOCK, sm_clocks=(900.0, 1500.0)), gpus, print)
    assert {p.sm_lock_mhz for p in planned.points} == {900.0, 1500.0}
    assert planned.caps_w == [gpus[0].envelope().current_w]
    assert not sm.sets_limit(point_options(axis=Axis.SM_CLOCK))
    held = point_options(axis=Axis.GRID, hold_cap_w=300.0)
    grid = AXES["grid"].plan(held, gpus, print)
    assert grid.caps_w == [300.0] and all(p.cap_w == 300.0 for p in grid.points)
    assert {p.mem_lock_mhz for p in grid.points} == {9501.0, 5001.0}  # the card's own tiers
    assert AXES["grid"].sets_limit(held)


def test_a_plan_longer_than_a_day_is_refused_in_the_axis_words() -> None:
    long = SweepOptions(
        points=PointOptions(step_size_w=1.0),
        measure=MeasureOptions(windows=WindowPolicy(max_s=3000.0)),
    )
    with pytest.raises(UsageError, match=r"fewer caps \(--caps, a larger --step-size\)"):
        AXES["power"].plan(long, [FakeGpu(0)], lambda _m: None)


class _ToyAxis(PowerAxis):
    """A toy axis: power caps read with a summary of its own (as a new axis module would be)."""

    name: ClassVar[str] = "toy"

    def summary(self, curve: Curve, result: PowerAnalysis) -> str:
        return "toy summary\n" + super().summary(curve, result)


def test_a_new_axis_is_one_class_and_a_registration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(AXES, "toy", _ToyAxis())  # type: ignore[index]
    csv = _power_csv(tmp_path)
    (csv.parent / "run.json").write_text(json.dumps({"options": {"axis": "toy"}}))
    assert axis_of(load_curve(csv)).name == "toy"  # its run.json names it
    report = build_report(csv, charts=False)
    assert report.summary.startswith("toy summary\n")
    assert (csv.parent / "summary.md").read_text().startswith("toy summary\n")
    # a curve recorded on no registered axis is read by the data's
    (csv.parent / "run.json").write_text(json.dumps({"options": {"axis": "gone"}}))
    assert axis_of(load_curve(csv)).name == "power"


def test_each_axis_says_its_answer_in_one_line(tmp_path: Path) -> None:
    power_curve = load_curve(_power_csv(tmp_path))
    power = AXES["power"]
    line = power.headline(power.analyze(power_curve, AnalysisSettings(bootstrap=0)))
    assert line == "sweet spot: 250 W, 0.4500 TPS/W, 108.0 TPS"
    clock_curve = load_curve(_clock_csv(tmp_path))
    sm = axis_of(clock_curve)
    line = sm.headline(sm.analyze(clock_curve, AnalysisSettings(bootstrap=0)))
    # 36 TPS at 220 W + 10 W of memory: 0.1565 TPS/W
    assert line == "efficiency peak: SM 1500 MHz / mem 10001 MHz, 0.1565 TPS/W, 36.0 TPS, 230 W"
    empty = tmp_path / "failed.csv"
    empty.write_text("cap_w,narr_tps,power_w,status\n200,80,200,failed\n")
    failed = load_curve(empty)
    assert power.headline(power.analyze(failed, AnalysisSettings())) is None
