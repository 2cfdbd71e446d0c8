"""Misbehaving-server faults the simulated server can inject (hidden ``--sim-fault SPEC``).

Each imitates a way real servers went wrong on real rigs, so the tests can show that every
request stays time-bounded and every figure is either right or clearly marked:

- ``no-done``: sends the finish reason and the usage, then holds the socket without ``[DONE]``.
- ``endless``: ignores ``max_tokens`` and keeps streaming.
- ``long-line``: after a few tokens, starts an event-stream line that never ends.
- ``stall``: pauses :data:`STALL_S` run seconds mid-stream (the GPU idles meanwhile).
- ``no-tokens``: streams its text under a key no client knows (``delta.text``), usage included.
- ``inflated-usage``: usage claims :data:`INFLATE_FACTOR` times the tokens it streamed.
- ``busy``: answers the first :data:`BUSY_ANSWERS` chat requests 503 with a ``Retry-After`` of
  one run second.
- ``slow``: the first token comes only after :data:`SLOW_FIRST_TOKEN_S` run seconds.
- ``slow-code``: the code prompt decodes :data:`SLOW_CODE_FACTOR` times slower than the
  narrative one (a server disturbed on one prompt only).
- ``reset``: every :data:`RESET_EVERY`-th request it meets is cut after
  :data:`RESET_AFTER_TOKENS` tokens (half a shorter answer, at least two) by closing the
  connection mid-stream (a proxy or a server that drops connections), so the client sees an
  incomplete chunked body.
- ``pause``: :data:`PAUSE_AFTER_S` run seconds after the request that meets it arrives, the
  whole server stops for :data:`PAUSE_S` run seconds (a paused or swapping process): no stream
  sends a token, no prefill advances, the GPU idles, and nothing catches up afterwards.

``KIND@CAP`` limits a fault to requests served while the card is capped at CAP watts;
``KIND@+T`` to requests that arrive T run seconds or more after the server started (a clock
sweep, whose points share one cap); ``KIND-once`` (and ``KIND-once@CAP``, ``KIND-once@+T``) to
the first request it would hit; ``KIND-first@CAP`` to the requests of the first visit to that
cap (a cap measured again later is served normally).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from powersweep.errors import UsageError

FAULT_KINDS = (
    "no-done",
    "endless",
    "long-line",
    "stall",
    "no-tokens",
    "inflated-usage",
    "busy",
    "slow",
    "slow-code",
    "pause",
    "reset",
)
STALL_S = 45.0
STALL_AFTER_TOKENS = 10
INFLATE_FACTOR = 50
BUSY_ANSWERS = 2
SLOW_FIRST_TOKEN_S = 600.0
SLOW_CODE_FACTOR = 5.0
ENDLESS_TOKENS = 100_000
LONG_LINE_AFTER_TOKENS = 5
PAUSE_S = 6.0
PAUSE_AFTER_S = 2.0
RESET_AFTER_TOKENS = 20
RESET_EVERY = 2

_SPEC = re.compile(
    r"^(?P<kind>[a-z-]+?)(?P<scope>-once|-first)?"
    r"(?:@(?P<cap>\d+(?:\.\d+)?)|@\+(?P<after>\d+(?:\.\d+)?))?$"
)


@dataclass(frozen=True)
class ServerFault:
    """One injected fault.

    Attributes:
        kind: One of :data:`FAULT_KINDS`.
        at_cap_w: Only while the card is capped at this many watts (None: always).
        once: Only the first request it would hit.
        first_visit: Only while the card is at ``at_cap_w`` for the first time.
        after_s: Only requests arriving this many run seconds after the server started.
    """

    kind: str
    at_cap_w: float | None = None
    once: bool = False
    first_visit: bool = False
    after_s: float | None = None


def parse_fault(spec: str) -> ServerFault:
    """Parse ``KIND[-once|-first][@CAP|@+T]``.

    Raises:
        UsageError: Not a known fault.
    """
    m = _SPEC.match(spec.strip().lower())
    if m is None or m.group("kind") not in FAULT_KINDS:
        raise UsageError(
            f"--sim-fault takes KIND[-once|-first][@CAP|@+SECONDS] with KIND one of "
            f"{', '.join(FAULT_KINDS)}, not {spec!r}"
        )
    cap = m.group("cap")
    scope = m.group("scope")
    if scope == "-first" and cap is None:
        raise UsageError("--sim-fault KIND-first needs @CAP (the cap whose first visit fails)")
    after = m.group("after")
    return ServerFault(
        m.group("kind"),
        float(cap) if cap else None,
        once=scope == "-once",
        first_visit=scope == "-first",
        after_s=float(after) if after else None,
    )


def reset_after(completion_tokens: int) -> int:
    """Tokens a stream the ``reset`` fault cuts delivers first (a short prefill answer is cut
    half way, so every load mode meets the fault)."""
    return max(2, min(RESET_AFTER_TOKENS, completion_tokens // 2))


class StreamReset(Exception):
    """Raised by a stream the ``reset`` fault cuts: the server closes the connection mid-body."""


class _QuietResets(logging.Filter):
    """Drops uvicorn's report of a planted reset (it is the fault, not a bug in the simulator)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, StreamReset)


def quiet_resets() -> None:
    """Keep planted resets out of the simulated server's error log (idempotent)."""
    log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietResets) for f in log.filters):
        log.addFilter(_QuietResets())
