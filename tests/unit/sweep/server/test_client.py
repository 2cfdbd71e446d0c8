"""ChatClient against scripted transports: exotic bodies, errors, retries, deadlines."""

from __future__ import annotations

import asyncio
import json
import math
import re
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from powersweep.clock import ScaledClock
from powersweep.errors import PowersweepError, UsageError
from powersweep.sim.engine import ConstantEngine
from powersweep.sim.server import SimServer
from powersweep.sweep.server.client import ChatClient, RequestResult, ServerInfo
from powersweep.sweep.server.discovery import normalize_base_url, strip_credentials
from powersweep.sweep.server.greedy_answer import GreedyAnswer

INFO = ServerInfo(
    base_url="http://sim.test:8080",
    model="m",
    engine="openai-compatible",
    context_tokens=None,
    total_slots=None,
    accepts_thinking_switch=None,
)
SSE = {"content-type": "text/event-stream"}
KEY = "sk-very-secret-key"


def sse_body(*payloads: Any, done: bool = True) -> bytes:
    out = b"".join(
        b"data: " + (p if isinstance(p, bytes) else json.dumps(p).encode()) + b"\n\n"
        for p in payloads
    )
    return out + (b"data: [DONE]\n\n" if done else b"")


def delta(**d: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def finish(reason: str = "length") -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


Handler = Callable[[httpx.Request], Any]


def run_chat(handler: Handler, **kwargs: Any) -> tuple[RequestResult, ChatClient]:
    async def go() -> tuple[RequestResult, ChatClient]:
        client = ChatClient(
            INFO,
            ScaledClock(1.0),
            api_key=KEY,
            transport=httpx.MockTransport(handler),
        )
        try:
            kwargs.setdefault("max_tokens", 8)
            kwargs.setdefault("prompt_kind", "narr")
            result = await client.chat("hello", **kwargs)
        finally:
            await client.aclose()
        return result, client

    return asyncio.run(go())


def test_request_body_and_auth_header() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers=SSE, content=sse_body(delta(content="a"), finish()))

    result, _ = run_chat(handler, max_tokens=5, extra_body={"top_k": 3})
    body = json.loads(seen[0].content)
    assert seen[0].url.path == "/v1/chat/completions"
    assert seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert body["model"] == "m"
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert body["max_tokens"] == 5
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["top_k"] == 3
    assert result.ok
    assert result.token_source == "chunks"
    assert result.completion_tokens == 1


def test_usage_counts_and_mismatch_warning() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        chunks = [delta(content="ab") for _ in range(5)]
        return httpx.Response(200, headers=SSE, content=sse_body(*chunks, finish(), usage(3, 13)))

    result, _ = run_chat(handler, max_tokens=20)
    assert result.ok
    assert (result.completion_tokens, result.chunk_tokens, result.prompt_tokens) == (13, 5, 3)
    assert result.token_source == "usage"
    assert result.warnings == ("packed_chunks",)


def test_over_generation_is_warned() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        chunks = [delta(content="x") for _ in range(12)]
        return httpx.Response(200, headers=SSE, content=sse_body(*chunks, finish(), usage(1, 12)))

    result, _ = run_chat(handler, max_tokens=4)
    assert result.ok
    assert result.warnings == ("ignored_max_tokens",)


@pytest.mark.parametrize(
    ("status", "content", "expected"),
    [
        (500, b"<html><title>oops</title></html>", "HTTP 500: an HTML page (oops)"),
        (
            400,
            json.dumps({"error": {"message": "ctx exceeded", "type": "exceed_context_size_error"}}),
            "HTTP 400: ctx exceeded (exceed_context_size_error)",
        ),
        (502, b"", "HTTP 502: an empty body"),
        (401, json.dumps({"error": f"bad key {KEY}"}), "HTTP 401: bad key ***"),
    ],
)
def test_http_errors_fail_with_status_and_message(
    status: int, content: bytes | str, expected: str
) -> None:
    result, _ = run_chat(lambda r: httpx.Response(status, content=content))
    assert not result.ok
    assert result.error == expected
    assert KEY not in result.error


