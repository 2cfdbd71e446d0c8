"""The client and the sweep against llama-cpp-python's real OpenAI server (CPU, tiny model).

This server never sends ``usage`` in a stream and has no ``/props``: the client must fall back to
counting token-bearing chunks, and must not invent a context length.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from powersweep.cli.rigs import build_rig
from powersweep.clock import real_clock
from powersweep.runformat import REFERENCE_REASON
from powersweep.sweep.options import SafetyOptions
from powersweep.sweep.sampling.windows import WindowPolicy
from powersweep.sweep.server.client import ChatClient, RequestResult
from powersweep.sweep.session import run_session
from tests.integration.conftest import read_csv, read_json
from tests.realservers.conftest import (
    REAL_TIME_MEASURE,
    RealServer,
    TeeTransport,
    discover,
    session_run_dir,
    sse_payloads,
    sweep_options,
)
from tests.realservers.tinymodel import chatml_prompt_tokens

pytestmark = pytest.mark.realserver

PROMPT = "Tell me a story about a lighthouse."


def chat(
    server: RealServer, max_tokens: int, *, stream: bool = True, tee: TeeTransport | None = None
) -> RequestResult:
    info = discover(server)

    async def go() -> RequestResult:
        async with ChatClient(info, real_clock(), transport=tee) as client:
            return await client.chat(
                PROMPT, max_tokens=max_tokens, prompt_kind="narr", stream=stream
            )

    return asyncio.run(go())


def test_discovery_finds_a_generic_server_without_a_context(
    llama_cpp_python_server: RealServer,
) -> None:
    info = discover(llama_cpp_python_server)
    assert info.engine == "openai-compatible"
    assert info.context_tokens is None  # no /props: unknown, never guessed
    assert info.total_slots is None
    assert info.model == str(llama_cpp_python_server.model_path)


def test_streamed_counts_fall_back_to_chunks_and_equal_what_was_generated(
    llama_cpp_python_server: RealServer,
) -> None:
    tee = TeeTransport()
    result = chat(llama_cpp_python_server, 40, tee=tee)
    assert result.ok, result.error
    (body,) = tee.bodies
    payloads = sse_payloads(bytes(body))
    assert not any(p.get("usage") for p in payloads)  # the quirk this test is about
    text = "".join(
        c["delta"].get("content") or "" for p in payloads for c in p["choices"] if "delta" in c
    )
    assert len(text) == 40  # one character per token: the server generated max_tokens
    assert result.token_source == "chunks"
    assert result.completion_tokens == result.chunk_tokens == 40
    assert result.finish_reason == "length"
    assert result.prompt_tokens is None
    assert result.server_decode_tps is None
    assert result.decode_tps > 0


def test_non_streamed_answer_carries_usage(llama_cpp_python_server: RealServer) -> None:
    result = chat(llama_cpp_python_server, 24, stream=False)
    assert result.ok, result.error
    assert result.token_source == "usage"
    assert result.completion_tokens == 24
    assert result.prompt_tokens == chatml_prompt_tokens(PROMPT)


def test_sweep_session_counts_chunks(llama_cpp_python_server: RealServer, tmp_path: Path) -> None:
    options = sweep_options(llama_cpp_python_server, tmp_path, "decode-single")
    run = run_session(options, build_rig).run_dir
    meta = read_json(run / "run.json")
    assert meta["status"] == "complete", meta["error"]
    assert meta["server"]["engine"] == "openai-compatible"
    assert meta["server"]["context_tokens"] is None
    requests = read_csv(run / "requests.csv")
    assert {"narr", "code"} <= {r["prompt_kind"] for r in requests}
    for row in requests:
        assert row["ok"] == "true", row
        assert row["token_source"] == "chunks"
        assert row["prompt_tokens"] == ""  # empty means not reported, never zero
        assert row["chunk_tokens"] == row["completion_tokens"]
        # sized to end with its window: one that ended on its own made its whole limit
        if row["finish_reason"] == "length":
            assert int(row["completion_tokens"]) == int(row["max_tokens"])
        else:
            assert row["finish_reason"] == "deadline", row


def test_a_stream_the_server_interrupts_is_a_failed_request(
    llama_cpp_python_server: RealServer,
) -> None:
    # By default (interrupt_requests) this server aborts a running stream when another request
    # arrives: the aborted one must be a failure, not a short "ok" request that skews the TPS.
    info = discover(llama_cpp_python_server)

    async def go() -> tuple[RequestResult, RequestResult]:
        async with ChatClient(info, real_clock()) as client:

            async def second() -> RequestResult:
                await asyncio.sleep(0.5)
                return await client.chat(PROMPT, max_tokens=8, prompt_kind="narr", stream_index=1)

            long = client.chat(PROMPT, max_tokens=3000, prompt_kind="narr")
            first, late = await asyncio.gather(long, second())
            return first, late

    first, late = asyncio.run(go())
    assert late.ok, late.error
    assert late.completion_tokens == 8
    assert not first.ok
    # it sends "[DONE]" without a finish reason (or drops the connection mid-response)
    assert "without a finish reason" in first.error or "mid-response" in first.error
    assert first.chunk_tokens < 3000


def test_prefill_session_takes_prompt_tokens_from_a_whole_answer(
    llama_cpp_python_server: RealServer, tmp_path: Path
) -> None:
    # No usage in streams: prefill-heavy asks the same prompt once more without streaming to
    # learn how many tokens the server processed (and so whether it truncated it).
    run = session_run_dir(
        llama_cpp_python_server, tmp_path, "prefill-heavy", load={"target_prefill_s": 0.5}
    )
    meta = read_json(run / "run.json")
    assert meta["status"] == "complete", meta["error"]
    # the cap, and the run's first point read again at its end (the run-to-run term)
    cap, reread = read_csv(run / "caps.csv")
    assert reread["reason"] == REFERENCE_REASON
    assert cap["status"] == "ok" and float(cap["prefill_tps"]) > 0
    # (a window's last prompt that did not fit is cut before its first token: it counts nothing)
    prefill = [
        r
        for r in read_csv(run / "requests.csv")
        if r["prompt_kind"] == "prefill" and r["t_first_token_s"]
    ]
    assert prefill and all(r["ok"] == "true" and int(r["prompt_tokens"]) > 100 for r in prefill)


def test_concurrent_streams_the_server_interrupts_fail_the_cap_with_the_hint(
    llama_cpp_python_server: RealServer, tmp_path: Path
) -> None:
    warnings: list[str] = []
    options = sweep_options(
        llama_cpp_python_server,
        tmp_path,
        "decode-concurrent",
        load={"concurrency": 2},
        measure=dataclasses.replace(
            REAL_TIME_MEASURE, settle_s=0.2, windows=WindowPolicy(max_s=1.0)
        ),
        safety=SafetyOptions(state_dir=tmp_path / "state", max_failed_caps=1),
    )
    run = run_session(options, build_rig, warn=warnings.append).run_dir
    (cap,) = read_csv(run / "caps.csv")
    # two streams on a server that kills one when the other arrives: no honest aggregate TPS
    assert cap["status"] == "failed", cap
    assert "requests failed" in cap["error"]
    assert any("interrupt_requests" in w for w in warnings), warnings
