"""powersweep.analysis.trust: every row the analysis leaves out named with its caps.csv line
(unusable figures, suspect and implausible caps, duplicates and which row counts), and the faults,
budget and status the run recorded, failed requests by cause."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from powersweep.analysis.findings import Finding, Severity
from powersweep.analysis.load import Curve, load_curve
from powersweep.analysis.run_record import RunRecord
from powersweep.analysis.trust import ignored_rows, input_findings, run_findings, usable_mask
from powersweep.errors import UsageError

HEAD = "cap_w,narr_tps,power_w,status,error,reason\n"


def _curve(tmp_path: Path, rows: str, run: dict[str, Any] | None = None) -> Curve:
    (tmp_path / "caps.csv").write_text(HEAD + rows)
    if run is not None:
        (tmp_path / "run.json").write_text(json.dumps(run))
    return load_curve(tmp_path)


def _run_findings(
    run: dict[str, Any] | None, requests: pl.DataFrame | None = None, source: str = "RUN"
) -> list[Finding]:
    """The run's findings from its run.json (as the loader types it)."""
    record = RunRecord.from_json(run) if run is not None else None
    return run_findings(record, requests, source)


def _by_code(findings: list[Finding]) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in findings:
        out.setdefault(f.code, []).append(f)
    return out


def test_usable_mask_needs_status_ok_and_positive_finite_figures() -> None:
    df = pl.DataFrame(
        {
            "status": ["ok", "ok", "ok", "failed", "ok", "ok"],
            "narr_tps": [1.0, float("inf"), 1.0, 1.0, None, 1.0],
            "power_w": [1.0, 1.0, 0.0, 1.0, 1.0, float("nan")],
        }
    )
    assert df.select(usable_mask("narr_tps"))["status"].to_list() == [
        True,
        False,
        False,
        False,
        False,
        False,
    ]


def test_rows_with_unusable_figures_are_listed_by_line(tmp_path: Path) -> None:
    curve = _curve(tmp_path, "200,20,199,ok,,\n210,nan,209,ok,,\n220,0,219,ok,,\n230,inf,-1,ok,,\n")
    (f,) = input_findings(curve)
    assert (f.severity, f.code) == (Severity.WARNING, "rows_ignored")
    assert f.message == (
        "3 row(s) of caps.csv ignored, their figures are not usable: line 3 (210 W): narr_tps "
        "missing; line 4 (220 W): narr_tps is 0 (not positive); line 5 (230 W): power_w is -1 "
        "(not positive), narr_tps is inf"
    )
    assert ignored_rows(curve) == [f]


def test_a_long_list_of_ignored_rows_is_cut_at_twelve(tmp_path: Path) -> None:
    rows = "".join(f"{200 + k},,{199 + k},ok,,\n" for k in range(15)) + "300,30,299,ok,,\n"
    (f,) = ignored_rows(_curve(tmp_path, rows))
    assert f.message.startswith("15 row(s) of caps.csv ignored")
    assert f.message.count("narr_tps missing") == 12
    assert f.message.endswith("line 13 (211 W): narr_tps missing; and 3 more")


def test_suspect_and_implausible_caps_are_their_own_findings(tmp_path: Path) -> None:
    curve = _curve(
        tmp_path, "200,20,199,ok,,\n240,24,239,suspect,stalled twice,\n250,25,9000,ok,,\n"
    )
    found = _by_code(input_findings(curve))
    assert found["suspect_caps"][0].message == (
        "1 cap(s) suspect, kept in the table and left out of every pick: line 3 (240 W): "
        "stalled twice"
    )
    (implausible,) = found["implausible_rows"]
    assert implausible.message.startswith(
        "1 cap(s) implausible, kept in the table and left out of every pick: line 4 (250 W): "
        "draw 9000.0 W per card"
    )
    assert implausible.hint == "check the file's units (W per card) and the readings"
    assert "rows_ignored" not in found  # those rows have their own status


def test_duplicates_say_which_row_counts(tmp_path: Path) -> None:
    curve = _curve(
        tmp_path,
        "250,25,249,ok,,\n250,26,250,ok,,confirm\n"  # pooled
        "260,,,failed,x,\n260,26,259,ok,,\n"  # the only usable one
        "270,27,269,ok,,\n270,27.5,268,ok,,\n"  # two readings: the last counts
        "280,,,failed,,\n280,,,failed,,\n",  # none usable
    )
    found = _by_code(input_findings(curve))
    assert [f.message for f in found["confirm_pooled"]] == [
        "250 W appears in 2 rows: the confirm phase measured it again, and lines 2, 3 are "
        "pooled into its figures"
    ]
    assert [(f.severity, f.message, f.hint) for f in found["duplicate_cap"]] == [
        (
            Severity.INFO,
            "260 W appears in 2 rows (lines 4, 5): kept line 5, the only usable one (the others "
            "failed or were set aside: a re-measurement)",
            None,
        ),
        (
            Severity.WARNING,
            "270 W appears in 2 rows (lines 6, 7): kept line 7, the last usable row, the latest "
            "measurement; the others are ignored",
            "remove the rows you do not want",
        ),
        (
            Severity.WARNING,
            "280 W appears in 2 rows (lines 8, 9); none is usable",
            "rerun that cap",
        ),
    ]


def test_a_confirmed_cap_names_the_rows_set_aside(tmp_path: Path) -> None:
    curve = _curve(tmp_path, "250,24,249,ok,,\n250,25,249,ok,,\n250,26,250,ok,,confirm\n")
    (f,) = _by_code(input_findings(curve))["confirm_pooled"]
    assert f.message == (
        "250 W appears in 3 rows: the confirm phase measured it again, and lines 3, 4 are "
        "pooled into its figures; line(s) 2 were set aside (failed, or an earlier attempt "
        "measured again)"
    )


