"""Is one cap's measurement self-consistent? Stalls and disagreeing prompts, from the requests.

A server that stalls mid-cap (or a sweep paused with Ctrl-Z) leaves figures several times too low
with nothing failed. Two signs give it away, both judged against the run's own data: a request
whose token arrivals stop for far longer than its own rhythm, and narrative and code rates whose
ratio departs far from the ratio the other caps showed. Pure functions.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

# A gap between two tokens is a stall when it is this many times the request's own rhythm ...
GAP_FACTOR = 20.0
# ... and long enough to move the request's rate by this share (shorter hiccups do not matter) ...
GAP_SHARE_OF_SPAN = 0.25
# ... and at least this many run seconds ...
MIN_GAP_S = 3.0
# ... and at least this many wall seconds: a loaded machine can leave a process unscheduled for
# a fraction of a second, which a scaled (simulated) clock stretches into a long gap.
MIN_GAP_WALL_S = 0.25
# Narrative/code ratio this many times off the other caps' median ratio (either way) ...
RATIO_FACTOR = 1.5
# ... judged only against this many other caps (one disturbed cap must not become the yardstick).
MIN_OTHER_RATIOS = 3
DECODE_KINDS = frozenset({"narr", "code"})


def min_gap_s(time_scale: float) -> float:
    """The shortest gap, in run seconds, that counts as a stall on a clock at ``time_scale``."""
    return max(MIN_GAP_S, MIN_GAP_WALL_S * time_scale)


def stall_reason(requests: Iterable[Any], shortest_gap_s: float = MIN_GAP_S) -> str:
    """Why the requests show a stall (empty when none does).

    Completed decode requests with token arrival times are judged on the longest gap between
    two tokens; a request cut at its deadline also on the silence between its last token and
    the cut (a stall that outlasted the request leaves no gap, only a short burst).
    """
    for r in requests:
        times = getattr(r, "token_times_s", None)
        if not r.ok or r.prompt_kind not in DECODE_KINDS or not times or len(times) < 2:
            continue
        gaps = [b - a for a, b in itertools.pairwise(times)]
        span = times[-1] - times[0]
        if len(gaps) >= 3:
            big = max(gaps)
            rest = (span - big) / (len(gaps) - 1)
            if _is_stall(big, rest, span, shortest_gap_s):
                return (
                    f"a {r.prompt_kind} request's tokens stopped for {big:.3g} s mid-stream "
                    f"(its own rhythm: {rest * 1000:.3g} ms per token): a stall"
                )
        if r.finish_reason == "deadline":
            silence = r.t_end_s - times[-1]
            rhythm = span / len(gaps)
            if _is_stall(silence, rhythm, r.t_end_s - times[0], shortest_gap_s):
                return (
                    f"a {r.prompt_kind} request's tokens stopped {silence:.3g} s before its "
                    f"deadline cut it, after {len(times)} tokens: a stall"
                )
    return ""


def _is_stall(gap_s: float, rhythm_s: float, span_s: float, shortest_gap_s: float) -> bool:
    if not (math.isfinite(gap_s) and math.isfinite(span_s) and span_s > 0):
        return False
    return (
        gap_s >= shortest_gap_s
        and gap_s >= GAP_SHARE_OF_SPAN * span_s
        and gap_s > GAP_FACTOR * max(rhythm_s, 0.0)
    )


def ratio_reason(narr_tps: float, code_tps: float, earlier_ratios: Sequence[float]) -> str:
    """Why narrative and code rates disagree beyond the other caps' spread (empty when not)."""
    usual = [x for x in earlier_ratios if math.isfinite(x) and x > 0]
    if len(usual) < MIN_OTHER_RATIOS or not (narr_tps > 0 and code_tps > 0):
        return ""
    median = statistics.median(usual)
    ratio = code_tps / narr_tps
    off = max(ratio / median, median / ratio)
    if off <= RATIO_FACTOR:
        return ""
    return (
        f"code/narrative rate ratio {ratio:.3g} is {off:.3g}x off the {median:.3g} of the other "
        "caps: one of them was disturbed"
    )


def tps_ratio(narr_tps: float, code_tps: float) -> float:
    """``code_tps / narr_tps`` (NaN when either is not a positive number)."""
    return code_tps / narr_tps if narr_tps > 0 and code_tps > 0 else math.nan
