"""Is one point's measurement self-consistent? Stalls, stuck streams, disagreeing prompts.

A server that stalls mid-point (a paused process, a sweep paused with Ctrl-Z) leaves figures
several times too low with nothing failed.

The reasoning: docs/reference.md, "powersweep.sweep.sampling.consistency".
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from powersweep.runformat import CUT_FINISHES

# A stream lost at least this many run seconds ...
MIN_LOST_S = 1.0
# ... and at least this share of its span: shorter pauses barely move its rate.
LOST_SHARE_OF_SPAN = 0.1
# A span is cut into slices to find the stream's own rhythm: the mean rate of the middle half of
# the slices that got tokens (a slice cut by a pause, or the burst that made up for one, falls
# outside it). Each slice holds this many token-bearing chunks on average ...
CHUNKS_PER_SLICE = 5
# ... with at most this many slices, and at least this many (fewer chunks cannot tell).
MAX_SLICES = 50
MIN_SLICES = 3
# A slice is at least this long: a load whose work comes in bursts (a few tenths of a second of
# steps, a gap of scheduling) streams in that rhythm, which slices shorter than it would read as
# its rate and its gaps as lost; a pause that matters is a second or more (MIN_LOST_S).
MIN_SLICE_S = 0.5
# Narrative/code ratio this many times off the other points' median ratio (either way) ...
RATIO_FACTOR = 1.5
# ... judged only against this many other points (one disturbed point must not be the yardstick).
MIN_OTHER_RATIOS = 3
# A prefill prompt's time to first token this many times what its peers took is an outlier.
TTFT_FACTOR = 1.5
# Peers a prompt is judged against: the point's other prompts, else the nearest points' rates.
MIN_TTFT_PEERS = 2
NEAREST_POINTS = 3
# A stream with fewer tokens in the window than this share of the median stream's is stuck.
STUCK_SHARE = 0.25
DECODE_KINDS = frozenset({"narr", "code"})


def lost_time_s(times_s: Sequence[float], end_s: float | None = None) -> float:
    """Run seconds a token stream produced nothing beyond its own rhythm.

    The span from the first token to the last (or to ``end_s``, when the stream was cut there)
    is cut into equal slices; the stream's own rate is the mean rate of the middle half of the
    slices that got tokens, and the lost time is the span less the time that rate needs for the
    tokens that arrived. A pause whose tokens came out in a burst afterwards (delayed reading,
    not a stalled server) loses nothing; a server that stopped loses the pause.

    Args:
        times_s: Arrival times of the token-bearing chunks, ascending.
        end_s: When the stream was cut (None: at its last token).

    Returns:
        The lost run seconds (0.0 with too few chunks to tell).
    """
    n = len(times_s)
    if n < 2:
        return 0.0
    first = times_s[0]
    last = times_s[-1] if end_s is None else max(end_s, times_s[-1])
    span = last - first
    if not span > 0:
        return 0.0
    k = min(MAX_SLICES, (n - 1) // CHUNKS_PER_SLICE, int(span / MIN_SLICE_S))
    if k < MIN_SLICES:
        # Too few chunks for a rhythm of slices: only a silence before the cut can tell, beyond
        # the rhythm of the chunks that came.
        rhythm = (times_s[-1] - first) / (n - 1)
        return max(0.0, last - times_s[-1] - 2.0 * rhythm) if end_s is not None else 0.0
    width = span / k
    counts = [0] * k
    # the first chunk marks the start (as a decode rate counts n - 1 intervals)
    for t in times_s[1:]:
        counts[min(k - 1, int((t - first) / width))] += 1
    busy = sorted(c for c in counts if c > 0)
    if not busy:
        return 0.0
    q = len(busy) // 4
    middle = busy[q : len(busy) - q] if len(busy) - 2 * q > 0 else busy
    rate = statistics.fmean(middle) / width
    return max(0.0, span - (n - 1) / rate)


def is_stall(lost_s: float, span_s: float) -> bool:
    """True when ``lost_s`` of a ``span_s`` stream is a stall (long, and a share of it)."""
    return (
        math.isfinite(lost_s)
        and span_s > 0
        and lost_s >= MIN_LOST_S
        and lost_s >= LOST_SHARE_OF_SPAN * span_s
    )


def stall_reason(requests: Iterable[Any]) -> str:
    """Why a decode request's token stream shows a stall (empty when none does).

    Completed and cut requests with token arrival times count; a request cut at its deadline is
    judged up to the cut, so a stall that outlasted the request is seen in its silence.
    """
    for r in requests:
        times = getattr(r, "token_times_s", None)
        if not r.ok or r.prompt_kind not in DECODE_KINDS or not times or len(times) < 2:
            continue
        end = r.t_end_s if r.finish_reason in CUT_FINISHES else None
        lost = lost_time_s(times, end)
        span = (times[-1] if end is None else max(end, times[-1])) - times[0]
        if is_stall(lost, span):
            return (
                f"a {r.prompt_kind} request's tokens stopped for {lost:.3g} s of its "
                f"{span:.3g} s (beyond its own rhythm): a stall"
            )
    return ""


def aggregate_stall_reason(requests: Iterable[Any], t0_s: float, t1_s: float, kind: str) -> str:
    """Why the aggregate arrivals of a window show every stream paused (empty when not)."""
    times = sorted(
        t
        for r in requests
        if r.prompt_kind == kind
        for t in (getattr(r, "token_times_s", None) or ())
        if t0_s <= t <= t1_s
    )
    if len(times) < 3:
        return ""
    lost = lost_time_s([t0_s, *times], t1_s)
    if is_stall(lost, t1_s - t0_s):
        return (
            f"the {kind} window's token arrivals (all streams) stopped for {lost:.3g} s of "
            f"{t1_s - t0_s:.3g} s: the server paused"
        )
    return ""


def stuck_stream_reason(
    requests: Iterable[Any], t0_s: float, t1_s: float, kind: str, n_streams: int
) -> str:
    """Why one stream of a window is stuck: far fewer tokens than the others (empty when not).

    Only with every stream served at once (no queue), where each should get its share.
    """
    per_stream = dict.fromkeys(range(n_streams), 0)
    for r in requests:
        if r.prompt_kind != kind or r.stream not in per_stream:
            continue
        per_stream[r.stream] += sum(
            1 for t in (getattr(r, "token_times_s", None) or ()) if t0_s <= t <= t1_s
        )
    if n_streams < 2:
        return ""
    median = statistics.median(per_stream.values())
    stuck = [i for i, c in per_stream.items() if c < STUCK_SHARE * median]
    if not median > 0 or not stuck:
        return ""
    return (
        f"stream {stuck[0]} of {n_streams} got {per_stream[stuck[0]]} token chunks in the "
        f"{kind} window where the median stream got {median:g}: a stuck stream"
    )


def ratio_reason(narr_tps: float, code_tps: float, other_ratios: Sequence[float]) -> str:
    """Why narrative and code rates disagree beyond the other points' spread (empty when not)."""
    usual = [x for x in other_ratios if math.isfinite(x) and x > 0]
    if len(usual) < MIN_OTHER_RATIOS or not (narr_tps > 0 and code_tps > 0):
        return ""
    median = statistics.median(usual)
    ratio = code_tps / narr_tps
    off = max(ratio / median, median / ratio)
    if off <= RATIO_FACTOR:
        return ""
    return (
        f"code/narrative rate ratio {ratio:.3g} is {off:.3g}x off the {median:.3g} of the other "
        "points: one of them was disturbed"
    )


