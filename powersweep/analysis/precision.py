"""Each point's own precision: how far its TPS, draw and TPS/W may lie from the card's steady state.

Every figure's uncertainty comes from what was measured at that point, never from the scatter
of other points around a curve:

- **TPS**: the ``tps_blocks`` of the point (consecutive inter-token intervals of each request
  in decode-single, equal time slices of the aggregate window in decode-concurrent, whole
  requests in prefill-heavy). The figure is a ratio (tokens over seconds), so its standard error
  is the ratio estimator's: ``sum((t_i - R s_i)^2) * n / (n - 1)`` over ``(sum s)^2``.
- **Draw**: the point's load ticks in time order, cut into consecutive batches whose means are
  nearly independent although neighbouring ticks are not (batch means).
- **Drift**: a card whose temperature still moves reads away from its steady state. Its
  temperature approaches the steady level exponentially, so what is still to come is the slope
  times the card's thermal time constant (fitted from the run's own temperature and draw,
  :func:`fit_thermal`; the slope over the trailing readings, enough to resolve whole-degree
  steps). A warmer card leaks more (:data:`LEAKAGE_W_PER_C`): under a binding cap those watts
  come out of the clock, so TPS/W moves by the curve's own slope times them; a card under its
  cap draws them instead (:func:`drift_sensitivity_per_c`). That expected bias is carried inside
  the stated uncertainty (it is the same sign for every point measured while the card cools or
  heats at the same pace, so it cancels from the difference of two such points, :func:`tied`).

The 95% half-width adds the statistical part (Student's t on the Welch-Satterthwaite degrees of
freedom of TPS and draw together) and the drift bias in quadrature.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# A warmer card leaks more: this many watts per degree per card (a 300-450 W card's static power,
# some 50-150 W under load, grows by a few tenths of a percent per degree; the simulated cards
# leak 0.3-0.5 W per degree). Under a binding cap those watts come out of the clock, so TPS/W
# moves by this times the curve's own slope d ln(TPS)/dP; a card drawing under its cap keeps its
# clock and draws them.
LEAKAGE_W_PER_C = 0.5
# The sensitivity assumed where the curve's slope is not known yet (the first point): 0.5% per
# degree, a card at its voltage floor (where TPS is nearly proportional to the cap's watts).
DRIFT_SENSITIVITY_PER_C = 0.005
# The time constant assumed when the run's own readings cannot fit one (a heatsink under a fan:
# tens of seconds to about a minute and a half).
DEFAULT_TAU_S = 60.0
# A fitted time constant outside this range is not believed (too few or too flat readings).
TAU_RANGE_S = (5.0, 600.0)
# The fewest ticks a time constant is fitted from, and the most kept for it (the last ones).
TAU_MIN_TICKS = 60
TAU_MAX_TICKS = 4000
# Batches the draw's ticks are cut into (at least two ticks each).
POWER_BATCHES = 8
# Two-sided confidence of every stated interval.
CONFIDENCE = 0.95
# Typical repeatability of one reading of a curve with no raw data (a bare caps.csv), as a 95%
# half-width of TPS/W: a 10 s-window reading on a steady card. The published RTX 3090 curve's
# four boost-plateau caps (one operating point read four times) agree within 0.05%, and readings
# of the simulated rig repeat within 0.3%; readings taken minutes apart on a card whose
# temperature moved by 2 C differ by about 1% (the drift sensitivity above), which is what one
# reading of a bare curve cannot rule out.
TYPICAL_READING_U95_REL = 0.01


@dataclass(frozen=True)
class Precision:
    """A point's figures with their own uncertainty (relative, 95% half-widths).

    Attributes:
        tps_u95_rel: Statistical half-width of the metric's TPS.
        power_u95_rel: Statistical half-width of the draw.
        stat_u95_rel: Statistical half-width of TPS/W (TPS and draw together).
        drift_bias_rel: Expected bias of TPS/W from the temperature still moving (signed:
            negative when the card was warmer than its steady state, so it read low).
        u95_rel: The stated half-width of TPS/W (and of J/token): statistics and drift.
        dof: Degrees of freedom of the statistical part (NaN: no units).
    """

    tps_u95_rel: float
    power_u95_rel: float
    stat_u95_rel: float
    drift_bias_rel: float
    u95_rel: float
    dof: float

    @property
    def known(self) -> bool:
        """True when the statistical part could be estimated."""
        return math.isfinite(self.stat_u95_rel)


def t_quantile(dof: float, confidence: float = CONFIDENCE) -> float:
    """Student's t quantile of a two-sided ``confidence`` interval (normal for huge ``dof``)."""
    from scipy.special import stdtrit

    return float(stdtrit(max(1.0, dof), 0.5 + confidence / 2.0))


