"""How honest a finished sweep can be: its status from the caps' statuses, and the faults it met.

A run is ``complete`` only when enough caps succeeded to answer; the faults (stalls, retries,
untrusted usage, busy servers...) go to ``run.json`` so the summary can say what the run met.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from powersweep.analysis.failures import cause_examples
from powersweep.runformat import WARN_CUT_BY_RESET, WARN_IGNORED_MAX_TOKENS
from powersweep.sweep.loads.base import TOO_SLOW
from powersweep.sweep.server.client import (
    ERR_NO_COUNTABLE_TOKENS,
    WARN_BUSY_RETRIED,
    WARN_USAGE_UNTRUSTED,
)
from powersweep.sweep.server.sse import MAX_LINE_BYTES

# Caps that must succeed for a run to answer (fewer planned: all of them).
MIN_OK_CAPS = 3
_EXAMPLES_KEPT = 3


def judge(statuses: Iterable[str]) -> tuple[str, str | None]:
    """``complete`` when the run measured what it was asked, else ``partial`` or ``failed``.

    Enough: at least :data:`MIN_OK_CAPS` (every measurable cap when fewer were planned: a run
    asked for one or two caps completes, and its analysis says that so few give no answer,
    :mod:`powersweep.analysis.claims`), and no
    fewer than the caps that failed or stayed suspect. Rejected caps (the card refused them) do
    not count either way, nor do an undervolt search's unstable steps: finding the first one is
    what the search is for.

    Returns:
        The status and, when not complete, a one-line reason.
    """
    statuses = list(statuses)
    ok = statuses.count("ok")
    measurable = [x for x in statuses if x not in ("rejected", "unstable")]
    bad = {x: statuses.count(x) for x in ("failed", "suspect") if x in statuses}
    what = ", ".join(f"{n} {x}" for x, n in bad.items())
    if ok == 0:
        if not statuses:
            return "failed", "no cap was measured"
        return "failed", f"no cap was measured successfully ({what or 'all rejected'})"
    needed = min(MIN_OK_CAPS, len(measurable))
    if ok < needed or ok < len(measurable) - ok:
        return "partial", (
            f"only {ok} of {len(measurable)} caps were measured successfully ({what}): "
            "too few to answer"
        )
    return "complete", None


class FaultLog:
    """Faults the run met, by kind, with a count and a few examples (``run.json`` ``faults``).

    A request cut at its window's end is by design (requests are sized to end with it); one
    that streamed past its ``max_tokens`` before the cut shows a server that ignores it.
    """

    def __init__(self) -> None:
        self._faults: dict[str, dict[str, Any]] = {}
        # errors of failed requests no other kind names: counted by cause in words
        self._failed: list[str] = []

    def add(self, kind: str, detail: str) -> None:
        """Count one fault of ``kind``."""
        entry = self._faults.setdefault(kind, {"kind": kind, "count": 0, "examples": []})
        entry["count"] += 1
        if len(entry["examples"]) < _EXAMPLES_KEPT and detail not in entry["examples"]:
            entry["examples"].append(detail)

    def requests(self, requests: Sequence[Any]) -> None:
        """Count the faults the client's results show (warnings and errors it recognises)."""
        for r in requests:
            cut = r.ok and getattr(r, "finish_reason", None) == "deadline"
            warnings = getattr(r, "warnings", ())
            if cut and WARN_IGNORED_MAX_TOKENS in warnings and r.prompt_kind != "warmup":
                # Requests are sized to end with their window, and one that runs a little long
                # is cut by design; one that streamed past its max_tokens ignored it, and only
                # the cut bounded it.
                self.add(
                    "cut_at_deadline",
                    f"a {r.prompt_kind} request ran past its max_tokens (the server ignores it) "
                    f"and was cut at its window's end after {r.chunk_tokens} token chunks",
                )
            for w in warnings:
                if w == WARN_CUT_BY_RESET:
                    self.add(
                        "cut_by_reset",
                        f"a {r.prompt_kind} request was reset by the server after "
                        f"{r.chunk_tokens} token chunks: its tokens count as the rate up to the "
                        "reset, and the window went on with a new request",
                    )
                elif WARN_USAGE_UNTRUSTED in w:
                    self.add("usage_untrusted", w)
                elif WARN_BUSY_RETRIED in w:
                    self.add("server_busy", w)
            error = getattr(r, "error", "") or ""
            if error.startswith(("HTTP 429", "HTTP 503")):
                self.add("server_busy", error)
            elif ERR_NO_COUNTABLE_TOKENS in error:
                self.add("no_countable_tokens", error)
            elif f"more than {MAX_LINE_BYTES} bytes" in error:
                self.add("line_too_long", error)
            elif TOO_SLOW in error:
                self.add("too_slow", error)
            elif not r.ok:
                self._failed.append(error)

    def to_list(self) -> list[dict[str, Any]]:
        """The faults as ``run.json`` records them; failed requests no other kind names are
        ``request_failed``, their examples the commonest causes in words with their counts."""
        out = [dict(f, examples=list(f["examples"])) for f in self._faults.values()]
        if self._failed:
            out.append(
                {
                    "kind": "request_failed",
                    "count": len(self._failed),
                    "examples": cause_examples(self._failed),
                }
            )
        return out
