"""What physics lets a curve's readings do: the reading noise a curve shows, and the readings
it forbids (outliers).

Raising a power cap or a clock lock never slows or cools a card, so along a curve TPS and draw
never fall as the limit rises; where the limit does not bind they stay put.

The reasoning: docs/precision.md, "powersweep.analysis.curve_noise".
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
# TPS rises at most this many times as fast as the power a cap allows (relative): only the
# dynamic share of the draw buys clock, and it is at least a quarter of a loaded card's draw (the
# published RTX 3090 curve rises 2.0x as fast at its voltage floor, 190-200 W). The cap, not
# the measured draw: a bursty load's window-averaged draw understates what the cap lets it use.
MAX_TPS_RISE_PER_CAP_RISE = 4.0
# The floor of one reading's noise: the typical repeatability of a reading (precision.py),
# split evenly between TPS and draw, 1 sigma.
FLOOR_SIGMA_REL = TYPICAL_READING_U95_REL / 1.96 / math.sqrt(2.0)
# The typical repeatability is prior knowledge worth this many degrees of freedom of the
# curve's own scatter: a few residuals move it a little, a dozen rule it.
PRIOR_DOF = 4.0
# An outlier is judged against at least this noise of one reading, 1 sigma: readings taken
# minutes apart against a real llama.cpp server scatter by 1.55% (issue 44: one point measured 8
# times), more than a window's own statistics show; a reading's own stated precision, or the
# curve's falls, count where larger. Naming a reading broken takes that much.
OUTLIER_FLOOR_SIGMA_REL = 0.015
# The robust first estimate (for outliers) needs this many falls to stand on.
MIN_FALLS = 3
# A normal deviate's median absolute value.
_MAD_NORMAL = 0.6744897501960817


@dataclass(frozen=True)
class CurveNoise:
    """A curve's reading noise, from the scatter physics forbids (1 sigma, relative).

    The typical repeatability of a reading (:data:`FLOOR_SIGMA_REL`) is prior knowledge worth
    :data:`PRIOR_DOF` degrees of freedom: what the curve measures is pooled with it (a scaled
    inverse chi-square update), so one large fall among a few widens the noise without making
    Student's t on one degree of freedom (12.7) the whole answer, and a curve with many residuals
    is ruled by them.

    Attributes:
        tps_rel: Noise of one TPS reading, pooled with the prior.
        power_rel: Noise of one draw reading, pooled with the prior.
        tps_dof: Degrees of freedom of ``tps_rel`` (the prior's included).
        power_dof: Degrees of freedom of ``power_rel``.
        measured_tps_rel: The TPS scatter measured alone (NaN: none to measure).
        measured_power_rel: The draw scatter measured alone (NaN: none).
    """

    tps_rel: float = FLOOR_SIGMA_REL
    power_rel: float = FLOOR_SIGMA_REL
    tps_dof: float = PRIOR_DOF
    power_dof: float = PRIOR_DOF
    measured_tps_rel: float = math.nan
    measured_power_rel: float = math.nan

    @property
    def tps_per_w_rel(self) -> float:
        """Noise of one TPS/W reading."""
        return math.hypot(self.tps_rel, self.power_rel)

    @property
    def dof(self) -> float:
        """Degrees of freedom of the TPS/W noise (Welch-Satterthwaite)."""
        a, b = self.tps_rel**2, self.power_rel**2
        return (a + b) ** 2 / (a**2 / self.tps_dof + b**2 / self.power_dof)

    @property
    def from_floor(self) -> bool:
        """The curve showed no more scatter than the floor (or none could be measured)."""
        measured = [v for v in (self.measured_tps_rel, self.measured_power_rel) if v == v]
        return not measured or max(measured) <= FLOOR_SIGMA_REL

    def u95_rel(self) -> float:
        """The 95% half-width of one TPS/W reading, never under the typical repeatability."""
        if self.from_floor:
            return TYPICAL_READING_U95_REL
        return max(TYPICAL_READING_U95_REL, t_quantile(self.dof) * self.tps_per_w_rel)

    def tps_u95_rel(self) -> float:
        """The 95% half-width of one TPS reading, never under the typical repeatability."""
        if not self.measured_tps_rel > FLOOR_SIGMA_REL:
            return TYPICAL_READING_U95_REL
        return max(TYPICAL_READING_U95_REL, t_quantile(self.tps_dof) * self.tps_rel)

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
    fall, a flat stretch's spread, repeats' spread) is noise. Its sum of squares has the readings
    less the fit's level sets as degrees of freedom (the degrees of freedom of an isotonic fit,
    Meyer & Woodroofe 2000), pooled with the prior (:class:`CurveNoise`). A steep curve that
    never falls leaves none: the prior, the typical repeatability, stands.
    """
    tps_ss, tps_dof = _scatter([line.tps for line in lines])
    pw_ss, pw_dof = _scatter([line.power_w for line in lines])
    prior = PRIOR_DOF * FLOOR_SIGMA_REL**2
    return CurveNoise(
        tps_rel=max(FLOOR_SIGMA_REL, math.sqrt((prior + tps_ss) / (PRIOR_DOF + tps_dof))),
        power_rel=max(FLOOR_SIGMA_REL, math.sqrt((prior + pw_ss) / (PRIOR_DOF + pw_dof))),
        tps_dof=PRIOR_DOF + tps_dof,
        power_dof=PRIOR_DOF + pw_dof,
        measured_tps_rel=math.sqrt(tps_ss / tps_dof) if tps_dof else math.nan,
        measured_power_rel=math.sqrt(pw_ss / pw_dof) if pw_dof else math.nan,
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
    cap_w: Sequence[float] | None = None,
) -> list[int]:
    """The readings along one line (one value per setting, ``x`` ascending) that physics
    forbids by far: each is named by its index.

    A reading is an outlier when it stands above both its neighbours or below both by more
    than :data:`OUTLIER_SIGMAS` (the curve never has a peak or a dip in TPS or draw). An end of
    the line, whose one neighbour cannot bracket it, must break physics against the next two: the
    lowest setting above both (a fall as the limit rose), the highest below both; or rise faster
    than its cap allows (:data:`MAX_TPS_RISE_PER_CAP_RISE`, ``cap_w`` given: a TPS along power
    caps) while the next two keep within it. The worst is set aside first and the rest judged
    again without it, so a wild reading does not make its neighbours look wild; a reading that
    becomes an end only by that is judged as an inner one, so a real fall at the top of a curve
    is not peeled away reading by reading.

    Args:
        x: The settings, ascending.
        values: The reading at each (TPS or draw).
        sigma_rel: Each reading's noise, 1 sigma relative.
        cap_w: The power cap at each setting, for the rise bound of TPS (None: no bound).
    """
    logs = [math.log(v) if v > 0 and math.isfinite(v) else math.nan for v in values]
    keep = [i for i, v in enumerate(logs) if v == v]
    ends = {keep[0], keep[-1]} if keep else set()
    found: list[int] = []
    while len(keep) >= 3:
        scores = [_score(keep, k, ends, logs, sigma_rel, cap_w) for k in range(len(keep))]
        worst = max(range(len(keep)), key=lambda k: scores[k])
        if scores[worst] <= 0:
            break
        found.append(keep.pop(worst))
    return sorted(found)


def _score(
    keep: Sequence[int],
    k: int,
    ends: set[int],
    logs: Sequence[float],
    sigma: Sequence[float],
    cap_w: Sequence[float] | None,
) -> float:
    """How far past :data:`OUTLIER_SIGMAS` the ``k``-th kept reading breaks physics (0: not)."""
    n = len(keep)
    i = keep[k]
    if 0 < k < n - 1:
        return _apart(logs, sigma, i, keep[k - 1], keep[k + 1])
    if i not in ends:
        return 0.0
    low = k == 0
    a, b = (keep[1], keep[2]) if low else (keep[n - 2], keep[n - 3])
    sign = 1.0 if low else -1.0  # the lowest must not stand above the next two, the highest below
    if sign * _z(logs, sigma, i, a) > 0:
        return _apart(logs, sigma, i, a, b)
    if cap_w is None:
        return 0.0
    lo, hi = (i, a) if low else (a, i)
    inner = _steepness(logs, sigma, cap_w, min(a, b), max(a, b))
    return _steepness(logs, sigma, cap_w, lo, hi) if inner <= 0 else 0.0


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
    logs: Sequence[float], sigma: Sequence[float], cap_w: Sequence[float], lo: int, hi: int
) -> float:
    """How far past the bound TPS rises from ``lo`` to ``hi`` faster than their caps allow."""
    c_lo, c_hi = cap_w[lo], cap_w[hi]
    if not (c_lo > 0 and c_hi > 0):
        return 0.0
    allowed = MAX_TPS_RISE_PER_CAP_RISE * max(0.0, math.log(c_hi / c_lo))
    excess = (logs[hi] - logs[lo] - allowed) / math.hypot(sigma[lo], sigma[hi])
    return max(0.0, excess - OUTLIER_SIGMAS)


