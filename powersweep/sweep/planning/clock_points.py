"""Which clock-lock points a clock sweep measures (``--axis sm-clock|mem-clock|grid``).

A clock point is a pair of clock locks held under one power limit (:class:`SweepPoint`).

The reasoning: docs/clocks.md, "powersweep.sweep.planning.clock_points".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence

from powersweep.errors import UsageError
from powersweep.sweep.gpu import SupportedClocks
from powersweep.sweep.planning.points import SweepPoint

__all__ = [
    "SweepPoint",
    "coarse_points",
    "load_mem_tiers",
    "measure_order",
    "parse_clocks",
    "plan_clock_points",
    "refine_points",
    "sm_step_mhz",
    "thin_sm_clocks",
]

DEFAULT_SM_STEPS = 11
# The lowest SM lock swept by default, as a fraction of the highest: far below it decode is
# compute-starved and nobody serves a model there.
SM_FLOOR_FRACTION = 0.35
# Memory tiers under this fraction of the highest are idle states (405, 810 MHz), not load tiers.
MEM_TIER_FLOOR_FRACTION = 0.4


def parse_clocks(text: str, flag: str) -> tuple[float, ...]:
    """Parse ``--sm-clocks 900,1200`` / ``--mem-clocks ...`` (MHz, optional ``MHz`` suffix).

    Raises:
        UsageError: Empty, or a value that is not a positive number.
    """
    values = []
    for part in text.split(","):
        token = part.strip().lower().removesuffix("mhz").strip()
        if not token:
            continue
        try:
            value = float(token)
        except ValueError:
            raise UsageError(f"{flag}: {part.strip()!r} is not a number of MHz") from None
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag}: {part.strip()!r} must be a positive number of MHz")
        values.append(value)
    if not values:
        raise UsageError(f"{flag} is empty; give MHz like {flag} 900,1200,1500")
    return tuple(dict.fromkeys(values))


def load_mem_tiers(supported: SupportedClocks) -> tuple[float, ...]:
    """The memory clocks a load runs at, descending (idle tiers left out)."""
    if not supported.mem_mhz:
        return ()
    top = max(supported.mem_mhz)
    return tuple(
        sorted({m for m in supported.mem_mhz if m >= MEM_TIER_FLOOR_FRACTION * top}, reverse=True)
    )


def thin_sm_clocks(listed: Iterable[float], steps: int = DEFAULT_SM_STEPS) -> tuple[float, ...]:
    """About ``steps`` SM clocks from the listed ones, evenly spread between a floor and the top.

    The floor is :data:`SM_FLOOR_FRACTION` of the top (or the lowest listed clock, if higher);
    each target snaps to the nearest listed clock, so every set-point is one the card offers.
    """
    clocks = sorted(set(listed))
    if not clocks:
        return ()
    top = clocks[-1]
    floor = max(clocks[0], SM_FLOOR_FRACTION * top)
    usable = [c for c in clocks if c >= floor - 1e-6] or clocks[-1:]
    if len(usable) <= steps:
        return tuple(usable)
    lo = usable[0]
    targets = [lo + (top - lo) * i / (steps - 1) for i in range(steps)]
    picked = {min(usable, key=lambda c: abs(c - t)) for t in targets}
    return tuple(sorted(picked))


def plan_clock_points(
    axis: str,
    supported: SupportedClocks | None,
    *,
    sm_clocks: Sequence[float] | None,
    mem_clocks: Sequence[float] | None,
    cap_w: float | None,
    mem_locks: bool = True,
) -> list[SweepPoint]:
    """The points of a clock sweep, ascending (SM within each memory tier).

    Args:
        axis: ``sm-clock``, ``mem-clock`` or ``grid``.
        supported: The card's supported clocks (None: unknown, so the clocks must be given).
        sm_clocks: ``--sm-clocks`` (None: from the supported clocks).
        mem_clocks: ``--mem-clocks`` (None: every load tier on ``mem-clock`` / ``grid``, no
            memory lock on ``sm-clock``).
        cap_w: ``--cap``: the limit held (None: the limit in force stays).
        mem_locks: False when the card refuses memory locks (the grid then sweeps SM only).

    Raises:
        UsageError: Clocks cannot be planned (none given and none listed).
    """
    tiers: tuple[float | None, ...]
    if axis == "sm-clock" or not mem_locks:
        tiers = (mem_clocks[0],) if mem_clocks and mem_locks else (None,)
    elif mem_clocks:
        tiers = tuple(sorted(set(mem_clocks)))
    else:
        tiers = tuple(sorted(load_mem_tiers(supported))) if supported else ()
        if not tiers:
            raise UsageError("the card lists no memory clocks: give --mem-clocks")
    if axis == "mem-clock" and mem_locks:
        sms: tuple[float | None, ...] = (sm_clocks[0],) if sm_clocks else (None,)
        return [SweepPoint(cap_w, sm, mem) for mem in tiers for sm in sms]
    points = []
    for mem in tiers:
        if sm_clocks:
            sms = tuple(sorted(set(sm_clocks)))
        else:
            if supported is None:
                raise UsageError("the card lists no SM clocks: give --sm-clocks")
            key = mem if mem in supported.sm_mhz_by_mem else max(supported.mem_mhz, default=None)
            listed = supported.sm_mhz_by_mem.get(key, ()) if key is not None else ()
            sms = thin_sm_clocks(listed)
            if not sms:
                raise UsageError("the card lists no SM clocks: give --sm-clocks")
        points += [SweepPoint(cap_w, sm, mem) for sm in sms]
    return points


def sm_step_mhz(points: Sequence[SweepPoint]) -> float | None:
    """The median spacing of the SM set-points (one "SM step"), None with fewer than two."""
    sms = sorted({p.sm_lock_mhz for p in points if p.sm_lock_mhz is not None})
    gaps = sorted(b - a for a, b in itertools.pairwise(sms))
    return gaps[len(gaps) // 2] if gaps else None


def measure_order(points: Iterable[SweepPoint]) -> list[SweepPoint]:
    """Highest memory tier first, highest SM lock first within it (like caps: top down)."""
    return sorted(
        points,
        key=lambda p: (-(p.mem_lock_mhz or math.inf), -(p.sm_lock_mhz or math.inf)),
    )


def coarse_points(points: Sequence[SweepPoint]) -> list[SweepPoint]:
    """Adaptive first pass: every other SM lock of each tier, always with its ends."""
    out = []
    for tier in _by_tier(points).values():
        kept = tier[::2]
        if tier[-1] not in kept:
            kept.append(tier[-1])
        out += kept
    return out


def refine_points(
    candidates: Sequence[SweepPoint], measured: Mapping[SweepPoint, tuple[float, float]]
) -> list[SweepPoint]:
    """Adaptive refinement: the unmeasured SM neighbours of each tier's peak and, on a grid, of
    the points on the Pareto front of (TPS, W).

    Args:
        candidates: Every point the dense sweep would measure.
        measured: ``{point: (tps, power_w)}`` of the points measured ok so far.
    """
    if not measured:
        return []
    wanted: set[SweepPoint] = set()
    tiers = _by_tier(candidates)
    front = [
        p
        for p, (tps, w) in measured.items()
        if not any(
            o != p and ot >= tps and ow <= w and (ot > tps or ow < w)
            for o, (ot, ow) in measured.items()
        )
    ]
    # on one axis more TPS always costs more W, so every point is on the front: only the peak
    anchors = set(front) if len(tiers) > 1 else set()
    for tier in tiers.values():
        done = [p for p in tier if p in measured]
        if done:
            anchors.add(max(done, key=lambda p: measured[p][0] / measured[p][1]))
    for p in anchors:
        tier = tiers.get(p.mem_lock_mhz, [])
        if p not in tier:
            continue
        i = tier.index(p)
        for j in (i - 1, i + 1):
            if 0 <= j < len(tier) and tier[j] not in measured:
                wanted.add(tier[j])
    return measure_order(wanted)


def _by_tier(points: Iterable[SweepPoint]) -> dict[float | None, list[SweepPoint]]:
    tiers: dict[float | None, list[SweepPoint]] = {}
    for p in sorted(points, key=lambda p: p.sm_lock_mhz or 0.0):
        tiers.setdefault(p.mem_lock_mhz, []).append(p)
    return tiers
