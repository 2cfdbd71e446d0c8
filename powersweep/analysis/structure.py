"""Structure of a power-cap curve: boost plateaus, draw ceilings and the regime of every cap.

A cap is *power-limited* while the board draws what the cap allows: draw rises one watt per watt
of cap.

The reasoning: docs/figures.md, "powersweep.analysis.structure".
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence

import numpy as np

from powersweep.analysis.binding import FOLLOWS_Z, tps_rise_z
from powersweep.analysis.binding import tps_sigmas as binding_sigmas
from powersweep.analysis.cap_points import (
    BOOST_PLATEAU,
    CEILING_HEADROOM_FRAC,
    CEILING_HEADROOM_STEPS,
    CEILING_SLOPE,
    CEILING_STEP_RISE_FRAC,
    DRAW_CEILING,
    LEVEL_ABOVE_CAP_SIGMAS,
    MIN_REGION_CAPS,
    NAN,
    ONE_MISSING_STEPS,
    POWER_LIMITED,
    THERMAL_LIMITED,
    UNDER_LOADED,
    CapPoint,
    Noise,
    Region,
    adjacent,
    binding_margin_w,
    estimate_noise,
    is_eligible,
    is_thermal,
    is_under_loaded,
    power_limited,
    typical_step_w,
)
from powersweep.analysis.curve_noise import Line, estimate
from powersweep.analysis.result_types import Regime

# A cap's TPS joins a flat region within this many standard deviations of a difference.
FLAT_SIGMAS = 3.0


def find_regions(
    points: Sequence[CapPoint],
    all_caps_w: Sequence[float],
    *,
    slowdown_temp_c: float = NAN,
    step_w: float | None = None,
) -> list[Region]:
    """Find boost plateaus and draw ceilings.

    Args:
        points: Measured caps (status ok, finite draw and TPS), sorted by cap.
        all_caps_w: Every cap of the sweep including failed ones (for the usual step and for the
            caps missing inside a region).
        slowdown_temp_c: The card's thermal slowdown threshold (NaN if unknown).
        step_w: The planned grid's step, W (run.json ``caps_planned``); None infers it from
            the caps. An adaptive sweep measures a subset of its grid: which measured caps are
            neighbours still follows their usual gap, but the draw ceiling's headroom rule
            (``CEILING_HEADROOM_STEPS``) is in grid steps, or a short ceiling at the top of the
            envelope would need two to four times the headroom a dense sweep asks.

    Returns:
        Regions, lowest cap first. A smooth power-limited curve gives none.
    """
    if len(points) < MIN_REGION_CAPS:
        return []
    gap_w = typical_step_w([p.cap_w for p in points] + list(all_caps_w))
    if not math.isfinite(gap_w) or gap_w <= 0:
        return []
    grid_step_w = step_w if step_w is not None and math.isfinite(step_w) and step_w > 0 else gap_w
    step_w = gap_w
    noise = estimate_noise(points, step_w)
    eligible = [is_eligible(p, slowdown_temp_c) for p in points]
    baseline = _tracking_headroom(points, step_w)

    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(points):
        if not eligible[i]:
            i += 1
            continue
        j = _grow(points, eligible, i, step_w, noise)
        lo, hi = _trim(points, i, j, baseline, noise)
        if hi - lo + 1 >= MIN_REGION_CAPS:
            spans.append((lo, hi))
            i = j + 1
        else:
            i += 1

    regions: list[Region] = []
    covered: set[float] = set()
    for lo, hi in spans:
        # A ceiling absorbs the noisy caps above its grown part; never report them twice.
        if points[lo].cap_w in covered:
            continue
        region = _classify(points, eligible, lo, hi, step_w, noise, all_caps_w, grid_step_w)
        if region is not None:
            regions.append(region)
            covered.update(region.caps_w)
    return _with_top_ceiling(regions, points, eligible, step_w, noise, all_caps_w)


def _with_top_ceiling(
    regions: list[Region],
    points: Sequence[CapPoint],
    eligible: Sequence[bool],
    step_w: float,
    noise: Noise,
    all_caps_w: Sequence[float],
) -> list[Region]:
    """Add (or extend down) the draw ceiling found from the draw alone, whatever TPS does.

    A ceiling is there when, up to the top of the sweep, the card draws clearly under every cap
    (by more than :func:`binding_margin_w`, the draw's noise against a binding cap) and the
    draw rises much less than the caps. It starts at the first cap whose draw falls short of it
    by more than that and stays short above it. The flat-region search also asks TPS to stay
    flat, so jittery TPS hid the lower part of such a ceiling.
    """
    margin = binding_margin_w(points, step_w)
    top = len(points) - 1

    def under(p: CapPoint) -> bool:
        return p.cap_total_w - p.power_w > margin

    def joined(a: CapPoint, b: CapPoint) -> bool:
        # Neighbours on the grid, or a gap physics fills: a higher cap never lowers the draw,
        # so every cap between draws at most b's draw, and when that is under a's own cap by
        # the margin, every one of them draws clearly under its cap too (an adaptive sweep's
        # sparse caps on a long ceiling).
        return adjacent(a, b, step_w, ONE_MISSING_STEPS) or (
            under(a) and b.power_w < a.cap_total_w - margin
        )

    if top < MIN_REGION_CAPS - 1 or not eligible[top] or not under(points[top]):
        return regions
    start = top
    while start > 0:
        a, b = points[start - 1], points[start]
        d_cap = b.cap_total_w - a.cap_total_w
        rise_ok = b.power_w - a.power_w < CEILING_STEP_RISE_FRAC * d_cap + 2.0 * noise.power_w
        if not (eligible[start - 1] and under(a) and rise_ok):
            break
        if not joined(a, b):
            break
        start -= 1
    # Another kind of region (a plateau) keeps its caps.
    others = [r for r in regions if r.kind != DRAW_CEILING]
    for r in others:
        while start <= top and points[start].cap_w <= r.end_w:
            start += 1
    while top - start + 1 >= MIN_REGION_CAPS:
        span = points[start:]
        if _slope([p.cap_total_w for p in span], [p.power_w for p in span]) <= CEILING_SLOPE:
            break
        start += 1
    if top - start + 1 < MIN_REGION_CAPS:
        return regions
    # The ceiling starts where the draw first falls short of the cap and stays short: the caps
    # below the part found flat, each short by more than the draw's noise, belong to it even
    # where the draw still rises with the cap there (it bends away from the cap, then levels).
    floor_w = max((r.end_w for r in others), default=-math.inf)
    while start > 0:
        a, b = points[start - 1], points[start]
        if not (eligible[start - 1] and under(a) and a.cap_w > floor_w):
            break
        if not joined(a, b):
            break
        start -= 1
    ceilings = [r for r in regions if r.kind == DRAW_CEILING]
    lowest = min([points[start].cap_w, *(r.start_w for r in ceilings)])
    members = _flat_top([p for p in points if p.cap_w >= lowest])
    if len(members) < MIN_REGION_CAPS:
        return regions
    measured = {p.cap_w for p in members}
    start_w, end_w = members[0].cap_w, members[-1].cap_w
    ceiling = Region(
        kind=DRAW_CEILING,
        start_w=start_w,
        end_w=end_w,
        power_w=float(statistics.median(p.power_w for p in members)),
        tps=float(statistics.median(p.tps for p in members)),
        caps_w=tuple(p.cap_w for p in members),
        missing_caps_w=tuple(
            sorted(c for c in set(all_caps_w) if start_w < c < end_w and c not in measured)
        ),
        escape_w=None,
    )
    return sorted([*others, ceiling], key=lambda r: r.start_w)


def _flat_top(members: Sequence[CapPoint]) -> list[CapPoint]:
    """A ceiling's caps from the lowest whose TPS no longer follows the cap: the draw under a
    cap says nothing of a bursty load (its window average understates the peaks the cap holds),
    and a cap that does not bind cannot change TPS."""
    members = list(members)
    while len(members) >= MIN_REGION_CAPS:
        sigma = tps_sigmas(members)
        # the lowest against the rest's level, weighted by their own noise (one noisy reading
        # among precise ones must not hide a step)
        weights = np.array([1.0 / (v * v) for v in sigma[1:]])
        rest = np.log([p.tps for p in members[1:]])
        level = float((weights * rest).sum() / weights.sum())
        spread = math.hypot(sigma[0], 1.0 / math.sqrt(float(weights.sum())))
        below = (level - math.log(members[0].tps)) / spread
        if not (below > FOLLOWS_Z or tps_rise_z(members, sigma) > FOLLOWS_Z):
            break
        members.pop(0)
    return members


def tps_sigmas(points: Sequence[CapPoint]) -> list[float]:
    """Each point's TPS noise (:func:`~.binding.tps_sigmas`), the curve's scatter read off these
    points' TPS falls (a curvature is no noise, so not the second differences' ``Noise``)."""
    line = Line(tuple(p.cap_w for p in points), tuple((p.tps,) for p in points), ())
    return binding_sigmas(points, estimate([line]))


def follows_cap(points: Sequence[CapPoint], k: int, *, upward_only: bool = False) -> bool:
    """Cap ``k`` (its draw under it) binds a bursty load: TPS rises beyond noise from the cap
    below, into the cap above or across the two, while the draw rises no faster than the caps.
    A cap that does not bind cannot change TPS; a draw jumping past the cap's step is a boost
    state escaping instead. ``upward_only``: only into the cap above (the adaptive planner's
    sparse caps: a rise from a binding cap far below says nothing of this one)."""
    sigma = tps_sigmas(points)
    pairs = ((k, k + 1),) if upward_only else ((k - 1, k), (k, k + 1), (k - 1, k + 1))
    for a, b in pairs:
        if a < 0 or b >= len(points):
            continue
        pa, pb = points[a], points[b]
        d_cap = pb.cap_total_w - pa.cap_total_w
        rise = math.log(pb.tps / pa.tps) / math.hypot(sigma[a], sigma[b])
        if d_cap > 0 and rise > FOLLOWS_Z and pb.power_w - pa.power_w <= d_cap:
            return True
    return False


def regimes(
    points: Sequence[CapPoint],
    regions: Sequence[Region],
    *,
    slowdown_temp_c: float = NAN,
) -> list[Regime]:
    """The regime of every measured cap, with a ``bound`` hint where SM clocks are known.

    Args:
        points: Measured caps, sorted by cap.
        regions: Regions from :func:`find_regions`.
        slowdown_temp_c: The card's thermal slowdown threshold (NaN if unknown).

    Returns:
        One :class:`Regime` a cap; its ``bound`` is ``bandwidth``, ``compute`` or None.
    """
    by_cap = {c: r.kind for r in regions for c in r.caps_w}
    bounds = _bounds(points)
    step_w = typical_step_w([p.cap_w for p in points])
    margin = binding_margin_w(points, step_w)
    out: list[Regime] = []
    for k, (p, bound) in enumerate(zip(points, bounds, strict=True)):
        if is_under_loaded(p):
            regime = UNDER_LOADED
        elif is_thermal(p, slowdown_temp_c):
            regime = THERMAL_LIMITED
        elif p.cap_w in by_cap:
            regime = by_cap[p.cap_w]
        elif power_limited(p, margin) or follows_cap(points, k):
            regime = POWER_LIMITED
        else:
            regime = _unheld_regime(points, k)
        out.append(Regime(cap_w=p.cap_w, regime=regime, bound=bound))
    return out


def _unheld_regime(points: Sequence[CapPoint], k: int) -> str:
    """Neither the cap (no power-cap bit, clearly under it) nor heat holds cap ``k``.

    Where the draw climbs steeply next to it (into the cap above, or from the cap below at the
    top of the sweep), the card sits in a boost state under the cap: a boost plateau of one.
    Elsewhere the workload or memory bandwidth decides what it draws: a draw ceiling (the
    ``bound`` hint says which when SM clocks are known).
    """

    def climbs(a: CapPoint, b: CapPoint) -> bool:
        d_cap = b.cap_total_w - a.cap_total_w
        return d_cap > 0 and (b.power_w - a.power_w) / d_cap >= 0.5

    if k + 1 < len(points) and climbs(points[k], points[k + 1]):
        return BOOST_PLATEAU
    if k == len(points) - 1 and k > 0 and climbs(points[k - 1], points[k]):
        return BOOST_PLATEAU
    return DRAW_CEILING


def _tracking_headroom(points: Sequence[CapPoint], step_w: float) -> float | None:
    """Usual (cap - draw) while the draw follows the cap; None if the curve never tracks."""
    headrooms: list[float] = []
    for a, b in itertools.pairwise(points):
        d_cap = b.cap_total_w - a.cap_total_w
        if adjacent(a, b, step_w) and d_cap > 0 and (b.power_w - a.power_w) / d_cap >= 0.7:
            headrooms += [a.cap_total_w - a.power_w, b.cap_total_w - b.power_w]
    return float(statistics.median(headrooms)) if headrooms else None


def _grow(
    points: Sequence[CapPoint], eligible: Sequence[bool], i: int, step_w: float, noise: Noise
) -> int:
    """Extend a flat region from ``points[i]`` as far as it stays flat; return its last index."""
    j = i
    while j + 1 < len(points):
        if _joins(points, eligible, i, j, j + 1, step_w, noise):
            j += 1
            continue
        # One noisy cap must not end a region: accept it when the cap after it joins as well.
        if (
            j + 2 < len(points)
            and _joins(points, eligible, i, j, j + 1, step_w, noise, loose=True)
            and _joins(points, eligible, i, j + 1, j + 2, step_w, noise)
        ):
            j += 2
            continue
        break
    return j


def _joins(
    points: Sequence[CapPoint],
    eligible: Sequence[bool],
    i: int,
    j: int,
    k: int,
    step_w: float,
    noise: Noise,
    *,
    loose: bool = False,
) -> bool:
    """Whether cap ``k`` continues the flat region ``points[i..j]``."""
    prev, new = points[j], points[k]
    if not eligible[k] or not adjacent(prev, new, step_w, ONE_MISSING_STEPS):
        return False
    region = list(points[i : j + 1])
    recent = region[-3:]
    d_cap = new.cap_total_w - prev.cap_total_w
    n_gpus = new.cap_total_w / new.cap_w
    step_total = step_w * n_gpus
    # Neighbour test against the local level (median of the last caps): a slow drift passes.
    level = statistics.median(p.power_w for p in recent)
    local_sd = statistics.pstdev([p.power_w for p in region]) if len(region) >= 3 else 0.0
    tol = max(0.35 * step_total, 3.5 * noise.power_w, 2.5 * local_sd)
    if loose:
        tol *= 1.5
    tol = min(tol, (0.8 if not loose else 1.0) * max(d_cap, step_total))
    if abs(new.power_w - level) > tol:
        return False
    # The region as a whole must stay flat: bounded span and a slope well under 1 W per W.
    grown = [*region, new]
    draws = [p.power_w for p in grown]
    med = statistics.median(draws)
    if max(draws) - min(draws) > max(0.03 * med, 6.0 * noise.power_w, 2.0):
        return False
    if len(grown) >= 3 and _slope([p.cap_total_w for p in grown], draws) > 0.2:
        return False
    # TPS only jitters on a flat region, within its noise: a cap that does not bind cannot
    # change TPS (a run of caps whose TPS moves 8-10% a step is no plateau, whatever the draw).
    tps_level = statistics.median(p.tps for p in recent)
    # the new cap against the level of the recent ones (a median: its noise the smallest's)
    sigma = tps_sigmas([*recent, new])
    tps_tol = FLAT_SIGMAS * math.hypot(sigma[-1], min(sigma[:-1]))
    if tps_level > 0 and abs(new.tps - tps_level) / tps_level > tps_tol:
        return False
    if len(grown) >= 3:
        tps = [p.tps for p in grown]
        rise = _slope([p.cap_total_w for p in grown], tps) * (
            grown[-1].cap_total_w - grown[0].cap_total_w
        )
        if rise / statistics.median(tps) > tps_tol:
            return False
    # The card stays in one boost state: same P-state, SM clock not climbing with the cap.
    if math.isfinite(new.pstate) and math.isfinite(prev.pstate) and new.pstate != prev.pstate:
        return False
    clocks = [p.sm_clock_mhz for p in recent if math.isfinite(p.sm_clock_mhz)]
    if clocks and math.isfinite(new.sm_clock_mhz):
        clock_level = statistics.median(clocks)
        if abs(new.sm_clock_mhz - clock_level) > max(0.03 * clock_level, 30.0):
            return False
    return True


def _trim(
    points: Sequence[CapPoint], lo: int, hi: int, baseline: float | None, noise: Noise
) -> tuple[int, int]:
    """Drop edge caps that belong to the neighbouring power-limited stretch."""
    if hi - lo + 1 < MIN_REGION_CAPS:
        return lo, hi
    # The first cap may still be at its cap (the last power-limited one) while its draw happens
    # to sit near the plateau level: drop it when it is clearly (by more than the noise) closer
    # to its cap than to the plateau.
    if baseline is not None:
        first = points[lo]
        rest_level = statistics.median(p.power_w for p in points[lo + 1 : hi + 1])
        to_cap = abs((first.cap_total_w - first.power_w) - baseline)
        if to_cap + noise.power_w < abs(first.power_w - rest_level):
            lo += 1
        elif rest_level > first.cap_total_w - baseline + LEVEL_ABOVE_CAP_SIGMAS * noise.power_w:
            # The level above is more than this cap lets the card draw: the cap binds here, so
            # it is the last power-limited cap even though its draw sits within noise of the
            # level.
            lo += 1
    # A boost state shows as one SM clock: an edge cap on another clock is not part of it.
    for _ in range(2):
        if hi - lo + 1 <= MIN_REGION_CAPS:
            break
        inner = [p.sm_clock_mhz for p in points[lo + 1 : hi]]
        if not inner or not all(math.isfinite(c) for c in inner):
            break
        if max(inner) - min(inner) > 7.5:
            break
        centre = statistics.median(inner)
        if math.isfinite(points[lo].sm_clock_mhz) and abs(points[lo].sm_clock_mhz - centre) > 7.5:
            lo += 1
        elif math.isfinite(points[hi].sm_clock_mhz) and abs(points[hi].sm_clock_mhz - centre) > 7.5:
            hi -= 1
        else:
            break
    return lo, hi


def _classify(
    points: Sequence[CapPoint],
    eligible: Sequence[bool],
    lo: int,
    hi: int,
    step_w: float,
    noise: Noise,
    all_caps_w: Sequence[float],
    grid_step_w: float,
) -> Region | None:
    """Name a flat region: plateau if the draw escapes above it, ceiling if it runs to the top."""
    members = list(points[lo : hi + 1])
    level = float(statistics.median(p.power_w for p in members))
    n_gpus = members[0].cap_total_w / members[0].cap_w
    escape_tol = max(0.35 * step_w * n_gpus, 3.0 * noise.power_w, 0.01 * level)
    above = [(k, p) for k, p in enumerate(points) if k > hi and eligible[k]]
    # An escape keeps rising: a lone high cap followed by one back at the level is noise.
    escape = next(
        (
            p
            for n, (_, p) in enumerate(above)
            if p.power_w > level + escape_tol
            and (n + 1 == len(above) or above[n + 1][1].power_w > level + escape_tol)
        ),
        None,
    )
    if escape is not None:
        kind = BOOST_PLATEAU
    else:
        # No escape: caps above that were left out only by noise still belong to the ceiling.
        if any(abs(p.power_w - level) > escape_tol for _, p in above):
            return None
        members += [p for _, p in above]
        top = members[-1]
        headroom = top.cap_total_w - level
        if (
            headroom / top.cap_total_w < CEILING_HEADROOM_FRAC
            or headroom < CEILING_HEADROOM_STEPS * min(step_w, grid_step_w) * n_gpus
        ):
            return None
        kind = DRAW_CEILING
    start, end = members[0].cap_w, members[-1].cap_w
    measured = {p.cap_w for p in members}
    missing = tuple(sorted(c for c in set(all_caps_w) if start < c < end and c not in measured))
    return Region(
        kind=kind,
        start_w=start,
        end_w=end,
        power_w=float(statistics.median(p.power_w for p in members)),
        tps=float(statistics.median(p.tps for p in members)),
        caps_w=tuple(p.cap_w for p in members),
        missing_caps_w=missing,
        escape_w=escape.cap_w if escape is not None else None,
    )


def _slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of y on x (0 when x does not vary)."""
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    dx = xa - xa.mean()
    denom = float((dx * dx).sum())
    return float((dx * (ya - ya.mean())).sum() / denom) if denom > 0 else 0.0


