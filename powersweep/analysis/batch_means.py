"""Standard errors of time-ordered readings whose neighbours are not independent: batch means
with batches as long as the series' own autocorrelation says, and the power sensor's step.

A point's TPS blocks (a few tokens each) and its draw's ticks follow a stream whose speed and
draw wander over seconds: taken as independent, they understate the error several-fold.

The reasoning: docs/precision.md, "powersweep.analysis.batch_means".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Fewer consecutive units than this cannot show their own autocorrelation: they are taken as
# independent (prefill's few whole prompts, a short first round).
MIN_ACF_UNITS = 8
# The autocorrelation of a series is read up to this share of its length (beyond, its estimate is
# noise).
ACF_MAX_LAG_SHARE = 1 / 3
# Batches of correlated units are this many integrated autocorrelation times long: batches one
# time long are still correlated with their neighbours and understate the error (synthetic AR(1)
# token gaps, docs/precision.md: 86% coverage at one, 91% at two, the same as one on independent
# units).
BATCH_TAUS = 2.0
# At least this many batches (where there are as many units): two batches leave one degree of
# freedom, whose t quantile (12.7) states intervals no reader can use.
MIN_BATCHES = 3


def integrated_autocorrelation(resid: np.ndarray) -> float:
    """How many consecutive units of ``resid`` count as one independent one: ``1 + 2 * sum`` of
    its autocorrelations up to the first lag at which they stop being positive (the initial
    positive sequence), read up to a third of its length; 1 for independent units."""
    n = len(resid)
    centred = resid - resid.mean()
    c0 = float(np.dot(centred, centred))
    if n < MIN_ACF_UNITS or not c0 > 0:
        return 1.0
    tau = 1.0
    for lag in range(1, max(1, int(n * ACF_MAX_LAG_SHARE)) + 1):
        rho = float(np.dot(centred[lag:], centred[:-lag])) / c0
        if rho <= 0:
            break
        tau += 2.0 * rho
    return tau


def batch_count(resid: Sequence[float] | np.ndarray, fast: bool = False) -> int:
    """Batches a time-ordered series is cut into so that their sums are nearly independent:
    batches :data:`BATCH_TAUS` times as long as :func:`integrated_autocorrelation` (every unit
    its own batch when they are independent), at least :data:`MIN_BATCHES`. ``fast``: as if
    the units were independent beyond their neighbours (batches of :data:`BATCH_TAUS`), the
    shortest batches, which still sum away the negative correlation of two neighbouring units
    (a late token shortens the next gap)."""
    arr = np.asarray(resid, dtype=float)
    n = len(arr)
    if n < 2:
        return n
    tau = 1.0 if fast else integrated_autocorrelation(arr)
    k = math.floor(n / (BATCH_TAUS * tau))
    return int(max(min(MIN_BATCHES, n), min(n, k)))


def _sum_var(resid: np.ndarray, fast: bool = False) -> tuple[float, float]:
    """Variance of the sum of time-ordered residuals (mean zero) by batch means, and its degrees
    of freedom (``fast``: the shortest batches, :func:`batch_count`)."""
    k = batch_count(resid, fast)
    sums = np.array([b.sum() for b in np.array_split(resid, k)])
    return float(np.sum(sums**2)) * k / (k - 1), float(k - 1)


def ratio_se_rel(blocks: Sequence[tuple[float, float]], fast: bool = False) -> tuple[float, float]:
    """Relative standard error of ``sum(tokens) / sum(seconds)`` over time-ordered ``(tokens,
    seconds)`` blocks, and its degrees of freedom (NaN, NaN with fewer than two blocks).

    The ratio estimator's residuals ``t_i - R s_i`` are summed in batches of consecutive blocks
    (:func:`batch_count`): blocks a few tokens long from a stream whose speed wanders over
    seconds are not independent, and treating them so understates the error several-fold.
    ``fast`` takes the shortest batches whatever the blocks' correlation: the variance at the
    blocks' own time scale, which a wander slower than them leaves out
    (:class:`~.precision.RunToRun` measures that part between readings).
    """
    arr = np.asarray(blocks, dtype=float).reshape(-1, 2)
    n = len(arr)
    if n < 2:
        return math.nan, math.nan
    tok, sec = arr[:, 0], arr[:, 1]
    total_s = float(sec.sum())
    rate = float(tok.sum()) / total_s if total_s > 0 else math.nan
    if not (math.isfinite(rate) and rate > 0):
        return math.nan, math.nan
    var, dof = _sum_var(tok - rate * sec, fast)
    return math.sqrt(var) / total_s / rate, dof


def batch_se_rel(values: Sequence[float]) -> tuple[float, float]:
    """Relative standard error of the mean of time-ordered ``values`` by batch means (batches as
    long as the series' own autocorrelation, :func:`batch_count`), and its degrees of freedom
    (NaN, NaN with fewer than four finite values)."""
    arr = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if len(arr) < 4:
        return math.nan, math.nan
    mean = float(arr.mean())
    if not mean > 0:
        return math.nan, math.nan
    var, dof = _sum_var(arr - mean)
    return math.sqrt(var) / len(arr) / mean, dof


def sensor_step(values: Sequence[float]) -> float:
    """The sensor's resolution as its readings show it: the smallest step between two distinct
    readings (NaN: fewer than two distinct ones)."""
    distinct = np.unique(np.asarray([v for v in values if math.isfinite(v)], dtype=float))
    if len(distinct) < 2:
        return math.nan
    steps = np.diff(distinct)
    # steps under a microwatt are a float's rounding, not the sensor's
    steps = steps[steps > 1e-6]
    return float(steps.min()) if len(steps) else math.nan