def ratio_se_rel(blocks: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Relative standard error of ``sum(tokens) / sum(seconds)`` over ``(tokens, seconds)``
    blocks, and its degrees of freedom (NaN, NaN with fewer than two blocks)."""
    arr = np.asarray(blocks, dtype=float).reshape(-1, 2)
    n = len(arr)
    if n < 2:
        return math.nan, math.nan
    tok, sec = arr[:, 0], arr[:, 1]
    total_s = float(sec.sum())
    rate = float(tok.sum()) / total_s if total_s > 0 else math.nan
    if not (math.isfinite(rate) and rate > 0):
        return math.nan, math.nan
    resid = tok - rate * sec
    var = float(np.sum(resid**2)) * n / (n - 1) / total_s**2
    return math.sqrt(var) / rate, float(n - 1)


def batch_se_rel(values: Sequence[float], batches: int = POWER_BATCHES) -> tuple[float, float]:
    """Relative standard error of the mean of time-ordered ``values`` by batch means, and its
    degrees of freedom (NaN, NaN with fewer than four finite values)."""
    arr = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    k = min(batches, len(arr) // 2)
    if k < 2:
        return math.nan, math.nan
    means = np.array([b.mean() for b in np.array_split(arr, k)])
    mean = float(arr.mean())
    if not mean > 0:
        return math.nan, math.nan
    return float(means.std(ddof=1)) / math.sqrt(k) / mean, float(k - 1)


@dataclass(frozen=True)
class ThermalModel:
    """The card's first-order thermal model: ``dT/dt = (ambient_c + r_c_per_w * P - T) / tau_s``.

    Attributes:
        ambient_c: The level at no draw.
        r_c_per_w: Degrees per watt of combined draw at steady state.
        tau_s: Time constant, run seconds.
    """

    ambient_c: float
    r_c_per_w: float
    tau_s: float

    def steady_c(self, power_w: float) -> float:
        """The temperature the card settles at under ``power_w``."""
        return self.ambient_c + self.r_c_per_w * power_w


def fit_thermal(
    t_s: Sequence[float], temp_c: Sequence[float], power_w: Sequence[float]
) -> ThermalModel | None:
    """The card's :class:`ThermalModel`, fitted from its own readings (None: not fittable).

    Least squares over consecutive readings: whole-degree readings and a noisy draw average out
    over a few hundred ticks, and each change of setting excites the fit.
    """
    t = np.asarray(t_s, dtype=float)
    temp = np.asarray(temp_c, dtype=float)
    power = np.asarray(power_w, dtype=float)
    ok = np.isfinite(t) & np.isfinite(temp) & np.isfinite(power)
    t, temp, power = t[ok][-TAU_MAX_TICKS:], temp[ok][-TAU_MAX_TICKS:], power[ok][-TAU_MAX_TICKS:]
    if len(t) < TAU_MIN_TICKS:
        return None
    dt = np.diff(t)
    keep = dt > 0
    if keep.sum() < TAU_MIN_TICKS // 2:
        return None
    rate = np.diff(temp)[keep] / dt[keep]
    mid_t = ((temp[1:] + temp[:-1]) / 2)[keep]
    mid_p = ((power[1:] + power[:-1]) / 2)[keep]
    design = np.column_stack([np.ones_like(mid_t), mid_p, mid_t])
    coef, *_ = np.linalg.lstsq(design, rate, rcond=None)
    if not coef[2] < 0:
        return None
    tau = -1.0 / float(coef[2])
    lo, hi = TAU_RANGE_S
    if not lo <= tau <= hi:
        return None
    return ThermalModel(float(coef[0]) * tau, float(coef[1]) * tau, tau)


def drift_sensitivity_per_c(
    tps_slope_per_w: float, power_w: float, binding: bool, n_gpus: int = 1
) -> float:
    """How much TPS/W moves per degree the card still has to go (relative).

    Args:
        tps_slope_per_w: The curve's own slope at the point, d ln(TPS) / d(combined W), from the
            nearest other point measured (NaN: not known yet).
        power_w: The point's combined draw.
        binding: The cap binds (the card draws at its cap).
        n_gpus: Cards whose leakage adds up.
    """
    leak = LEAKAGE_W_PER_C * max(1, n_gpus)
    if not binding and math.isfinite(power_w) and power_w > 0:
        return leak / power_w  # the clock holds; the draw takes the leakage
    if math.isfinite(tps_slope_per_w):
        return leak * max(0.0, tps_slope_per_w)
    return DRIFT_SENSITIVITY_PER_C


def drift_bias_rel(
    slope_c_per_min: float, tau_s: float, sensitivity_per_c: float = DRIFT_SENSITIVITY_PER_C
) -> float:
    """Expected relative bias of TPS/W from a temperature still moving at ``slope_c_per_min``.

    Still to come: ``slope * tau`` degrees (``tau`` NaN: :data:`DEFAULT_TAU_S`), each worth
    ``sensitivity_per_c`` (:func:`drift_sensitivity_per_c`); a card still heating will run
    slower once there, so it read high (positive bias), and one cooling read low.
    """
    if not math.isfinite(slope_c_per_min):
        return 0.0
    tau = tau_s if math.isfinite(tau_s) and tau_s > 0 else DEFAULT_TAU_S
    return sensitivity_per_c * slope_c_per_min / 60.0 * tau


def point_precision(
    blocks: Sequence[tuple[float, float]],
    power_ticks: Sequence[float],
    slope_c_per_min: float,
    tau_s: float,
    sensitivity_per_c: float = DRIFT_SENSITIVITY_PER_C,
) -> Precision:
    """A point's :class:`Precision` from its own TPS blocks, load ticks and drift.

    Args:
        blocks: ``(tokens, seconds)`` units of the metric's TPS.
        power_ticks: Combined draw of each load tick, in time order.
        slope_c_per_min: The hottest card's temperature slope since the point was set.
        tau_s: The card's thermal time constant (NaN: :data:`DEFAULT_TAU_S`).
        sensitivity_per_c: TPS/W's relative move per degree (:func:`drift_sensitivity_per_c`).
    """
    tps_se, tps_dof = ratio_se_rel(blocks)
    pw_se, pw_dof = batch_se_rel(power_ticks)
    bias = drift_bias_rel(slope_c_per_min, tau_s, sensitivity_per_c)
    if not (math.isfinite(tps_se) and math.isfinite(pw_se)):
        return Precision(math.nan, math.nan, math.nan, bias, math.nan, math.nan)
    var = tps_se**2 + pw_se**2
    # Welch-Satterthwaite: the degrees of freedom of a sum of two estimated variances
    parts = tps_se**4 / tps_dof + pw_se**4 / pw_dof
    dof = var**2 / parts if parts > 0 else tps_dof + pw_dof
    stat = t_quantile(dof) * math.sqrt(var)
    return Precision(
        tps_u95_rel=t_quantile(tps_dof) * tps_se,
        power_u95_rel=t_quantile(pw_dof) * pw_se,
        stat_u95_rel=stat,
        drift_bias_rel=bias,
        u95_rel=math.hypot(stat, bias),
        dof=dof,
    )


@dataclass(frozen=True)
class Reading:
    """A point's TPS/W and its own precision, as the stop rule and the confirm phase read them.

    Attributes:
        tps_per_w: The figure.
        stat_u95_rel: Its statistical 95% half-width, relative.
        bias_rel: The drift's expected bias, relative (signed).
        tps_u95_rel: The statistical 95% half-width of its TPS, relative.
    """

    tps_per_w: float
    stat_u95_rel: float
    bias_rel: float
    tps_u95_rel: float = math.nan

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Reading:
        """The reading of a caps.csv row (NaN where it has none)."""

        def num(key: str, default: float = math.nan) -> float:
            value = row.get(key)
            try:
                out = float(value) if value is not None else default
            except (TypeError, ValueError):
                return default
            return out if math.isfinite(out) else default

        return cls(
            num("tps_per_w"),
            num("tps_per_w_stat_u95_pct") / 100.0,
            num("drift_bias_pct", 0.0) / 100.0,
            num("tps_u95_pct") / 100.0,
        )

    @property
    def known(self) -> bool:
        """True when the reading carries its own precision."""
        return math.isfinite(self.tps_per_w) and math.isfinite(self.stat_u95_rel)

    @classmethod
    def pooled(cls, readings: Sequence[Reading], tps_per_w: float) -> Reading:
        """Several readings of one point (a confirmed point) pooled around ``tps_per_w``: the
        statistical half-widths by inverse variance, the biases averaged."""
        known = [r for r in readings if r.known and r.stat_u95_rel > 0]
        if not known:
            return cls(tps_per_w, math.nan, 0.0)
        stat = 1.0 / math.sqrt(sum(1.0 / r.stat_u95_rel**2 for r in known))
        tps = [r.tps_u95_rel for r in known if math.isfinite(r.tps_u95_rel) and r.tps_u95_rel > 0]
        return cls(
            tps_per_w,
            stat,
            sum(r.bias_rel for r in known) / len(known),
            1.0 / math.sqrt(sum(1.0 / u**2 for u in tps)) if tps else math.nan,
        )

    def tied_with(self, other: Reading) -> bool:
        """True when the two readings are within their own noise of each other."""
        return tied(
            self.tps_per_w,
            self.stat_u95_rel,
            self.bias_rel,
            other.tps_per_w,
            other.stat_u95_rel,
            other.bias_rel,
        )


def tied(
    tpw_a: float,
    stat_a: float,
    bias_a: float,
    tpw_b: float,
    stat_b: float,
    bias_b: float,
) -> bool:
    """True when two points' TPS/W are within their own noise of each other.

    Their difference is tested against the statistical half-widths in quadrature and the part
    of their drift biases that does not cancel (two points read while the card cooled alike
    both read low by about as much).
    """
    if not all(math.isfinite(v) for v in (tpw_a, tpw_b, stat_a, stat_b)):
        return False
    scale = (tpw_a + tpw_b) / 2.0
    if not scale > 0:
        return False
    gap = abs(tpw_a - tpw_b) / scale
    return gap <= math.sqrt(stat_a**2 + stat_b**2 + (bias_a - bias_b) ** 2)
