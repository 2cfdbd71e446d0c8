"""The client under faults: held sockets, endless lines, busy servers, unreadable streams,
implausible usage. Every request ends by its deadline and says what happened."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from powersweep.clock import ScaledClock
from powersweep.runformat import CUT_BY_RESET, WARN_CUT_BY_RESET, WARN_NO_USAGE
from powersweep.sweep.server.client import (
    ERR_NO_COUNTABLE_TOKENS,
    WARN_BUSY_RETRIED,
    WARN_USAGE_UNTRUSTED,
    ChatClient,
    RequestResult,
)
from tests.unit.sweep.server.test_client import INFO, SSE, delta, finish, run_chat, sse_body, usage


class _Stream(httpx.AsyncByteStream):
    """A body that sends its parts, then (optionally) holds the socket open forever."""

    def __init__(self, parts: list[bytes], hold: bool) -> None:
        self.parts = parts
        self.hold = hold

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for p in self.parts:
            yield p
        while self.hold:
            await asyncio.sleep(0.05)
            yield b""


def _held(parts: list[bytes], hold: bool = True) -> httpx.Response:
    return httpx.Response(200, headers=SSE, stream=_Stream(parts, hold))


def _chat_through(handler: Any, deadline_in_s: float | None = None, **kw: Any) -> RequestResult:
    async def go() -> RequestResult:
        clock = ScaledClock(1.0)
        client = ChatClient(INFO, clock, transport=httpx.MockTransport(handler))
        try:
            deadline = None if deadline_in_s is None else clock.now() + deadline_in_s
            return await client.chat(
                "hello", max_tokens=8, prompt_kind="narr", deadline_s=deadline, **kw
            )
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_stream_is_done_once_finish_and_usage_arrived_without_done() -> None:
    body = sse_body(delta(content="a"), delta(content=" b"), finish(), usage(3, 2), done=False)
    t0 = time.monotonic()
    result = _chat_through(lambda r: _held([body]), deadline_in_s=30)
    assert time.monotonic() - t0 < 5
    assert result.ok and result.completion_tokens == 2 and result.finish_reason == "length"


def test_a_held_stream_without_usage_ends_at_the_deadline() -> None:
    body = sse_body(delta(content="a"), delta(content=" b"), done=False)
    t0 = time.monotonic()
    result = _chat_through(lambda r: _held([body]), deadline_in_s=0.5)
    assert time.monotonic() - t0 < 3
    assert result.ok and result.finish_reason == "deadline" and result.chunk_tokens == 2


def test_an_endless_line_fails_with_a_clear_reason() -> None:
    parts = [b"data: " + b"x" * 65536 for _ in range(40)]
    result = _chat_through(lambda r: _held(parts, hold=False), deadline_in_s=30)
    assert not result.ok
    assert "line of more than" in result.error and "without ending it" in result.error


def test_busy_503_is_retried_honouring_retry_after() -> None:
    calls: list[float] = []
    body = sse_body(delta(content="a"), delta(content=" b"), finish(), usage(3, 2))

    def handler(r: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        if len(calls) < 3:
            return httpx.Response(503, headers={"Retry-After": "0.2"}, json={"error": "loading"})
        return httpx.Response(200, headers=SSE, content=body)

    result = _chat_through(handler, deadline_in_s=30)
    assert result.ok and len(calls) == 3
    assert calls[1] - calls[0] >= 0.19
    assert any(WARN_BUSY_RETRIED in w for w in result.warnings)


def test_busy_429_gives_up_when_the_wait_passes_the_deadline() -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": "30"}, json={"error": "slow down"})

    t0 = time.monotonic()
    result = _chat_through(handler, deadline_in_s=2)
    assert time.monotonic() - t0 < 2
    assert not result.ok and result.error.startswith("HTTP 429: slow down")


def test_a_stream_without_countable_tokens_is_not_ok() -> None:
    unknown = {"choices": [{"index": 0, "delta": {"text": "hi"}, "finish_reason": None}]}
    body = sse_body(unknown, unknown, finish(), usage(3, 2))
    result, _ = run_chat(lambda r: httpx.Response(200, headers=SSE, content=body))
    assert not result.ok
    assert result.error.startswith(ERR_NO_COUNTABLE_TOKENS)


def test_usage_far_beyond_the_streamed_text_is_not_trusted() -> None:
    body = sse_body(*(delta(content=" word") for _ in range(10)), finish(), usage(3, 500))
    result, _ = run_chat(lambda r: httpx.Response(200, headers=SSE, content=body), max_tokens=1000)
    assert result.ok
    assert result.completion_tokens == 10 and result.token_source == "chunks"
    assert any(WARN_USAGE_UNTRUSTED in w for w in result.warnings)


def test_plausible_usage_with_packed_chunks_is_trusted() -> None:
    # a server that packs 4 tokens per chunk: 40 tokens, 10 chunks of 4 words
    body = sse_body(*(delta(content=" ab cd ef gh") for _ in range(10)), finish(), usage(3, 40))
    result, _ = run_chat(lambda r: httpx.Response(200, headers=SSE, content=body), max_tokens=64)
    assert result.ok and result.completion_tokens == 40 and result.token_source == "usage"
    assert not any(WARN_USAGE_UNTRUSTED in w for w in result.warnings)


def test_a_server_busy_through_all_retries_is_not_retried_again_until_it_answers() -> None:
    calls: list[int] = []
    body = sse_body(delta(content="a"), delta(content=" b"), finish(), usage(3, 2))

    def handler(r: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) <= 7:
            return httpx.Response(503, headers={"Retry-After": "0"}, json={"error": "loading"})
        return httpx.Response(200, headers=SSE, content=body)

    async def go() -> list[RequestResult]:
        client = ChatClient(INFO, ScaledClock(1.0), transport=httpx.MockTransport(handler))
        try:
            return [
                await client.chat("hi", max_tokens=8, prompt_kind="narr", deadline_s=None)
                for _ in range(3)
            ]
        finally:
            await client.aclose()

    first, second, third = asyncio.run(go())
    assert not first.ok and "still busy after 6 retries" in first.error
    # 7 calls for the first (6 retries); the second was sent once and answered; the third too
    assert second.ok and third.ok and len(calls) == 9


def test_usage_far_below_the_streamed_chunks_is_not_trusted() -> None:
    body = sse_body(*(delta(content=" word") for _ in range(40)), finish(), usage(3, 0))
    result, _ = run_chat(lambda r: httpx.Response(200, headers=SSE, content=body), max_tokens=64)
    assert result.ok and result.completion_tokens == 40 and result.token_source == "chunks"
    assert WARN_USAGE_UNTRUSTED in result.warnings


class _Reset(httpx.AsyncByteStream):
    """A body cut by a connection reset: a few events, then the read fails with no detail."""

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for p in self.parts:
            yield p
        raise httpx.ReadError("")


def test_a_connection_reset_mid_stream_is_said_in_words() -> None:
    from powersweep.analysis.failures import failure_cause

    # one token measures no rate: the request failed
    body = sse_body(delta(content="a"), done=False)
    result = _chat_through(lambda r: httpx.Response(200, headers=SSE, stream=_Reset([body])), 30)
    assert not result.ok
    # httpx says only "ReadError:"; the error says what happened and how far it got
    assert result.error.startswith("connection reset by the server while reading the answer")
    assert "after 1 tokens" in result.error and "(ReadError)" in result.error
    assert failure_cause(result.error) == "connection reset by the server"


@pytest.mark.parametrize(
    "error", [httpx.ReadError(""), httpx.RemoteProtocolError("incomplete chunked read")]
)
def test_a_stream_reset_after_tokens_keeps_them_as_a_measurement_of_the_rate(
    error: httpx.HTTPError,
) -> None:
    class _Cut(_Reset):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for p in self.parts:
                yield p
            raise error

    body = sse_body(*(delta(content=" w") for _ in range(5)), done=False)
    result = _chat_through(lambda r: httpx.Response(200, headers=SSE, stream=_Cut([body])), 30)
    assert result.ok and result.error == ""
    assert result.finish_reason == CUT_BY_RESET and WARN_CUT_BY_RESET in result.warnings
    assert result.completion_tokens == 5 and result.token_source == "chunks"
    assert WARN_NO_USAGE not in result.warnings  # the window's load converts the chunks