@pytest.mark.parametrize(
    ("content", "ctype", "fragment"),
    [
        (b"<!DOCTYPE html><html><title>Login</title>", "text/html", "an HTML page (Login)"),
        (b"hello world\n", "text/plain", "text 'hello world'"),
        (b'{"error": {"message": "bad model"}}', "application/json", "bad model"),
    ],
)
def test_non_sse_200_bodies_fail_clearly(content: bytes, ctype: str, fragment: str) -> None:
    result, _ = run_chat(
        lambda r: httpx.Response(200, headers={"content-type": ctype}, content=content)
    )
    assert not result.ok
    assert fragment in result.error


def test_html_served_as_event_stream_fails() -> None:
    result, _ = run_chat(lambda r: httpx.Response(200, headers=SSE, content=b"<html>no</html>"))
    assert not result.ok
    assert "instead of an event stream" in result.error


def test_error_event_inside_200_stream() -> None:
    body = sse_body(delta(content="a"), {"error": {"message": "slot crashed"}}, done=False)
    result, _ = run_chat(lambda r: httpx.Response(200, headers=SSE, content=body))
    assert not result.ok
    assert result.error == "slot crashed"
    assert result.chunk_tokens == 1


def test_done_without_a_finish_reason_is_a_cut_generation() -> None:
    # llama-cpp-python aborts a running stream for a new request and still sends [DONE]: the
    # request's rate is a short one's, so it must not count as a finished request.
    body = sse_body(delta(content="a"), delta(content="b"))
    result, _ = run_chat(lambda r: httpx.Response(200, headers=SSE, content=body))
    assert not result.ok
    assert "after 2 tokens without a finish reason" in result.error


def test_no_finish_and_no_done_is_a_warning() -> None:
    body = sse_body(delta(content="a"), delta(content="b"), done=False)
    result, _ = run_chat(lambda r: httpx.Response(200, headers=SSE, content=body))
    assert result.ok
    assert "no_finish" in result.warnings


def test_empty_stream_fails() -> None:
    result, _ = run_chat(lambda r: httpx.Response(200, headers=SSE, content=b""))
    assert not result.ok
    assert "without sending any event" in result.error


def test_refused_thinking_switch_is_retried_once_and_remembered() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if "chat_template_kwargs" in body:
            detail = [{"loc": ["body", "chat_template_kwargs"], "msg": "extra"}]
            return httpx.Response(422, json={"detail": detail})
        return httpx.Response(200, headers=SSE, content=sse_body(delta(content="a"), finish()))

    async def go() -> ChatClient:
        client = ChatClient(INFO, ScaledClock(1.0), transport=httpx.MockTransport(handler))
        first = await client.chat("p", max_tokens=2, prompt_kind="narr")
        second = await client.chat("p", max_tokens=2, prompt_kind="narr")
        assert first.ok and second.ok
        await client.aclose()
        return client

    client = asyncio.run(go())
    assert ["chat_template_kwargs" in b for b in bodies] == [True, False, False]
    assert client.refused_keys == {"chat_template_kwargs"}
    assert client.accepts_thinking_switch is False


def test_unrelated_400_is_not_blamed_on_optional_keys() -> None:
    calls: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(json.loads(request.content))
        return httpx.Response(400, json={"error": {"message": "prompt too long"}})

    result, client = run_chat(handler)
    assert len(calls) == 2  # one retry without the optional keys, then give up
    assert result.error == "HTTP 400: prompt too long"
    assert client.refused_keys == frozenset()


def test_refused_max_completion_tokens_falls_back_to_max_tokens() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if "max_completion_tokens" in body:
            return httpx.Response(400, json={"error": "unknown field max_completion_tokens"})
        return httpx.Response(200, headers=SSE, content=sse_body(delta(content="a"), finish()))

    result, client = run_chat(handler, extra_body={"max_completion_tokens": 7, "max_tokens": None})
    assert result.ok
    assert "max_tokens" not in bodies[0]
    assert bodies[1]["max_tokens"] == 7
    assert "chat_template_kwargs" in bodies[1]  # only the named key was dropped
    assert client.refused_keys == {"max_completion_tokens"}


