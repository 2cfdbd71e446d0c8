"""The decode time of one token stream, from every chunk's arrival, not only its two ends;
the decode rate of a prompt kind's requests, and the share of it their stalls took.

A request's decode rate is its tokens after the first over the time from the first token to the
last.

The reasoning: docs/precision.md, "powersweep.sweep.sampling.stream_rate".
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

NAN = math.nan

# Fewer stamps than this: the two ends are all there is.
MIN_FITTED_CHUNKS = 3


def fitted_span_s(times_s: Sequence[float] | None, first_s: float, last_s: float) -> float:
    """Seconds from the first token-bearing chunk to the last, on the stream's own rhythm.

    With at least :data:`MIN_FITTED_CHUNKS` arrival times, the slope of a least-squares line of
    arrival time against chunk index (seconds per chunk) times the chunks after the first; else
    (or when that is not positive) ``last_s - first_s``. For evenly spaced chunks both are the
    same.

    Args:
        times_s: Arrival times of the token-bearing chunks, ascending (None: not recorded).
        first_s: The first chunk's time.
        last_s: The last chunk's time.

    Returns:
        The span in run seconds (NaN or non-positive when the ends give none).
    """
    ends = last_s - first_s
    if times_s is None or len(times_s) < MIN_FITTED_CHUNKS:
        return ends
    m = len(times_s)
    mean_i = (m - 1) / 2.0
    t0 = times_s[0]
    mean_t = math.fsum(times_s) / m - t0
    # Sxx of 0..m-1 in closed form; the times are taken from the first to keep the sums small.
    sxx = m * (m * m - 1) / 12.0
    sxy = math.fsum((i - mean_i) * (t - t0 - mean_t) for i, t in enumerate(times_s))
    span = sxy / sxx * (m - 1)
    return span if span > 0 and math.isfinite(span) else ends


# A gap between two chunks is a stall when it is this many times the stream's median gap ...
STALL_GAP_FACTOR = 4.0
# ... and at least this many run seconds longer than it (a client's scheduling jitter is shorter).
MIN_STALL_GAP_S = 0.1
# Gaps under this share of the median, right after a long one, are a late reader's catch-up.
BURST_SHARE = 0.5


def stall_gaps(times_s: Sequence[float]) -> dict[int, float]:
    """The seconds each stalled gap of a token stream lost beyond the stream's rhythm.

    A gap (index ``i``: from chunk ``i`` to ``i + 1``) stalled when it is :data:`STALL_GAP_FACTOR`
    times the median gap and :data:`MIN_STALL_GAP_S` longer. It lost its excess over the median
    less what a burst right after it made up: a client that read late gets the chunks that fell
    due meanwhile together (gaps under half the median), and the server lost nothing.

    Returns:
        Gap index -> seconds lost in it (empty: no stall).
    """
    if len(times_s) < MIN_FITTED_CHUNKS:
        return {}
    gaps = [b - a for a, b in itertools.pairwise(times_s)]
    typical = statistics.median(gaps)
    out: dict[int, float] = {}
    for i, g in enumerate(gaps):
        if not (g > STALL_GAP_FACTOR * typical and g - typical >= MIN_STALL_GAP_S):
            continue
        made_up = 0.0
        for later in gaps[i + 1 :]:
            if later >= BURST_SHARE * typical:
                break
            made_up += typical - later
        lost = g - typical - made_up
        if lost >= MIN_STALL_GAP_S:
            out[i] = lost
    return out


def without_stalls(times_s: Sequence[float]) -> list[float]:
    """The arrival times with each stalled gap's lost seconds taken out (the stream's rhythm)."""
    lost = stall_gaps(times_s)
    out, shift = [], 0.0
    for i, t in enumerate(times_s):
        shift += lost.get(i - 1, 0.0)
        out.append(t - shift)
    return out


def decode_tps(requests: Iterable[Any], kind: str) -> float:
    """Token-weighted decode TPS of the completed requests of one prompt kind.

    Each request contributes ``completion_tokens - 1`` tokens over its first to last token (the
    first token's time is the prefill's, not the decode's; servers that pack tokens into chunks
    under load still stream the first one alone), a span taken on the stream's own rhythm where
    its chunks' arrival times are known (:func:`~.stream_rate.fitted_span_s`); the figure is
    total tokens over total time, so long requests weigh more than short ones. NaN when nothing
    qualifies.
    """
    tokens = 0.0
    seconds = 0.0
    for r, span in _decoded(requests, kind):
        tokens += r.completion_tokens - 1
        seconds += span
    return tokens / seconds if seconds > 0 else NAN


def _decoded(requests: Iterable[Any], kind: str) -> Iterator[tuple[Any, float]]:
    """Each completed request of ``kind`` that decoded, with its decode span (positive)."""
    for r in requests:
        if not r.ok or r.prompt_kind != kind or r.completion_tokens is None:
            continue
        span = decode_span_s(r)
        if r.completion_tokens >= 2 and span > 0:
            yield r, span


def decode_span_s(r: Any) -> float:
    """A request's decode span on its stream's rhythm (:func:`fitted_span_s` of its chunks)."""
    return fitted_span_s(getattr(r, "token_times_s", None), r.t_first_token_s, r.t_last_token_s)


def decode_stall_share(requests: Iterable[Any], kind: str) -> float:
    """The share of :func:`decode_tps`'s seconds that the streams' stalls took: 1 less its rate
    over the rate on the streams' rhythm, their stalled gaps taken out
    (:func:`~.stream_rate.without_stalls`). 0 where no stream stalled (or none recorded its
    chunks' times); NaN where :func:`decode_tps` is."""
    seconds = rhythm_s = 0.0
    for r, span in _decoded(requests, kind):
        times = getattr(r, "token_times_s", None)
        steady = fitted_span_s(without_stalls(times), 0.0, span) if times else span
        seconds += span
        rhythm_s += steady if steady > 0 else span
    return 1.0 - rhythm_s / seconds if seconds > 0 else NAN
