"""A serving point's figures from its requests and windows: output tokens per second, the
arrivals offered and taken, latency percentiles, the targets' shares and goodput.

Pure (no client, no clock). The definitions: docs/serving.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from powersweep.runformat import CUT_FINISHES, SERVE_KIND
from powersweep.sweep.sampling.per_token import chunk_tokens, quantile_interval

NAN = math.nan
# The error a request refused by the load's own in-flight bound carries (it was never sent).
REFUSED_BOUND = "refused: --max-in-flight"
# Answers a server gives when it cannot take a request.
REFUSED_STATUSES = ("HTTP 429", "HTTP 503")
# A point whose completed requests are under this share of those offered did not keep up.
SATURATED_SHARE = 0.9


def serve_windows(windows: Sequence[tuple[str, float, float]] | None) -> list[tuple[float, float]]:
    """``(t0, t1)`` of each serving window."""
    return [(t0, t1) for k, t0, t1 in windows or () if k == SERVE_KIND and t1 > t0]


def refused(result: Any) -> bool:
    """A request the load's bound or the server refused (429/503 to the end)."""
    error = str(getattr(result, "error", "") or "")
    return not result.ok and (error.startswith(REFUSED_BOUND) or error.startswith(REFUSED_STATUSES))


def window_tokens(requests: Sequence[Any], t0: float, t1: float) -> float:
    """Tokens whose chunks arrived in ``[t0, t1]``, each request's chunks at its own tokens per
    chunk (every request: those sent before the window served it too)."""
    total = 0.0
    for r in requests:
        times = getattr(r, "token_times_s", None) or ()
        inside = sum(1 for t in times if t0 <= t <= t1)
        if inside and r.ok:
            total += inside * chunk_tokens(r)
    return total


def serving_tps(
    requests: Sequence[Any], windows: Sequence[tuple[str, float, float]] | None
) -> float:
    """Output tokens per second over the serving windows (NaN without one, or no token)."""
    spans = serve_windows(windows)
    seconds = math.fsum(t1 - t0 for t0, t1 in spans)
    tokens = math.fsum(window_tokens(requests, t0, t1) for t0, t1 in spans)
    return tokens / seconds if seconds > 0 and tokens > 0 else NAN


def serving_blocks(
    requests: Sequence[Any], windows: Sequence[tuple[str, float, float]] | None, n_blocks: int
) -> list[tuple[float, float]]:
    """Each serving window cut into ``n_blocks`` equal spans: ``(tokens, seconds)`` of each
    (the units TPS's precision resamples)."""
    out: list[tuple[float, float]] = []
    for t0, t1 in serve_windows(windows):
        length = (t1 - t0) / n_blocks
        for k in range(n_blocks):
            a = t0 + k * length
            # half-open blocks (the last closed), so a chunk on an edge counts once
            b = t1 if k == n_blocks - 1 else math.nextafter(a + length, -math.inf)
            out.append((window_tokens(requests, a, b), length))
    return out


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else NAN


def mean_itl_ms(result: Any) -> float:
    """A request's mean inter-token latency (its TPOT), ms: first token to last over the tokens
    after the first (NaN under two tokens)."""
    n = result.completion_tokens or 0
    span = result.t_last_token_s - result.t_first_token_s
    if n < 2 or not span >= 0:
        return NAN
    return 1000.0 * span / (n - 1)


def in_flight_max(requests: Sequence[Any]) -> int:
    """The most requests in flight at once (sent, not yet answered to the end)."""
    events: list[tuple[float, int]] = []
    for r in requests:
        if refused(r) and str(r.error).startswith(REFUSED_BOUND):
            continue
        if math.isfinite(r.t_start_s) and math.isfinite(r.t_end_s):
            events += [(r.t_start_s, 1), (r.t_end_s, -1)]
    peak = level = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        level += step
        peak = max(peak, level)
    return peak


# The latency percentiles a serving point states, each with its 95% interval.
PERCENTILES = (50, 95, 99)


def percentile_columns(name: str, values: Sequence[float]) -> dict[str, float]:
    """``{name}_p{q}_ms`` of each of :data:`PERCENTILES` and the ends of its 95% confidence
    interval, ``_lo_ms`` and ``_hi_ms`` (order statistics, :func:`quantile_interval`: NaN where
    the values cannot bound an end)."""
    out: dict[str, float] = {}
    for q in PERCENTILES:
        lo, hi = quantile_interval(values, q / 100.0)
        out[f"{name}_p{q}_ms"] = _pct(values, q)
        out[f"{name}_p{q}_lo_ms"] = lo
        out[f"{name}_p{q}_hi_ms"] = hi
    return out


