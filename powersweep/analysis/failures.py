"""A failed request's cause in words, from the error text requests.csv keeps for it.

The client words its own errors, but runs of older versions kept httpx's bare exception names
(``ReadError:`` with nothing after it); both read here as what happened: the server reset the
connection, went silent, closed the stream, answered an HTTP error.

The reasoning: docs/analyze.md, "powersweep.analysis.failures".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

# Failures the sweep counts under a fault kind of their own (run.json ``faults``): their
# requests are not counted again as ``request_failed``.
COUNTED_KINDS: tuple[tuple[str, str], ...] = (
    (r"^HTTP (429|503)\b", "server_busy"),
    (r"too slow for the window", "too_slow"),
    (r"no stream carried tokens the client could count", "no_countable_tokens"),
    (r"event-stream line .*more than \d+ bytes|more than \d+ bytes", "line_too_long"),
)
# (pattern, cause): the first match names the cause.
_CAUSES: tuple[tuple[str, str], ...] = (
    (r"connection reset|ReadError|ECONNRESET|errno 104", "connection reset by the server"),
    (
        r"closed the connection|RemoteProtocolError|peer closed|incomplete chunked",
        "the server closed the connection mid-response",
    ),
    (r"read timeout|ReadTimeout", "read timeout (the server went silent)"),
    (r"connect timeout|ConnectTimeout", "connect timeout (the server did not answer)"),
    (
        r"cannot connect|ConnectError|connection refused|errno 111",
        "cannot connect to the server",
    ),
    (r"WriteError|WriteTimeout|broken pipe|errno 32", "the request could not be sent"),
    (r"PoolTimeout", "no free connection to the server in time"),
    (r"too slow for the window", "no token before the deadline (too slow for the window)"),
    (r"no stream carried tokens|generated no tokens", "the server generated no countable tokens"),
    (r"more than \d+ bytes", "an event-stream line that never ended"),
    (r"without sending any event", "the server closed the stream without an event"),
    (r"DecodingError|not valid JSON|bad json", "an answer that could not be decoded"),
    (r"timeout|timed out", "timed out"),
)


def failure_cause(error: str | None) -> str:
    """The cause of a failed request in words (``HTTP 500 from the server``, ``connection
    reset by the server``, ...); an error it does not recognise is kept, shortened."""
    text = " ".join(str(error or "").split())
    if not text:
        return "failed without an error message"
    http = re.match(r"^HTTP (\d{3})\b", text)
    if http:
        return f"HTTP {http.group(1)} from the server"
    for pattern, cause in _CAUSES:
        if re.search(pattern, text, re.IGNORECASE):
            return cause
    return text[:80]


def counted_elsewhere(error: str | None) -> bool:
    """Whether a failure is one the sweep counts under its own fault kind (a busy server, a
    server too slow for the window, ...), not as ``request_failed``."""
    text = str(error or "")
    return any(re.search(p, text, re.IGNORECASE) for p, _ in COUNTED_KINDS)


def cause_examples(errors: Iterable[str | None], limit: int = 3) -> list[str]:
    """The most common causes of these failures, with their counts (``read timeout (x2)``)."""
    counts = Counter(failure_cause(e) for e in errors)
    return [f"{cause} (x{n})" for cause, n in counts.most_common(limit)]
