"""The real client against the real simulated server, for every flavour."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from powersweep.clock import ScaledClock
from powersweep.errors import PowersweepError
from powersweep.sim.engine import ConstantEngine
from powersweep.sim.server import FLAVOURS, SimServer, count_prompt_tokens
from powersweep.sweep.server import discovery
from powersweep.sweep.server.client import ChatClient, RequestResult, ServerInfo, discover_server

SCALE = 20.0
DECODE_TPS = 50.0
CONTEXT = 4096
PROMPT = "Write a short story about a graphics card that learned to save power."


def make_engine(decode_tps: float = DECODE_TPS) -> ConstantEngine:
    return ConstantEngine(
        ScaledClock(SCALE), decode_tps=decode_tps, prefill_tps=2000.0, context_tokens=CONTEXT
    )


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[tuple[SimServer, ConstantEngine]]:
    kwargs: dict[str, Any] = dict(getattr(request, "param", {}))
    engine = make_engine(kwargs.pop("decode_tps", DECODE_TPS))
    server = SimServer(engine, **kwargs)
    server.start()
    try:
        yield server, engine
    finally:
        server.stop()


async def _discover_sim(server: SimServer, engine: ConstantEngine) -> ServerInfo:
    return await discover_server(server.url, model=None, api_key=None, clock=engine.clock)


async def _chats_on(
    server: SimServer, engine: ConstantEngine, n: int = 1, **kwargs: Any
) -> tuple[list[RequestResult], ChatClient]:
    info = await _discover_sim(server, engine)
    client = ChatClient(info, engine.clock, max_connections=max(n, 1))
    try:
        kwargs.setdefault("prompt_kind", "narr")
        prompt = kwargs.pop("prompt", PROMPT)
        if "deadline_in_s" in kwargs:  # relative to after discovery, which takes run time too
            kwargs["deadline_s"] = engine.clock.now() + kwargs.pop("deadline_in_s")
        results = await asyncio.gather(
            *(client.chat(prompt, stream_index=i, **kwargs) for i in range(n))
        )
    finally:
        await client.aclose()
    return list(results), client


def chat(server: SimServer, engine: ConstantEngine, **kwargs: Any) -> RequestResult:
    results, _ = asyncio.run(_chats_on(server, engine, **kwargs))
    return results[0]


def wait_idle(engine: ConstantEngine) -> None:
    """The server finishes its bookkeeping in its own thread; give it a moment."""
    for _ in range(500):
        if engine.active == {"decode": 0, "prefill": 0}:
            return
        time.sleep(0.01)


EXPECTED = {
    "llamacpp": ("llamacpp", CONTEXT, 4, "usage"),
    "vllm": ("vllm", CONTEXT, None, "usage"),
    "sglang": ("sglang", CONTEXT, None, "usage"),
    "ollama": ("ollama", CONTEXT, None, "usage"),
    "plain": ("openai-compatible", None, None, "chunks"),
}


@pytest.mark.parametrize("served", [{"flavour": f} for f in FLAVOURS], indirect=True, ids=FLAVOURS)
def test_flavour_end_to_end(served: tuple[SimServer, ConstantEngine]) -> None:
    server, engine = served
    engine_name, context, slots, source = EXPECTED[server.flavour]
    info = asyncio.run(_discover_sim(server, engine))
    assert info.engine == engine_name
    assert info.context_tokens == context  # llama.cpp: /props n_ctx, not meta.n_ctx_train
    assert info.total_slots == slots
    assert info.model == "sim-model"

    result = chat(server, engine, max_tokens=500)
    assert result.ok, result.error
    assert result.token_source == source
    assert result.completion_tokens == 500
    assert result.chunk_tokens == 500
    assert result.finish_reason == "length"
    # a stream without usage is counted in chunks: right here, but a guess in general
    assert result.warnings == (("no_usage",) if source == "chunks" else ())
    assert result.decode_tps == pytest.approx(DECODE_TPS, rel=0.02)
    if source == "usage":
        assert result.prompt_tokens == count_prompt_tokens(PROMPT)
    else:
        assert result.prompt_tokens is None
    if server.flavour == "llamacpp":
        assert result.server_decode_tps == pytest.approx(DECODE_TPS, rel=0.02)
        assert result.cached_tokens == 0
    assert result.t_start_s <= result.t_first_token_s < result.t_last_token_s <= result.t_end_s
    wait_idle(engine)
    assert engine.active == {"decode": 0, "prefill": 0}


@pytest.mark.parametrize(
    "served",
    [
        {"flavour": "plain", "reasoning_tokens": 50},
        {"flavour": "ollama", "reasoning_tokens": 50},
        {"flavour": "llamacpp", "reasoning_tokens": 50},
    ],
    indirect=True,
    ids=["plain-refuses-switch", "ollama-ignores-switch", "llamacpp-honours-switch"],
)
def test_reasoning_tokens_are_counted_once(served: tuple[SimServer, ConstantEngine]) -> None:
    server, engine = served
    results, client = asyncio.run(_chats_on(server, engine, max_tokens=60, record_token_times=True))
    result = results[0]
    assert result.ok, result.error
    # Double-counting plain's two reasoning aliases would give 110.
    assert result.chunk_tokens == 60
    assert result.completion_tokens == 60
    assert result.token_times_s is not None and len(result.token_times_s) == 60
    assert result.t_first_token_s == result.token_times_s[0]
    if server.flavour == "plain":
        assert client.refused_keys == {"chat_template_kwargs"}
        assert client.accepts_thinking_switch is False
    else:
        assert client.refused_keys == frozenset()


def _raw_stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    payloads = []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                payloads.append(json.loads(line[6:]))
    return payloads


@pytest.mark.parametrize("served", [{"reasoning_tokens": 5}], indirect=True)
def test_llamacpp_wire_format(served: tuple[SimServer, ConstantEngine]) -> None:
    server, _ = served
    base = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]}
    with_thinking = _raw_stream(server.url, {**base, "max_tokens": 8, "stream": True})
    deltas = [c["choices"][0]["delta"] for c in with_thinking if c["choices"]]
    assert sum("reasoning_content" in d for d in deltas) == 5
    assert sum(bool(d.get("content")) for d in deltas) == 3
    # timings even without include_usage, and no usage chunk
    assert "timings" in with_thinking[-1]
    assert with_thinking[-1]["timings"]["predicted_n"] == 8
    assert all("usage" not in c for c in with_thinking)

    off = _raw_stream(
        server.url,
        {
            **base,
            "max_tokens": 8,
            "stream": True,
            "stream_options": {"include_usage": True},
            "chat_template_kwargs": {"enable_thinking": False},
        },
    )
    assert all("reasoning_content" not in c["choices"][0]["delta"] for c in off if c["choices"])
    usage_chunk = off[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 8
    assert usage_chunk["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert "timings" in usage_chunk

    props = httpx.get(server.url + "/props").json()
    assert props["default_generation_settings"]["n_ctx"] == CONTEXT
    assert props["total_slots"] == 4
    metrics = httpx.get(server.url + "/metrics").text
    assert "llamacpp:requests_processing 0" in metrics
    assert "llamacpp:requests_deferred 0" in metrics
    tokens = httpx.post(server.url + "/tokenize", json={"content": "hello, world"}).json()
    assert len(tokens["tokens"]) == count_prompt_tokens("hello, world") == 5


def test_count_prompt_tokens() -> None:
    assert count_prompt_tokens("") == 0
    assert count_prompt_tokens("a bb ccc dddd") == 4
    assert count_prompt_tokens("abcdefghi") == 3  # runs of up to four word characters
    assert count_prompt_tokens("x, y!") == 4


@pytest.mark.parametrize("served", [{"fail_after_tokens": 5}], indirect=True)
def test_in_stream_error_is_a_failed_request(served: tuple[SimServer, ConstantEngine]) -> None:
    server, engine = served
    result = chat(server, engine, max_tokens=50)
    assert not result.ok
    assert "simulated failure after 5 tokens" in result.error
    assert result.chunk_tokens == 5
    wait_idle(engine)
    assert engine.active["decode"] == 0


# 500, not 503: a 503 is "busy", retried with back-off
# (tests/unit/sweep/server/test_client_faults.py)
@pytest.mark.parametrize("served", [{"http_error": 500, "flavour": "vllm"}], indirect=True)
def test_http_error_is_a_failed_request(served: tuple[SimServer, ConstantEngine]) -> None:
    server, engine = served
    result = chat(server, engine, max_tokens=5)
    assert not result.ok
    assert result.error == "HTTP 500: simulated HTTP 500 (server_error)"


@pytest.mark.parametrize("served", [{"flavour": "llamacpp"}], indirect=True)
def test_over_context_is_http_400(served: tuple[SimServer, ConstantEngine]) -> None:
    server, engine = served
    result = chat(server, engine, max_tokens=5, prompt="word " * (CONTEXT + 10))
    assert not result.ok
    assert result.error.startswith("HTTP 400: request (")
    assert "exceeds the available context size" in result.error
    assert "exceed_context_size_error" in result.error


@pytest.mark.parametrize("served", [{"flavour": "ollama"}], indirect=True)
def test_ollama_truncates_silently_and_ignores_max_completion_tokens(
    served: tuple[SimServer, ConstantEngine],
) -> None:
    server, engine = served
    prompt = "word " * (CONTEXT + 500)
    result = chat(server, engine, max_tokens=5, prompt=prompt)
    assert result.ok
    assert result.prompt_tokens == CONTEXT < count_prompt_tokens(prompt)

    result = chat(
        server, engine, max_tokens=5, extra_body={"max_completion_tokens": 20, "max_tokens": None}
    )
    assert result.ok
    assert result.completion_tokens == 80
    assert result.warnings == ("ignored_max_tokens",)


@pytest.mark.parametrize("served", [{"flavour": "vllm", "decode_tps": 4.0}], indirect=True)
def test_sixteen_concurrent_streams(served: tuple[SimServer, ConstantEngine]) -> None:
    server, engine = served
    results, _ = asyncio.run(_chats_on(server, engine, n=16, max_tokens=40))
    assert [r.stream for r in results] == list(range(16))
    for r in results:
        assert r.ok, r.error
        assert (r.completion_tokens, r.chunk_tokens, r.token_source) == (40, 40, "usage")
        # Looser than single-stream (2%): 16 streams share the CPUs with the server, and a
        # chunk-counting bug would be off by multiples, not percent.
        assert r.decode_tps == pytest.approx(4.0, rel=0.1)
    assert engine.peak_active["decode"] == 16
    wait_idle(engine)
    assert engine.active == {"decode": 0, "prefill": 0}


@pytest.mark.parametrize("served", [{"flavour": "llamacpp"}], indirect=True)
def test_llamacpp_slots_limit_parallel_decoding(served: tuple[SimServer, ConstantEngine]) -> None:
    server, engine = served
    results, _ = asyncio.run(_chats_on(server, engine, n=8, max_tokens=10))
    assert all(r.ok and r.completion_tokens == 10 for r in results)
    assert engine.peak_active["decode"] == 4


@pytest.mark.parametrize("served", [{"flavour": "sglang"}], indirect=True)
def test_deadline_stops_early_and_server_finishes_work(
    served: tuple[SimServer, ConstantEngine],
) -> None:
    server, engine = served
    result = chat(server, engine, max_tokens=2000, deadline_in_s=4.0)
    assert result.ok
    assert result.finish_reason == "deadline"
    assert 0 < result.chunk_tokens < 2000
    assert result.completion_tokens == result.chunk_tokens
    wait_idle(engine)
    assert engine.active == {"decode": 0, "prefill": 0}


@pytest.mark.parametrize("served", [{"flavour": "llamacpp"}], indirect=True)
def test_non_streaming_against_sim(served: tuple[SimServer, ConstantEngine]) -> None:
    server, engine = served
    result = chat(server, engine, max_tokens=100, stream=False)
    assert result.ok, result.error
    assert (result.completion_tokens, result.token_source) == (100, "usage")
    assert result.chunk_tokens == 0
    assert result.prompt_tokens == count_prompt_tokens(PROMPT)
    # The server's own timing over a short (0.1 s wall) decode: loose on a shared machine.
    assert result.server_decode_tps == pytest.approx(DECODE_TPS, rel=0.2)


def test_stop_is_idempotent_and_context_manager() -> None:
    engine = make_engine()
    with SimServer(engine, flavour="plain") as server:
        url = server.url
        assert httpx.get(url + "/v1/models").json()["data"][0]["id"] == "sim-model"
    server.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/v1/models")


def test_discovery_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ScaledClock(1.0)
    html = httpx.MockTransport(
        lambda r: httpx.Response(200, headers={"content-type": "text/html"}, text="<html></html>")
    )
    with pytest.raises(PowersweepError, match=r"answered HTML: not an OpenAI-compatible server"):
        asyncio.run(
            discover_server("http://x:1", model=None, api_key=None, clock=clock, transport=html)
        )

    def two_models(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"id": "a"}, {"id": "b"}]})

    with pytest.raises(PowersweepError, match=r"serves 2 models \(a, b\); choose one"):
        asyncio.run(
            discover_server(
                "http://x:1",
                model=None,
                api_key=None,
                clock=clock,
                transport=httpx.MockTransport(two_models),
            )
        )

    free = []
    for _ in range(2):
        s = __import__("socket").socket()
        s.bind(("127.0.0.1", 0))
        free.append(s.getsockname()[1])
        s.close()
    monkeypatch.setattr(discovery, "DEFAULT_PORTS", ((free[0], "A"), (free[1], "B")))
    with pytest.raises(PowersweepError) as err:
        asyncio.run(discover_server(None, model=None, api_key=None, clock=clock, timeout_s=1))
    message = str(err.value)
    assert "\n" not in message
    assert f"{free[0]} (A): nothing" in message and f"{free[1]} (B): nothing" in message


def test_discovery_probes_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine()
    with SimServer(engine, flavour="vllm") as server:
        port = int(server.url.rsplit(":", 1)[1])
        s = __import__("socket").socket()
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
        s.close()
        monkeypatch.setattr(discovery, "DEFAULT_PORTS", ((dead, "A"), (port, "B")))
        info = asyncio.run(
            discover_server(None, model="other-name", api_key=None, clock=engine.clock)
        )
    assert info.base_url == server.url or info.base_url == f"http://127.0.0.1:{port}"
    assert (info.engine, info.model, info.context_tokens) == ("vllm", "other-name", CONTEXT)
