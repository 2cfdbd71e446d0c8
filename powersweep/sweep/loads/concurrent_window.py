"""decode-concurrent's counting: one window's figures, and the tokens that arrived inside it.

Pure functions of the requests' chunk arrival times (no client, no clock): a window's aggregate
TPS counts the tokens that arrived inside it, converted from chunks with each request's own
server count.

The reasoning: docs/reference.md, "powersweep.sweep.loads.concurrent_window".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from powersweep.runformat import CUT_FINISHES


@dataclass(frozen=True)
class Window:
    """One measurement window.

    Attributes:
        n_streams: Streams that ran.
        t0_s: Window start (run seconds).
        t1_s: Window end.
        tokens: Tokens that arrived inside the window.
        tps: ``tokens / (t1_s - t0_s)``.
        failures: Failed requests.
        queued: Requests the server reported waiting mid-window (None if unknown).
    """

    n_streams: int
    t0_s: float
    t1_s: float
    tokens: float
    tps: float
    failures: int
    queued: int | None


def tokens_in_window(
    results: Sequence[Any], t0_s: float, t1_s: float, default_per_chunk: float
) -> float:
    """Tokens that arrived in ``[t0_s, t1_s]``, from each request's chunk arrival times.

    A request that completed with a server count converts its chunks at its own tokens-per-chunk;
    one cut off by the deadline (no count) uses ``default_per_chunk``.
    """
    total = 0.0
    for r in results:
        times = r.token_times_s or ()
        inside = sum(1 for t in times if t0_s <= t <= t1_s)
        if not inside:
            continue
        total += inside * tokens_per_chunk(r, default_per_chunk)
    return total


def window_blocks(
    results: Sequence[Any], t0_s: float, t1_s: float, default_per_chunk: float, n_blocks: int
) -> list[tuple[float, float]]:
    """The window cut into ``n_blocks`` equal spans: ``(aggregate tokens, seconds)`` of each.

    These resample the aggregate figure (all streams together), never one stream's rate.
    """
    if not t1_s > t0_s:
        return []
    length = (t1_s - t0_s) / n_blocks
    out = []
    for k in range(n_blocks):
        a = t0_s + k * length
        # Half-open blocks (the last one closed) so a token on an edge counts once.
        b = t1_s if k == n_blocks - 1 else math.nextafter(a + length, -math.inf)
        out.append((tokens_in_window(results, a, b, default_per_chunk), length))
    return out


def tokens_per_chunk(result: Any, default: float) -> float:
    """A request's tokens per token-bearing chunk, from the server's own count when it has one."""
    if (
        result.ok
        and result.token_source in ("usage", "timings")
        and result.finish_reason not in CUT_FINISHES
        and result.completion_tokens
        and result.chunk_tokens
    ):
        return float(result.completion_tokens) / float(result.chunk_tokens)
    return default


def spread_pct(values: Sequence[float]) -> float:
    """(max - min) / median of finite values, in % (NaN with fewer than two)."""
    v = [x for x in values if math.isfinite(x)]
    if len(v) < 2:
        return math.nan
    med = statistics.median(v)
    return 100.0 * (max(v) - min(v)) / med if med else math.nan


def _all_streams_running_s(results: Sequence[Any]) -> float | None:
    """Run time by which every stream that produced tokens had its first one (None: none did)."""
    first: dict[int, float] = {}
    for r in results:
        t = r.t_first_token_s
        if math.isfinite(t):
            first[r.stream] = min(t, first.get(r.stream, math.inf))
    return max(first.values()) if first else None
