"""powersweep.sweep.axes.clock_axes: the SM, memory and grid axes on their own. Planning asks the
card for its clocks only when a list is missing (and says which axis could not be planned),
measures highest memory tier and SM lock first, holds the one limit given (clamped) or the lowest
in force, observes the locks in force; a resumed sweep keeps its limit; each axis claims only its
own curves; the confirm phase without a peak ties nothing. (The registry and the reading of saved
curves are in ``test_axes.py``.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from powersweep.analysis import load_curve
from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.errors import GpuError, UsageError
from powersweep.sweep.axes.clock_axes import GridAxis, MemClockAxis, SmClockAxis
from powersweep.sweep.gpu import SupportedClocks
from powersweep.sweep.options import (
    Axis,
    MeasureOptions,
    PointOptions,
    SweepOptions,
)
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.resume import ResumeState
from powersweep.sweep.sampling.windows import WindowPolicy
from tests.fakes.fake_gpu import FakeGpu
from tests.helpers.options import point_options

SM, MEM, GRID = SmClockAxis(), MemClockAxis(), GridAxis()


class _NoClockList(FakeGpu):
    """A card that cannot list its supported clocks."""

    def supported_clocks(self) -> SupportedClocks:
        raise GpuError("GPU 0 cannot list its clocks (not supported)")


def _left(points: list[SweepPoint]) -> ResumeState:
    return ResumeState(meta={}, writer=None, caps_left=[], caps_done=[], points_left=points)  # type: ignore[arg-type]


def test_names_and_words_of_the_three_axes() -> None:
    assert [a.name for a in (SM, MEM, GRID)] == ["sm-clock", "mem-clock", "grid"]
    assert all(a.noun == "point" and a.locks_clocks for a in (SM, MEM, GRID))
    assert SM.fewer_flags == "--sm-clocks / --mem-clocks"


def test_given_clocks_are_planned_without_asking_the_card_highest_first() -> None:
    gpu = FakeGpu(0, limit_w=320.0)
    planned = GRID.plan(
        point_options(axis=Axis.GRID, sm_clocks=(900.0, 1500.0), mem_clocks=(5001.0, 9501.0)),
        [gpu],
        lambda _m: None,
    )
    assert gpu.calls["supported_clocks"] == 0
    assert [(p.sm_lock_mhz, p.mem_lock_mhz) for p in planned.points] == [
        (1500.0, 9501.0),
        (900.0, 9501.0),
        (1500.0, 5001.0),
        (900.0, 5001.0),
    ]
    # no --cap: the points keep the limit in force, which the plan runs under
    assert all(p.cap_w is None for p in planned.points) and planned.caps_w == [320.0]


def test_a_memory_axis_with_its_list_needs_no_sm_clocks_from_the_card() -> None:
    gpu = FakeGpu(0)
    planned = MEM.plan(point_options(axis=Axis.MEM_CLOCK, mem_clocks=(5001.0,)), [gpu], print)
    assert gpu.calls["supported_clocks"] == 0
    assert [(p.sm_lock_mhz, p.mem_lock_mhz) for p in planned.points] == [(None, 5001.0)]


def test_a_card_that_cannot_list_its_clocks_names_the_axis_it_could_not_plan() -> None:
    with pytest.raises(GpuError) as caught:
        GRID.plan(point_options(axis=Axis.GRID, sm_clocks=(900.0,)), [_NoClockList(0)], print)
    assert str(caught.value) == (
        "cannot plan --axis grid: GPU 0 cannot list its clocks (not supported)"
    )
    # with both lists given the card is never asked
    planned = GRID.plan(
        point_options(axis=Axis.GRID, sm_clocks=(900.0,), mem_clocks=(5001.0,)),
        [_NoClockList(0)],
        print,
    )
    assert len(planned.points) == 1


def test_the_held_limit_is_clamped_into_every_cards_envelope() -> None:
    gpus = [FakeGpu(0, max_w=400.0), FakeGpu(1, max_w=380.0)]
    warned: list[str] = []
    planned = SM.plan(
        point_options(axis=Axis.SM_CLOCK, sm_clocks=(1200.0,), hold_cap_w=450.0),
        gpus,
        warned.append,
    )
    assert planned.caps_w == [380.0] and [p.cap_w for p in planned.points] == [380.0]
    assert warned == ["cap 450 W is outside the envelope 100-380 W; using 380 W"]
    assert SM.sets_limit(point_options(axis=Axis.SM_CLOCK, hold_cap_w=450.0))
    assert not SM.sets_limit(point_options(axis=Axis.SM_CLOCK))


def test_without_a_held_limit_the_lowest_limit_in_force_labels_the_run() -> None:
    gpus = [FakeGpu(0, limit_w=350.0), FakeGpu(1, limit_w=310.0)]
    planned = SM.plan(point_options(axis=Axis.SM_CLOCK, sm_clocks=(1200.0,)), gpus, print)
    assert planned.caps_w == [310.0]


def test_observe_only_measures_the_locks_in_force_as_one_point() -> None:
    gpu = FakeGpu(0, limit_w=300.0)
    gpu.sm_lock_mhz = 1410.0
    planned = GRID.plan(point_options(observe=True, axis=Axis.GRID), [gpu], print)
    assert planned.points == [SweepPoint(None, 1410.0, None)]
    assert planned.caps_w == [300.0] and gpu.calls["supported_clocks"] == 0


def test_a_resumed_sweep_keeps_the_limit_it_held_or_the_lowest_in_force() -> None:
    gpus = [FakeGpu(0, limit_w=330.0), FakeGpu(1, limit_w=300.0)]
    held = [SweepPoint(280.0, 1200.0, None), SweepPoint(280.0, 900.0, None)]
    planned = SM.resumed(point_options(axis=Axis.SM_CLOCK), gpus, _left(held))
    assert planned.caps_w == [280.0] and planned.points == held
    free = [SweepPoint(None, 1200.0, None)]
    assert SM.resumed(point_options(axis=Axis.SM_CLOCK), gpus, _left(free)).caps_w == [300.0]
    # nothing left: the limit in force still labels it
    assert SM.resumed(point_options(), gpus, _left([])).caps_w == [300.0]


def test_a_plan_longer_than_a_day_is_refused_in_points() -> None:
    long = SweepOptions(
        points=PointOptions(axis=Axis.SM_CLOCK, sm_clocks=tuple(600.0 + 15 * k for k in range(60))),
        measure=MeasureOptions(windows=WindowPolicy(max_s=3600.0)),
    )
    with pytest.raises(
        UsageError,
        match=r"this plan measures 60 points .* fewer points \(--sm-clocks / --mem-clocks\)",
    ):
        SM.plan(long, [FakeGpu(0)], print)


def _grid_csv(tmp_path: Path, name: str, rows: list[tuple[int, int]], run: Any = None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    lines = ["sm_lock_mhz,mem_lock_mhz,narr_tps,power_w"]
    lines += [f"{sm},{mem},{sm / 40},{150 + sm / 10 + mem / 100}" for sm, mem in rows]
    (folder / "caps.csv").write_text("\n".join(lines) + "\n")
    if run is not None:
        (folder / "run.json").write_text(json.dumps(run))
    return folder / "caps.csv"


def test_each_axis_claims_only_the_curves_of_its_own_shape(tmp_path: Path) -> None:
    sm_only = load_curve(_grid_csv(tmp_path, "sm", [(1200, 9501), (1500, 9501)]))
    mem_only = load_curve(_grid_csv(tmp_path, "mem", [(1500, 5001), (1500, 9501)]))
    grid = load_curve(_grid_csv(tmp_path, "grid", [(1200, 5001), (1500, 9501), (1200, 9501)]))
    power = tmp_path / "power.csv"
    power.write_text("cap_w,narr_tps,power_w\n200,80,200\n")
    claims = {
        name: [a.name for a in (SM, MEM, GRID) if a.matches(c)]
        for name, c in (("sm", sm_only), ("mem", mem_only), ("grid", grid))
    }
    assert claims == {"sm": ["sm-clock"], "mem": ["mem-clock"], "grid": ["grid"]}
    assert not any(a.matches(load_curve(power)) for a in (SM, MEM, GRID))
    # run.json's axis wins over the data's shape
    recorded = load_curve(
        _grid_csv(tmp_path, "rec", [(1200, 9501), (1500, 9501)], {"options": {"axis": "grid"}})
    )
    assert GRID.matches(recorded) and not SM.matches(recorded)


def test_without_a_peak_nothing_is_tied_and_the_record_is_empty() -> None:
    empty = ClockAnalysis.from_json({})
    assert SM.answer(empty) is None
    assert not SM.tied(empty, SweepPoint(300.0, 1500.0, None))
    assert SM.confirm_record(empty) == {
        "best_after_w": None,
        "tied_after": None,
        "tied_points_after": None,
    }


def test_a_saved_clock_analysis_reads_back_typed() -> None:
    saved = {"axis": "grid", "peak": {"sm_lock_mhz": 1500.0, "mem_lock_mhz": 9501.0}}
    result = GRID.read(saved)
    assert isinstance(result, ClockAnalysis) and result.axis == "grid"
    peak = GRID.answer(result)
    assert peak is not None and (peak.sm_lock_mhz, peak.mem_lock_mhz) == (1500.0, 9501.0)
