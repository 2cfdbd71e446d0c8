"""Misbehaving-server faults the simulated server can inject (hidden ``--sim-fault SPEC``).

Each imitates a way real servers went wrong on real rigs, so the tests can show that every
request stays time-bounded and every figure is either right or clearly marked.

The reasoning: docs/simulated-rig.md, "powersweep.sim.faults".
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