def test_non_streaming_mode() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream"] is False
        return httpx.Response(
            200,
            json={
                "choices": [
                    {
                        "message": {"content": "hi", "reasoning_content": "hmm"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 4, "completion_tokens": 6},
            },
        )

    result, _ = run_chat(handler, stream=False)
    assert result.ok
    assert (result.completion_tokens, result.prompt_tokens, result.finish_reason) == (6, 4, "stop")
    assert math.isnan(result.t_first_token_s) and math.isnan(result.decode_tps)
    assert result.t_end_s >= result.t_start_s


def test_transport_errors_become_failed_results() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out")

    result, _ = run_chat(refuse)
    assert not result.ok and "cannot connect to http://sim.test:8080" in result.error
    result, _ = run_chat(hang)
    assert not result.ok and result.error.startswith("read timeout")


def test_deadline_closes_stream_and_counts_what_arrived() -> None:
    async def endless() -> AsyncIterator[bytes]:
        yield sse_body(delta(role="assistant"), done=False)
        while True:
            yield sse_body(delta(content="t"), done=False)
            await asyncio.sleep(0.005)

    clock = ScaledClock(1.0)

    async def go() -> RequestResult:
        client = ChatClient(
            INFO,
            clock,
            transport=httpx.MockTransport(
                lambda r: httpx.Response(200, headers=SSE, content=endless())
            ),
        )
        result = await client.chat(
            "p", max_tokens=1000, prompt_kind="narr", deadline_s=clock.now() + 0.1
        )
        await client.aclose()
        return result

    result = asyncio.run(go())
    assert result.ok
    assert result.finish_reason == "deadline"
    assert result.chunk_tokens > 0
    assert result.completion_tokens == result.chunk_tokens
    assert result.t_end_s - result.t_start_s < 5  # it did not wait for the endless stream


def test_decode_tps_property() -> None:
    base = dict(
        prompt_kind="narr",
        stream=0,
        t_start_s=0.0,
        t_end_s=3.0,
        prompt_tokens=1,
        token_source="usage",
        chunk_tokens=0,
        token_times_s=None,
        finish_reason="length",
        ok=True,
        error="",
    )
    r = RequestResult(t_first_token_s=1.0, t_last_token_s=3.0, completion_tokens=11, **base)  # type: ignore[arg-type]
    assert r.decode_tps == pytest.approx(5.0)
    r = RequestResult(t_first_token_s=1.0, t_last_token_s=1.0, completion_tokens=1, **base)  # type: ignore[arg-type]
    assert math.isnan(r.decode_tps)


@pytest.fixture
def dead_port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    yield port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections (kernel backlog) but never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


def test_real_connection_refused(dead_port: int) -> None:
    info = ServerInfo(f"http://127.0.0.1:{dead_port}", "m", "vllm", None, None, None)

    async def go() -> RequestResult:
        client = ChatClient(info, ScaledClock(1.0), api_key=KEY)
        result = await client.chat("p", max_tokens=2, prompt_kind="narr")
        await client.aclose()
        return result

    result = asyncio.run(go())
    assert not result.ok
    assert result.error.startswith(f"cannot connect to http://127.0.0.1:{dead_port}")
    assert "\n" not in result.error and KEY not in result.error


def test_real_read_timeout(silent_port: int) -> None:
    info = ServerInfo(f"http://127.0.0.1:{silent_port}", "m", "vllm", None, None, None)

    async def go() -> RequestResult:
        client = ChatClient(info, ScaledClock(1.0), read_timeout_s=0.2)
        result = await client.chat("p", max_tokens=2, prompt_kind="narr")
        await client.aclose()
        return result

    result = asyncio.run(go())
    assert not result.ok
    assert result.error == "read timeout: server sent nothing for 0.2 s"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("localhost:8080", "http://localhost:8080"),
        ("http://host:8000/v1/", "http://host:8000"),
        ("https://u:pw@host/prefix/v1/chat/completions", "https://host/prefix"),
        ("http://host:1234/", "http://host:1234"),
    ],
)
def test_normalize_base_url(given: str, expected: str) -> None:
    assert normalize_base_url(given) == expected


