"""Whether the power caps of a curve bind: a cap binds where the card draws at it, and a curve
binds wherever its TPS follows the cap, whatever the averaged draw says (a cap that does not
bind cannot change TPS; a bursty load's window-averaged draw sits under a cap that binds its
bursts). "No cap binds" only when neither holds.

The reasoning: docs/precision.md, "powersweep.analysis.binding".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from powersweep.analysis.cap_points import CapPoint, binding_margin_w, power_limited, typical_step_w
from powersweep.analysis.curve_noise import CurveNoise
from powersweep.analysis.result_types import CapsBind

# TPS follows the cap when its rise with the cap stands this many standard errors above none
# (one-sided, about 1 in 700 for a curve that does not move).
FOLLOWS_Z = 3.0
BY_DRAW = "draw"
BY_TPS = "tps"


def tps_sigmas(points: Sequence[CapPoint], noise: CurveNoise) -> list[float]:
    """Each point's TPS noise (1 sigma, relative): its own where it states one, never under the
    scatter its curve shows; the curve's pooled with the typical repeatability where it states
    none (a bare curve: that floor is for readings nobody measured the noise of)."""
    shown = noise.measured_tps_rel if math.isfinite(noise.measured_tps_rel) else 0.0
    return [
        max(p.tps_sigma_rel, shown) if math.isfinite(p.tps_sigma_rel) else noise.tps_rel
        for p in points
    ]


def tps_rise_z(points: Sequence[CapPoint], sigmas: Sequence[float]) -> float:
    """The slope of log TPS against the cap in standard errors (weighted least squares; NaN
    with fewer than three points)."""
    if len(points) < 3:
        return math.nan
    x = np.array([p.cap_w for p in points], dtype=float)
    y = np.log([p.tps for p in points])
    w = 1.0 / np.square(np.asarray(sigmas, dtype=float))
    xm = float((w * x).sum() / w.sum())
    sxx = float((w * (x - xm) ** 2).sum())
    if not sxx > 0:
        return math.nan
    slope = float((w * (x - xm) * (y - float((w * y).sum() / w.sum()))).sum()) / sxx
    return slope * math.sqrt(sxx)


def caps_bind(points: Sequence[CapPoint], noise: CurveNoise) -> CapsBind:
    """Whether any cap binds (the draw's and the caps' spans beside it), and how it shows
    (``draw``: a card draws at its cap; ``tps``: only the TPS follows the cap)."""
    margin = binding_margin_w(points, typical_step_w([p.cap_w for p in points]))
    by = None
    if any(power_limited(p, margin) for p in points):
        by = BY_DRAW
    elif tps_rise_z(points, tps_sigmas(points, noise)) > FOLLOWS_Z:
        by = BY_TPS
    draws = [p.power_w for p in points]
    return CapsBind(
        binds=by is not None,
        draw_w=[min(draws), max(draws)],
        caps_w=[min(p.cap_w for p in points), max(p.cap_w for p in points)],
        by=by,
    )
