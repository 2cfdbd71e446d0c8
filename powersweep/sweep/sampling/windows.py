"""Sequential windows: a point measures until its precision is what the decision needs.

A point is measured in rounds, each as long as the precision still missing predicts, never past
the maximum (``--target-cap-seconds``); after each round its own precision decides whether it is
precise, clearly apart from the best, or measured on.

The reasoning: docs/precision.md, "powersweep.sweep.sampling.windows".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from powersweep.analysis.precision import Reading

# The shortest first round per prompt, run seconds: a slow card (16 TPS) still streams ~50
# tokens and the sampler reads ~6 ticks per prompt.
DEFAULT_MIN_WINDOW_S = 3.0
# The goal: a 95% half-width of TPS/W, percent (statistics only: measuring longer does not
# remove the drift's bias, waiting does).
DEFAULT_PRECISION_PCT = 0.5
# A next round lasts at least this share of the minimum window (a round has fixed costs: the
# first token of each request, the streams' ramp).
MIN_ROUND_SHARE = 0.5

STOP_PRECISE = "precise"
STOP_SEPARATED = "separated"
STOP_MAX = "max window"
STOP_FAILED = "failed"
STOP_ONE_ROUND = "one round"


@dataclass(frozen=True)
class WindowPolicy:
    """How long a point measures.

    Attributes:
        min_s: Run seconds of the first round per prompt.
        max_s: The most run seconds of the metric's windows of a point, all rounds together.
        precision_pct: The goal: a 95% half-width of the point's TPS/W, percent (0: always
            measure to the maximum).
    """

    min_s: float = DEFAULT_MIN_WINDOW_S
    max_s: float = 10.0
    precision_pct: float = DEFAULT_PRECISION_PCT

    def first_s(self, load_min_s: float = 0.0) -> float:
        """The first round's window: the minimum (at least what the load needs), at most the
        maximum."""
        return min(self.max_s, max(self.min_s, load_min_s))


def stop_reason(
    policy: WindowPolicy,
    measured_s: float,
    reading: Reading,
    best: Reading | None,
    load_min_s: float = 0.0,
) -> str | None:
    """Why the point stops measuring now, or None to measure on.

    Args:
        policy: The bounds and the goal.
        measured_s: Run seconds of the metric's windows so far.
        reading: The point's reading so far.
        best: The best other point measured so far (None: none yet).
        load_min_s: The load's own shortest window (:func:`round_floor_s`).
    """
    if policy.min_s >= policy.max_s:
        return STOP_ONE_ROUND
    if measured_s >= policy.max_s - 1e-6 or not math.isfinite(reading.tps_per_w):
        return STOP_MAX
    # what more time at the point shrinks: its own readings' half-width (the run-to-run term is
    # carried in every point's stated interval, and no longer window removes it)
    within = reading.within_rel
    if math.isfinite(within) and within <= policy.precision_pct / 100:
        return STOP_PRECISE
    if best is not None and math.isfinite(reading.stat_u95_rel) and not reading.tied_with(best):
        return STOP_SEPARATED
    if measured_s + round_floor_s(policy, load_min_s) > policy.max_s + 1e-6:
        # what is left is shorter than a round is worth: the bound is reached
        return STOP_MAX
    return None


def round_floor_s(policy: WindowPolicy, load_min_s: float = 0.0) -> float:
    """The shortest next round: a share of the minimum window, and at least half the load's
    own minimum (one whole prefill-heavy prompt, as long as the last one took)."""
    return max(MIN_ROUND_SHARE * policy.min_s, load_min_s / 2.0)


def next_round_s(
    policy: WindowPolicy, measured_s: float, reading: Reading, load_min_s: float = 0.0
) -> float:
    """Run seconds of the next round: what the precision still missing predicts, within the
    bounds (a half-width shrinks as one over the square root of the seconds measured); at
    least half the load's own minimum (one prefill-heavy prompt)."""
    left = policy.max_s - measured_s
    floor = round_floor_s(policy, load_min_s)
    goal = policy.precision_pct / 100.0
    u = reading.within_rel
    if goal > 0 and math.isfinite(u) and u > 0:
        wanted = measured_s * ((u / goal) ** 2 - 1.0)
    else:
        wanted = left
    return max(min(floor, left), min(left, max(floor, wanted)))
