"""Answers that are not the stream: which mean a busy server, how long to wait before asking
again, and how much of an unexpected body is read to explain it."""

from __future__ import annotations

import math

import httpx

# Statuses a busy or loading server answers; retried with back-off within the deadline.
BUSY_STATUSES = (429, 503)
BUSY_RETRIES = 6
BUSY_BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 8.0)
RETRY_AFTER_MAX_S = 60.0
# How much of an unexpected body is read to explain it.
MAX_ERROR_BODY_BYTES = 65536


def retry_after_s(response: httpx.Response, attempt: int) -> float:
    """Wall seconds to wait before retrying a busy answer: ``Retry-After`` when it is a number of
    seconds (at most :data:`RETRY_AFTER_MAX_S`), else an exponential back-off."""
    header = response.headers.get("retry-after", "").strip()
    try:
        value = float(header)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and value >= 0:
        return min(value, RETRY_AFTER_MAX_S)
    return BUSY_BACKOFF_S[min(attempt, len(BUSY_BACKOFF_S) - 1)]


async def read_limited(response: httpx.Response) -> bytes:
    """The body's first :data:`MAX_ERROR_BODY_BYTES` or so (reading stops once past them)."""
    out = b""
    async for data in response.aiter_bytes():
        out += data
        if len(out) >= MAX_ERROR_BODY_BYTES:
            break
    return out
