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
from powersweep.flags import MEASUREMENT, flag

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
    """How long a point measures (each field's meaning is its flag's help and doc; a
    precision of 0: always measure to the maximum)."""

    # under a second of load is a handful of tokens: no rate, no draw median worth the name
    max_s: float = flag(
        10.0,
        "--target-cap-seconds",
        metavar="S",
        help="Most seconds each point measures.",
        doc="The most run seconds of each point's metric window (all its rounds together; a "
        "request may run on for a margin of at most 10% of a window, 1.5 s per point in all, "
        "then it is cut).",
        panel=MEASUREMENT,
        bounds=(1.0, 3600.0),
    )
    # 3 s: a slow card (16 TPS) still streams ~50 tokens and the sampler reads ~6 ticks per
    # prompt
    min_s: float = flag(
        3.0,
        "--min-cap-seconds",
        metavar="S",
        help="Seconds of a point's first window.",
        doc="Run seconds of each prompt's first window per point; the point measures on "
        "(its metric's prompt only) until its TPS/W is known to --precision, is clearly apart "
        "from the best point so far, or --target-cap-seconds is reached.",
        panel=MEASUREMENT,
        bounds=(1.0, 3600.0),
    )
    # a 95% half-width of TPS/W (statistics only: measuring longer does not remove the drift's
    # bias, waiting does); a goal finer than 0.01% would never be met before the maximum window
    precision_pct: float = flag(
        0.5,
        "--precision",
        metavar="PCT",
        help="Goal: TPS/W to ± this % (95%).",
        doc="Precision goal of each point: the 95% half-width of its TPS/W, in percent, from "
        "its own measurements (0.5: a neighbour 10 W away near the sweet spot is told apart).",
        panel=MEASUREMENT,
        bounds=(0.01, 100.0),
    )

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
