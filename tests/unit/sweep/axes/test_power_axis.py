"""powersweep.sweep.axes.power_axis: the power axis on its own. Observe-only measures the limit in
force (the lowest, said, when the cards differ), a plan past the cap budget is refused with its
numbers, a resumed sweep takes the caps left, the card's facts reach the analysis, and the
confirm phase's ties and record when there is no sweet spot. (The registry and the reading of
saved curves by either axis are in ``test_axes.py``.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from powersweep.analysis import load_curve
from powersweep.analysis.context import CardFacts
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.errors import UsageError
from powersweep.sweep.axes import AnalysisSettings
from powersweep.sweep.axes.power_axis import PowerAxis
from powersweep.sweep.gpu import PowerEnvelope
from powersweep.sweep.options import (
    MAX_PLANNED_CAPS,
)
from powersweep.sweep.planning.caps import default_caps
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.resume import ResumeState
from tests.fakes.fake_gpu import FakeGpu
from tests.helpers.options import point_options

AXIS = PowerAxis()


def test_its_words_and_that_it_always_sets_the_limit() -> None:
    assert (AXIS.name, AXIS.noun, AXIS.locks_clocks) == ("power", "cap", False)
    assert AXIS.fewer_flags == "--caps, a larger --step-size"
    assert AXIS.sets_limit(point_options()) and AXIS.sets_limit(point_options(observe=True))


def test_observe_only_measures_the_limit_in_force_and_asks_the_cards_nothing_else() -> None:
    gpus = [FakeGpu(0, limit_w=300.0), FakeGpu(1, limit_w=300.0)]
    warned: list[str] = []
    planned = AXIS.plan(point_options(observe=True), gpus, warned.append)
    assert planned.caps_w == [300.0] and planned.points == [] and warned == []
    assert all(g.calls["set_power_limit"] == 0 for g in gpus)


def test_observe_only_on_cards_at_different_limits_is_labelled_with_the_lowest() -> None:
    gpus = [FakeGpu(0, limit_w=320.0), FakeGpu(1, limit_w=285.5), FakeGpu(2, limit_w=320.0)]
    warned: list[str] = []
    planned = AXIS.plan(point_options(observe=True), gpus, warned.append)
    assert planned.caps_w == [285.5]
    assert warned == [
        "the GPUs run at different limits (285.5, 320 W); the run is labelled with the lowest, "
        "285.5 W"
    ]


def test_default_caps_run_from_the_floor_to_the_top_in_steps() -> None:
    gpus = [FakeGpu(0, min_w=100.0, max_w=400.0, default_w=350.0)]
    planned = AXIS.plan(point_options(step_size_w=25.0), gpus, lambda _m: None)
    # the floor is half the default limit, rounded up to the step
    assert planned.caps_w == [175.0 + 25.0 * k for k in range(10)]


def test_a_step_that_plans_too_many_caps_is_refused_with_its_numbers() -> None:
    gpus = [FakeGpu(0, min_w=100.0, max_w=400.0, default_w=350.0)]
    n = len(default_caps(PowerEnvelope(100.0, 350.0, 400.0, 350.0), 0.5))
    assert n > MAX_PLANNED_CAPS
    with pytest.raises(UsageError) as caught:
        AXIS.plan(point_options(step_size_w=0.5), gpus, lambda _m: None)
    assert str(caught.value) == (
        f"--step-size 0.5 W plans {n} caps from 100 to 400 W; at most {MAX_PLANNED_CAPS} "
        "(use a larger --step-size or --caps)"
    )


def test_given_caps_are_clamped_deduplicated_and_sorted() -> None:
    gpus = [FakeGpu(0, min_w=100.0, max_w=400.0)]
    warned: list[str] = []
    planned = AXIS.plan(point_options(caps=(450.0, 250.0, 400.0, 50.0)), gpus, warned.append)
    assert planned.caps_w == [100.0, 250.0, 400.0]
    assert warned == [
        "cap 450 W is outside the envelope 100-400 W; using 400 W",
        "cap 50 W is outside the envelope 100-400 W; using 100 W",
    ]


def test_a_resumed_sweep_measures_the_caps_left_in_their_order() -> None:
    left = ResumeState(meta={}, writer=None, caps_left=[300.0, 200.0], caps_done=[250.0])  # type: ignore[arg-type]
    planned = AXIS.resumed(point_options(), [FakeGpu(0)], left)
    assert planned.caps_w == [300.0, 200.0] and planned.points == []
    assert planned.caps_w is not left.caps_left  # the plan does not share the state's list


def test_a_curve_with_clock_locks_is_not_its_own(tmp_path: Path) -> None:
    power = tmp_path / "power.csv"
    power.write_text("cap_w,narr_tps,power_w\n200,80,200\n250,108,240\n")
    clocks = tmp_path / "clocks.csv"
    clocks.write_text("sm_lock_mhz,mem_lock_mhz,narr_tps,power_w\n1200,9501,30,200\n")
    assert AXIS.matches(load_curve(power))
    assert not AXIS.matches(load_curve(clocks))


def test_the_cards_facts_fill_in_what_a_bare_csv_lacks(tmp_path: Path) -> None:
    csv = tmp_path / "caps.csv"
    csv.write_text("cap_w,narr_tps,power_w\n200,80,200\n250,108,240\n300,118.8,270\n")
    facts = CardFacts(gpu_name="RTX 3090", default_limit_w=350.0)
    result = AXIS.analyze(load_curve(csv), AnalysisSettings(bootstrap=0, card=facts))
    assert result.run.gpu_name == "RTX 3090" and result.run.default_limit_w == 350.0
    spot = AXIS.answer(result)
    assert spot is not None and spot.cap_w == 250.0
    assert spot.pct_of_default == pytest.approx(100 * 250 / 350, abs=0.1)
    bare = AXIS.analyze(load_curve(csv), AnalysisSettings(bootstrap=0))
    assert bare.run.gpu_name != "RTX 3090"


def test_without_a_sweet_spot_nothing_is_tied_and_the_record_is_empty() -> None:
    empty = PowerAnalysis.from_json({"caps": []})
    assert AXIS.answer(empty) is None
    assert not AXIS.tied(empty, SweepPoint(250.0))
    assert AXIS.confirm_record(empty) == {"best_after_w": None, "tied_after": None}
    # a sweet spot whose ties were not written ties nothing either
    untied = PowerAnalysis.from_json({"sweet_spot": {"cap_w": 250.0}})
    assert not AXIS.tied(untied, SweepPoint(250.0))
    assert AXIS.confirm_record(untied) == {"best_after_w": 250.0, "tied_after": None}


def test_a_saved_analysis_reads_back_typed() -> None:
    saved = {"sweet_spot": {"cap_w": 240.0, "tied_caps": [240.0]}, "caps": []}
    result = AXIS.read(saved)
    assert isinstance(result, PowerAnalysis) and result.sweet_spot is not None
    assert AXIS.tied(result, SweepPoint(240.0))