def tps_ratio(narr_tps: float, code_tps: float) -> float:
    """``code_tps / narr_tps`` (NaN when either is not a positive number)."""
    return code_tps / narr_tps if narr_tps > 0 and code_tps > 0 else math.nan


def ratio_outliers(ratios: Mapping[Any, float]) -> list[Any]:
    """The points whose narrative/code ratio stands out from all the others'."""
    return [
        key
        for key, r in ratios.items()
        if ratio_reason(1.0, r, [x for k, x in ratios.items() if k != key])
    ]


def prefill_s_per_token(requests: Iterable[Any]) -> list[float]:
    """Time to first token per prompt token of each completed prefill request."""
    out = []
    for r in requests:
        if not r.ok or r.prompt_kind != "prefill" or not r.prompt_tokens:
            continue
        ttft = r.t_first_token_s - r.t_start_s
        if ttft > 0:
            out.append(ttft / r.prompt_tokens)
    return out


def _ranks(requests: Sequence[Any], windows: Sequence[tuple[str, float, float]]) -> dict[int, int]:
    """Each prefill request's rank in its window, by ``id`` of the request."""
    out: dict[int, int] = {}
    for _kind, t0, t1 in windows:
        inside = [r for r in requests if r.prompt_kind == "prefill" and t0 <= r.t_start_s <= t1]
        for k, r in enumerate(sorted(inside, key=lambda r: r.t_start_s)):
            out[id(r)] = k
    return out


