"""Framing the lean transport refuses (llhttp in strict mode plus its own checks), against a
raw-socket server sending exact bytes: every malformed answer fails its request with a clear
reason, returns no body and counts no token; the same bytes through httpx's own transport (h11,
what ``https://`` servers get) refuse or read as each case documents. Stale bytes never answer
the next request; request headers that would inject others are refused before sending; interim
heads and trailers cannot hold a request past its read timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

import httpx
import pytest

from powersweep.clock import ScaledClock
from powersweep.sweep.server.client import ChatClient, RequestResult, ServerInfo
from powersweep.sweep.server.http11 import (
    MAX_FRAMING_BYTES,
    MAX_HEAD_BYTES,
    MAX_INTERIM_HEADS,
    MAX_TRAILERS,
    MalformedResponse,
)
from powersweep.sweep.server.transport import LeanTransport
from tests.unit.sweep.server.test_client import delta, finish, sse_body, usage
from tests.unit.sweep.server.test_transport import CLOSE, HOLD, Piece, Scripted
from tests.unit.sweep.server.test_transport import run as serve

BODY = sse_body(delta(content="a"), delta(content=" b"), finish(), usage(3, 2))
STALE = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale"


def head(status: str, *headers: str, version: str = "HTTP/1.1") -> bytes:
    return (f"{version} {status}\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode()


def chunks(body: bytes, size: int = 16) -> bytes:
    out = b"".join(
        f"{len(body[i : i + size]):x}\r\n".encode() + body[i : i + size] + b"\r\n"
        for i in range(0, len(body), size)
    )
    return out + b"0\r\n\r\n"


SSE = "content-type: text/event-stream"
CHUNKED = head("200 OK", SSE, "transfer-encoding: chunked")
RIGHT = head("200 OK", "content-length: 5") + b"right"


def client(transport: str, read_timeout_s: float = 2.0) -> httpx.AsyncClient:
    if transport == "lean":
        lean = LeanTransport(
            max_connections=4, connect_timeout_s=2.0, read_timeout_s=read_timeout_s
        )
        return httpx.AsyncClient(transport=lean, timeout=read_timeout_s)
    return httpx.AsyncClient(timeout=read_timeout_s)  # httpx's own: httpcore and h11


async def fetch(http: httpx.AsyncClient, url: str, **kwargs: Any) -> tuple[int, bytes]:
    async with http.stream("POST", url + "/v1/chat/completions", content=b"{}", **kwargs) as r:
        return r.status_code, b"".join([d async for d in r.aiter_raw()])


# Each malformed answer (carrying a real token stream, so that a wrong framing would count its
# tokens), the lean transport's reason, and what httpx's own transport does with the same bytes:
# an exception's words, or the body it returns (where h11 reads the bytes another way).
CASES: list[tuple[str, bytes | list[Piece], str, str | bytes]] = [
    (
        "duplicate Content-Length",
        head("200 OK", SSE, f"content-length: {len(BODY)}", f"content-length: {len(BODY)}") + BODY,
        "invalid Content-Length (llhttp: Duplicate Content-Length)",
        BODY,  # h11 takes equal duplicates as one
    ),
    (
        "conflicting Content-Length",
        head("200 OK", SSE, "content-length: 5", f"content-length: {len(BODY)}") + BODY,
        "invalid Content-Length (llhttp: Duplicate Content-Length)",
        "conflicting Content-Length headers",
    ),
    (
        "obs-folded Transfer-Encoding",
        head("200 OK", SSE, "x-a: 1", " transfer-encoding: chunked") + chunks(BODY),
        "folded or malformed header line",
        chunks(BODY),  # h11 unfolds it into x-a's value: no framing, read until the close
    ),
    (
        "space before the colon",
        head("200 OK", SSE, "transfer-encoding : chunked") + chunks(BODY),
        "malformed header line (llhttp: Invalid header field char)",
        "illegal header line",
    ),
    (
        "chunked, gzip",
        head("200 OK", SSE, "transfer-encoding: chunked, gzip") + chunks(BODY),
        "Transfer-Encoding b'chunked, gzip': this client asked for no coding",
        "Only Transfer-Encoding: chunked is supported",
    ),
    (
        "two Transfer-Encoding lines",
        head("200 OK", SSE, "transfer-encoding: chunked", "transfer-encoding: chunked")
        + chunks(BODY),
        "Transfer-Encoding b'chunked, chunked'",
        "multiple Transfer-Encoding headers",
    ),
    (
        "chunk size 0x3",
        CHUNKED + b"0x10\r\n" + BODY[:16] + b"\r\n" + chunks(BODY[16:]),
        "malformed chunk size",
        "illegal chunk header",
    ),
    (
        "chunk size +3",
        CHUNKED + b"+10\r\n" + BODY[:16] + b"\r\n" + chunks(BODY[16:]),
        "malformed chunk size",
        "illegal chunk header",
    ),
    (
        "chunk size 1_0",
        CHUNKED + b"1_0\r\n" + BODY[:16] + b"\r\n" + chunks(BODY[16:]),
        "malformed chunk size",
        "illegal chunk header",
    ),
    (
        "chunk size -0",
        CHUNKED + b"-0\r\n\r\n" + chunks(BODY),
        "malformed chunk size",
        "illegal chunk header",
    ),
    (
        "chunk size of 33 digits",
        CHUNKED + b"1" + b"0" * 32 + b"\r\n" + BODY + b"\r\n0\r\n\r\n",
        "malformed chunk size (llhttp: Chunk size overflow)",
        "illegal chunk header",
    ),
    (
        "an endless run of zeros in a chunk size",
        [CHUNKED, 0.05, b"0" * (2 * MAX_FRAMING_BYTES)],
        f"more than {MAX_FRAMING_BYTES} bytes of chunk framing without a body byte",
        "Receive buffer too long",  # h11's bound on an unfinished line (100 KiB in httpcore)
    ),
    (
        "too many interim heads",
        head("100 Continue") * (MAX_INTERIM_HEADS + 1) + CHUNKED + chunks(BODY),
        f"more than {MAX_INTERIM_HEADS} interim (1xx) heads",
        BODY,  # h11 reads any number of them
    ),
    (
        "interim heads past the head bound",
        head("103 Early Hints", "link: " + "x" * (MAX_HEAD_BYTES + 100)) + CHUNKED + chunks(BODY),
        f"response heads of more than {MAX_HEAD_BYTES} bytes",
        BODY,  # httpcore lets h11 read events of up to 100 KiB
    ),
    (
        "too many trailer lines",
        CHUNKED + chunks(BODY).removesuffix(b"\r\n") + b"x-t: 1\r\n" * (MAX_TRAILERS + 1) + b"\r\n",
        f"more than {MAX_TRAILERS} trailer lines",
        BODY,  # h11 reads any number of trailers
    ),
    (
        "101 without an upgrade asked",
        head("101 Switching Protocols", "upgrade: x", "connection: upgrade") + BODY,
        "switched protocols (101)",
        "without a pending proposal",
    ),
    (
        "HTTP/2.0 status line",
        head("200 OK", SSE, f"content-length: {len(BODY)}", version="HTTP/2.0") + BODY,
        "did not answer HTTP/1.x",
        BODY,  # h11 accepts any HTTP/x.y version
    ),
    (
        "RTSP status line",
        head("200 OK", SSE, f"content-length: {len(BODY)}", version="RTSP/1.0") + BODY,
        "did not answer HTTP/1.x",
        "illegal status line",
    ),
]
IDS = [c[0] for c in CASES]
# Cases whose malformed part follows a whole event stream: a chat has its answer (finish reason,
# usage, [DONE]) and stops reading before it.
AFTER_THE_STREAM = {"too many trailer lines"}


def _pieces(wire: bytes | list[Piece]) -> list[Piece]:
    return [wire] if isinstance(wire, bytes) else wire


@pytest.mark.parametrize(("name", "wire", "reason", "_httpx"), CASES, ids=IDS)
def test_the_lean_transport_refuses_each_malformed_answer(
    name: str, wire: bytes | list[Piece], reason: str, _httpx: str | bytes
) -> None:
    async def go(url: str, server: Scripted) -> None:
        async with client("lean") as http:
            with pytest.raises(MalformedResponse) as refused:
                await fetch(http, url)
            assert str(refused.value).startswith("the server ")
            assert reason in str(refused.value)
            # the connection is gone: the next request gets its own answer on a new one
            assert await fetch(http, url) == (200, b"right")
        assert server.peers[0] != server.peers[1]

    serve([[*_pieces(wire), CLOSE], [RIGHT]], go)


@pytest.mark.parametrize(("name", "wire", "_reason", "httpx_does"), CASES, ids=IDS)
def test_httpx_own_transport_on_the_same_bytes(
    name: str, wire: bytes | list[Piece], _reason: str, httpx_does: str | bytes
) -> None:
    async def go(url: str, server: Scripted) -> None:
        async with client("httpx") as http:
            if isinstance(httpx_does, bytes):
                assert await fetch(http, url) == (200, httpx_does)
            else:
                with pytest.raises(httpx.RemoteProtocolError, match=httpx_does):
                    await fetch(http, url)

    serve([[*_pieces(wire), CLOSE]], go)


def _chat_at(url: str, **kwargs: Any) -> RequestResult:
    async def go() -> RequestResult:
        chat = ChatClient(
            ServerInfo(url, "m", "vllm", None, None, None), ScaledClock(1.0), **kwargs
        )
        try:
            return await chat.chat("hi", max_tokens=8, prompt_kind="narr")
        finally:
            await chat.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize(("name", "wire", "reason", "_httpx"), CASES, ids=IDS)
def test_a_chat_over_a_malformed_answer_fails_in_bounded_time_and_counts_no_token(
    name: str, wire: bytes | list[Piece], reason: str, _httpx: str | bytes
) -> None:
    async def go(url: str, server: Scripted) -> tuple[RequestResult, float]:
        t0 = time.monotonic()
        result = await asyncio.to_thread(_chat_at, url, read_timeout_s=2.0)
        return result, time.monotonic() - t0

    result, took_s = serve([[*_pieces(wire), HOLD]], go)  # held open: only the refusal ends it
    assert took_s < 1.5
    if name in AFTER_THE_STREAM:
        assert result.ok and result.completion_tokens == 2
        return
    assert not result.ok
    assert result.error.startswith("malformed HTTP answer after 0 tokens: the server ")
    assert reason in result.error
    assert result.chunk_tokens == 0 and not result.completion_tokens


def test_a_malformed_chunk_after_tokens_fails_the_request() -> None:
    """``-0`` after a token: the old framing took it as the last chunk (a whole answer)."""
    first = sse_body(delta(content="a"), done=False)
    wire = CHUNKED + f"{len(first):x}\r\n".encode() + first + b"\r\n-0\r\n\r\n"

    result = serve([[wire, HOLD]], lambda url, s: asyncio.to_thread(_chat_at, url))
    assert not result.ok
    assert result.error.startswith("malformed HTTP answer after 1 tokens")
    assert "malformed chunk size" in result.error


def test_leading_zeros_in_a_chunk_size_read_as_the_number_they_spell() -> None:
    """llhttp bounds a chunk size's value (2^64), not its leading zeros: 33 digits that spell
    16 frame the right 16 bytes, never a wrong body (h11 refuses more than 20 digits)."""
    wire = CHUNKED + b"0" * 31 + b"10\r\n" + BODY[:16] + b"\r\n" + chunks(BODY[16:])

    async def go(url: str, server: Scripted) -> tuple[int, bytes]:
        async with client("lean") as http:
            return await fetch(http, url)

    assert serve([[wire]], go) == (200, BODY)


@pytest.mark.parametrize("transport", ["lean", "httpx"])
@pytest.mark.parametrize("stale", [STALE, b"X", b"\r\n"], ids=["response", "byte", "crlf"])
def test_bytes_on_an_idle_connection_never_answer_the_next_request(
    transport: str, stale: bytes
) -> None:
    async def go(url: str, server: Scripted) -> list[tuple[int, bytes]]:
        async with client(transport) as http:
            first = await fetch(http, url)
            await asyncio.sleep(0.2)  # the stale bytes arrive while the connection is idle
            return [first, await fetch(http, url)]

    script: list[list[Piece]] = [[RIGHT, 0.05, stale], [RIGHT]]
    got, peers = serve(script, lambda url, s: _with_peers(go(url, s), s))
    assert got == [(200, b"right"), (200, b"right")]
    assert peers[0] != peers[1]  # a new connection for the second request


def test_a_response_after_the_body_in_the_same_read_never_answers_the_next_request() -> None:
    """httpx's own transport (h11) keeps these bytes and returns them as the next answer: the
    ``https://`` path is exposed to it; the lean transport closes the connection."""

    async def go(url: str, server: Scripted) -> list[tuple[int, bytes]]:
        async with client("lean") as http:
            return [await fetch(http, url), await fetch(http, url)]

    got, peers = serve([[RIGHT + STALE], [RIGHT]], lambda url, s: _with_peers(go(url, s), s))
    assert got == [(200, b"right"), (200, b"right")]
    assert peers[0] != peers[1]