def excess_scatter(lines: Sequence[Sequence[tuple[float, float]]]) -> tuple[float, int]:
    """The between-reading variance a run's own curve shows beyond its readings' own: each
    line's ``(value, own variance of its log)`` in order along the limit, one reading a point.

    The log values are fitted by a non-decreasing function (:func:`estimate`'s isotonic fit);
    a pooled block of ``m`` readings leaves, by their own variances alone, ``sum v (m - 1) / m``
    of its sum of squares; what the residuals hold beyond that, over the fit's degrees of
    freedom, is the variance between readings taken apart in time (a drift, a stall some windows
    met and others missed) that no reading's own statistics can see.

    Returns:
        ``(variance, dof)``; ``(0, 0)`` where nothing falls.
    """
    ss, own, dof = 0.0, 0.0, 0
    for line in lines:
        pairs = [(math.log(v), w) for v, w in line if v > 0 and math.isfinite(v) and w == w]
        if len(pairs) < 2:
            continue
        y = np.array([p[0] for p in pairs])
        var = np.array([max(0.0, p[1]) for p in pairs])
        fit = isotonic_regression(y, increasing=True)
        ss += float(((y - fit.x) ** 2).sum())
        starts = list(fit.blocks)
        for lo, hi in itertools.pairwise(starts):
            m = hi - lo
            own += float(var[lo:hi].sum()) * (m - 1) / m
        dof += len(y) - (len(starts) - 1)
    if dof <= 0:
        return 0.0, 0
    return max(0.0, (ss - own) / dof), dof


def falls(values: Sequence[float], sigma_rel: Sequence[float]) -> list[int]:
    """Indices ``i`` along a line (settings ascending) where the reading falls from ``i`` to
    ``i + 1`` by more than :data:`OUTLIER_SIGMAS` standard deviations of their difference: a
    higher limit never slows a card, so something else changed between them."""
    return [
        i
        for i in range(len(values) - 1)
        if values[i] > 0
        and values[i + 1] > 0
        and math.log(values[i] / values[i + 1])
        > OUTLIER_SIGMAS * math.hypot(sigma_rel[i], sigma_rel[i + 1])
    ]
