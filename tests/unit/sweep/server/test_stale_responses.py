"""Stale responses (issue 46): a server that writes a second, unrequested response on a kept
connection, at several delays after the first. No request may take it for its answer; the next
requests go on new connections, in bounded time. A well-behaved server keeps its connection."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from powersweep.clock import ScaledClock
from powersweep.sweep.server.client import ChatClient, RequestResult, ServerInfo
from powersweep.sweep.server.http11 import Http11Connection
from powersweep.sweep.server.transport import LeanTransport
from tests.unit.sweep.server.test_client import delta, finish, sse_body, usage

REAL_PROMPT = 7
STALE_PROMPT = 4242


def _answer(text: str, prompt_tokens: int, stream: bool) -> bytes:
    if stream:
        body = sse_body(delta(content=text), finish(), usage(prompt_tokens, 1))
        ctype = b"text/event-stream"
    else:
        message = {"message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        payload = {"choices": [message], "usage": usage(prompt_tokens, 1)["usage"]}
        body = json.dumps(payload).encode()
        ctype = b"application/json"
    head = b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
    return head % (ctype, len(body)) + body


class StaleServer:
    """Answers each request, then (from its ``stale_from``-th answer on) writes a complete
    "STALE" answer ``delay_s`` later on the same connection (0: in the same write)."""

    def __init__(self, delay_s: float | None, stream: bool, stale_from: int = 0) -> None:
        self.delay_s = delay_s
        self.stream = stream
        self.stale_from = stale_from
        self.accepts = 0
        self.answered = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepts += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                real = _answer("real", REAL_PROMPT, self.stream)
                stale = _answer("STALE", STALE_PROMPT, self.stream)
                self.answered += 1
                if self.delay_s is None or self.answered <= self.stale_from:
                    writer.write(real)
                elif self.delay_s == 0:
                    writer.write(real + stale)
                else:
                    writer.write(real)
                    await writer.drain()
                    await asyncio.sleep(self.delay_s)
                    writer.write(stale)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client left, or the loop ends (a cancelled handler would log a trace)
        finally:
            writer.close()


def _serve(server: StaleServer, go: Callable[[str], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = listening.sockets[0].getsockname()[1]
        try:
            return await go(f"http://127.0.0.1:{port}")
        finally:
            listening.close()

    return asyncio.run(main())


def _chats_apart(
    server: StaleServer, n: int, pause_s: float = 0.0, rest_s: float | None = None
) -> tuple[list[RequestResult], int, float]:
    """``n`` chats one after another, ``pause_s`` apart: their results, the transport's stale
    connections and the wall seconds they took (``rest_s``: both rests, None the defaults)."""

    async def go(url: str) -> tuple[list[RequestResult], int, float]:
        lean = LeanTransport(
            max_connections=4,
            connect_timeout_s=5.0,
            read_timeout_s=5.0,
            reuse_rest_s=rest_s,
            probation_s=rest_s,
        )
        client = ChatClient(
            ServerInfo(url, "m", "vllm", None, None, None), ScaledClock(1.0), transport=lean
        )
        start = time.monotonic()
        results = []
        try:
            for i in range(n):
                if i and pause_s:
                    await asyncio.sleep(pause_s)
                results.append(
                    await client.chat("hi", max_tokens=8, prompt_kind="narr", stream=server.stream)
                )
        finally:
            await client.aclose()
        return results, lean.stale_connections, time.monotonic() - start

    return _serve(server, go)


def _assert_all_real(results: list[RequestResult]) -> None:
    for r in results:
        assert r.ok, r.error
        assert r.prompt_tokens == REAL_PROMPT
        assert r.completion_tokens == 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    ("delay_s", "pause_s"),
    [(0.0, 0.0), (0.0003, 0.0), (0.05, 0.0), (0.2, 0.3)],
    ids=["same-write", "0.3ms", "50ms", "while-idle-200ms"],
)
def test_a_stale_response_never_answers_a_later_request(
    stream: bool, delay_s: float, pause_s: float
) -> None:
    server = StaleServer(delay_s, stream)
    results, stale, took_s = _chats_apart(server, 6, pause_s)
    _assert_all_real(results)
    assert stale >= 1
    # the host sent stale bytes: its connections are kept no more, each request a new one
    assert server.accepts == 6
    assert took_s < 6 * pause_s + 3.0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_stale_responses_after_the_host_proved_clean_are_still_caught(stream: bool) -> None:
    """The first answers come clean (the host passes its probation and its connection rests
    only briefly after that); from the third on a stale answer follows 0.3 ms later."""
    server = StaleServer(0.0003, stream, stale_from=2)
    results, stale, _ = _chats_apart(server, 6)
    _assert_all_real(results)
    assert stale >= 1 and server.accepts >= 2


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_well_behaved_server_keeps_one_connection(stream: bool) -> None:
    server = StaleServer(None, stream)
    results, stale, took_s = _chats_apart(server, 6)
    _assert_all_real(results)
    assert (server.accepts, stale) == (1, 0)
    assert took_s < 2.0  # one probation rest, then short ones


def test_without_rests_a_clean_server_still_keeps_its_connection() -> None:
    """The rests only add time: with them off (the in-memory network's setting) reuse is as
    before."""
    server = StaleServer(None, True)
    results, stale, took_s = _chats_apart(server, 4, rest_s=0.0)
    _assert_all_real(results)
    assert (server.accepts, stale) == (1, 0)
    assert took_s < 1.0


# -- the peek at reuse -----------------------------------------------------------------------


async def _connected(
    send: bytes | None, *, close: bool = False
) -> tuple[Http11Connection, list[Http11Connection]]:
    """A client connection whose socket holds ``send`` unread (its reading paused, so the loop
    never hands the bytes to the protocol), or whose peer closed it."""
    ready = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # the loop ends while it waits
            await ready.wait()
            if send:
                writer.write(send)
                await writer.drain()
            if close:
                writer.close()
            await asyncio.sleep(0.2)

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    conn = Http11Connection(loop)
    stale: list[Http11Connection] = []
    conn.on_stale = stale.append
    await loop.create_connection(lambda: conn, "127.0.0.1", port)
    assert conn.transport is not None
    conn.transport.pause_reading()
    ready.set()
    await asyncio.sleep(0.05)  # the bytes (or the close) reach the kernel, not the protocol
    listening.close()
    return conn, stale


@pytest.mark.parametrize(
    ("send", "close", "clean", "counted"),
    [
        (None, False, True, False),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nSTALE", False, False, True),
        (b"X", False, False, True),
        (None, True, False, False),
    ],
    ids=["nothing", "response", "byte", "peer-closed"],
)
def test_the_peek_at_reuse_sees_bytes_the_loop_has_not_delivered(
    send: bytes | None, close: bool, clean: bool, counted: bool
) -> None:
    async def go() -> None:
        conn, stale = await _connected(send, close=close)
        try:
            assert conn.check_unread() is clean
            assert conn.closed is not clean
            assert bool(stale) is counted
        finally:
            conn.close()

    asyncio.run(go())
