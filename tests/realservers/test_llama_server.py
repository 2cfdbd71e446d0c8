"""The client and the sweep against llama.cpp's real ``llama-server`` (CPU, generated models)."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import httpx
import pytest

from powersweep.analysis.precision import REAL_SERVER_FLOOR_REL
from powersweep.cli.rigs import build_rig
from powersweep.clock import real_clock
from powersweep.report import build_report
from powersweep.runformat import REFERENCE_REASON
from powersweep.sweep.loads.prompts import CODE_PROMPT, NARRATIVE_PROMPT
from powersweep.sweep.options import (
    Cooling,
    LoadOptions,
    OutputOptions,
    PointOptions,
    SafetyOptions,
    ServerOptions,
    SweepOptions,
)
from powersweep.sweep.server.client import ChatClient, RequestResult
from powersweep.sweep.session import run_session
from tests.integration.conftest import read_csv, read_json
from tests.realservers.conftest import (
    CONTEXT_TOKENS,
    REAL_TIME_MEASURE,
    SLOTS,
    RealServer,
    TeeTransport,
    discover,
    session_run_dir,
    sse_payloads,
)
from tests.realservers.tinymodel import TINY, chatml_prompt_tokens

pytestmark = pytest.mark.realserver

PROMPT = "Tell me a story about a lighthouse."


def chat(
    server: RealServer,
    prompt: str,
    max_tokens: int,
    transport: httpx.AsyncBaseTransport | None = None,
    *,
    warm_first: bool = False,
) -> tuple[RequestResult, ChatClient]:
    """One request through the real client (optionally after an unmeasured warm-up request)."""
    info = discover(server)

    async def go() -> tuple[RequestResult, ChatClient]:
        client = ChatClient(info, real_clock(), transport=transport)
        async with client:
            if warm_first:
                await client.chat(prompt, max_tokens=8, prompt_kind="warmup")
            return await client.chat(prompt, max_tokens=max_tokens, prompt_kind="narr"), client

    return asyncio.run(go())


def test_discovery_reads_engine_runtime_context_and_slots_from_props(
    llama_server: RealServer,
) -> None:
    info = discover(llama_server)
    assert info.engine == "llamacpp"
    # The runtime context (-c), not the model's training length that /v1/models advertises.
    assert info.context_tokens == CONTEXT_TOKENS
    models = httpx.get(llama_server.url + "/v1/models", timeout=5).json()
    assert models["data"][0]["meta"]["n_ctx_train"] == TINY.context_tokens != CONTEXT_TOKENS
    assert info.total_slots == SLOTS
    assert info.model == models["data"][0]["id"]
    assert info.accepts_thinking_switch is True


def test_with_split_slots_discovery_reports_the_per_request_context_the_server_enforces(
    llama_server_split_slots: RealServer,
) -> None:
    # -c 4096 -np 4 gives each slot 1024 tokens: /props reports that, and it is the real limit
    # of one request (the -c value would overstate it four times).
    info = discover(llama_server_split_slots)
    per_slot = CONTEXT_TOKENS // SLOTS
    assert info.context_tokens == per_slot
    assert info.total_slots == SLOTS
    fits, _ = chat(llama_server_split_slots, "x" * (per_slot - 100), 4)
    assert fits.ok, fits.error
    too_long, _ = chat(llama_server_split_slots, "x" * (per_slot + 100), 4)
    assert not too_long.ok
    assert f"({per_slot} tokens)" in too_long.error
    assert "exceed_context_size_error" in too_long.error


def test_token_counts_equal_the_servers_usage_and_timings(llama_server: RealServer) -> None:
    tee = TeeTransport()
    result, client = chat(llama_server, PROMPT, 48, tee)
    assert result.ok, result.error
    assert result.warnings == ()
    assert client.refused_keys == frozenset()  # llama-server takes chat_template_kwargs

    (body,) = tee.bodies
    payloads = sse_payloads(bytes(body))
    (usage,) = [p["usage"] for p in payloads if p.get("usage")]
    timings = [p["timings"] for p in payloads if p.get("timings")][-1]
    # The server ran to the limit (the model never samples EOS) ...
    assert usage["completion_tokens"] == 48
    assert timings["predicted_n"] == 48
    # ... and the client reports exactly the server's counts, from usage.
    assert result.token_source == "usage"
    assert result.completion_tokens == 48
    assert result.chunk_tokens == 48  # one ASCII token per chunk
    assert result.finish_reason == "length"
    assert result.prompt_tokens == usage["prompt_tokens"] == chatml_prompt_tokens(PROMPT)
    assert result.server_decode_tps == pytest.approx(timings["predicted_per_second"])
    assert result.server_prompt_tps == pytest.approx(timings["prompt_per_second"])
    assert result.t_start_s <= result.t_first_token_s < result.t_last_token_s <= result.t_end_s


def test_back_to_back_requests_on_kept_alive_connections_all_succeed(
    llama_server: RealServer,
) -> None:
    # llama-server now and then closes a kept-alive connection just as the next request goes
    # out (about 1 request in 20 here); a sweep sends requests back to back, so the client must
    # resend such a request instead of recording a failure.
    info = discover(llama_server)

    async def go() -> list[RequestResult]:
        async with ChatClient(info, real_clock()) as client:
            return [await client.chat(PROMPT, max_tokens=4, prompt_kind="narr") for _ in range(40)]

    results = asyncio.run(go())
    assert [r.error for r in results if not r.ok] == []
    assert all(r.completion_tokens == 4 for r in results)


def test_decode_tps_agrees_with_llama_servers_own_timing(llama_server_medium: RealServer) -> None:
    # The medium model decodes at tens of tokens per second: client-side timing (first to last
    # token-bearing chunk) must match the server's own decode timing within 2 %.
    result, _ = chat(llama_server_medium, PROMPT, 96, warm_first=True)
    assert result.ok, result.error
    assert result.completion_tokens == 96
    assert result.server_decode_tps is not None
    assert math.isfinite(result.decode_tps)
    assert result.decode_tps == pytest.approx(result.server_decode_tps, rel=0.02)


def test_prompt_over_the_context_is_a_failed_request_with_the_servers_error(
    llama_server: RealServer,
) -> None:
    prompt = "lighthouse " * (CONTEXT_TOKENS // 10)  # ~4400 one-character tokens
    result, client = chat(llama_server, prompt, 16)
    assert not result.ok
    assert result.error.startswith("HTTP 400: ")
    assert "exceed" in result.error and "context" in result.error
    assert "exceed_context_size_error" in result.error
    assert result.completion_tokens == 0
    # The refusal is about the prompt: the client must not blame (and drop) its optional keys.
    assert client.refused_keys == frozenset()
    assert client.accepts_thinking_switch is not False


def test_sim_llamacpp_flavour_metrics_and_props_keys_exist_on_the_real_server(
    llama_server: RealServer,
) -> None:
    # The simulated llamacpp flavour imitates these; the names must be the real ones.
    metrics = httpx.get(llama_server.url + "/metrics", timeout=5)
    assert metrics.status_code == 200
    for name in (
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
        "llamacpp:tokens_predicted_total",
    ):
        assert name in metrics.text
    props = httpx.get(llama_server.url + "/props", timeout=5).json()
    assert props["default_generation_settings"]["n_ctx"] == CONTEXT_TOKENS
    assert props["total_slots"] == SLOTS
    assert {"model_path", "build_info"} <= props.keys()


def test_sweep_session_through_the_real_code_path(llama_server: RealServer, tmp_path: Path) -> None:
    # GPU simulated, server real: the whole sweep path (discovery, warm-up, load, CSVs).
    options = SweepOptions(
        simulate="rtx3090-air",
        server=ServerOptions(url=llama_server.url),
        points=PointOptions(caps=(300.0,)),
        measure=REAL_TIME_MEASURE,
        safety=SafetyOptions(state_dir=tmp_path / "state"),
        load=LoadOptions(warmup_requests=2),
        output=OutputOptions(out=tmp_path, cooling=Cooling.AIR),
    )
    session = run_session(options, build_rig)
    run = session.run_dir
    assert run.parent == tmp_path
    meta = read_json(run / "run.json")
    assert meta["server"]["engine"] == "llamacpp"
    assert meta["server"]["context_tokens"] == CONTEXT_TOKENS
    assert meta["server"]["url"] == llama_server.url
    # the server, not the simulated card, sets the rate: the floor measured for such a server
    # is carried (a real card's run carries only the run-to-run term it measures)
    assert meta["run_to_run"]["floor_sd_pct"] == pytest.approx(100 * REAL_SERVER_FLOOR_REL)

    requests = read_csv(run / "requests.csv")
    prompts = {"narr": NARRATIVE_PROMPT, "code": CODE_PROMPT}
    kinds = [r["prompt_kind"] for r in requests]
    assert {"warmup", "narr", "code"} <= set(kinds), kinds
    for row in requests:
        assert row["ok"] == "true", row
        assert row["completion_tokens"] == row["chunk_tokens"]
        kind = row["prompt_kind"]
        # sized to end with its window: one that ended on its own made its whole limit, one
        # still streaming at the window's end was cut there (its chunks counted)
        if row["finish_reason"] == "length":
            assert row["token_source"] == "usage"
            assert int(row["completion_tokens"]) == int(row["max_tokens"])
            if kind in prompts:
                assert int(row["prompt_tokens"]) == chatml_prompt_tokens(prompts[kind])
        else:
            assert row["finish_reason"] == "deadline" and row["token_source"] == "chunks", row
        if kind in prompts:
            assert float(row["decode_tps"]) > 0
    # (a CPU server shared with other tests can halve its rate between warm-up and window:
    # then every measured request is cut, which the rows above allow)
    assert any(r["finish_reason"] == "length" for r in requests)

    # the cap, and the run's first point read again at its end (the run-to-run term)
    cap, reread = read_csv(run / "caps.csv")
    assert float(cap["cap_w"]) == float(reread["cap_w"]) == 300.0
    assert reread["reason"] == REFERENCE_REASON
    measured = [r for r in requests if r["prompt_kind"] == "narr"]
    # (a point measured twice keeps its first attempt's requests, marked discarded)
    kept = [r for r in requests if r["prompt_kind"] in prompts]
    assert int(cap["n_requests"]) + int(reread["n_requests"]) == len(kept)
    tps = [float(r["decode_tps"]) for r in measured]
    assert min(tps) * 0.5 < float(cap["narr_tps"]) < max(tps) * 1.5
    assert json.loads((run / "run.json").read_text())["status"] == "complete"


def test_decode_concurrent_session_runs_one_stream_per_slot(
    llama_server: RealServer, tmp_path: Path
) -> None:
    run = session_run_dir(llama_server, tmp_path, "decode-concurrent", load={"concurrency": SLOTS})
    assert read_json(run / "run.json")["status"] == "complete"
    # the cap, and the run's first point read again at its end (the run-to-run term)
    cap, reread = read_csv(run / "caps.csv")
    assert cap["status"] == reread["status"] == "ok" and reread["reason"] == REFERENCE_REASON
    assert int(cap["concurrency"]) == SLOTS
    measured = [r for r in read_csv(run / "requests.csv") if r["prompt_kind"] != "warmup"]
    assert {int(r["stream"]) for r in measured} == set(range(SLOTS))
    for row in measured:
        assert row["ok"] == "true", row
        assert row["completion_tokens"] == row["chunk_tokens"]
        # A stream the window's end cut has no usage (counted chunks); a finished one has.
        expected_source = "chunks" if row["finish_reason"] == "deadline" else "usage"
        assert row["token_source"] == expected_source, row


def test_prefill_heavy_session_keeps_prompts_inside_the_context(
    llama_server: RealServer, tmp_path: Path
) -> None:
    # The byte-level tokenizer makes ~8 tokens per word: the prompt must be sized from the
    # server's /tokenize count, never sent over the 4096-token context.
    run = session_run_dir(llama_server, tmp_path, "prefill-heavy", load={"target_prefill_s": 0.2})
    meta = read_json(run / "run.json")
    assert meta["status"] == "complete", meta["error"]
    for row in read_csv(run / "requests.csv"):
        assert row["ok"] == "true", row
        # (a window's last prompt that did not fit counts nothing; a warm-up request cut at the
        # warm-up's end has no usage)
        if row["prompt_kind"] == "prefill" and row["t_first_token_s"]:
            assert int(row["prompt_tokens"]) < CONTEXT_TOKENS


def test_server_decode_rate_is_recorded_and_agrees_with_the_tools(
    llama_server: RealServer, tmp_path: Path
) -> None:
    # llama.cpp reports its own decode rate for every request; requests.csv keeps it and the
    # summary cross-checks it against the tool's.
    run = session_run_dir(llama_server, tmp_path, "decode-single")
    requests = read_csv(run / "requests.csv")
    assert {"warmup", "narr", "code"} <= {r["prompt_kind"] for r in requests}
    for row in requests:
        assert row["ok"] == "true", row
        assert row["warnings"] == "", row
        if row["finish_reason"] == "deadline":  # cut at its window's end: no timings came
            assert row["server_decode_tps"] == "" and row["server_prompt_tps"] == "", row
            continue
        assert float(row["server_decode_tps"]) > 0, row
        assert float(row["server_prompt_tps"]) > 0, row
    report = build_report(run, charts=False)
    doc = report.result.to_json()
    codes = {f["code"] for f in doc["findings"]}
    assert "server_rates_agree" in codes and "server_rate_mismatch" not in codes
    (rate,) = doc["server_rates"]
    timed = [r for r in requests if r["prompt_kind"] in ("narr", "code") and r["server_decode_tps"]]
    assert timed and rate["n_requests"] == len(timed)
    assert "agrees with the server's own rate" in report.summary
