"""The undervolt analysis, from caps.csv rows alone (and run.json's options where present)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from powersweep.analysis.load import load_curve
from powersweep.analysis.result_types import Answer
from powersweep.analysis.undervolt import analyze_undervolt, is_undervolt_curve
from powersweep.analysis.undervolt_result_types import UndervoltAnalysis
from powersweep.analysis.undervolt_summary import headline, render_undervolt_summary
from powersweep.runformat import CAPS_COLUMNS

LOCK = 1485.0


def _row(offset: float | None, status: str = "ok", reason: str = "search", **kw: Any) -> dict:
    row = {
        "cap_w": 300.0,
        "narr_tps": 33.0,
        "power_w": 300.0 - (offset or 0.0) / 10,
        "sm_lock_mhz": LOCK,
        "sm_offset_mhz": offset,
        "status": status,
        "reason": reason,
        "tps_per_w_u95_pct": 0.5,
        "j_per_token": 9.0,
    }
    row.update(kw)
    row["tps_per_w"] = row["narr_tps"] / row["power_w"]
    return row


def _curve(tmp: Path, rows: list[dict], run: dict | None = None) -> Any:
    lines = [",".join(CAPS_COLUMNS)]
    for r in rows:
        lines.append(",".join("" if r.get(c) is None else str(r[c]) for c in CAPS_COLUMNS))
    (tmp / "caps.csv").write_text("\n".join(lines) + "\n")
    if run is not None:
        (tmp / "run.json").write_text(json.dumps(run))
        return load_curve(tmp)
    return load_curve(tmp / "caps.csv")


def _search(stable_to: float, step: float = 30.0, soaks: tuple = ()) -> list[dict]:
    rows = [_row(0.0, reason="baseline", sm_lock_mhz=None, tps_per_w_u95_pct=1.0)]
    rows.append(_row(0.0, reason="reference"))
    k = 1
    while True:
        o = k * step
        ok = o <= stable_to
        rows.append(_row(o, "ok" if ok else "unstable", error=None if ok else "answers differ"))
        if not ok:
            break
        k += 1
    for offset, status in soaks:
        rows.append(_row(offset, status, reason="soak"))
    return rows


def test_the_answer_is_the_soak_that_held_beside_the_baseline_cap(tmp_path: Path) -> None:
    curve = _curve(tmp_path, _search(150.0, soaks=((90.0, "unstable"), (60.0, "ok"))))
    assert is_undervolt_curve(curve)
    a = analyze_undervolt(curve)
    assert a.last_stable_mhz == 150.0 and a.first_unstable_mhz == 180.0
    assert a.first_unstable_reason == "answers differ"
    assert a.chosen is not None and a.chosen.sm_offset_mhz == 60.0 and a.chosen.reason == "soak"
    assert a.baseline is not None and a.baseline.sm_lock_mhz is None
    v = a.versus_cap
    assert v is not None and v.tps_per_w_gain_pct is not None and v.tps_per_w_gain_pct > 0
    assert v.tps_per_w_gain_u95_pct == (0.5**2 + 1.0**2) ** 0.5
    codes = [f.code for f in a.findings]
    assert "undervolt_unstable" in codes and "soak_failed" in codes
    assert UndervoltAnalysis.from_json(a.to_json()).to_json() == a.to_json()


def test_without_soaks_the_margin_lands_on_a_measured_step(tmp_path: Path) -> None:
    run = {"options": {"offset_step_mhz": 30.0, "margin_mhz": 30.0}}
    a = analyze_undervolt(_curve(tmp_path, _search(120.0), run))
    assert a.margin_mhz == 30.0 and a.chosen is not None and a.chosen.sm_offset_mhz == 90.0


def test_a_run_before_the_margin_backs_off_its_recorded_steps(tmp_path: Path) -> None:
    run = {"options": {"offset_step_mhz": 30.0, "backoff_steps": 1}}
    a = analyze_undervolt(_curve(tmp_path, _search(120.0), run))
    assert a.margin_mhz == 30.0 and a.chosen is not None and a.chosen.sm_offset_mhz == 90.0


def test_no_stable_offset_above_zero_answers_the_cards_own_curve(tmp_path: Path) -> None:
    a = analyze_undervolt(_curve(tmp_path, _search(30.0)))
    assert a.chosen is not None and a.chosen.sm_offset_mhz == 0.0
    assert "no_undervolt" in [f.code for f in a.findings]


def test_a_gain_within_noise_is_a_tie(tmp_path: Path) -> None:
    rows = _search(150.0, soaks=((90.0, "ok"),))
    rows[-1]["tps_per_w_u95_pct"] = 10.0
    a = analyze_undervolt(_curve(tmp_path, rows))
    assert a.versus_cap is not None and a.versus_cap.tied
    assert "undervolt_tied" in [f.code for f in a.findings]


def test_a_search_without_steps_has_no_answer(tmp_path: Path) -> None:
    rows = [_row(0.0, reason="baseline", sm_lock_mhz=None), _row(0.0, "failed", "reference")]
    a = analyze_undervolt(_curve(tmp_path, rows))
    assert a.chosen is None and a.versus_cap is None and headline(a) is None
    assert "No stable offset was found" in render_undervolt_summary(_curve(tmp_path, rows), a)


def test_a_step_measured_again_is_judged_by_its_second_reading(tmp_path: Path) -> None:
    rows = _search(150.0)
    # +60 first failed on TPS alone; offset 0 read again, +60 measured again held
    at = next(i for i, r in enumerate(rows) if r["sm_offset_mhz"] == 60.0)
    rows[at].update(status="unstable", error="TPS 30.00 is 9.1% below offset 0's")
    rows[at + 1 : at + 1] = [_row(0.0, reason="rebase"), _row(60.0, reason="retry")]
    a = analyze_undervolt(_curve(tmp_path, rows))
    assert a.last_stable_mhz == 150.0 and a.first_unstable_mhz == 180.0
    (retried,) = [f for f in a.findings if f.code == "step_retried"]
    assert retried.message == (
        "+60 MHz failed (TPS 30.00 is 9.1% below offset 0's), a failure the server or the "
        "world may cause: measured once more, it held"
    )
    summary = render_undervolt_summary(_curve(tmp_path, rows), a)
    assert "| rebase |" in summary and "| retry |" in summary


def test_a_search_cut_short_withholds_its_answer(tmp_path: Path) -> None:
    # issue 44, every axis: an interrupted search (its soak never ran) gives no answer, shows
    # its steps, and says how to go on; the count is of the steps it measured
    from powersweep.report_view import render_answer
    from powersweep.sweep.axes.undervolt_axis import UndervoltAxis

    run = {
        "status": "interrupted",
        "options": {"axis": "undervolt", "offset_step_mhz": 30.0, "margin_mhz": 30.0},
        "points_done": list(range(7)),
        "points_planned": [0],
    }
    a = analyze_undervolt(_curve(tmp_path, _search(150.0), run))
    assert a.chosen is None and a.steps  # nothing chosen, every step kept
    answer = a.answer
    assert isinstance(answer, Answer) and answer.kind == "none"
    assert answer.why is not None and answer.why.startswith("interrupted after 7 steps")
    assert "--resume" in answer.why
    assert headline(a) is None
    assert render_answer(a, headline(a)).startswith("no answer: interrupted after 7 steps")
    # `analyze` still shows it (its baseline is a usable reading), it is no answer to apply
    assert UndervoltAxis().answer(a) is a.baseline
    assert UndervoltAnalysis.from_json(a.to_json()).to_json() == a.to_json()
    # a finished search's analysis has no such record
    done = analyze_undervolt(_curve(tmp_path, _search(150.0), {**run, "status": "complete"}))
    assert done.chosen is not None and "answer" not in done.to_json()
