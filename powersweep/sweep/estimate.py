"""How long a sweep takes, in run seconds, from its options alone (the dry run says it).

The model follows the protocol every point goes through (:mod:`powersweep.sweep.measurement`):
a settle under load, the wait for a steady temperature (at least the trailing window its slope
is fitted over, the usual case: caps 10-20 W apart move the temperature by a degree or two),
each prompt's time-bounded window, and the margin and hand-over between
points; before the first point, the warm-up (time-bounded: usually to its bound on a cold card,
which is still heating) and the load's set-up (the concurrency probe, the prefill calibration);
after the last, the confirm phase's re-measurements (metric prompt only) of the points tied with
the best, which caps 10-20 W apart (and a clock sweep's flat curve) nearly always have. An
adaptive sweep is counted at its budget.
"""

from __future__ import annotations

import math

from powersweep.sweep.loads.warmup import WARMUP_REQUEST_SHARE, WARMUP_WINDOWS
from powersweep.sweep.options import SweepOptions
from powersweep.sweep.planning.confirm import CONFIRM_MAX_CAPS
from powersweep.sweep.planning.strategy import DEFAULT_COARSE_STEPS, MAX_CAPS_SHARE
from powersweep.sweep.sampling.thermal import CARRY_DRAW_W, THERMAL_TRAIL_S

PROMPTS_PER_POINT = {"decode-single": 2, "decode-concurrent": 2, "prefill-heavy": 1}
# What auto settle takes under load (the detector's trailing window plus the first busy
# readings), at most --settle-seconds.
AUTO_SETTLE_S = 0.6
# Run seconds per point beyond its windows and settle: the requests' tails, the hand-over from
# one point to the next (rows written, the next point set).
POINT_OVERHEAD_S = 0.3
# The first short request of each prompt kind in the warm-up (it measures the rate).
PROBE_S = 1.5
# decode-concurrent: the streams' ramp before each window opens, the scheduling check, and the
# windows of the concurrency probe (N = 1, 2, 4, ... up to the pick).
RAMP_S = 1.0
SCHEDULING_CHECK_S = 2.0
# An adaptive sweep usually settles its answer this many caps short of its budget.
ADAPTIVE_SHORT_OF_BUDGET = 1
# Caps this far apart or closer are usually tied with the best near a peak (TPS/W moves a
# fraction of a percent per 10 W there): the confirm phase re-measures two of them.
TIE_SPACING_W = 20.0
# prefill-heavy: calibration requests, each about the prefill time asked for.
CALIBRATION_REQUESTS = 3
# Points that wait for a steady temperature in a dense sweep: the first two (the card still
# heating from its warm-up); every later one a step from a steady one carries its steadiness,
# unless the grid's steps are jumps (wider than the carry's CARRY_DRAW_W): then every point waits.
THERMAL_WAITING_POINTS = 2


def estimate_run_s(options: SweepOptions, n_points: int, spacing_w: float | None = None) -> float:
    """Run seconds a sweep of ``n_points`` planned points takes.

    Args:
        options: The sweep's options.
        n_points: The points planned (an adaptive sweep measures at most its budget of them).
        spacing_w: The typical step between the planned caps (None: the default grid's): caps
            further apart than :data:`TIE_SPACING_W` differ by more than their noise near a
            peak, so nothing is confirmed; a clock sweep's flat curve nearly always has ties.
    """
    mode = options.load_mode
    window = options.target_cap_seconds
    prompts = PROMPTS_PER_POINT.get(mode, 1)
    measured = _points_measured(options, n_points)
    settle = min(AUTO_SETTLE_S, options.settle_seconds) if options.settle == "auto" else 0.0
    if options.settle == "fixed":
        settle = options.settle_seconds
    thermal = 0.0
    if not options.observe_only and options.thermal_wait_seconds > 0:
        # the slope is judged once its trailing window since the point was set is full
        thermal = max(0.0, min(THERMAL_TRAIL_S - settle, options.thermal_wait_seconds))
    ramp = RAMP_S if mode == "decode-concurrent" else 0.0
    per_point = settle + prompts * (window + ramp) * options.bench_runs + POINT_OVERHEAD_S
    # a point next to a steady one carries its steadiness: the first points (a card still
    # heating from the warm-up) and jumps wait
    spacing = options.step_size_w if spacing_w is None else spacing_w
    waiting = min(measured, THERMAL_WAITING_POINTS)
    jumps = options.strategy == "adaptive" or spacing > CARRY_DRAW_W
    if jumps and not options.clock_axis:
        # no point carries the last one's steadiness: a grid's steps are wider than a carried
        # point may move, and an adaptive sweep's points jump (its coarse pass, then back and
        # forth between the regions it refines)
        waiting = measured
    waits = waiting * thermal
    confirm = 0.0
    ties = options.clock_axis or spacing <= TIE_SPACING_W
    if options.confirm and not options.observe_only and measured >= 2 and ties:
        # an adaptive sweep measures caps a step apart only at the peak: ties there half the time
        # and so does a grid as coarse as the tie spacing, whose caps near the peak differ by
        # about their noise
        coarse = spacing >= TIE_SPACING_W and not options.clock_axis
        expected = (
            CONFIRM_MAX_CAPS / 2 if options.strategy == "adaptive" or coarse else (CONFIRM_MAX_CAPS)
        )
        # a confirmed point is a jump back to the best: it waits for its temperature
        confirm = min(expected, measured) * (settle + thermal + window + ramp + POINT_OVERHEAD_S)
    return _warmup_s(options) + _prepare_s(options) + measured * per_point + waits + confirm


def _points_measured(options: SweepOptions, n_points: int) -> int:
    if options.observe_only:
        return min(1, n_points)
    if options.strategy != "adaptive" or options.clock_axis:
        return n_points
    coarse = math.ceil(n_points / DEFAULT_COARSE_STEPS) + 1
    budget = min(n_points, max(coarse, int(MAX_CAPS_SHARE * n_points)))
    # the planner settles the answer a cap or so short of its budget on most curves
    return max(coarse, budget - ADAPTIVE_SHORT_OF_BUDGET)


def _warmup_s(options: SweepOptions) -> float:
    if options.warmup_requests <= 0:
        return 0.0
    kinds = 2
    sized = (
        (options.warmup_requests - 1) * kinds * WARMUP_REQUEST_SHARE * options.target_cap_seconds
    )
    return min(WARMUP_WINDOWS * options.target_cap_seconds, kinds * PROBE_S + sized)


def _prepare_s(options: SweepOptions) -> float:
    if options.load_mode == "prefill-heavy":
        return CALIBRATION_REQUESTS * options.prefill_seconds
    if options.load_mode != "decode-concurrent":
        return 0.0
    if options.concurrency is not None:
        return SCHEDULING_CHECK_S
    length = max(2.0, options.target_cap_seconds / 3.0) + RAMP_S
    steps = math.floor(math.log2(max(1, options.max_concurrency_probe))) + 1
    # the probe usually stops a step past the knee, about half way up to its limit
    return SCHEDULING_CHECK_S + length * max(1, math.ceil(steps / 2))
