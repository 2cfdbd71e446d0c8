"""powersweep.sim.server_streaming: how the simulated server streams an accepted request, answered
in process (httpx over its ASGI app, a constant engine on a clock 1,000 times faster than the
wall). The bytes of each flavour's stream (the role first, one token an event or packed after the
first, llama.cpp's pings, a strict server's event lines, the finish, usage and timings where each
flavour puts them, ``[DONE]``), an error event after some tokens, the slots that queue requests,
and the stall and pause faults that hold the decode (run time, never caught up)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from powersweep.clock import ScaledClock
from powersweep.sim import faults
from powersweep.sim.engine import ConstantEngine
from powersweep.sim.faults import parse_fault
from powersweep.sim.server import SimServer

HELLO = [{"role": "user", "content": "Say hello."}]


def _server_and_engine(decode_tps: float = 100.0, **kw: Any) -> tuple[SimServer, ConstantEngine]:
    engine = ConstantEngine(ScaledClock(1000.0), decode_tps=decode_tps, prefill_tps=50_000.0)
    return SimServer(engine, **kw), engine


def _streamed_bodies(server: SimServer, n: int, copies: int = 1, **extra: Any) -> list[str]:
    """The raw streamed bodies of ``copies`` concurrent requests for ``n`` tokens."""
    body = {"messages": HELLO, "max_tokens": n, "stream": True, **extra}

    async def run() -> list[str]:
        transport = httpx.ASGITransport(app=server.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            answers = await asyncio.gather(
                *(client.post("/v1/chat/completions", json=body) for _ in range(copies))
            )
        assert all(a.status_code == 200 for a in answers)
        return [a.text for a in answers]

    return asyncio.run(run())


def _events(text: str) -> list[str]:
    return [e for e in text.split("\n\n") if e]


def _data(text: str) -> list[dict[str, Any]]:
    out = []
    for event in _events(text):
        for line in event.splitlines():
            if line.startswith("data: {"):
                out.append(json.loads(line.removeprefix("data: ")))
    return out


def _contents(text: str) -> list[str]:
    return [
        c["delta"]["content"]
        for d in _data(text)
        for c in d.get("choices", [])
        if c["delta"].get("content") is not None
    ]


USAGE = {"stream_options": {"include_usage": True}}


def test_a_vllm_stream_has_the_role_each_token_the_finish_the_usage_and_done() -> None:
    server, engine = _server_and_engine(flavour="vllm")
    (text,) = _streamed_bodies(server, 9, **USAGE)
    data = _data(text)
    assert data[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert len(_contents(text)) == 9  # one token an event
    finish, usage = data[-2], data[-1]
    assert finish["choices"] == [{"index": 0, "delta": {}, "finish_reason": "length"}]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 9
    assert "timings" not in usage and "timings" not in finish
    assert _events(text)[-1] == "data: [DONE]"
    assert {d["id"] for d in data} == {"chatcmpl-sim-1"}
    assert server.tokens_generated == 9 and server.requests_processing == 0
    assert engine.active == {"decode": 0, "prefill": 0}


def test_without_include_usage_there_is_no_usage_chunk() -> None:
    (text,) = _streamed_bodies(_server_and_engine(flavour="vllm")[0], 5)
    assert all("usage" not in d for d in _data(text))
    assert _data(text)[-1]["choices"][0]["finish_reason"] == "length"


def test_llama_cpp_pings_every_seventh_token_and_times_the_usage_chunk() -> None:
    server, _ = _server_and_engine(flavour="llamacpp")
    (text,) = _streamed_bodies(server, 14, **USAGE)
    assert text.count(": ping\n\n") == 2  # before tokens 7 and 14
    first_ping = _events(text).index(": ping")
    assert len(_contents("\n\n".join(_events(text)[:first_ping]))) == 6
    usage = _data(text)[-1]
    assert usage["usage"]["completion_tokens"] == 14 and usage["timings"]["predicted_n"] == 14
    assert "timings" not in _data(text)[-2]


def test_llama_cpp_times_the_final_chunk_when_no_usage_was_asked_for() -> None:
    (text,) = _streamed_bodies(_server_and_engine(flavour="llamacpp")[0], 3)
    final = _data(text)[-1]
    assert final["choices"][0]["finish_reason"] == "length" and final["timings"]["predicted_n"] == 3
    assert "usage" not in final


def test_a_strict_server_writes_event_lines_and_no_usage_even_when_asked() -> None:
    (text,) = _streamed_bodies(_server_and_engine(flavour="plain")[0], 11, **USAGE)
    assert text.count("event: chunk\n") == 3  # tokens 1, 6 and 11
    assert all("usage" not in d for d in _data(text)) and len(_contents(text)) == 11
    assert ": ping" not in text


def test_packed_tokens_share_an_event_after_the_first() -> None:
    server, _ = _server_and_engine(flavour="vllm", tokens_per_chunk=4)
    (text,) = _streamed_bodies(server, 10, **USAGE)
    words = [len(c.split()) for c in _contents(text)]
    assert words == [1, 4, 4, 1]  # the first alone, then four an event, the rest at the end
    assert _data(text)[-1]["usage"]["completion_tokens"] == 10


def test_reasoning_and_answer_never_share_an_event() -> None:
    server, _ = _server_and_engine(flavour="vllm", tokens_per_chunk=4, reasoning_tokens=3)
    (text,) = _streamed_bodies(server, 9)
    deltas = [c["delta"] for d in _data(text)[1:-1] for c in d["choices"]]
    kinds = [
        ("reasoning" if "reasoning_content" in d else "answer", len(next(iter(d.values())).split()))
        for d in deltas
    ]
    assert kinds == [("reasoning", 1), ("reasoning", 2), ("answer", 4), ("answer", 2)]


def test_an_error_event_ends_the_stream_after_the_tokens_it_allows() -> None:
    (text,) = _streamed_bodies(
        _server_and_engine(flavour="vllm", fail_after_tokens=4)[0], 10, **USAGE
    )
    assert len(_contents(text)) == 4
    last = _data(text)[-1]
    assert last == {
        "error": {
            "code": 500,
            "message": "simulated failure after 4 tokens",
            "type": "server_error",
        }
    }
    assert "[DONE]" not in text


def test_requests_beyond_the_slots_wait_for_one() -> None:
    server, engine = _server_and_engine(flavour="llamacpp", total_slots=1)
    texts = _streamed_bodies(server, 20, copies=3, **USAGE)
    assert [_data(t)[-1]["usage"]["completion_tokens"] for t in texts] == [20, 20, 20]
    assert engine.peak_active["decode"] == 1 and engine.peak_active["prefill"] == 1
    assert (server.requests_deferred, server.requests_processing) == (0, 0)
    assert server.tokens_generated == 60
    free, free_engine = _server_and_engine(flavour="vllm")  # no slots: all decode at once
    _streamed_bodies(free, 20, copies=3)
    assert free_engine.peak_active["decode"] == 3


def _decode_ms(text: str) -> float:
    return float(_data(text)[-1]["timings"]["predicted_ms"])


def test_a_stalled_server_sends_nothing_for_its_stall_and_then_goes_on() -> None:
    # a token every 2 run seconds: each goes out on its own, the stall comes after the tenth
    server, _ = _server_and_engine(decode_tps=0.5, flavour="llamacpp", fault=parse_fault("stall"))
    (text,) = _streamed_bodies(server, faults.STALL_AFTER_TOKENS + 5)
    assert len(_contents(text)) == faults.STALL_AFTER_TOKENS + 5
    assert _decode_ms(text) >= 1000.0 * (2.0 * 15 + faults.STALL_S) * 0.99


def test_a_paused_server_does_not_catch_up_afterwards() -> None:
    # ten tokens 2 run seconds apart; the whole server stops 2 s after the request arrived
    server, _ = _server_and_engine(decode_tps=0.5, flavour="llamacpp", fault=parse_fault("pause"))
    (text,) = _streamed_bodies(server, 10)
    assert len(_contents(text)) == 10
    assert _decode_ms(text) >= 1000.0 * (2.0 * 10 + faults.PAUSE_S) * 0.99


@pytest.mark.parametrize("flavour", ["vllm", "llamacpp"])
def test_a_whole_answer_counts_every_token(flavour: str) -> None:
    server, engine = _server_and_engine(flavour=flavour)

    async def run() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=server.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            body = {"messages": HELLO, "max_tokens": 7}
            return (await client.post("/v1/chat/completions", json=body)).json()

    answer = asyncio.run(run())
    assert answer["usage"]["completion_tokens"] == 7 and server.tokens_generated == 7
    assert engine.active == {"decode": 0, "prefill": 0}
