"""The confirm phase's plan: which points tied with the best are measured once more, and why.

Pure: it reads the typed analysis of the sweep so far (a power sweep's
``sweet_spot.tied_caps``, a clock sweep's ``peak.tied_points``) and returns the points and the
record ``run.json`` keeps under ``confirm``. The driver measures them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.analysis.result_types import JsonRecord, PowerAnalysis, known
from powersweep.runformat import as_float
from powersweep.sweep.planning.points import SweepPoint

# At most this many points tied with the best are measured again (the best included): the two
# most often best across the resamples decide nearly every tie, and each point re-measured costs
# a window (a sweep's time is a bound users plan by).
CONFIRM_MAX_CAPS = 2
NOTHING_TIED = "no other cap was within noise of the best"
NOTHING_TIED_POINTS = "no other clock point was within noise of the best"
NO_USABLE_CAP = "no usable cap"


@dataclass(frozen=True)
class ConfirmPlan:
    """What the confirm phase measures.

    Attributes:
        points: Points to measure once more, in measuring order (empty: nothing to confirm).
        record: ``run.json`` ``confirm`` so far: ``{caps_w, reason, skipped, tied_before,
            best_before_w}`` (a clock sweep adds ``points``).
    """

    points: tuple[SweepPoint, ...]
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def caps_w(self) -> tuple[float, ...]:
        """The caps of the points (a power sweep's confirm, by cap)."""
        return tuple(p.cap_w for p in self.points if p.cap_w is not None)


def plan_confirm(
    analysis: JsonRecord | None,
    max_caps: int = CONFIRM_MAX_CAPS,
    planned: Sequence[SweepPoint] = (),
) -> ConfirmPlan:
    """The points statistically tied with the best, most likely best first, at most
    ``max_caps``.

    With resampled noise, the points most often best across the resamples go first: a noisy
    point whose one reading may hide the optimum is worth measuring again more than a quiet one
    that is clearly second. Without it (an estimate from the curve's scatter), the best TPS/W
    first.

    Args:
        analysis: The analysis of the sweep so far (None when nothing could be analysed; an
            axis with no ties to confirm, the undervolt search's, confirms nothing).
        max_caps: The most points to measure again.
        planned: The sweep's planned points (a clock sweep's tied points are matched to them by
            their locks).

    Returns:
        The plan; with fewer than two tied points nothing is measured and ``skipped`` says why.
    """
    if isinstance(analysis, ClockAnalysis):
        return _plan_clock_confirm(analysis, max_caps, planned)
    power = analysis if isinstance(analysis, PowerAnalysis) else None
    sweet = power.sweet_spot if power is not None else None
    tied = [float(c) for c in (known(sweet.tied_caps) if sweet is not None else None) or []]
    record: dict[str, Any] = {"caps_w": [], "reason": None, "skipped": None}
    if power is None or sweet is None or len(tied) < 2:
        record["skipped"] = NOTHING_TIED if sweet is not None else NO_USABLE_CAP
        return ConfirmPlan((), record)
    tpw = {
        float(r.cap_w): float(r.figures.tps_per_w)
        for r in power.caps
        if r.figures.status == "ok" and r.figures.tps_per_w is not None
    }
    boot = known(sweet.bootstrap)
    share = {float(k): float(v) for k, v in (boot.best_share if boot else {}).items()}
    ranked = sorted((c for c in tied if c in tpw), key=lambda c: (-share.get(c, 0.0), -tpw[c], c))
    picked = sorted(ranked[:max_caps], reverse=True)
    lo, hi = known(sweet.interval_w) or (min(tied), max(tied))
    record.update(
        caps_w=picked,
        reason=(
            f"{len(tied)} caps ({lo:g}-{hi:g} W) were statistically tied with the best, "
            f"{float(sweet.cap_w):g} W ({known(sweet.noise_source)}); the {len(picked)} best "
            "measured once more"
        ),
        tied_before=tied,
        best_before_w=sweet.cap_w,
    )
    return ConfirmPlan(tuple(SweepPoint(c) for c in picked), record)


def _plan_clock_confirm(
    analysis: ClockAnalysis, max_caps: int, planned: Sequence[SweepPoint]
) -> ConfirmPlan:
    peak = analysis.peak
    record: dict[str, Any] = {"caps_w": [], "points": [], "reason": None, "skipped": None}
    by_locks = {(p.sm_lock_mhz, p.mem_lock_mhz): p for p in planned}
    tied = [
        by_locks[key]
        for t in (known(peak.tied_points) if peak is not None else None) or []
        if (key := (as_float(t.sm_lock_mhz, None), as_float(t.mem_lock_mhz, None))) in by_locks
    ]
    if peak is None or len(tied) < 2:
        record["skipped"] = NOTHING_TIED_POINTS if peak is not None else NO_USABLE_CAP
        return ConfirmPlan((), record)
    tpw = {
        (as_float(p.sm_lock_mhz, None), as_float(p.mem_lock_mhz, None)): float(p.figures.tps_per_w)
        for p in analysis.points
        if p.figures.tps_per_w is not None
    }
    share = {
        (as_float(s.sm_lock_mhz, None), as_float(s.mem_lock_mhz, None)): float(s.share or 0.0)
        for s in known(peak.best_share) or []
    }

    def rank(p: SweepPoint) -> tuple[float, float]:
        locks = (p.sm_lock_mhz, p.mem_lock_mhz)
        return (-share.get(locks, 0.0), -tpw.get(locks, 0.0))

    picked = sorted(tied, key=rank)[:max_caps]
    picked.sort(key=lambda p: (-(p.mem_lock_mhz or math.inf), -(p.sm_lock_mhz or math.inf)))
    best = SweepPoint(None, as_float(peak.sm_lock_mhz, None), as_float(peak.mem_lock_mhz, None))
    record.update(
        points=[p.to_dict() for p in picked],
        reason=(
            f"{len(tied)} clock points were statistically tied with the best, {best.label()} "
            f"({known(peak.noise_source)}); the {len(picked)} best measured once more"
        ),
        tied_before=[p.to_dict() for p in tied],
    )
    return ConfirmPlan(tuple(picked), record)
