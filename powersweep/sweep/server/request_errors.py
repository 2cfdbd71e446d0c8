"""A failed request's exception in one line (the client's ``chat`` and ``greedy`` alike)."""

from __future__ import annotations

import httpx

from powersweep.sweep.server.http11 import MalformedResponse
from powersweep.sweep.server.request import http_error_text
from powersweep.sweep.server.sse import one_line


def failure_text(
    exc: Exception,
    tokens: int,
    *,
    base_url: str,
    connect_timeout_s: float,
    read_timeout_s: float,
) -> tuple[str, bool]:
    """A request's exception in one line, and whether the connection was reset.

    Args:
        exc: What the exchange raised (the caller's deadline excluded).
        tokens: Token-bearing chunks read before it.
        base_url: The server (named when it cannot be reached).
        connect_timeout_s: The client's connect timeout (named when it ran out).
        read_timeout_s: The client's read timeout (named when it ran out).
    """
    if isinstance(exc, httpx.TimeoutException):
        return _timeout_message(exc, base_url, connect_timeout_s, read_timeout_s), False
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect to {base_url}: {one_line(str(exc)) or 'refused'}", False
    if isinstance(exc, MalformedResponse):
        # Framing the transport refused: the request fails, its tokens untrusted (not counted
        # as a stream cut by the server's close would be).
        return f"malformed HTTP answer after {tokens} tokens: {exc}", False
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"server closed the connection mid-response after {tokens} tokens: {exc}", True
    if isinstance(exc, httpx.HTTPError):
        return http_error_text(exc, tokens), isinstance(exc, httpx.ReadError)
    if isinstance(exc, TimeoutError):
        return f"timeout: {one_line(str(exc)) or type(exc).__name__}", False
    if isinstance(exc, OSError):
        return f"network error: {one_line(str(exc)) or type(exc).__name__}", False
    return f"client error while reading the answer: {type(exc).__name__}: {exc}", False


def _timeout_message(
    exc: httpx.TimeoutException, base_url: str, connect_timeout_s: float, read_timeout_s: float
) -> str:
    if isinstance(exc, httpx.ConnectTimeout):
        return f"connect timeout: {base_url} did not answer in {connect_timeout_s:g} s"
    if isinstance(exc, httpx.ReadTimeout):
        return f"read timeout: server sent nothing for {read_timeout_s:g} s"
    return f"timeout: {type(exc).__name__}"
