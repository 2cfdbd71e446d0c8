"""The undervolt axis: its plan, its refusals, and which saved curves are its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from powersweep.analysis.load import Curve, load_curve
from powersweep.analysis.serving import ServingOptions
from powersweep.errors import UsageError
from powersweep.runformat import CAPS_COLUMNS
from powersweep.sweep.axes import AXES, axis_of
from powersweep.sweep.axes import undervolt_axis as module
from powersweep.sweep.axes.axis_base import AnalysisSettings
from powersweep.sweep.axes.undervolt_axis import RISK_WARNING, UndervoltAxis
from powersweep.sweep.gpu import ClockOffset
from powersweep.sweep.options import (
    Axis,
    PointOptions,
    SweepOptions,
    UndervoltOptions,
)
from powersweep.sweep.planning.points import SweepPoint
from tests.fakes.fake_gpu import FakeGpu


def _undervolt_options(simulate: str | None = "rtx3090-air", **kw: object) -> SweepOptions:
    points = PointOptions(axis=Axis.UNDERVOLT, **kw)  # type: ignore[arg-type]
    return SweepOptions(points=points, undervolt=UndervoltOptions(), simulate=simulate)


def test_it_is_registered_under_its_name() -> None:
    assert isinstance(AXES["undervolt"], UndervoltAxis)


def test_the_plan_is_the_baseline_cap_and_the_search_bounds() -> None:
    said: list[str] = []
    planned = UndervoltAxis().plan(_undervolt_options(hold_cap_w=280.0), [FakeGpu()], said.append)
    assert planned.caps_w == [280.0]
    assert planned.points == [SweepPoint(280.0, sm_offset_mhz=0.0)]
    plan = planned.undervolt
    assert plan is not None and plan.lock_mhz is None and plan.max_mhz == 1000.0
    assert plan.step_mhz == 30.0 and plan.margin_mhz == 30.0 and plan.soak_s == 300.0
    assert said == [RISK_WARNING]  # before anything changes


def test_the_limit_in_force_is_the_baseline_without_cap_and_sm_clocks_lock() -> None:
    said: list[str] = []
    planned = UndervoltAxis().plan(
        _undervolt_options(sm_clocks=(1500.0,)), [FakeGpu(limit_w=320.0)], said.append
    )
    assert planned.caps_w == [320.0]
    assert planned.undervolt is not None and planned.undervolt.lock_mhz == 1500.0
    assert said == [RISK_WARNING]  # a limit of the user's own: their cap, nothing to say


def test_a_default_limit_as_the_baseline_is_said() -> None:
    said: list[str] = []
    planned = UndervoltAxis().plan(_undervolt_options(), [FakeGpu()], said.append)
    assert planned.caps_w == [350.0]
    assert said[0].startswith("the baseline is the limit in force, 350 W, the card's default")


def test_max_offset_lowers_the_driver_range() -> None:
    options = SweepOptions(
        points=PointOptions(axis=Axis.UNDERVOLT),
        undervolt=UndervoltOptions(max_offset_mhz=150.0),
        simulate="x",
    )
    planned = UndervoltAxis().plan(options, [FakeGpu()], lambda _m: None)
    assert planned.undervolt is not None and planned.undervolt.max_mhz == 150.0
    assert planned.undervolt.max_steps == 5


def test_a_vm_guest_is_refused_on_real_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "vm_guest", lambda: "the CPU reports the hypervisor flag")
    with pytest.raises(UsageError, match="refused in a virtual machine"):
        UndervoltAxis().plan(_undervolt_options(simulate=None), [FakeGpu()], lambda _m: None)
    # the simulated rig is no card a reset could take with it
    UndervoltAxis().plan(_undervolt_options(), [FakeGpu()], lambda _m: None)
    monkeypatch.setattr(module, "vm_guest", lambda: None)
    UndervoltAxis().plan(_undervolt_options(simulate=None), [FakeGpu()], lambda _m: None)


def test_a_card_without_offsets_is_refused() -> None:
    gpu = FakeGpu()
    gpu.sm_clock_offset = lambda: ClockOffset(False, message="Not Supported")  # type: ignore[method-assign]
    with pytest.raises(UsageError, match="GPU 0 has no clock offset"):
        UndervoltAxis().plan(_undervolt_options(), [gpu], lambda _m: None)


def test_a_range_below_one_step_is_refused() -> None:
    gpu = FakeGpu()
    gpu.sm_clock_offset = lambda: ClockOffset(True, 0.0, -10.0, 20.0)  # type: ignore[method-assign]
    with pytest.raises(UsageError, match="less than one --offset-step"):
        UndervoltAxis().plan(_undervolt_options(), [gpu], lambda _m: None)


def test_a_resumed_search_goes_on_from_its_rows(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from powersweep.sweep.planning.undervolt_steps import ResumeFrom

    (tmp_path / "caps.csv").write_text(
        "cap_w,sm_lock_mhz,sm_offset_mhz,status,reason\n"
        "280,,0,ok,baseline\n280,1680,0,ok,reference\n280,1680,30,ok,search\n"
    )
    record = {"sm_lock_mhz": 1680.0, "in_flight": {"sm_offset_mhz": 60.0, "reason": "search"}}
    left = SimpleNamespace(meta={"undervolt": record}, writer=SimpleNamespace(path=tmp_path))
    planned = UndervoltAxis().resumed(_undervolt_options(hold_cap_w=280.0), [FakeGpu()], left)  # type: ignore[arg-type]
    assert planned.undervolt is not None
    assert planned.undervolt.resume == ResumeFrom(1680.0, 30.0, 60.0, 60.0)
    assert planned.points == [SweepPoint(280.0, sm_offset_mhz=0.0)]  # set first, not measured
    fresh = SimpleNamespace(meta={"undervolt": {"sm_lock_mhz": None}}, writer=left.writer)
    again = UndervoltAxis().resumed(_undervolt_options(hold_cap_w=280.0), [FakeGpu()], fresh)  # type: ignore[arg-type]
    assert again.undervolt is not None and again.undervolt.resume is None


def _saved_curve(tmp_path: Path) -> Curve:
    rows = [
        {"cap_w": 300, "narr_tps": 33, "power_w": 300, "sm_offset_mhz": 0, "reason": "baseline"},
        {"cap_w": 300, "narr_tps": 33, "power_w": 295, "sm_lock_mhz": 1485, "sm_offset_mhz": 0},
        {"cap_w": 300, "narr_tps": 33, "power_w": 290, "sm_lock_mhz": 1485, "sm_offset_mhz": 30},
    ]
    lines = [",".join(CAPS_COLUMNS)]
    for r in rows:
        r = {**r, "status": "ok", "tps_per_w": r["narr_tps"] / r["power_w"]}
        lines.append(",".join(str(r.get(c, "")) for c in CAPS_COLUMNS))
    (tmp_path / "caps.csv").write_text("\n".join(lines) + "\n")
    return load_curve(tmp_path / "caps.csv")


def test_saved_undervolt_curves_are_its_own_not_a_clock_axis(tmp_path: Path) -> None:
    curve = _saved_curve(tmp_path)
    assert axis_of(curve).name == "undervolt"
    assert not AXES["sm-clock"].matches(curve)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"serving": ServingOptions(max_ttft_ms=100.0)}, "--max-ttft-ms"),
        ({"serving": ServingOptions(max_itl_ms=40.0)}, "--max-itl-ms"),
        ({"serving": ServingOptions(tariff_per_kwh=0.3)}, "--tariff"),
        ({"objective": "cost"}, "--objective"),
    ],
)
def test_what_cannot_choose_the_searchs_answer_is_refused_not_ignored(
    tmp_path: Path, settings: dict[str, object], named: str
) -> None:
    # the search's answer is the highest offset that held less its margin: a latency target or
    # a price given to `analyze` was dropped silently, and the answer read as though it chose it
    curve = _saved_curve(tmp_path)
    assert UndervoltAxis().analyze(curve, AnalysisSettings()) is not None
    with pytest.raises(UsageError, match=f"{named} cannot choose an undervolt search's answer"):
        UndervoltAxis().analyze(curve, AnalysisSettings(**settings))  # type: ignore[arg-type]