def test_normalize_rejects_non_http() -> None:
    with pytest.raises(UsageError):
        normalize_base_url("ftp://host")
    assert issubclass(UsageError, PowersweepError)


def test_strip_credentials() -> None:
    assert strip_credentials("http://user:pass@h:1/v1?key=abc#x") == "http://h:1/v1"


def run_greedy(
    handler: Handler | httpx.AsyncBaseTransport, *, client_kw: Any = None, **kwargs: Any
) -> tuple[GreedyAnswer, ChatClient, float]:
    """One greedy answer from a client on ``handler`` (or a transport); also the wall seconds
    it took."""

    async def go() -> tuple[GreedyAnswer, ChatClient, float]:
        transport = (
            handler
            if isinstance(handler, httpx.AsyncBaseTransport)
            else httpx.MockTransport(handler)
        )
        client = ChatClient(
            INFO, ScaledClock(1.0), api_key=KEY, transport=transport, **(client_kw or {})
        )
        kwargs.setdefault("max_tokens", 8)
        kwargs.setdefault("seed", 1234)
        t0 = time.monotonic()
        try:
            answer = await client.greedy("hello", **kwargs)
        finally:
            await client.aclose()
        return answer, client, time.monotonic() - t0

    return asyncio.run(go())


def completion(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
        **extra,
    }


def test_greedy_sends_one_unstreamed_greedy_request_with_the_thinking_switch() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        message = {"role": "assistant", "content": " The answer.", "reasoning_content": "Hm."}
        usage = {"prompt_tokens": 3, "completion_tokens": 5}
        return httpx.Response(200, json=completion(message, usage=usage))

    answer, client, _ = run_greedy(handler, max_tokens=5, seed=77)
    assert len(seen) == 1
    body = json.loads(seen[0].content)
    assert (body["temperature"], body["top_p"], body["seed"]) == (0, 1, 77)
    assert body["stream"] is False and "stream_options" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["max_tokens"] == 5
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert answer == GreedyAnswer(
        text="Hm. The answer.", completion_tokens=5, finish_reason="length", prompt_tokens=3
    )
    assert answer.ok
    assert client.accepts_thinking_switch is True


def test_greedy_drops_a_refused_thinking_switch_as_chat_does() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if "chat_template_kwargs" in body:
            detail = [{"loc": ["body", "chat_template_kwargs"], "msg": "extra"}]
            return httpx.Response(422, json={"detail": detail})
        if body["stream"]:
            return httpx.Response(200, headers=SSE, content=sse_body(delta(content="a"), finish()))
        return httpx.Response(200, json=completion({"content": "a"}))

    async def go() -> tuple[GreedyAnswer, RequestResult, GreedyAnswer, ChatClient]:
        client = ChatClient(INFO, ScaledClock(1.0), transport=httpx.MockTransport(handler))
        first = await client.greedy("p", max_tokens=2, seed=1)
        chat = await client.chat("p", max_tokens=2, prompt_kind="narr")
        again = await client.greedy("p", max_tokens=2, seed=1)
        await client.aclose()
        return first, chat, again, client

    first, chat, again, client = asyncio.run(go())
    assert first.ok and chat.ok and again.ok
    assert ["chat_template_kwargs" in b for b in bodies] == [True, False, False, False]
    assert client.refused_keys == {"chat_template_kwargs"}
    assert client.accepts_thinking_switch is False
    assert all(b["temperature"] == 0 for b in (bodies[1], bodies[3]))


