"""The run's stall share: from every decode request; each decode-single row is stated at it."""

from __future__ import annotations

import math

import pytest

from powersweep.sweep.measurement.stalls import RunStalls


def _stall_request(
    stall_s: float, span_s: float = 2.0, kind: str = "narr", ok: bool = True
) -> dict:
    return {
        "prompt_kind": kind,
        "t_first_token_s": "10.0",
        "t_last_token_s": str(10.0 + span_s),
        "stall_s": str(stall_s),
        "ok": str(ok).lower(),
    }


def test_the_share_counts_every_decode_request_and_leaves_out_disturbances() -> None:
    rows = [
        _stall_request(0.4),
        _stall_request(0.0),
        _stall_request(0.0),
        _stall_request(0.4, kind="warmup"),
    ]
    rows += [
        _stall_request(0.4, kind="prefill"),  # no decode stream
        _stall_request(0.4, ok=False),
        {**_stall_request(0.0), "stall_s": ""},  # no chunk times recorded
        _stall_request(1.5),  # a stall the consistency check measures again
    ]
    stalls = RunStalls.of(rows)
    assert stalls.requests == 4
    assert stalls.share == pytest.approx(0.8 / 8.0)
    # the ratio estimator's standard error, requests as the units
    resid = [0.4 - 0.2, -0.2, -0.2, 0.4 - 0.2]
    assert stalls.sd == pytest.approx(math.sqrt(4 / 3 * sum(r * r for r in resid)) / 8.0)
    assert RunStalls.of([_stall_request(0.0)] * 5) == RunStalls(0.0, 0.0, 5)
    assert RunStalls.of([]).share == 0.0


def test_a_row_is_stated_at_the_runs_share_once_and_only_once() -> None:
    stalls = RunStalls(share=0.05, sd=0.01, requests=40)
    # a window that met no stall reads the stream's rhythm; one that met 10% reads 10% low
    clean = {"narr_tps": "100", "code_tps": "80", "tps_per_w": "0.4", "j_per_token": "2.5"}
    clean |= {"narr_stall_pct": "0", "code_stall_pct": "0", "stall_run_pct": ""}
    stated = stalls.stated(clean)
    assert stated["narr_tps"] == pytest.approx(95.0)
    assert stated["code_tps"] == pytest.approx(76.0)
    assert stated["tps_per_w"] == pytest.approx(0.38)
    assert stated["j_per_token"] == pytest.approx(2.5 / 0.95)
    assert stated["stall_run_pct"] == pytest.approx(5.0)
    hit = {**clean, "narr_tps": "90", "narr_stall_pct": "10"}
    assert stalls.stated(hit)["narr_tps"] == pytest.approx(95.0)
    # stated again (a resumed run's end): from the share it was stated at, not its own
    again = {**clean, **{k: str(v) for k, v in stated.items()}}
    assert stalls.stated(again)["narr_tps"] == pytest.approx(95.0)
    # other modes and runs before the columns: nothing
    assert stalls.stated({"narr_tps": "100", "narr_stall_pct": ""}) == {}
    assert RunStalls(0.05, 0.01).sd_rel == pytest.approx(0.01 / 0.95)


def test_the_note_says_how_much_and_what_was_done() -> None:
    note = RunStalls(0.0635, 0.0138, 45).note()
    assert "6.3% (±2.7%)" in note and "stated at that share" in note