async def _with_peers(result: Awaitable[Any], server: Scripted) -> tuple[Any, list[int]]:
    return await result, server.peers


@pytest.mark.parametrize(
    "value", ["Bearer k\r\nX-Injected: 1", "Bearer k\nX-Injected: 1", "Bearer k\x00"]
)
@pytest.mark.parametrize("transport", ["lean", "httpx"])
def test_a_header_value_with_cr_lf_or_nul_is_refused_before_sending(
    transport: str, value: str
) -> None:
    async def go(url: str, server: Scripted) -> None:
        async with client(transport) as http:
            with pytest.raises(httpx.LocalProtocolError):
                await fetch(http, url, headers={"authorization": value})
            assert await fetch(http, url) == (200, b"right")
        assert len(server.requests) == 1 and b"X-Injected" not in server.requests[0]

    serve([[RIGHT]], go)


def test_a_chat_with_an_injecting_api_key_fails_and_sends_nothing() -> None:
    async def go(url: str, server: Scripted) -> tuple[RequestResult, int]:
        result = await asyncio.to_thread(_chat_at, url, api_key="k\r\nX-Injected: 1")
        return result, len(server.requests)

    result, sent = serve([[RIGHT]], go)
    assert not result.ok and "holds CR, LF or NUL: refused before sending" in result.error
    assert sent == 0


