"""powersweep.analysis.context: card facts given on the command line, checked (positive watts,
ordered limits) and filled into a curve where its run.json lacks them; run.json wins and a
disagreement becomes a note."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from powersweep.analysis.context import CardFacts, with_card_facts
from powersweep.analysis.load import load_curve
from powersweep.analysis.run_record import RunGpu, RunRecord
from powersweep.errors import UsageError


def _bare(tmp_path: Path, n_gpus: int | None = None) -> Path:
    head = "cap_w,narr_tps,power_w" + (",n_gpus" if n_gpus else "")
    tail = f",{n_gpus}" if n_gpus else ""
    rows = [f"{c},{c / 10},{c - 1}{tail}" for c in (200, 250, 300)]
    path = tmp_path / "bare.csv"
    path.write_text("\n".join([head, *rows]) + "\n")
    return path


def test_empty_facts_leave_the_curve_as_it_is(tmp_path: Path) -> None:
    curve = load_curve(_bare(tmp_path))
    assert CardFacts().empty
    assert not CardFacts(gpu_name="RTX 3090").empty
    assert not CardFacts(max_limit_w=400.0).empty
    assert with_card_facts(curve, CardFacts()) is curve


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"default_limit_w": 0.0}, "--default-limit must be positive watts, at most 5000, got 0"),
        ({"min_limit_w": -5.0}, "--min-limit must be positive watts, at most 5000, got -5"),
        ({"max_limit_w": 6000.0}, "--max-limit must be positive watts, at most 5000, got 6000"),
        ({"max_limit_w": math.inf}, "--max-limit must be positive watts, at most 5000, got inf"),
        ({"default_limit_w": math.nan}, "--default-limit must be positive watts"),
        (
            {"min_limit_w": 300.0, "default_limit_w": 250.0},
            "the limits must satisfy --min-limit <= --default-limit <= --max-limit",
        ),
        (
            {"min_limit_w": 400.0, "max_limit_w": 350.0},
            "the limits must satisfy --min-limit <= --default-limit <= --max-limit",
        ),
    ],
)
def test_bad_facts_are_one_usage_error_naming_the_flag(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError) as exc:
        CardFacts(**kwargs)
    assert str(exc.value).startswith(message)


def test_equal_limits_and_the_top_of_the_range_are_accepted() -> None:
    facts = CardFacts(min_limit_w=300.0, default_limit_w=300.0, max_limit_w=5000.0)
    assert (facts.min_limit_w, facts.default_limit_w, facts.max_limit_w) == (300.0, 300.0, 5000.0)


def test_a_bare_curve_gets_one_gpus_entry_per_card_of_its_set(tmp_path: Path) -> None:
    facts = CardFacts("RTX 3090", 350.0, 100.0, 400.0)
    one = with_card_facts(load_curve(_bare(tmp_path)), facts)
    assert one.run == RunRecord(
        gpus=[
            RunGpu(
                index=0,
                name="RTX 3090",
                default_limit_w=350.0,
                min_limit_w=100.0,
                max_limit_w=400.0,
            )
        ]
    )
    assert one.notes == ()
    two = with_card_facts(load_curve(_bare(tmp_path, n_gpus=2)), facts)
    assert two.run is not None and two.run.gpus is not None
    assert [g.index for g in two.run.gpus] == [0, 1]
    assert {g.name for g in two.run.gpus} == {"RTX 3090"}


def test_run_json_wins_and_a_disagreement_is_a_note(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _bare(tmp_path).rename(run_dir / "caps.csv")
    gpu = {"index": 0, "name": "RTX 4090", "default_limit_w": 450.0, "min_limit_w": None}
    (run_dir / "run.json").write_text(json.dumps({"gpus": [gpu, {"index": 1}], "x": 1}))
    curve = load_curve(run_dir)
    out = with_card_facts(
        curve, CardFacts("RTX 4090", default_limit_w=400.0, min_limit_w=150.0, max_limit_w=600.0)
    )
    assert out.run is not None and out.run.gpus is not None
    first = out.run.gpus[0]
    assert first.name == "RTX 4090"  # agrees: no note
    assert first.default_limit_w == 450.0  # run.json's own figure stays
    assert first.min_limit_w == 150.0  # an empty one is filled
    assert first.max_limit_w == 600.0
    assert out.run.gpus[1] == RunGpu(index=1)  # other cards untouched
    assert out.notes == (
        "run.json says default_limit_w = 450.0; the value given (400.0) is ignored",
    )
    # the loaded curve itself is not changed
    assert curve.run is not None and curve.run.gpus is not None
    assert curve.run.gpus[0].min_limit_w is None
