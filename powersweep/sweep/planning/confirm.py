"""The confirm phase's plan: which caps tied with the best are measured once more, and why.

Pure: it reads the analysis of the sweep so far (``analysis.json`` content) and returns the caps
and the record ``run.json`` keeps under ``confirm``. The driver measures them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# At most this many caps tied with the best are measured again (the best included).
CONFIRM_MAX_CAPS = 3
NOTHING_TIED = "no other cap was within noise of the best"
NO_USABLE_CAP = "no usable cap"


@dataclass(frozen=True)
class ConfirmPlan:
    """What the confirm phase measures.

    Attributes:
        caps_w: Caps to measure once more, highest first (empty: nothing to confirm).
        record: ``run.json`` ``confirm`` so far: ``{caps_w, reason, skipped, tied_before,
            best_before_w}``.
    """

    caps_w: tuple[float, ...]
    record: dict[str, Any] = field(default_factory=dict)


def plan_confirm(analysis: Mapping[str, Any], max_caps: int = CONFIRM_MAX_CAPS) -> ConfirmPlan:
    """The caps statistically tied with the best, most likely best first, at most ``max_caps``.

    With resampled noise, the caps most often best across the resamples go first: a noisy cap
    whose one reading may hide the optimum is worth measuring again more than a quiet cap that
    is clearly second. Without it (an estimate from the curve's scatter), the best TPS/W first.

    Args:
        analysis: The analysis of the sweep so far (``{}`` when nothing could be analysed).
        max_caps: The most caps to measure again.

    Returns:
        The plan; with fewer than two tied caps nothing is measured and ``skipped`` says why.
    """
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
    return ConfirmPlan(tuple(picked), record)
