"""LeanTransport against a scripted socket server: framing split at every byte, keep-alive,
informational answers, broken framing, closed connections, the pool limit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from powersweep.clock import ScaledClock
from powersweep.sweep.server import http11, transport
from powersweep.sweep.server.client import ChatClient, RequestResult, ServerInfo
from powersweep.sweep.server.transport import LeanTransport, lean_transport_applies
from tests.unit.sweep.server.test_client import SSE, delta, finish, sse_body, usage

CLOSE = b"<close>"
HOLD = b"<hold>"
# A piece of a script: bytes to write, CLOSE, HOLD, or seconds to wait before the next piece.
Piece = bytes | float
Script = list[list[Piece]]


class Scripted:
    """A server that answers the n-th request on any connection with ``script[n]``, written
    piece by piece (each piece its own read); ``CLOSE`` closes the connection there, ``HOLD``
    keeps it silent, a number of seconds waits before the next piece."""

    def __init__(self, script: Script) -> None:
        self.script = list(script)
        self.requests: list[bytes] = []
        self.peers: list[int] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.open_now = 0
        self.open_peak = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        self.open_now += 1
        self.open_peak = max(self.open_peak, self.open_now)
        try:
            while self.script:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                self.requests.append(head + await reader.readexactly(length))
                self.peers.append(writer.get_extra_info("peername")[1])
                for piece in self.script.pop(0):
                    if isinstance(piece, float):
                        await asyncio.sleep(piece)
                        continue
                    if piece == CLOSE:
                        return
                    if piece == HOLD:
                        await asyncio.sleep(3600)
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.001)
        finally:
            self.open_now -= 1
            writer.close()


def run(script: Script, go: Callable[[str, Scripted], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        scripted = Scripted(script)
        server = await asyncio.start_server(scripted.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await go(f"http://127.0.0.1:{port}", scripted)
        finally:
            server.close()

    return asyncio.run(main())


def chunked(body: bytes, size: int = 7) -> bytes:
    out = b""
    for i in range(0, len(body), size):
        part = body[i : i + size]
        out += f"{len(part):x};ext=1\r\n".encode() + part + b"\r\n"
    return out + b"0\r\nx-trailer: 1\r\n\r\n"


def head(status: str = "200 OK", *headers: str) -> bytes:
    return (f"HTTP/1.1 {status}\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode()


CHUNKED_HEAD = head("200 OK", "content-type: text/event-stream", "transfer-encoding: chunked")
BODY = sse_body(delta(content="a"), delta(content=" b"), finish(), usage(3, 2))


async def fetch(client: httpx.AsyncClient, url: str) -> tuple[int, bytes]:
    async with client.stream("POST", url + "/v1/chat/completions", content=b"{}") as r:
        return r.status_code, b"".join([d async for d in r.aiter_raw()])


def lean_client(max_connections: int = 4, read_timeout_s: float = 5.0) -> httpx.AsyncClient:
    transport = LeanTransport(
        max_connections=max_connections, connect_timeout_s=5.0, read_timeout_s=read_timeout_s
    )
    # httpx hands every request its client's timeouts: the transport's own are the fallback
    return httpx.AsyncClient(transport=transport, timeout=read_timeout_s)


def test_chunked_body_split_at_every_byte_and_the_connection_is_kept() -> None:
    wire = CHUNKED_HEAD + chunked(BODY)
    # the whole answer, then one split at a time through the head, the sizes and the trailers
    script = [[wire], *([wire[:i], wire[i:]] for i in range(1, len(wire), 3))]

    async def go(url: str, scripted: Scripted) -> None:
        async with lean_client() as client:
            for _ in script:
                assert await fetch(client, url) == (200, BODY)
        assert len(set(scripted.peers)) == 1  # one connection served them all

    run(script, go)


def test_byte_by_byte_content_length_and_close_delimited_bodies() -> None:
    wire = CHUNKED_HEAD + chunked(BODY, size=3)
    script = [
        [wire[i : i + 1] for i in range(len(wire))],
        [head("200 OK", f"content-length: {len(BODY)}") + BODY],
        [head("100 Continue"), head("200 OK", "content-length: 2") + b"ok"],
        [head("200 OK") + BODY[:10], BODY[10:], CLOSE],
        [head("204 No Content")],
    ]

    async def go(url: str, scripted: Scripted) -> None:
        async with lean_client() as client:
            assert await fetch(client, url) == (200, BODY)
            assert await fetch(client, url) == (200, BODY)
            assert await fetch(client, url) == (200, b"ok")
            assert await fetch(client, url) == (200, BODY)
            assert await fetch(client, url) == (204, b"")
        # a body that ends with the connection is not reused
        assert scripted.peers[3] != scripted.peers[4]

    run(script, go)


@pytest.mark.parametrize(
    ("pieces", "fragment"),
    [
        ([CHUNKED_HEAD + b"zz\r\nhello\r\n"], "malformed chunk size"),
        ([CHUNKED_HEAD + b"5\r\nhelloXX"], "no CRLF after its data"),
        ([CHUNKED_HEAD + b"5\r\nhel", CLOSE], "peer closed connection"),
        ([b"SSH-2.0-OpenSSH\r\n\r\n"], "did not answer HTTP/1.x"),
        ([head("200 OK", "content-length: x")], "invalid Content-Length"),
        ([CLOSE], "without sending a response"),
    ],
)
def test_broken_answers_are_protocol_errors(pieces: list[bytes], fragment: str) -> None:
    async def go(url: str, scripted: Scripted) -> None:
        async with lean_client() as client:
            with pytest.raises(httpx.RemoteProtocolError, match=fragment):
                await fetch(client, url)

    run([pieces], go)


def test_read_timeout_mid_body() -> None:
    async def go(url: str, scripted: Scripted) -> None:
        async with lean_client(read_timeout_s=0.2) as client:
            with pytest.raises(httpx.ReadTimeout):
                await fetch(client, url)

    run([[CHUNKED_HEAD + b"5\r\nhel", b"lo\r\n", HOLD]], go)


def test_the_pool_limit_holds_connections_open_at_once() -> None:
    body = chunked(BODY)
    wire = [CHUNKED_HEAD, *(body[i : i + 20] for i in range(0, len(body), 20))]
    script = [wire for _ in range(6)]

    async def go(url: str, scripted: Scripted) -> None:
        async with lean_client(max_connections=2) as client:
            got = await asyncio.gather(*(fetch(client, url) for _ in script))
        assert all(g == (200, BODY) for g in got)
        assert scripted.open_peak == 2

    run(script, go)


def test_chat_over_the_lean_transport_matches_a_scripted_transport() -> None:
    """The same stream, split at every byte on a socket or handed over whole, is one result."""
    wire = CHUNKED_HEAD + chunked(BODY, size=5)

    async def go(url: str, scripted: Scripted) -> tuple[RequestResult, RequestResult]:
        info = ServerInfo(url, "m", "vllm", None, None, None)
        lean = ChatClient(info, ScaledClock(1.0))
        mock = ChatClient(
            info,
            ScaledClock(1.0),
            transport=httpx.MockTransport(lambda r: httpx.Response(200, headers=SSE, content=BODY)),
        )
        try:
            a = await lean.chat("hi", max_tokens=8, prompt_kind="narr", record_token_times=True)
            b = await mock.chat("hi", max_tokens=8, prompt_kind="narr")
        finally:
            await lean.aclose()
            await mock.aclose()
        assert json.loads(scripted.requests[0].split(b"\r\n\r\n", 1)[1])["max_tokens"] == 8
        return a, b

    a, b = run([[wire[i : i + 1] for i in range(len(wire))]], go)
    times = ("t_start_s", "t_first_token_s", "t_last_token_s", "t_end_s", "token_times_s")
    assert a.ok and a.completion_tokens == 2 and a.finish_reason == "length"
    assert {k: v for k, v in vars(a).items() if k not in times} == {
        k: v for k, v in vars(b).items() if k not in times
    }
    assert a.token_times_s is not None and len(a.token_times_s) == 2
    assert a.t_start_s <= a.token_times_s[0] <= a.token_times_s[-1] <= a.t_end_s


@pytest.mark.parametrize("tokens", [1, 2])
def test_a_connection_cut_mid_stream_is_reported_with_the_tokens_so_far(tokens: int) -> None:
    body = sse_body(*(delta(content=c) for c in "ab"[:tokens]), done=False)
    wire = CHUNKED_HEAD + chunked(body).removesuffix(b"0\r\nx-trailer: 1\r\n\r\n")

    async def go(url: str, scripted: Scripted) -> RequestResult:
        info = ServerInfo(url, "m", "vllm", None, None, None)
        client = ChatClient(info, ScaledClock(1.0))
        try:
            return await client.chat("hi", max_tokens=8, prompt_kind="narr")
        finally:
            await client.aclose()

    result = run([[wire, CLOSE]], go)
    if tokens == 2:  # two tokens measured the rate up to the cut: kept, and said
        assert result.ok and result.finish_reason == "reset"
        assert "cut_by_reset" in result.warnings and result.completion_tokens == 2
        return
    assert not result.ok
    assert result.error.startswith("server closed the connection mid-response after 1 tokens")


def test_a_kept_alive_connection_dropped_as_the_request_goes_out_is_sent_again() -> None:
    answer = [CHUNKED_HEAD + chunked(BODY)]

    async def go(url: str, scripted: Scripted) -> list[RequestResult]:
        info = ServerInfo(url, "m", "vllm", None, None, None)
        client = ChatClient(info, ScaledClock(1.0))
        try:
            first = await client.chat("hi", max_tokens=8, prompt_kind="narr")
            scripted.script.insert(0, [CLOSE])  # the server drops the idle connection
            second = await client.chat("hi", max_tokens=8, prompt_kind="narr")
            return [first, second]
        finally:
            await client.aclose()

    results = run([answer, answer], go)
    assert all(r.ok and r.completion_tokens == 2 for r in results)


def test_idle_connections_the_server_dropped_together_are_not_tried_one_by_one() -> None:
    """llama-server drops idle kept-alive connections, all at once: the request that met a
    dead one goes once more on a new connection, not on the next idle one, as dead."""
    answer = [CHUNKED_HEAD + chunked(BODY)]

    async def go(url: str, scripted: Scripted) -> list[RequestResult]:
        info = ServerInfo(url, "m", "vllm", None, None, None)
        client = ChatClient(info, ScaledClock(1.0))
        try:
            both = await asyncio.gather(
                *(client.chat("hi", max_tokens=8, prompt_kind="narr") for _ in range(2))
            )
            await asyncio.sleep(0.05)
            for writer in scripted.writers:  # gone before the client hears of it
                writer.transport.abort()
            return [*both, await client.chat("hi", max_tokens=8, prompt_kind="narr")]
        finally:
            await client.aclose()

    results = run([answer, answer, answer], go)
    assert [r.ok for r in results] == [True, True, True], results[-1].error


def test_lean_transport_applies_to_plain_http_without_a_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert lean_transport_applies("http://127.0.0.1:8000")
    assert not lean_transport_applies("https://api.example.com")
    monkeypatch.setenv("http_proxy", "http://proxy:3128")
    assert not lean_transport_applies("http://10.0.0.5:8000")
    monkeypatch.setenv("no_proxy", "10.0.0.5")
    assert lean_transport_applies("http://10.0.0.5:8000")


def _chat_once(url: str, **kwargs: Any) -> RequestResult:
    async def go() -> RequestResult:
        client = ChatClient(
            ServerInfo(url, "m", "vllm", None, None, None), ScaledClock(1.0), **kwargs
        )
        try:
            return await client.chat("hi", max_tokens=8, prompt_kind="narr")
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_a_pushed_body_times_out_when_the_server_falls_silent() -> None:
    first = sse_body(delta(content="a"), done=False)
    script = [[CHUNKED_HEAD + chunked(first).removesuffix(b"0\r\nx-trailer: 1\r\n\r\n"), HOLD]]

    async def go(url: str, scripted: Scripted) -> RequestResult:
        return await asyncio.to_thread(_chat_once, url, read_timeout_s=0.3)

    result = run(script, go)
    assert not result.ok and result.chunk_tokens == 1
    assert result.error == "read timeout: server sent nothing for 0.3 s"


def test_an_endless_line_pushed_through_the_socket_fails_at_the_limit() -> None:
    line = CHUNKED_HEAD + b"10000\r\n" + b"data: " + b"x" * (0x10000 - 6) + b"\r\n"
    more = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"

    async def go(url: str, scripted: Scripted) -> RequestResult:
        return await asyncio.to_thread(_chat_once, url)

    result = run([[line, *([more] * 20), HOLD]], go)
    assert not result.ok
    assert "line of more than 1048576 bytes" in result.error


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


# A stream that reaches its finish reason and usage (the reader stops there), and its rest.
_TOKENS = CHUNKED_HEAD + _chunk(
    sse_body(delta(content="a"), delta(content=" b"), finish(), usage(3, 2), done=False)
)
_REST = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def _two_chats(script: Script, pause_s: float) -> tuple[list[RequestResult], Scripted]:
    """Two chats, ``pause_s`` apart, each answered by a piece of ``script``."""

    async def go(url: str, scripted: Scripted) -> tuple[list[RequestResult], Scripted]:
        client = ChatClient(ServerInfo(url, "m", "vllm", None, None, None), ScaledClock(1.0))
        try:
            first = await client.chat("hi", max_tokens=8, prompt_kind="narr")
            await asyncio.sleep(pause_s)
            second = await client.chat("hi", max_tokens=8, prompt_kind="narr")
            return [first, second], scripted
        finally:
            await client.aclose()

    return run(script, go)


def test_a_stream_stopped_at_its_finish_is_read_to_its_end_and_its_connection_kept() -> None:
    """The reader stops at finish reason and usage; "[DONE]" and the last chunk come later: the
    connection drains them and serves the next request (one connection opened, not two)."""
    results, scripted = _two_chats([[_TOKENS, 0.1, _REST], [CHUNKED_HEAD + chunked(BODY)]], 0.4)
    assert all(r.ok and r.completion_tokens == 2 for r in results)
    assert results[0].t_end_s - results[0].t_start_s < 0.1  # it did not wait for the rest
    assert len(scripted.peers) == 2 and len(set(scripted.peers)) == 1


@pytest.mark.parametrize(
    ("rest", "why"),
    [
        ([0.3, _REST], "the rest came after the drain's bound"),
        ([_REST + b"HTTP/1.1 200 OK\r\n\r\n"], "stale bytes after the end"),
        ([_chunk(b": " + b"x" * 400 + b"\n") * 3, _REST], "more body than the drain's bound"),
        ([CLOSE], "the server closed it"),
    ],
)
def test_a_drained_connection_is_closed_when_its_rest_is_late_large_or_stale(
    monkeypatch: pytest.MonkeyPatch, rest: list[Piece], why: str
) -> None:
    monkeypatch.setattr(http11, "DRAIN_S", 0.15)
    monkeypatch.setattr(http11, "DRAIN_MAX_BYTES", 1000)
    results, scripted = _two_chats([[_TOKENS, *rest], [CHUNKED_HEAD + chunked(BODY)]], 0.5)
    assert all(r.ok and r.completion_tokens == 2 for r in results), why
    assert len(scripted.peers) == 2 and len(set(scripted.peers)) == 2, why


def test_closing_the_pool_closes_connections_still_draining(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    released: list[http11.Http11Connection] = []
    release = transport._Pool.release
    monkeypatch.setattr(
        transport._Pool, "release", lambda pool, conn: (released.append(conn), release(pool, conn))
    )

    async def go(url: str, scripted: Scripted) -> None:
        client = ChatClient(ServerInfo(url, "m", "vllm", None, None, None), ScaledClock(1.0))
        result = await client.chat("hi", max_tokens=8, prompt_kind="narr")
        assert result.ok
        (conn,) = released
        assert conn.drained is not None and not conn.closed  # draining
        await client.aclose()
        assert conn.closed and conn.transport is not None and conn.transport.is_closing()

    run([[_TOKENS, HOLD]], go)


@pytest.mark.parametrize("api_key", [None, "sk-test"])
def test_a_chat_request_for_the_lean_transport_is_the_one_build_request_gives(
    api_key: str | None,
) -> None:
    """Built once and filled per request (headers, timeouts, compact JSON), not merged anew."""
    info = ServerInfo("http://127.0.0.1:9", "m", "vllm", None, None, None)
    client = ChatClient(info, ScaledClock(1.0), api_key=api_key, read_timeout_s=7.0)
    body = client._body('hi ünïcode \u2028 "q"', 8, True, {"top_p": 0.5, "n": [1, None]})
    run = type("Run", (), {"trace": None})()
    ours = client._chat_request(body, run)  # type: ignore[arg-type]
    theirs = client._http.build_request(
        "POST", client._chat_url, json=body, extensions={"trace": None}
    )
    assert sorted((k.lower(), v) for k, v in ours.headers.raw) == sorted(
        (k.lower(), v) for k, v in theirs.headers.raw
    )
    assert ours.read() == theirs.read()
    assert (ours.method, ours.url, ours.extensions) == (
        theirs.method,
        theirs.url,
        theirs.extensions,
    )
    assert ours.extensions["timeout"]["read"] == 7.0
    asyncio.run(client.aclose())
