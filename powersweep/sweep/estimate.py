"""How long a sweep takes, in run seconds, from its options alone (the dry run says it).

The reasoning: docs/reference.md, "powersweep.sweep.estimate".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from powersweep.clock import Clock
from powersweep.errors import UsageError
from powersweep.sweep.loads.serving import drain_s, lead_s
from powersweep.sweep.loads.warmup import WARMUP_REQUEST_SHARE, WARMUP_WINDOWS
from powersweep.sweep.options import SweepOptions
from powersweep.sweep.planning.confirm_plan import CONFIRM_MAX_CAPS
from powersweep.sweep.planning.strategy import DEFAULT_COARSE_STEPS, MAX_CAPS_SHARE

PROMPTS_PER_POINT = {"decode-single": 2, "decode-concurrent": 2, "prefill-heavy": 1, "serving": 1}
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
# Caps this far apart or closer can tie with the best near a peak (TPS/W moves about 1% per 10 W
# there, twice the default precision): the confirm phase re-measures two, in this share of
# power sweeps (the README sweep, seeds 1-20: 3 of 20, 2 of 20 before issue 44's intervals) and
# about half of clock sweeps (a flat curve).
TIE_SPACING_W = 10.0
CONFIRM_SHARE = {False: 0.15, True: 0.5}
# prefill-heavy: calibration requests, each about the prefill time asked for.
CALIBRATION_REQUESTS = 3
# A point waits as long as the temperature still to come would bias it where its drift could
# change the answer (the first for its whole bound: a card still heating from its warm-up). A
# step from the last point waits, on average, this share of the bound (the README sweep's 10 W
# steps, seeds 1-6: 0.125; only the steps near the best wait), a jump (a coarser grid, the
# confirm phase) this one (seeds 1-6: 0.42 on 20 W steps, 0.58 on 40 W steps).
STEP_WAIT_SHARE = 0.12
JUMP_WAIT_SHARE = 0.5
# An adaptive sweep's points after its first: its coarse pass's jumps wait, its refinements near
# the peak seldom (the RTX 3090 profile, seeds 1-6: 0.33 of the bound on average).
ADAPTIVE_WAIT_SHARE = 0.35
# A grid's steps wider than this are jumps: a 20 W step already waits as one (above).
JUMP_SPACING_W = 10.0
# Points far from the best stop after their first round; those near it (about this many on a
# grid as fine as the tie spacing, one on a coarser one) measure on for about this share of
# what the maximum window leaves, in a round or two (each with the load's fixed costs, a ramp):
# the README sweep, seeds 1-20, measured 1.08 rounds a point, 132 s of windows in all.
NEAR_BEST_POINTS = 3
MEASURED_ON_SHARE = 0.2
NEAR_BEST_ROUNDS = 1.5


def estimate_run_s(options: SweepOptions, n_points: int, spacing_w: float | None = None) -> float:
    """Run seconds a sweep of ``n_points`` planned points is expected to take.

    Args:
        options: The sweep's options.
        n_points: The points planned (an adaptive sweep measures at most its budget of them).
        spacing_w: The typical step between the planned caps (None: the default grid's): caps
            further apart than :data:`TIE_SPACING_W` differ by more than their noise near a
            peak, so nothing is confirmed; a clock sweep's flat curve nearly always has ties.
    """
    return _run_s(options, n_points, spacing_w, bound=False)


def bound_run_s(options: SweepOptions, n_points: int, spacing_w: float | None = None) -> float:
    """The most run seconds the same sweep may take: every point measured to its maximum
    window, every wait to its bound, the confirm phase at its most (arguments as
    :func:`estimate_run_s`)."""
    return _run_s(options, n_points, spacing_w, bound=True)


def first_window_s(options: SweepOptions) -> float:
    """Run seconds of a point's first window per prompt (prefill-heavy: two prompts at least)."""
    load_min = 2.0 * options.prefill_seconds if options.load.mode == "prefill-heavy" else 0.0
    return min(options.measure.windows.max_s, max(options.measure.windows.min_s, load_min))


def _run_s(options: SweepOptions, n_points: int, spacing_w: float | None, *, bound: bool) -> float:
    mode = options.load.mode
    first = first_window_s(options)
    left = options.measure.windows.max_s - first
    prompts = PROMPTS_PER_POINT.get(mode, 1)
    measured = points_measured(options, n_points)
    settle = (
        min(AUTO_SETTLE_S, options.measure.settle_s)
        if options.measure.settle_mode == "auto"
        else 0.0
    )
    if options.measure.settle_mode == "fixed" or bound:
        settle = options.measure.settle_s
    thermal = 0.0
    if not options.safety.observe_only and options.measure.thermal_wait_max_s > 0:
        thermal = options.measure.thermal_wait_max_s
    ramp = RAMP_S if mode == "decode-concurrent" else 0.0
    if mode == "serving":
        # each round's lead before its window, and its requests' drain after it (at most)
        ramp = lead_s(first) + drain_s(first)
    spacing = options.points.step_size_w if spacing_w is None else spacing_w
    per_point = settle + prompts * (first + ramp) * options.load.bench_runs + POINT_OVERHEAD_S
    fine = options.points.clock_axis or (
        spacing <= TIE_SPACING_W and options.points.strategy != "adaptive"
    )
    # an adaptive sweep brackets its peak with one point; a grid has a few near its best
    near = NEAR_BEST_POINTS if fine else 1
    if left <= 0:
        on = 0.0
    elif bound:
        # every point to its maximum, in rounds of at least half the first window
        on = measured * (left + left / (first / 2) * ramp)
    else:
        on = min(near, measured) * (MEASURED_ON_SHARE * left + NEAR_BEST_ROUNDS * ramp)
    # every point waits as its drift needs: the first its bound, a step or a jump a share of it
    jumps = spacing > JUMP_SPACING_W and not options.points.clock_axis
    if options.points.strategy == "adaptive" and not options.points.clock_axis:
        later = ADAPTIVE_WAIT_SHARE
    else:
        later = JUMP_WAIT_SHARE if jumps else STEP_WAIT_SHARE
    jump = thermal if bound else JUMP_WAIT_SHARE * thermal
    step = thermal if bound else later * thermal
    waits = min(measured, 1) * thermal + max(0, measured - 1) * step
    confirm = 0.0
    ties = options.points.clock_axis or spacing <= TIE_SPACING_W or bound
    if options.points.confirm and not options.safety.observe_only and measured >= 2 and ties:
        # each point's own precision separates neighbours whose TPS/W differ by more than
        # about half a percent: a power grid seldom ties at its peak, a clock curve often
        share = CONFIRM_SHARE[options.points.clock_axis]
        expected = CONFIRM_MAX_CAPS if bound else CONFIRM_MAX_CAPS * share
        # a confirmed point is a jump back to the best: it waits for its temperature; it
        # measures the metric's prompt only
        one = first + ramp + (left if bound else MEASURED_ON_SHARE * left)
        confirm = min(expected, measured) * (settle + jump + one + POINT_OVERHEAD_S)
    # a point read again at the end (the run-to-run term): its metric's prompt, as a confirmed
    # point. The first settled point is read, which seldom contends for the answer: it waits as
    # a step on a fine grid does (the coverage bench's 192 runs: 0.15 s on average), its bound
    # at most
    reference = 0.0
    if measured >= 1:
        again = first + ramp + (left if bound else 0.0)
        wait = thermal if bound else STEP_WAIT_SHARE * thermal
        reference = settle + wait + again + POINT_OVERHEAD_S
    setup = _warmup_s(options) + _prepare_s(options)
    return setup + measured * per_point + on + waits + confirm + reference


def points_measured(options: SweepOptions, n_points: int) -> int:
    """The points a sweep of ``n_points`` planned likely measures before its confirm phase: an
    adaptive sweep a cap or so short of its budget, an observe-only run one."""
    if options.safety.observe_only:
        return min(1, n_points)
    if options.points.strategy != "adaptive" or options.points.clock_axis:
        return n_points
    coarse = math.ceil(n_points / DEFAULT_COARSE_STEPS) + 1
    budget = min(n_points, max(coarse, int(MAX_CAPS_SHARE * n_points)))
    # the planner settles the answer a cap or so short of its budget on most curves
    return max(coarse, budget - ADAPTIVE_SHORT_OF_BUDGET)


def _warmup_s(options: SweepOptions) -> float:
    if options.load.warmup_requests <= 0:
        return 0.0
    kinds = 2
    sized = (
        (options.load.warmup_requests - 1)
        * kinds
        * WARMUP_REQUEST_SHARE
        * options.measure.windows.max_s
    )
    return min(WARMUP_WINDOWS * options.measure.windows.max_s, kinds * PROBE_S + sized)


def _prepare_s(options: SweepOptions) -> float:
    if options.load.mode == "prefill-heavy":
        return CALIBRATION_REQUESTS * options.prefill_seconds
    if options.load.mode != "decode-concurrent":
        return 0.0
    if options.load.concurrency is not None:
        return SCHEDULING_CHECK_S
    length = max(2.0, options.measure.windows.max_s / 3.0) + RAMP_S
    steps = math.floor(math.log2(max(1, options.load.max_concurrency_probe))) + 1
    # the probe usually stops a step past the knee, about half way up to its limit
    return SCHEDULING_CHECK_S + length * max(1, math.ceil(steps / 2))


def estimate_wall_s(
    options: SweepOptions,
    n_points: int,
    time_scale: float = 1.0,
    caps_w: Sequence[float] = (),
) -> float:
    """Wall time of a sweep of ``n_points`` points at ``time_scale``
    (:func:`~powersweep.sweep.estimate.estimate_run_s`; ``caps_w``: the planned caps)."""
    return estimate_run_s(options, n_points, planned_spacing_w(caps_w)) / max(time_scale, 1e-9)


def bound_wall_s(
    options: SweepOptions,
    n_points: int,
    time_scale: float = 1.0,
    caps_w: Sequence[float] = (),
) -> float:
    """The most wall time a sweep of ``n_points`` points may take at ``time_scale``
    (:func:`~powersweep.sweep.estimate.bound_run_s`: every point measured to its maximum)."""
    return bound_run_s(options, n_points, planned_spacing_w(caps_w)) / max(time_scale, 1e-9)


def planned_spacing_w(caps_w: Sequence[float]) -> float | None:
    """The median step between the planned caps (None: fewer than two)."""
    caps = sorted(set(caps_w))
    steps = sorted(b - a for a, b in itertools.pairwise(caps))
    return steps[len(steps) // 2] if steps else None


# The longest plan a sweep takes on: past a day (in run time, as on real hardware) the card,
# the server or the machine changes under it, and nobody means it.
MAX_PLAN_S = 24 * 3600.0


def check_plan_time(
    options: SweepOptions,
    n_points: int,
    clock: Clock | None = None,
    *,
    noun: str,
    fewer: str,
) -> None:
    """Refuse a plan whose run time may pass :data:`MAX_PLAN_S` (its bound, :func:`bound_wall_s`
    at real speed: every point measured to its maximum window), whatever its axis: caps and clock
    points alike; and one whose wall time on ``clock`` does (a simulated rig slowed far below real
    time).

    Args:
        options: The sweep's options.
        n_points: The points planned.
        clock: The rig's clock (its wall time bounds the plan too).
        noun: What the axis calls its points (``caps``, ``points``).
        fewer: The flags that plan fewer of them.

    Raises:
        UsageError: One line with the plan's size, its bound and what to change.
    """
    estimate_s = bound_wall_s(options, n_points, 1.0)
    wall_s = clock.wall_s(estimate_s) if clock is not None else None
    if estimate_s <= MAX_PLAN_S and wall_s is not None and wall_s > MAX_PLAN_S:
        raise UsageError(
            f"this plan's {estimate_s / 3600:.1f} h of run time would take about "
            f"{wall_s / 3600:.3g} h of wall time on the simulated rig's clock (more than a day): "
            "raise --time-scale or --sim-pace, or drop it"
        )
    if estimate_s <= MAX_PLAN_S:
        return
    raise UsageError(
        f"this plan measures {n_points} {noun} and may take up to "
        f"{estimate_s / 3600:.1f} h (more than a day, up to {options.measure.windows.max_s:g} s of "
        f"load per prompt each): measure fewer {noun} ({fewer}) or shorter windows "
        "(--target-cap-seconds)"
    )