@pytest.mark.parametrize(
    ("status", "content", "expected"),
    [
        (500, b"<html><title>oops</title></html>", "HTTP 500: an HTML page (oops)"),
        (401, json.dumps({"error": f"bad key {KEY}"}), "HTTP 401: bad key ***"),
        (400, json.dumps({"error": {"message": "seed not supported"}}), "seed not supported"),
    ],
)
def test_greedy_http_errors_are_answers_with_an_error(
    status: int, content: bytes | str, expected: str
) -> None:
    answer, _, _ = run_greedy(lambda r: httpx.Response(status, content=content))
    assert not answer.ok and answer.text == ""
    assert answer.error.endswith(expected) and answer.error.startswith(f"HTTP {status}: ")
    assert KEY not in answer.error


def test_greedy_body_that_is_not_a_chat_completion_is_an_error() -> None:
    answer, _, _ = run_greedy(lambda r: httpx.Response(200, json={"data": [{"id": f"m {KEY}"}]}))
    assert not answer.ok
    assert answer.error == "server answered a chat completion without choices"
    answer, _, _ = run_greedy(lambda r: httpx.Response(200, json={"error": f"no {KEY}"}))
    assert answer.error == "no ***"


def test_greedy_retries_a_busy_server() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            return httpx.Response(503, headers={"retry-after": "0.01"}, json={"error": "loading"})
        return httpx.Response(200, json=completion({"content": "ok"}))

    answer, _, _ = run_greedy(handler)
    assert answer.ok and answer.text == "ok" and len(calls) == 2