@pytest.mark.parametrize(
    "pieces",
    [
        # interim heads, one every 0.1 s
        [head("100 Continue"), 0.1] * 8 + [HOLD],
        # trailer lines after a whole body, one every 0.1 s
        [CHUNKED + chunks(BODY).removesuffix(b"\r\n")] + [b"x-t: 1\r\n", 0.1] * 8 + [HOLD],
        # chunk framing without data: a size line's zeros, a few at a time
        [CHUNKED + chunks(BODY[:16]).removesuffix(b"0\r\n\r\n")] + [b"000", 0.1] * 8 + [HOLD],
    ],
    ids=["interim heads", "trailers", "framing"],
)
def test_interim_heads_trailers_and_framing_do_not_restart_the_read_timeout(
    pieces: list[Piece],
) -> None:
    async def go(url: str, server: Scripted) -> float:
        async with client("lean", read_timeout_s=0.25) as http:
            t0 = time.monotonic()
            with pytest.raises(httpx.ReadTimeout):
                await fetch(http, url)
            return time.monotonic() - t0

    assert serve([pieces], go) < 0.6  # not 0.8 s of dribble plus the timeout


def test_body_bytes_do_restart_the_read_timeout() -> None:
    pieces: list[Piece] = [CHUNKED]
    for i in range(0, len(BODY), 16):
        pieces += [0.1, f"{len(BODY[i : i + 16]):x}\r\n".encode() + BODY[i : i + 16] + b"\r\n"]

    async def go(url: str, server: Scripted) -> tuple[int, bytes]:
        async with client("lean", read_timeout_s=0.25) as http:
            return await fetch(http, url)

    assert len(pieces) > 6  # longer in all than the timeout
    assert serve([[*pieces, b"0\r\n\r\n"]], go) == (200, BODY)


def test_a_head_answer_ends_at_its_head_and_its_connection_is_not_reused() -> None:
    async def go(url: str, server: Scripted) -> list[tuple[int, bytes]]:
        async with client("lean") as http:
            async with http.stream("HEAD", url + "/") as r:
                first = (r.status_code, b"".join([d async for d in r.aiter_raw()]))
            return [first, await fetch(http, url)]

    got, peers = serve(
        [[head("200 OK", "content-length: 5")], [RIGHT]], lambda u, s: _with_peers(go(u, s), s)
    )
    assert got == [(200, b""), (200, b"right")]
    assert peers[0] != peers[1]
