"""A failed request's exception in one line, and whether its connection was reset."""

from __future__ import annotations

import httpx
import pytest

from powersweep.sweep.server.http11 import MalformedResponse
from powersweep.sweep.server.request_errors import failure_text

URL = "http://127.0.0.1:8080"


def _failure_text(exc: Exception, tokens: int = 3) -> tuple[str, bool]:
    return failure_text(exc, tokens, base_url=URL, connect_timeout_s=5.0, read_timeout_s=60.0)


@pytest.mark.parametrize(
    ("exc", "text", "reset"),
    [
        (httpx.ConnectTimeout("x"), f"connect timeout: {URL} did not answer in 5 s", False),
        (httpx.ReadTimeout("x"), "read timeout: server sent nothing for 60 s", False),
        (httpx.PoolTimeout("x"), "timeout: PoolTimeout", False),
        (httpx.ConnectError("refused"), f"cannot connect to {URL}: refused", False),
        (MalformedResponse("bad chunk"), "malformed HTTP answer after 3 tokens: bad chunk", False),
        (
            httpx.RemoteProtocolError("peer closed"),
            "server closed the connection mid-response after 3 tokens: peer closed",
            True,
        ),
        (TimeoutError("socket"), "timeout: socket", False),
        (OSError("no route"), "network error: no route", False),
        (ValueError("boom"), "client error while reading the answer: ValueError: boom", False),
    ],
)
def test_each_failure_reads_in_one_line(exc: Exception, text: str, reset: bool) -> None:
    assert _failure_text(exc) == (text, reset)


def test_a_read_error_is_a_reset() -> None:
    message, reset = _failure_text(httpx.ReadError("connection reset"))
    assert reset and message
