"""The setting a run recommends (``sweep/settings/recommendation.py``), read from hand-written
``analysis.json`` and ``run.json``: the objective's pick, a clock run's locks with the cap it
held, the caveats, the latency target's pick, and one-line refusals for what cannot be applied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from powersweep.errors import PowersweepError, UsageError
from powersweep.runformat import SCHEMA_VERSION
from powersweep.sweep.settings.recommendation import (
    MeasuredGpu,
    Recommendation,
    read_recommendation,
)

UUID = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
SWEET = {"cap_w": 280.0, "tps_per_w": 0.125, "tps": 35.0}
NEAR = {"cap_w": 330.0, "tps_per_w": 0.11, "tps": 38.0}


def _answered_run(tmp_path: Path, analysis: dict[str, Any], **run: Any) -> Path:
    path = tmp_path / "run"
    path.mkdir(exist_ok=True)
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "status": "complete",
        "gpus": [{"index": 0, "name": "NVIDIA GeForce RTX 3090", "uuid": UUID}],
        "options": {"hold_cap_w": None},
        **run,
    }
    (path / "run.json").write_text(json.dumps(meta))
    (path / "analysis.json").write_text(json.dumps(analysis))
    return path


def _power_answer(**extra: Any) -> dict[str, Any]:
    return {
        "kind": "power",
        "recommendation": {"objective": "tps-per-w", **SWEET},
        "sweet_spot": dict(SWEET),
        "near_peak": dict(NEAR),
        **extra,
    }


def test_a_power_runs_pick_for_each_objective(tmp_path: Path) -> None:
    run = _answered_run(tmp_path, _power_answer())
    rec = read_recommendation(run)
    assert rec == Recommendation(
        run, "tps-per-w", 280.0, 0.125, 35.0, (MeasuredGpu(0, "NVIDIA GeForce RTX 3090", UUID),)
    )
    assert rec.describe() == "280 W per GPU" and not rec.clock_run
    near = read_recommendation(run, "near-peak")
    assert (near.objective, near.cap_w, near.tps) == ("near-peak", 330.0, 38.0)


def test_an_analysis_made_for_near_peak_recommends_near_peak(tmp_path: Path) -> None:
    analysis = _power_answer(recommendation={"objective": "near-peak", **NEAR})
    assert read_recommendation(_answered_run(tmp_path, analysis)).cap_w == 330.0
    odd = _power_answer(recommendation={"objective": "mystery", **NEAR})
    assert read_recommendation(_answered_run(tmp_path, odd)).objective == "tps-per-w"


def test_a_pick_at_the_sweeps_edge_carries_its_caveat(tmp_path: Path) -> None:
    analysis = _power_answer(sweet_spot={**SWEET, "at_boundary": "low"})
    rec = read_recommendation(_answered_run(tmp_path, analysis))
    assert rec.notes == (
        "the sweet spot is the lowest cap measured: the best cap may lie beyond the sweep",
    )
    high = _power_answer(sweet_spot={**SWEET, "at_boundary": "high"})
    (note,) = read_recommendation(_answered_run(tmp_path, high), "tps-per-w").notes
    assert "the highest cap measured" in note
    assert read_recommendation(_answered_run(tmp_path, high), "near-peak").notes == ()


@pytest.mark.parametrize("status", ["interrupted", "partial", "failed", "running"])
def test_a_run_that_did_not_finish_has_nothing_to_apply(tmp_path: Path, status: str) -> None:
    # whatever its analysis.json says: the run's own run.json decides
    for analysis in (_power_answer(), {"kind": "clocks", "sweet_spot": {"sm_lock_mhz": 1410.0}}):
        run = _answered_run(tmp_path, analysis, status=status)
        with pytest.raises(UsageError, match="has no answer to apply: ") as err:
            read_recommendation(run)
        assert f"`powersweep --resume {run}` measures the rest" in str(err.value)


def test_an_analysis_without_an_answer_has_nothing_to_apply(tmp_path: Path) -> None:
    why = "only 1 usable cap: an answer needs at least 3, a measured one on each side of the best"
    analysis = _power_answer(answer={"kind": "none", "why": why, "points_usable": 1})
    with pytest.raises(UsageError, match="has no answer to apply: only 1 usable cap"):
        read_recommendation(_answered_run(tmp_path, analysis))
    boundary = _power_answer(answer={"kind": "boundary", "why": "the lowest", "points_usable": 5})
    assert read_recommendation(_answered_run(tmp_path, boundary)).cap_w == SWEET["cap_w"]


def test_a_clock_run_recommends_its_locks_at_the_cap_it_held(tmp_path: Path) -> None:
    analysis = {
        "kind": "clocks",
        "sweet_spot": {"sm_lock_mhz": 1410.0, "mem_lock_mhz": 9501.0, "tps_per_w": 0.14},
        "near_peak": {"sm_lock_mhz": 1710.0, "mem_lock_mhz": None, "tps": 40.0},
    }
    run = _answered_run(tmp_path, analysis, options={"hold_cap_w": 300.0})
    rec = read_recommendation(run)
    assert (rec.cap_w, rec.sm_clock_mhz, rec.mem_clock_mhz, rec.clock_run) == (
        300.0,
        1410.0,
        9501.0,
        True,
    )
    assert rec.describe() == "SM 1410 MHz, memory 9501 MHz at 300 W per GPU"
    assert rec.notes == ()
    free = read_recommendation(_answered_run(tmp_path, analysis), "near-peak")
    assert (free.cap_w, free.describe()) == (None, "SM 1710 MHz")


@pytest.mark.parametrize(
    ("analysis", "objective", "message"),
    [
        ({"kind": "clocks"}, "cost", "is a clock run: it recommends clock locks for"),
        ({"kind": "clocks"}, "tps-per-w", "holds no tps-per-w clock recommendation"),
        (
            {"kind": "clocks", "sweet_spot": {"sm_lock_mhz": -5.0, "mem_lock_mhz": None}},
            None,
            "the tps-per-w recommendation has no valid clock lock",
        ),
    ],
)
def test_a_clock_run_without_a_usable_lock_is_refused(
    tmp_path: Path, analysis: dict[str, Any], objective: str | None, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        read_recommendation(_answered_run(tmp_path, analysis), objective)


@pytest.mark.parametrize(
    ("analysis", "objective", "message"),
    [
        (
            _power_answer(sweet_spot=None, recommendation=None),
            None,
            "holds no tps-per-w recommendation",
        ),
        (
            _power_answer(near_peak={"cap_w": -330.0}),
            "near-peak",
            "near-peak recommendation has no valid",
        ),
        # analysis.json is read once through its typed record, which names the key
        (
            _power_answer(near_peak={"cap_w": "high"}),
            "near-peak",
            r"schema: .*\$\.near_peak\.cap_w",
        ),
        (_power_answer(), "fastest", "unknown objective 'fastest'"),
    ],
)
def test_a_pick_that_is_not_there_is_refused(
    tmp_path: Path, analysis: dict[str, Any], objective: str | None, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        read_recommendation(_answered_run(tmp_path, analysis), objective)


def test_a_run_whose_caps_never_bound_has_no_cap_to_apply(tmp_path: Path) -> None:
    binds = {"binds": False, "draw_w": [181.2, 184.9], "caps_w": [200.0, 350.0]}
    with pytest.raises(UsageError) as info:
        read_recommendation(_answered_run(tmp_path, _power_answer(power_cap_binds=binds)))
    message = str(info.value)
    assert "the card drew 181-185 W under caps of 200-350 W, so no cap saves energy" in message
    assert "lock clocks instead: `powersweep --axis sm-clock`" in message
    unknown = {"binds": False, "draw_w": None, "caps_w": None}
    with pytest.raises(UsageError, match=r"^no cap binds in .*run, so no cap"):
        read_recommendation(_answered_run(tmp_path, _power_answer(power_cap_binds=unknown)))


def test_the_latency_targets_pick_from_the_analysis(tmp_path: Path) -> None:
    met = {"met": True, "point": {"cap_w": 300.0, "tps_per_w": 0.12, "tps": 36.0}}
    rec = read_recommendation(_answered_run(tmp_path, _power_answer(latency_target=met)), "slo")
    assert (rec.objective, rec.cap_w) == ("slo", 300.0)
    with pytest.raises(UsageError, match="--objective slo needs a latency target"):
        read_recommendation(_answered_run(tmp_path, _power_answer()), "slo")
    missed = {"met": False, "name": "280 W", "misses": ["p95 ITL 80 ms > 50 ms"]}
    with pytest.raises(UsageError) as info:
        read_recommendation(_answered_run(tmp_path, _power_answer(latency_target=missed)), "slo")
    assert "(the closest, 280 W, misses it: p95 ITL 80 ms > 50 ms)" in str(info.value)


def test_an_observe_only_run_recommends_nothing(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is an --observe-only run"):
        read_recommendation(_answered_run(tmp_path, _power_answer(), observe_only=True))


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        (None, "lists no GPUs: set the cap by name"),
        ([], "lists no GPUs"),
        ([{"name": "x"}], "a GPU entry without an index"),
    ],
)
def test_a_run_that_does_not_say_its_cards_is_refused(
    tmp_path: Path, gpus: Any, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        read_recommendation(_answered_run(tmp_path, _power_answer(), gpus=gpus))


def test_a_card_without_a_recorded_uuid_reads_as_none(tmp_path: Path) -> None:
    rec = read_recommendation(
        _answered_run(tmp_path, _power_answer(), gpus=[{"index": 2, "uuid": ""}])
    )
    assert rec.gpus == (MeasuredGpu(2, "", None),)


def test_files_that_are_not_a_run_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"is not a run directory$"):
        read_recommendation(tmp_path / "nowhere")
    run = _answered_run(tmp_path, _power_answer())
    (run / "analysis.json").unlink()
    with pytest.raises(UsageError, match=r"has no analysis.json: run `powersweep analyze"):
        read_recommendation(run)
    (run / "analysis.json").write_text("{\n  oops")
    with pytest.raises(UsageError, match=r"analysis.json: not valid JSON \(line 2: "):
        read_recommendation(run)
    (run / "analysis.json").write_text("[1, 2]")
    with pytest.raises(UsageError, match=r"analysis.json: expected a JSON object$"):
        read_recommendation(run)
    (run / "analysis.json").write_text(json.dumps(_power_answer()))
    (run / "run.json").unlink()
    with pytest.raises(UsageError, match=r"has no run.json, so it does not say which GPU"):
        read_recommendation(run)


def test_a_file_of_a_newer_powersweep_asks_for_an_upgrade(tmp_path: Path) -> None:
    run = _answered_run(tmp_path, {**_power_answer(), "schema_version": SCHEMA_VERSION + 1})
    with pytest.raises(PowersweepError, match="written by a newer powersweep") as info:
        read_recommendation(run)
    assert info.value.exit_code == 2


def test_a_memory_offset_is_carried_and_described_and_none_changes_nothing(
    tmp_path: Path,
) -> None:
    # issue 45: no analysis finds one yet; a recommendation that carries one says it
    gpus = (MeasuredGpu(0, "x", UUID),)
    base = Recommendation(tmp_path, "undervolt", 450.0, None, None, gpus, sm_clock_mhz=2790.0)
    assert base.mem_offset_mhz is None and base.describe() == "SM 2790 MHz at 450 W per GPU"
    undervolt = Recommendation(
        tmp_path, "undervolt", 450.0, None, None, gpus,
        sm_clock_mhz=2790.0, sm_offset_mhz=180.0, mem_offset_mhz=1000.0,
    )  # fmt: skip
    assert undervolt.describe() == (
        "SM 2790 MHz +180 MHz offset, +1000 MHz memory offset at 450 W per GPU"
    )
    power = Recommendation(tmp_path, "tps-per-w", 280.0, None, None, gpus, mem_offset_mhz=1000.0)
    assert power.describe() == "280 W per GPU, +1000 MHz memory offset"


def test_an_analysis_of_an_unknown_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"analysis.json is of an unknown kind 'mystery'"):
        read_recommendation(_answered_run(tmp_path, {"kind": "mystery", "sweet_spot": SWEET}))


def test_run_json_is_read_once_typed_with_its_sm_clock_floor(tmp_path: Path) -> None:
    low = read_recommendation(
        _answered_run(tmp_path, _power_answer(), options={"sm_clock_min_mhz": 900})
    )
    assert low.sm_clock_min_mhz == 900.0
    none = read_recommendation(
        _answered_run(tmp_path, _power_answer(), options={"sm_clock_min_mhz": 0})
    )
    assert none.sm_clock_min_mhz is None
    with pytest.raises(UsageError, match=r"run.json does not follow its schema: .*\$\.gpus"):
        read_recommendation(_answered_run(tmp_path, _power_answer(), gpus="0"))
