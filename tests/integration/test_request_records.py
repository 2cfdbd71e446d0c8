"""requests.csv keeps what the client noticed and the server's own rates; the summary says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from powersweep.runformat import REPEAT_REASONS
from tests.integration.conftest import read_csv, read_json, sweep_run_dir

SWEEP = (
    "--simulate", "rtx3090-air", "--caps", "300,250", "--cooling", "air", "--quiet", "--no-charts",
    "--warmup-requests", "1", "--target-cap-seconds", "4", "--settle", "fixed",
    "--settle-seconds", "1",
)  # fmt: skip


def _measured_requests(run: Path) -> list[dict[str, str]]:
    rows = [r for r in read_csv(run / "requests.csv") if r["prompt_kind"] in ("narr", "code")]
    assert rows
    return rows


def _codes_of(summary_findings: list[dict[str, str]]) -> set[str]:
    return {f["code"] for f in summary_findings}


@pytest.mark.slow
def test_llamacpp_packing_tokens(tmp_path: Path) -> None:
    run = sweep_run_dir(tmp_path, *SWEEP, "--sim-tokens-per-chunk", "4")
    rows = _measured_requests(run)
    for r in rows:
        assert r["warnings"] == "packed_chunks", r
        # a request cut at its window's end counts its chunks at the server's 4 per chunk
        assert r["token_source"] == (
            "chunks-scaled" if r["finish_reason"] == "deadline" else "usage"
        )
        if r["finish_reason"] != "deadline":  # a cut request never got the server's timings
            assert float(r["server_decode_tps"]) > 0 and float(r["server_prompt_tps"]) > 0
    analysis = read_json(run / "analysis.json")
    codes = _codes_of(analysis["findings"])
    assert "request_packed_chunks" in codes
    assert "request\\_packed\\_chunks" in (run / "summary.md").read_text()
    # the sim's llama.cpp reports its own decode rate: the tool's matches it at both caps
    assert "server_rates_agree" in codes and "server_rate_mismatch" not in codes
    assert len(analysis["server_rates"]) == 2
    assert "agrees with the server's own rate" in (run / "summary.md").read_text()


@pytest.mark.slow
def test_a_server_ignoring_max_tokens_is_cut_and_named(tmp_path: Path) -> None:
    run = sweep_run_dir(tmp_path, *SWEEP, "--sim-tokens-per-chunk", "4", "--sim-ignore-max-tokens")
    rows = _measured_requests(run)
    for r in rows:
        codes = set(r["warnings"].split(";"))
        # it shows the ignored limit once it streamed past it before the cut
        over = int(r["completion_tokens"]) > int(r["max_tokens"])
        assert over or r["finish_reason"] == "deadline", r
        assert codes == ({"packed_chunks", "ignored_max_tokens"} if over else {"packed_chunks"}), r
    assert any(int(r["completion_tokens"]) > int(r["max_tokens"]) for r in rows)
    caps = read_csv(run / "caps.csv")
    for c in caps:  # each window costs its 4 s and its margin, never more
        prompts = 1 if c["reason"] in REPEAT_REASONS else 2
        assert float(c["window_s"]) <= prompts * 4.4 + 0.2, c
    analysis = read_json(run / "analysis.json")
    by_code = {f["code"]: f for f in analysis["findings"]}
    assert "request_ignored_max_tokens" in by_code and by_code["request_ignored_max_tokens"]["hint"]
    summary = (run / "summary.md").read_text()
    assert "request\\_ignored\\_max\\_tokens" in summary


@pytest.mark.slow
def test_plain_server_without_usage(tmp_path: Path) -> None:
    run = sweep_run_dir(tmp_path, *SWEEP, "--sim-server", "plain")
    for r in _measured_requests(run):
        assert r["warnings"] == "no_usage"
        assert r["server_decode_tps"] == "" and r["server_prompt_tps"] == ""
    analysis = read_json(run / "analysis.json")
    codes = _codes_of(analysis["findings"])
    assert "request_no_usage" in codes
    assert not codes & {"server_rates_agree", "server_rate_mismatch"}
    assert "request\\_no\\_usage" in (run / "summary.md").read_text()