def test_a_reading_replaced_by_a_suspect_recheck_is_not_said_to_be_kept(tmp_path: Path) -> None:
    curve = _curve(tmp_path, "200,20,199,ok,,\n300,36,299,ok,,\n300,,,suspect,stalled twice,\n")
    found = _by_code(input_findings(curve))
    assert "suspect_caps" in found
    assert not any("kept line 3" in f.message for f in found.get("duplicate_cap", []))
    (dup,) = found["duplicate_cap"]
    assert "its last measurement, line 4, ended suspect" in dup.message
    assert "left out too" in dup.message


def test_loader_notes_become_input_notes_in_ignored_rows(tmp_path: Path) -> None:
    curve = _curve(tmp_path, "200,20,199,ok,,\n")
    noted = Curve(
        curve.caps, curve.metric, None, None, None, curve.source, curve.out_dir, ("a note",)
    )
    (f,) = ignored_rows(noted)
    assert (f.severity, f.code, f.message, f.hint) == (
        Severity.WARNING,
        "input_note",
        "a note",
        "check the run directory's files",
    )


def test_run_findings_name_faults_budget_and_status() -> None:
    run = {
        "status": "partial",
        "error": "interrupted",
        "faults": [
            {"kind": "server_busy", "count": 3, "examples": ["HTTP 503", "HTTP 429"]},
            {"kind": "request_failed", "count": 2, "examples": ["read timeout (x2)"]},
            {"kind": "new_kind", "count": 1},
        ],
        "adaptive": {"max_caps": 12, "left_out": [{"cap_w": 285, "reason": "edge"}, {}]},
    }
    found = _by_code(_run_findings(run))
    assert found["run_faults"][0].message == (
        "the run met faults: 3 request(s) met a busy server (HTTP 429/503) and were retried "
        "(e.g. HTTP 503); 2 request(s) failed: read timeout (x2); 1 new_kind"
    )
    assert found["adaptive_budget"][0].message == (
        "the adaptive sweep stopped at its budget of 12 caps; still asked for, not measured: "
        "285 W (edge), ? W (?)"
    )
    assert found["run_partial"][0].message == (
        "the run ended partial: interrupted: no answer; `powersweep --resume RUN` measures the rest"
    )
    assert _run_findings({"status": "failed"}, source="runs/a")[0].message == (
        "the run ended failed: no answer; `powersweep --resume runs/a` measures the rest"
    )
    # every planned cap measured, too few ok: resuming measures nothing more
    done = {"status": "partial", "error": "only 1 cap measured (an answer needs 3): too few to "
            "answer", "caps_done": [390.0], "caps_planned": [390.0]}  # fmt: skip
    assert _run_findings(done, source="r")[0].message == (
        "the run ended partial: only 1 cap measured (an answer needs 3): too few to answer; "
        "measure at least 3 caps that finish ok (`--caps`, or the whole envelope)"
    )
    counted = {"status": "interrupted", "caps_done": [1, 2], "caps_planned": [1, 2, 3]}
    assert _run_findings(counted, source="r")[0].message == (
        "interrupted after 2 of 3 caps: no answer yet; `powersweep --resume r` measures the rest"
    )
    assert "--resume" in (found["run_partial"][0].hint or "")
    # an undervolt search plans its steps as it goes (issue 45: it resumes from its last stable
    # step): its count is of steps measured, never "of 1 points"
    undervolt = {"status": "interrupted", "options": {"axis": "undervolt"},
                 "points_done": list(range(12)), "points_planned": [0]}  # fmt: skip
    (said,) = _run_findings(undervolt, source="r")
    assert said.message == (
        "interrupted after 12 steps of the search: no answer yet; `powersweep --resume r` goes "
        "on from its last stable step"
    )
    assert (said.hint or "").startswith("`powersweep --resume r` goes on")
    # faults that are no list: the run.json is refused, naming the key
    with pytest.raises(UsageError, match=r"\$\.faults"):
        _run_findings({"status": "complete", "faults": "none"})
    assert _run_findings(None) == _run_findings({}) == []


def test_failed_requests_come_from_requests_csv_when_run_json_does_not_count_them() -> None:
    requests = pl.DataFrame(
        {
            "ok": ["true", " FALSE ", "false", "false", "false"],
            "error": [None, "ReadTimeout", "HTTP 429", "read timeout", "HTTP 500"],
        }
    )
    (f,) = _run_findings({"status": "complete"}, requests)
    # the busy server's 429 is counted under its own kind, not here
    assert f.message == (
        "the run met faults: 3 request(s) failed: read timeout (the server went silent) (x2); "
        "HTTP 500 from the server (x1)"
    )
    counted = {"status": "complete", "faults": [{"kind": "request_failed", "count": 7}]}
    assert _run_findings(counted, requests)[0].message == "the run met faults: 7 request(s) failed"
    assert _run_findings({"status": "complete"}, requests.drop("error")) == []


def test_the_step_an_undervolt_search_ends_on_is_no_fault_of_the_run() -> None:
    # issue 47: the search's expected unstable step read "warning: the run met faults"

    searched = {"faults": [{"kind": "unstable_offset", "count": 2, "examples": ["+270 MHz"]}]}
    assert [f.code for f in _run_findings(searched, None, "run")] == []
    reset = {"kind": "gpu_reset", "count": 1, "examples": ["+360 MHz: Xid 79"]}
    both = {"faults": [*searched["faults"], reset]}
    (found,) = [f for f in _run_findings(both, None, "run") if f.code == "run_faults"]
    assert found.severity == "warning" and "reset" in found.message
    assert "stability check" not in found.message