def serving_columns(
    requests: Sequence[Any],
    windows: Sequence[tuple[str, float, float]] | None,
    *,
    request_rate_rps: float,
    max_in_flight: int,
    max_ttft_ms: float | None,
    max_itl_ms: float | None,
) -> dict[str, float]:
    """The serving columns of caps.csv (runformat.SERVING_COLUMNS, less energy per request).

    The requests counted are those the schedule sent in the windows (``prompt_kind``
    ``serve``): offered (every arrival, refused ones included), completed (answered to the
    end), cut (still streaming at the drain bound), refused (the bound's or the server's),
    failed (any other error). Latencies are the completed requests' (TTFT also the cut ones'
    with a token), in ms; ITL percentiles are of every token gap, per token.
    """
    mine = [r for r in requests if r.prompt_kind == SERVE_KIND]
    seconds = math.fsum(t1 - t0 for t0, t1 in serve_windows(windows))
    n_refused = sum(1 for r in mine if refused(r))
    failed = [r for r in mine if not r.ok and not refused(r)]
    cut = [r for r in mine if r.ok and r.finish_reason in CUT_FINISHES]
    done = [r for r in mine if r.ok and r.finish_reason not in CUT_FINISHES]
    ttft = [
        1000.0 * (r.t_first_token_s - r.t_start_s)
        for r in (*done, *cut)
        if math.isfinite(r.t_first_token_s) and r.t_first_token_s >= r.t_start_s
    ]
    itl: list[float] = []
    for r in (*done, *cut):
        times = getattr(r, "token_times_s", None) or ()
        per_chunk = chunk_tokens(r)
        itl += [1000.0 * (b - a) / per_chunk for a, b in itertools.pairwise(times)]
    e2e = [1000.0 * (r.t_end_s - r.t_start_s) for r in done if r.t_end_s >= r.t_start_s]
    offered = len(mine)
    achieved = len(done) / seconds if seconds > 0 else NAN
    offered_rps = offered / seconds if seconds > 0 else NAN

    def meets_ttft(r: Any) -> bool:
        t = 1000.0 * (r.t_first_token_s - r.t_start_s)
        return max_ttft_ms is None or (math.isfinite(t) and t <= max_ttft_ms)

    def meets_itl(r: Any) -> bool:
        itl_ms = mean_itl_ms(r)
        # an answer of one token has no gap to miss the target by
        return max_itl_ms is None or (not (itl_ms > max_itl_ms) and (r.completion_tokens or 0) > 0)

    answered = [*done, *cut]
    over_ttft = (
        100.0 * (offered - sum(1 for r in answered if meets_ttft(r))) / offered
        if max_ttft_ms is not None and offered
        else NAN
    )
    over_itl = (
        100.0 * (offered - sum(1 for r in answered if meets_itl(r))) / offered
        if max_itl_ms is not None and offered
        else NAN
    )
    targets = max_ttft_ms is not None or max_itl_ms is not None
    good = sum(1 for r in done if meets_ttft(r) and meets_itl(r))
    peak = in_flight_max(requests)  # the lead's requests hold places too
    saturated = bool(
        n_refused or peak >= max_in_flight or (offered and len(done) < SATURATED_SHARE * offered)
    )
    return {
        "request_rate_rps": request_rate_rps,
        "offered_rps": offered_rps,
        "achieved_rps": achieved,
        "n_offered": float(offered),
        "n_completed": float(len(done)),
        "n_refused": float(n_refused),
        "n_failed": float(len(failed)),
        "n_cut": float(len(cut)),
        "in_flight_max": float(peak),
        "max_in_flight": float(max_in_flight),
        **percentile_columns("ttft", ttft),
        **percentile_columns("itl", itl),
        **percentile_columns("e2e", e2e),
        "max_ttft_ms": max_ttft_ms if max_ttft_ms is not None else NAN,
        "max_itl_ms": max_itl_ms if max_itl_ms is not None else NAN,
        "over_ttft_pct": over_ttft,
        "over_itl_pct": over_itl,
        "goodput_rps": good / seconds if targets and seconds > 0 else NAN,
        "saturated": 1.0 if saturated else 0.0,
    }


def served_rps(columns: Mapping[str, float]) -> float:
    """The requests a point served per window second, what its energy per request divides by:
    a server that keeps up serves what arrives (``offered_rps``: the window's arrivals, the
    same sequence at every point, so the requests its edges cut weigh on no point), one that
    saturated what it completes (``achieved_rps``)."""
    return columns["achieved_rps"] if columns["saturated"] else columns["offered_rps"]
