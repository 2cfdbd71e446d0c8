"""The confirm phase's plan: which points tied with the best are measured once more, and why.

Pure: it reads the analysis of the sweep so far (``analysis.json`` content: a power sweep's
``sweet_spot.tied_caps``, a clock sweep's ``peak.tied_points``) and returns the points and the
record ``run.json`` keeps under ``confirm``. The driver measures them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
    analysis: Mapping[str, Any],
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
        analysis: The analysis of the sweep so far (``{}`` when nothing could be analysed).
        max_caps: The most points to measure again.
        planned: The sweep's planned points (a clock sweep's tied points are matched to them by
            their locks).

    Returns:
        The plan; with fewer than two tied points nothing is measured and ``skipped`` says why.
    """
    if analysis.get("kind") == "clocks":
        return _plan_clock_confirm(analysis, max_caps, planned)
    sweet: Mapping[str, Any] = analysis.get("sweet_spot") or {}
    tied = [float(c) for c in sweet.get("tied_caps") or []]
    record: dict[str, Any] = {"caps_w": [], "reason": None, "skipped": None}
    if len(tied) < 2:
        record["skipped"] = NOTHING_TIED if sweet else NO_USABLE_CAP
        return ConfirmPlan((), record)
    tpw = {
        float(r["cap_w"]): float(r["tps_per_w"])
        for r in analysis.get("caps") or []
        if r.get("status") == "ok" and r.get("tps_per_w") is not None
    }
    boot = sweet.get("bootstrap") or {}
    share = {float(k): float(v) for k, v in (boot.get("best_share") or {}).items()}
    ranked = sorted((c for c in tied if c in tpw), key=lambda c: (-share.get(c, 0.0), -tpw[c], c))
    picked = sorted(ranked[:max_caps], reverse=True)
    lo, hi = sweet.get("interval_w") or (min(tied), max(tied))
    record.update(
        caps_w=picked,
        reason=(
            f"{len(tied)} caps ({lo:g}-{hi:g} W) were statistically tied with the best, "
            f"{float(sweet['cap_w']):g} W ({sweet.get('noise_source')}); the {len(picked)} best "
            "measured once more"
        ),
        tied_before=tied,
        best_before_w=sweet["cap_w"],
    )
    return ConfirmPlan(tuple(SweepPoint(c) for c in picked), record)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _plan_clock_confirm(
    analysis: Mapping[str, Any], max_caps: int, planned: Sequence[SweepPoint]
) -> ConfirmPlan:
    peak: Mapping[str, Any] = analysis.get("peak") or {}
    record: dict[str, Any] = {"caps_w": [], "points": [], "reason": None, "skipped": None}
    by_locks = {(p.sm_lock_mhz, p.mem_lock_mhz): p for p in planned}
    tied = [
        by_locks[key]
        for t in peak.get("tied_points") or []
        if (key := (_num(t.get("sm_lock_mhz")), _num(t.get("mem_lock_mhz")))) in by_locks
    ]
    if len(tied) < 2:
        record["skipped"] = NOTHING_TIED_POINTS if peak else NO_USABLE_CAP
        return ConfirmPlan((), record)
    tpw = {
        (_num(p.get("sm_lock_mhz")), _num(p.get("mem_lock_mhz"))): float(p["tps_per_w"])
        for p in analysis.get("points") or []
        if p.get("tps_per_w") is not None
    }
    share = {
        (_num(s.get("sm_lock_mhz")), _num(s.get("mem_lock_mhz"))): float(s.get("share") or 0.0)
        for s in peak.get("best_share") or []
    }

    def rank(p: SweepPoint) -> tuple[float, float]:
        locks = (p.sm_lock_mhz, p.mem_lock_mhz)
        return (-share.get(locks, 0.0), -tpw.get(locks, 0.0))

    picked = sorted(tied, key=rank)[:max_caps]
    picked.sort(key=lambda p: (-(p.mem_lock_mhz or math.inf), -(p.sm_lock_mhz or math.inf)))
    best = SweepPoint(None, _num(peak.get("sm_lock_mhz")), _num(peak.get("mem_lock_mhz")))
    record.update(
        points=[p.to_dict() for p in picked],
        reason=(
            f"{len(tied)} clock points were statistically tied with the best, {best.label()} "
            f"({peak.get('noise_source')}); the {len(picked)} best measured once more"
        ),
        tied_before=[p.to_dict() for p in tied],
    )
    return ConfirmPlan(tuple(picked), record)
