"""What an undervolt run recommends (``sweep/settings/undervolt_pick.py``, through
``read_recommendation``), from hand-written ``analysis.json`` and ``run.json``: the cap, lock and
offset of its ``chosen`` point, the caveats, and one-line refusals: another objective, no answer,
an answer at offset 0 that does no better than the cap, and an answer its run's own caps.csv does
not give (issue 45: an edited analysis.json)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from powersweep.errors import UsageError
from powersweep.runformat import CAPS_COLUMNS, SCHEMA_VERSION
from powersweep.sweep.settings.recommendation import (
    MeasuredGpu,
    Recommendation,
    read_recommendation,
)

UUID = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
GPUS = (MeasuredGpu(0, "NVIDIA GeForce RTX 4090", UUID),)
CHOSEN = {
    "sm_offset_mhz": 180.0,
    "sm_lock_mhz": 2790.0,
    "cap_w": 450.0,
    "reason": "soak",
    "status": "ok",
    "tps": 47.05,
    "tps_per_w": 0.1341,
}
GAIN = {
    "cap_w": 450.0,
    "tps_per_w_gain_pct": 11.8,
    "tps_per_w_gain_u95_pct": 1.9,
    "tied": False,
}


# run.json's record of a search whose answer is offset 0
ZERO_RECORD = {"cap_w": 450.0, "sm_lock_mhz": 2790.0, "chosen_mhz": 0.0}


def _undervolt_answer(**extra: Any) -> dict[str, Any]:
    return {
        "kind": "undervolt",
        "axis": "undervolt",
        "sm_lock_mhz": 2790.0,
        "chosen": dict(CHOSEN),
        "versus_cap": dict(GAIN),
        "first_unstable_mhz": 270.0,
        "first_unstable_reason": "the narr answer differs from offset 0's",
        **extra,
    }


def _offset_row(
    offset: float, status: str = "ok", reason: str = "search", **kw: Any
) -> dict[str, Any]:
    row = {
        **{"cap_w": 450.0, "narr_tps": 47.05, "power_w": 350.8 - offset / 10, "status": status},
        **{"sm_lock_mhz": 2790.0, "sm_offset_mhz": offset, "reason": reason},
        **{"tps_per_w_u95_pct": 0.5, "j_per_token": 7.0, **kw},
    }
    row["tps_per_w"] = row["narr_tps"] / row["power_w"]
    return row


def _search_rows(stable_to: float = 180.0, soak: float | None = 180.0) -> list[dict[str, Any]]:
    """A search at 2790 MHz in 90 MHz steps: stable to ``stable_to``, the next step unstable,
    then the soak of ``soak`` (None: none)."""
    rows = [
        _offset_row(0.0, reason="baseline", sm_lock_mhz=None),
        _offset_row(0.0, reason="reference"),
    ]
    offset = 90.0
    while offset <= stable_to:
        rows.append(_offset_row(offset))
        offset += 90.0
    rows.append(_offset_row(offset, "unstable", error="the narr answer differs from offset 0's"))
    if soak is not None:
        rows.append(_offset_row(soak, reason="soak"))
    return rows


def _undervolt_run(
    tmp_path: Path,
    analysis: dict[str, Any],
    caps: list[dict[str, Any]] | None = None,
    **run: Any,
) -> Path:
    path = tmp_path / "run"
    path.mkdir(exist_ok=True)
    lines = [",".join(CAPS_COLUMNS)]
    for r in _search_rows() if caps is None else caps:
        lines.append(",".join("" if r.get(c) is None else str(r[c]) for c in CAPS_COLUMNS))
    (path / "caps.csv").write_text("\n".join(lines) + "\n")
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "status": "complete",
        "gpus": [{"index": 0, "name": "NVIDIA GeForce RTX 4090", "uuid": UUID}],
        "options": {"axis": "undervolt", "hold_cap_w": None, "margin_mhz": 0.0},
        "undervolt": {"cap_w": 450.0, "sm_lock_mhz": 2790.0, "chosen_mhz": 180.0},
        **run,
    }
    (path / "run.json").write_text(json.dumps(meta))
    (path / "analysis.json").write_text(json.dumps(analysis))
    return path


def test_the_chosen_points_cap_lock_and_offset_are_the_recommendation(tmp_path: Path) -> None:
    run = _undervolt_run(tmp_path, _undervolt_answer())
    rec = read_recommendation(run)
    assert rec == Recommendation(
        run, "undervolt", 450.0, 0.1341, 47.05, GPUS, (), sm_clock_mhz=2790.0, sm_offset_mhz=180.0
    )
    assert rec.clock_run
    assert rec.describe() == "SM 2790 MHz +180 MHz offset at 450 W per GPU"
    assert replace(rec, cap_w=None).describe() == "SM 2790 MHz +180 MHz offset"
    # tps-per-w is what the search maximises: the same answer
    assert read_recommendation(run, "tps-per-w") == rec


@pytest.mark.parametrize("objective", ["near-peak", "cost", "slo"])
def test_another_objective_is_refused_the_search_has_one_answer(
    tmp_path: Path, objective: str
) -> None:
    run = _undervolt_run(tmp_path, _undervolt_answer())
    with pytest.raises(UsageError) as info:
        read_recommendation(run, objective)
    assert str(info.value) == (
        f"{run} is an undervolt run: its search has one answer (the SM clock offset that held "
        f"at its locked clock), not a {objective} pick; apply it without --objective"
    )


def test_no_answer_is_refused_with_the_step_that_ended_the_search(tmp_path: Path) -> None:
    run = _undervolt_run(tmp_path, _undervolt_answer(chosen=None, versus_cap=None))
    with pytest.raises(UsageError) as info:
        read_recommendation(run)
    assert str(info.value) == (
        f"{run}'s undervolt search has no answer: no point at its locked SM clock held (the "
        "first unstable step, +270 MHz: the narr answer differs from offset 0's), so there is "
        f"nothing to apply; see {run / 'summary.md'}"
    )


def test_offset_zero_that_beats_the_cap_is_the_lock_and_cap_alone(tmp_path: Path) -> None:
    zero = _undervolt_answer(chosen={**CHOSEN, "sm_offset_mhz": 0.0, "reason": "reference"})
    rec = read_recommendation(
        _undervolt_run(
            tmp_path, zero, _search_rows(stable_to=0.0, soak=None), undervolt=ZERO_RECORD
        )
    )
    assert (rec.cap_w, rec.sm_clock_mhz, rec.sm_offset_mhz) == (450.0, 2790.0, None)
    assert rec.describe() == "SM 2790 MHz at 450 W per GPU"
    assert rec.notes == (
        "no SM clock offset above 0 held with the margin: only the SM clock lock and "
        "the power limit are set (the SM clock offset in force is left as it is)",
    )


@pytest.mark.parametrize(
    ("versus", "compared"),
    [
        (
            {**GAIN, "tps_per_w_gain_pct": 0.4, "tied": True},
            "its SM clock lock alone does no better than the 450 W cap (+0.4% +-1.9% TPS/W)",
        ),
        (
            {**GAIN, "tps_per_w_gain_pct": -6.0, "tps_per_w_gain_u95_pct": None, "tied": None},
            "its SM clock lock alone does no better than the 450 W cap (-6.0% TPS/W)",
        ),
        (None, "its SM clock lock alone was not compared with the 450 W cap"),
    ],
)
def test_offset_zero_no_better_than_the_cap_is_refused(
    tmp_path: Path, versus: dict[str, Any] | None, compared: str
) -> None:
    zero = _undervolt_answer(chosen={**CHOSEN, "sm_offset_mhz": 0.0}, versus_cap=versus)
    run = _undervolt_run(
        tmp_path, zero, _search_rows(stable_to=0.0, soak=None), undervolt=ZERO_RECORD
    )
    with pytest.raises(UsageError) as info:
        read_recommendation(run)
    assert str(info.value) == (
        f"no SM clock offset above 0 held in {run}'s undervolt search and {compared}: nothing "
        "is applied; set the cap alone with `powersweep apply --cap 450`"
    )


def test_an_offset_tied_with_the_cap_or_not_soaked_is_applied_with_its_caveats(
    tmp_path: Path,
) -> None:
    tied = _undervolt_answer(
        chosen={**CHOSEN, "reason": "search"},
        versus_cap={
            **GAIN,
            "tps_per_w_gain_pct": 7.5,
            "tps_per_w_gain_u95_pct": 35.9,
            "tied": True,
        },
    )
    rec = read_recommendation(_undervolt_run(tmp_path, tied, _search_rows(soak=None)))
    assert rec.sm_offset_mhz == 180.0
    assert rec.notes == (
        "the chosen offset was not soaked (no --soak-seconds run held it): a longer load may "
        "find it unstable",
        "the undervolt point's TPS/W is within noise of the 450 W cap's (+7.5% +-35.9%): the cap "
        "alone may do as well",
    )


def test_an_undervolt_search_that_did_not_finish_is_resumed_not_applied(
    tmp_path: Path,
) -> None:
    run = _undervolt_run(tmp_path, _undervolt_answer(), status="interrupted")
    with pytest.raises(UsageError) as info:
        read_recommendation(run)
    assert str(info.value) == (
        f"{run} has no answer to apply: interrupted after 0 steps of the search; "
        f"`powersweep --resume {run}` goes on from its last stable step"
    )


def test_the_lock_and_cap_come_from_run_json_when_the_point_lacks_them(tmp_path: Path) -> None:
    bare = _undervolt_answer(
        chosen={**CHOSEN, "sm_lock_mhz": None, "cap_w": None}, sm_lock_mhz=None
    )
    rec = read_recommendation(_undervolt_run(tmp_path, bare))
    assert (rec.cap_w, rec.sm_clock_mhz) == (450.0, 2790.0)
    nothing = _undervolt_run(tmp_path, bare, undervolt={})
    with pytest.raises(UsageError, match="the undervolt answer has no valid SM clock lock"):
        read_recommendation(nothing)


def test_an_undervolt_run_with_another_kind_of_analysis_is_refused(tmp_path: Path) -> None:
    power = {"kind": "power", "sweet_spot": {"cap_w": 300.0}}
    run = _undervolt_run(tmp_path, power)
    with pytest.raises(UsageError) as info:
        read_recommendation(run)
    assert str(info.value) == (
        f"{run} is an undervolt run but its analysis.json is of kind 'power': run "
        f"`powersweep analyze {run}` again"
    )


@pytest.mark.parametrize(
    ("offset", "why"),
    [
        # the step the run itself found unstable
        (270.0, "above the last offset its run measured stable (+180 MHz)"),
        (100000.0, "above the last offset its run measured stable (+180 MHz)"),
        # never measured at all
        (-150.0, "an offset its run never measured stable at that lock"),
        # measured stable, but not the answer: the soak chose +180
        (90.0, "but its caps.csv and run.json give SM 2790 MHz +180 MHz at 450 W"),
    ],
)
def test_an_edited_analysis_is_refused_for_what_the_run_measured(
    tmp_path: Path, offset: float, why: str
) -> None:
    edited = _undervolt_answer(chosen={**CHOSEN, "sm_offset_mhz": offset})
    run = _undervolt_run(tmp_path, edited)
    with pytest.raises(UsageError) as info:
        read_recommendation(run)
    message = str(info.value)
    assert message.startswith(f"{run / 'analysis.json'} answers SM 2790 MHz {offset:+g} MHz, ")
    assert why in message
    assert message.endswith(f"nothing is applied; run `powersweep analyze {run}` again")
    assert "--sm-offset" not in message  # a flag the user never passed


def test_an_edited_cap_or_lock_is_refused(tmp_path: Path) -> None:
    run = _undervolt_run(tmp_path, _undervolt_answer(chosen={**CHOSEN, "cap_w": 600.0}))
    with pytest.raises(UsageError, match=r"give SM 2790 MHz \+180 MHz at 450 W"):
        read_recommendation(run)
    run = _undervolt_run(tmp_path, _undervolt_answer(chosen={**CHOSEN, "sm_lock_mhz": 3000.0}))
    with pytest.raises(UsageError, match="never measured stable at that lock"):
        read_recommendation(run)


def test_a_run_json_record_that_disagrees_is_refused(tmp_path: Path) -> None:
    record = {"cap_w": 450.0, "sm_lock_mhz": 2790.0, "chosen_mhz": 90.0}
    run = _undervolt_run(tmp_path, _undervolt_answer(), undervolt=record)
    with pytest.raises(UsageError, match=r"run.json records \+90 MHz"):
        read_recommendation(run)


def test_a_run_without_its_measurements_applies_nothing(tmp_path: Path) -> None:
    run = _undervolt_run(tmp_path, _undervolt_answer())
    (run / "caps.csv").unlink()
    with pytest.raises(UsageError, match="nothing is applied that the run did not measure"):
        read_recommendation(run)