def test_greedy_transport_errors_are_answers_with_an_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    def broken(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("boom")

    answer, _, _ = run_greedy(refuse)
    assert not answer.ok
    assert answer.error == "cannot connect to http://sim.test:8080: [Errno 111] Connection refused"
    answer, _, _ = run_greedy(broken)
    assert answer.error == "client error while reading the answer: RuntimeError: boom"


def test_greedy_real_connection_refused(dead_port: int) -> None:
    info = ServerInfo(f"http://127.0.0.1:{dead_port}", "m", "vllm", None, None, None)

    async def go() -> GreedyAnswer:
        async with ChatClient(info, ScaledClock(1.0), api_key=KEY) as client:
            return await client.greedy("p", max_tokens=2, seed=0)

    answer = asyncio.run(go())
    assert not answer.ok
    assert answer.error.startswith(f"cannot connect to http://127.0.0.1:{dead_port}")


async def _never(request: httpx.Request) -> httpx.Response:
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


def test_greedy_is_bounded_by_the_deadline() -> None:
    clock = ScaledClock(1.0)

    async def go() -> tuple[GreedyAnswer, GreedyAnswer, float]:
        client = ChatClient(INFO, clock, transport=httpx.MockTransport(_never))
        t0 = time.monotonic()
        cut = await client.greedy("p", max_tokens=2, seed=0, deadline_s=clock.now() + 0.1)
        took = time.monotonic() - t0
        late = await client.greedy("p", max_tokens=2, seed=0, deadline_s=clock.now() - 1.0)
        await client.aclose()
        return cut, late, took

    cut, late, took = asyncio.run(go())
    # the seconds left to the deadline when the request was sent: 0.1 less the moment between
    # the test's clock read and the client's (0.0998 on a loaded machine)
    said = re.fullmatch(r"no answer within ([0-9.]+) s \(the deadline\)", cut.error)
    assert not cut.ok and said is not None and 0.05 < float(said.group(1)) <= 0.1, cut.error
    assert took < 5
    assert late.error == "no answer: the deadline had passed before the request was sent"


def test_greedy_without_a_deadline_is_bounded_by_the_read_timeout() -> None:
    # A server that never answers, behind a transport that applies no read timeout of its own:
    # the client's read timeout still bounds the whole request.
    answer, _, took = run_greedy(_never, client_kw={"read_timeout_s": 0.2})
    assert answer.error == "no answer within 0.2 s (the client's read timeout)"
    assert took < 5
    answer, _, _ = run_greedy(_never, client_kw={"read_timeout_s": 60, "request_budget_s": 0.1})
    assert answer.error == "no answer within 0.1 s (the client's request budget)"


def test_greedy_real_read_timeout(silent_port: int) -> None:
    info = ServerInfo(f"http://127.0.0.1:{silent_port}", "m", "vllm", None, None, None)

    async def go() -> GreedyAnswer:
        async with ChatClient(info, ScaledClock(1.0), read_timeout_s=0.2) as client:
            return await client.greedy("p", max_tokens=2, seed=0)

    answer = asyncio.run(go())
    assert not answer.ok and "0.2 s" in answer.error


@pytest.mark.parametrize(
    ("flavour", "switch"),
    [("llamacpp", True), ("vllm", True), ("ollama", True), ("plain", False)],
)
def test_greedy_against_the_simulated_server(flavour: str, switch: bool) -> None:
    engine = ConstantEngine(ScaledClock(1000.0), decode_tps=100.0, prefill_tps=50_000.0)
    server = SimServer(engine, flavour=flavour, reasoning_tokens=3)
    transport = httpx.ASGITransport(app=server.app())
    answer, client, _ = run_greedy(transport, max_tokens=6, seed=5)
    assert answer.ok, answer.error
    assert answer.completion_tokens == 6 and answer.finish_reason == "length"
    assert answer.text.strip()
    assert server.requests_total == 1
    assert client.accepts_thinking_switch is switch


def test_greedy_asks_the_server_to_compute_the_prompt_and_for_logprobs() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        usage = {"prompt_tokens": 3, "completion_tokens": 1}
        usage["prompt_tokens_details"] = {"cached_tokens": 2}  # type: ignore[assignment]
        logprobs = {"content": [{"token": "a", "logprob": -0.25, "top_logprobs": []}]}
        body = completion({"content": "a"}, usage=usage)
        body["choices"][0]["logprobs"] = logprobs
        return httpx.Response(200, json=body)

    answer, _, _ = run_greedy(handler, cache_salt="s-1", logprobs=True)
    # the prompt is the caller's, unchanged: the cache is switched off beside it
    assert seen[0]["messages"] == [{"role": "user", "content": "hello"}]
    assert seen[0]["cache_prompt"] is False and seen[0]["cache_salt"] == "s-1"
    assert (seen[0]["logprobs"], seen[0]["top_logprobs"]) == (True, 1)
    assert answer.cached_tokens == 2 and answer.logprobs == (-0.25,)
    # without them asked for, neither a salt nor logprobs is sent; cache_prompt still is
    run_greedy(handler)
    assert "cache_salt" not in seen[1] and "logprobs" not in seen[1]
    assert seen[1]["cache_prompt"] is False


def test_greedy_drops_a_refused_cache_salt_and_logprobs_and_remembers() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if "cache_salt" in body or "logprobs" in body:
            # as vLLM's V0 engine refuses a salt; this server refuses logprobs as well
            text = "cache_salt is not supported with V0; logprobs are not supported"
            return httpx.Response(400, json={"error": {"message": text}})
        return httpx.Response(200, json=completion({"content": "a"}))

    async def go() -> tuple[GreedyAnswer, GreedyAnswer, ChatClient]:
        client = ChatClient(INFO, ScaledClock(1.0), transport=httpx.MockTransport(handler))
        first = await client.greedy("p", max_tokens=2, seed=1, cache_salt="x", logprobs=True)
        again = await client.greedy("p", max_tokens=2, seed=1, cache_salt="y", logprobs=True)
        await client.aclose()
        return first, again, client

    first, again, client = asyncio.run(go())
    assert first.ok and again.ok and len(bodies) == 3
    assert not {"cache_salt", "logprobs", "top_logprobs"} & (bodies[1].keys() | bodies[2].keys())
    assert bodies[2]["cache_prompt"] is False  # not named by the refusal: kept
    assert {"cache_salt", "logprobs"} <= client.refused_keys
