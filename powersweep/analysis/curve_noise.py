"""What physics lets a curve's readings do: the reading noise a curve shows, and the readings
it forbids (outliers).

Raising a power cap or a clock lock never slows or cools a card, so along a curve TPS and draw
never fall as the limit rises; where the limit does not bind they stay put. The scatter that
breaks this (a fall, the spread of a flat stretch, repeats of one point) is reading noise, and
it is all the noise a bare curve can show: :func:`estimate` measures it, :func:`outliers` names
the readings that break it by far. docs/precision.md gives the reasoning and the sources.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import isotonic_regression

from powersweep.analysis.precision import TYPICAL_READING_U95_REL, t_quantile

# A reading is an outlier when it stands this many standard deviations (of the difference of
# two readings) from both the readings physics brackets it by: a chance of about 1e-9 per
# reading under Gaussian noise, so a clean curve of any length names none.
OUTLIER_SIGMAS = 4.0
# TPS rises at most this many times as fast as the draw (relative): only the dynamic share of
# the draw buys clock, and it is at least a quarter of a loaded card's draw (the published
# RTX 3090 curve rises 2.0x as fast at its voltage floor, 190-200 W).
MAX_TPS_RISE_PER_DRAW_RISE = 4.0
# The floor of one reading's noise: the typical repeatability of a reading (precision.py),
# split evenly between TPS and draw, 1 sigma.
FLOOR_SIGMA_REL = TYPICAL_READING_U95_REL / 1.96 / math.sqrt(2.0)
# The robust first estimate (for outliers) needs this many falls to stand on.
MIN_FALLS = 3
# A normal deviate's median absolute value.
_MAD_NORMAL = 0.6744897501960817


@dataclass(frozen=True)
class CurveNoise:
    """A curve's reading noise, from the scatter physics forbids (1 sigma, relative).

    Attributes:
        tps_rel: Noise of one TPS reading (at least :data:`FLOOR_SIGMA_REL`).
        power_rel: Noise of one draw reading (at least :data:`FLOOR_SIGMA_REL`).
        dof: Residual degrees of freedom behind the larger estimate (0: the floor alone).
        measured_tps_rel: The TPS scatter measured, before the floor (NaN: none to measure).
        measured_power_rel: The draw scatter measured, before the floor (NaN: none).
    """

    tps_rel: float
    power_rel: float
    dof: int
    measured_tps_rel: float = math.nan
    measured_power_rel: float = math.nan

    @property
    def tps_per_w_rel(self) -> float:
        """Noise of one TPS/W reading."""
        return math.hypot(self.tps_rel, self.power_rel)

    @property
    def from_floor(self) -> bool:
        """The curve showed less scatter than the floor (or none could be measured)."""
        measured = [v for v in (self.measured_tps_rel, self.measured_power_rel) if v == v]
        return not measured or max(measured) <= FLOOR_SIGMA_REL

    def u95_rel(self) -> float:
        """The 95% half-width of one TPS/W reading (Student's t on the estimate's dof)."""
        if self.from_floor:
            return TYPICAL_READING_U95_REL
        return max(TYPICAL_READING_U95_REL, t_quantile(self.dof) * self.tps_per_w_rel)

    def tps_u95_rel(self) -> float:
        """The 95% half-width of one TPS reading, never under the typical repeatability."""
        if not self.measured_tps_rel > FLOOR_SIGMA_REL:
            return TYPICAL_READING_U95_REL
        return max(TYPICAL_READING_U95_REL, t_quantile(self.dof) * self.tps_rel)

    def tied(self, a: float, b: float) -> bool:
        """Two TPS/W readings of this curve within their noise of each other."""
        if not (a > 0 and b > 0):
            return False
        return abs(math.log(a / b)) <= math.sqrt(2.0) * self.u95_rel()


@dataclass(frozen=True)
class Line:
    """Readings along one limit, lowest first: the values at each setting (repeats kept).

    Attributes:
        x: The settings, ascending (cap W, or a lock MHz).
        tps: The TPS readings at each setting.
        power_w: The draw readings at each setting (empty lists where unknown).
    """

    x: tuple[float, ...]
    tps: tuple[tuple[float, ...], ...]
    power_w: tuple[tuple[float, ...], ...]


def estimate(lines: Sequence[Line]) -> CurveNoise:
    """The reading noise of TPS and draw from what physics forbids along each line.

    Along a line the log readings are fitted by a non-decreasing function (isotonic
    regression, which takes every real rise and flat stretch as the curve's); what is left (a
    fall, a flat stretch's spread, repeats' spread) is noise. Its variance is the residual sum of
    squares over its degrees of freedom, the readings less the fit's level sets (the degrees of
    freedom of an isotonic fit, Meyer & Woodroofe 2000). A steep curve that never falls leaves
    none: the floor stands.
    """
    tps_ss, tps_dof = _scatter([line.tps for line in lines])
    pw_ss, pw_dof = _scatter([line.power_w for line in lines])
    tps = math.sqrt(tps_ss / tps_dof) if tps_dof else math.nan
    power = math.sqrt(pw_ss / pw_dof) if pw_dof else math.nan
    dof = tps_dof if (tps if tps == tps else 0.0) >= (power if power == power else 0.0) else pw_dof
    return CurveNoise(
        tps_rel=max(FLOOR_SIGMA_REL, tps) if tps == tps else FLOOR_SIGMA_REL,
        power_rel=max(FLOOR_SIGMA_REL, power) if power == power else FLOOR_SIGMA_REL,
        dof=dof,
        measured_tps_rel=tps,
        measured_power_rel=power,
    )


def _scatter(series: Sequence[Sequence[Sequence[float]]]) -> tuple[float, int]:
    """Residual sum of squares and degrees of freedom of log readings that must not fall."""
    ss, dof = 0.0, 0
    for line in series:
        groups = [np.log([v for v in vals if v > 0 and math.isfinite(v)]) for vals in line]
        groups = [g for g in groups if len(g)]
        if not groups:
            continue
        for g in groups:  # repeats of one setting
            ss += float(((g - g.mean()) ** 2).sum())
            dof += len(g) - 1
        if len(groups) < 2:
            continue
        means = np.array([g.mean() for g in groups])
        weights = np.array([float(len(g)) for g in groups])
        fit = isotonic_regression(means, weights=weights, increasing=True)
        ss += float((weights * (means - fit.x) ** 2).sum())
        dof += len(groups) - (len(fit.blocks) - 1)
    return ss, dof


def robust_fall_sigma(lines: Sequence[Sequence[float]]) -> float:
    """A first, outlier-proof noise estimate: the median size of the falls between neighbours.

    Where a curve is flat, half its steps fall, and a fall's size is that of the difference of
    two readings; one wild reading moves a median little. NaN with fewer than
    :data:`MIN_FALLS` falls (a steep curve: the floor and each point's own precision decide).
    """
    falls: list[float] = []
    for values in lines:
        logs = [math.log(v) for v in values if v > 0 and math.isfinite(v)]
        falls += [a - b for a, b in itertools.pairwise(logs) if b < a]
    if len(falls) < MIN_FALLS:
        return math.nan
    return float(np.median(falls)) / (_MAD_NORMAL * math.sqrt(2.0))


def outliers(
    x: Sequence[float],
    values: Sequence[float],
    sigma_rel: Sequence[float],
    draw: Sequence[float] | None = None,
) -> list[int]:
    """The readings along one line (one value per setting, ``x`` ascending) that physics
    forbids by far: each is named by its index.

    A reading is an outlier when it stands above both its neighbours or below both by more
    than :data:`OUTLIER_SIGMAS` (the curve never has a peak or a dip in TPS or draw). At an
    end, whose one neighbour cannot bracket it, it must break physics against the next two:
    the lowest setting above both (a fall as the limit rose), the highest below both; or rise
    faster than the draw allows (:data:`MAX_TPS_RISE_PER_DRAW_RISE`, ``draw`` given) while the
    next two keep within it. The worst is set aside first and the rest judged again without it,
    so a wild reading does not make its neighbours look wild.

    Args:
        x: The settings, ascending.
        values: The reading at each (TPS or draw).
        sigma_rel: Each reading's noise, 1 sigma relative (the larger of the curve's and its own).
        draw: The draw at each setting, for the rise bound of TPS (None: values are draws).
    """
    logs = [math.log(v) if v > 0 and math.isfinite(v) else math.nan for v in values]
    keep = [i for i, v in enumerate(logs) if v == v]
    found: list[int] = []
    while len(keep) >= 3:
        scores = [_score(keep, k, logs, sigma_rel, draw) for k in range(len(keep))]
        worst = max(range(len(keep)), key=lambda k: scores[k])
        if scores[worst] <= 0:
            break
        found.append(keep.pop(worst))
    return sorted(found)


def _score(
    keep: Sequence[int],
    k: int,
    logs: Sequence[float],
    sigma: Sequence[float],
    draw: Sequence[float] | None,
) -> float:
    """How far past :data:`OUTLIER_SIGMAS` the ``k``-th kept reading breaks physics (0: not)."""
    n = len(keep)
    i = keep[k]
    if 0 < k < n - 1:
        return _apart(logs, sigma, i, keep[k - 1], keep[k + 1])
    low = k == 0
    a, b = (keep[1], keep[2]) if low else (keep[n - 2], keep[n - 3])
    sign = 1.0 if low else -1.0  # the lowest must not stand above the next two, the highest below
    if sign * _z(logs, sigma, i, a) > 0:
        return _apart(logs, sigma, i, a, b)
    if draw is None:
        return 0.0
    lo, hi = (i, a) if low else (a, i)
    inner = _steepness(logs, sigma, draw, min(a, b), max(a, b))
    return _steepness(logs, sigma, draw, lo, hi) if inner <= 0 else 0.0


def _z(logs: Sequence[float], sigma: Sequence[float], i: int, j: int) -> float:
    """How far reading ``i`` stands above ``j``, in standard deviations of their difference."""
    spread = math.hypot(sigma[i], sigma[j])
    return (logs[i] - logs[j]) / spread if spread > 0 else 0.0


def _apart(logs: Sequence[float], sigma: Sequence[float], i: int, a: int, b: int) -> float:
    """How far past the bound reading ``i`` stands above both ``a`` and ``b``, or below both."""
    za, zb = _z(logs, sigma, i, a), _z(logs, sigma, i, b)
    strength = min(za, zb) if za > 0 else min(-za, -zb)
    return max(0.0, strength - OUTLIER_SIGMAS)


def _steepness(
    logs: Sequence[float], sigma: Sequence[float], draw: Sequence[float], lo: int, hi: int
) -> float:
    """How far past the bound TPS rises from ``lo`` to ``hi`` faster than their draws allow."""
    d_lo, d_hi = draw[lo], draw[hi]
    if not (d_lo > 0 and d_hi > 0):
        return 0.0
    allowed = MAX_TPS_RISE_PER_DRAW_RISE * max(0.0, math.log(d_hi / d_lo))
    excess = (logs[hi] - logs[lo] - allowed) / math.hypot(sigma[lo], sigma[hi])
    return max(0.0, excess - OUTLIER_SIGMAS)