def _bounds(points: Sequence[CapPoint]) -> list[str | None]:
    """Per-cap hint: bandwidth-bound (clock follows the cap, TPS does not) or compute-bound."""
    clocks = [p.sm_clock_mhz for p in points]
    if sum(math.isfinite(c) for c in clocks) < 3:
        return [None] * len(points)
    max_clock = max(c for c in clocks if math.isfinite(c))
    out: list[str | None] = []
    for k, p in enumerate(points):
        a = points[max(k - 1, 0)]
        b = points[min(k + 1, len(points) - 1)]
        if a is b or not all(math.isfinite(v) for v in (a.sm_clock_mhz, b.sm_clock_mhz)):
            out.append(None)
            continue
        if a.tps <= 0 or p.sm_clock_mhz <= 0 or not math.isfinite(p.sm_clock_mhz):
            out.append(None)
            continue
        d_clock = (b.sm_clock_mhz - a.sm_clock_mhz) / p.sm_clock_mhz
        d_tps = (b.tps - a.tps) / p.tps
        if d_clock > 0.02 and d_tps < 0.25 * d_clock:
            out.append("bandwidth")
        elif p.sm_clock_mhz >= 0.98 * max_clock and d_tps > 0.02 and d_clock < 0.01:
            out.append("compute")
        else:
            out.append(None)
    return out