def nearest_by_rank(
    by_rank: Mapping[float, Mapping[int, float]], position: float, n: int = NEAREST_POINTS
) -> dict[int, list[float]]:
    """Per rank, the figures of the ``n`` points nearest to ``position`` that have it."""
    ranks = {k for figures in by_rank.values() for k in figures}
    return {
        k: nearest({pos: f[k] for pos, f in by_rank.items() if k in f}, position, n) for k in ranks
    }


def nearest(
    figures: Mapping[float, float], position: float, n: int = NEAREST_POINTS
) -> list[float]:
    """The figures of the ``n`` points nearest to ``position`` (a cap or a lock, by distance)."""
    keys = sorted(figures)
    i = bisect.bisect_left(keys, position)
    lo, hi = i - 1, i
    out: list[float] = []
    while len(out) < n and (lo >= 0 or hi < len(keys)):
        take_lo = hi >= len(keys) or (lo >= 0 and position - keys[lo] <= keys[hi] - position)
        if take_lo:
            out.append(figures[keys[lo]])
            lo -= 1
        else:
            out.append(figures[keys[hi]])
            hi += 1
    return out


def prefill_by_rank(
    requests: Sequence[Any], windows: Sequence[tuple[str, float, float]]
) -> dict[int, float]:
    """Median time to first token per prompt token of the k-th prefill prompt of each window
    (k from 0), over the point's windows (a point measured in rounds has one per round)."""
    ranks: dict[int, list[float]] = {}
    rank_of = _ranks(requests, windows)
    for r in requests:
        ttft = r.t_first_token_s - r.t_start_s
        if id(r) in rank_of and r.ok and r.prompt_tokens and ttft > 0:
            ranks.setdefault(rank_of[id(r)], []).append(ttft / r.prompt_tokens)
    return {k: statistics.median(v) for k, v in ranks.items()}


def ttft_outlier_reason(
    requests: Sequence[Any],
    neighbours_s_per_token: Sequence[float],
    windows: Sequence[tuple[str, float, float]] = (),
    same_rank_nearby: Mapping[int, Sequence[float]] | None = None,
) -> str:
    """Why a prefill prompt's time to first token stands out (empty when none does).

    Each prompt is judged against the point's other prompts (the same size at the same card
    state, so their times agree); with fewer than :data:`MIN_TTFT_PEERS` of them, against the
    per-token time of the nearest points measured (prefill time moves smoothly with the clock:
    no step of the envelope makes it half again as long).

    A prompt that stands out is let be when the prompt of the same rank in its window took as
    long, per token, at the nearest points (``same_rank_nearby``, by rank): a difference
    between two prompts that every point shows is systematic (a first prompt after the
    keep-busy load, a cache), not a pause.
    """
    rank_of = _ranks(requests, windows)
    done = [
        r
        for r in requests
        if r.ok and r.prompt_kind == "prefill" and r.prompt_tokens and r.t_first_token_s > 0
    ]
    per_token = prefill_s_per_token(done)
    for k, r in enumerate(done):
        peers = per_token[:k] + per_token[k + 1 :]
        if len(peers) < MIN_TTFT_PEERS:
            peers = [x for x in neighbours_s_per_token if math.isfinite(x) and x > 0]
            if not peers:
                continue
        expected = statistics.median(peers) * r.prompt_tokens
        ttft = r.t_first_token_s - r.t_start_s
        if ttft > TTFT_FACTOR * expected and ttft - expected >= MIN_LOST_S:
            same = [
                x
                for x in (same_rank_nearby or {}).get(rank_of.get(id(r), -1), ())
                if math.isfinite(x) and x > 0
            ]
            if same and ttft <= TTFT_FACTOR * statistics.median(same) * r.prompt_tokens:
                continue  # as slow as its own rank elsewhere: systematic, not a pause
            return (
                f"a prefill prompt took {ttft:.3g} s to its first token where its peers took "
                f"{expected:.3g} s: the server paused"
            )
    return ""
