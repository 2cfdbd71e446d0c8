"""Busy answers: the wait before asking again, and the bounded read of an unexpected body."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from powersweep.sweep.server.busy_answers import (
    BUSY_BACKOFF_S,
    MAX_ERROR_BODY_BYTES,
    RETRY_AFTER_MAX_S,
    read_limited,
    retry_after_s,
)


def _busy(retry_after: str | None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(503, headers=headers)


@pytest.mark.parametrize(
    ("header", "attempt", "wait_s"),
    [
        ("2.5", 0, 2.5),  # the server's number of seconds
        (" 0 ", 3, 0.0),
        ("3600", 0, RETRY_AFTER_MAX_S),  # bounded
        (None, 0, BUSY_BACKOFF_S[0]),  # none: the back-off
        (None, 2, BUSY_BACKOFF_S[2]),
        (None, 99, BUSY_BACKOFF_S[-1]),  # past the table: its last step
        ("Wed, 21 Oct 2026 07:28:00 GMT", 1, BUSY_BACKOFF_S[1]),  # a date: the back-off
        ("-1", 1, BUSY_BACKOFF_S[1]),
        ("nan", 1, BUSY_BACKOFF_S[1]),
        ("inf", 1, BUSY_BACKOFF_S[1]),
    ],
)
def test_retry_after_is_the_servers_number_bounded_else_the_back_off(
    header: str | None, attempt: int, wait_s: float
) -> None:
    assert retry_after_s(_busy(header), attempt) == wait_s


def test_an_unexpected_body_is_read_only_up_to_the_bound() -> None:
    sent: list[int] = []

    async def endless():  # type: ignore[no-untyped-def]
        while True:
            sent.append(4096)
            yield b"x" * 4096

    async def go() -> tuple[bytes, bytes]:
        small = await read_limited(httpx.Response(500, content=b"out of memory"))
        large = await read_limited(httpx.Response(500, content=endless()))
        return small, large

    small, large = asyncio.run(go())
    assert small == b"out of memory"
    assert MAX_ERROR_BODY_BYTES <= len(large) < MAX_ERROR_BODY_BYTES + 4096
    assert sum(sent) == len(large)  # reading stopped there
