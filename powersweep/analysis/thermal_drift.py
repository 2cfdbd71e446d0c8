"""The card's temperature still moving as a point is read: its thermal model, fitted from the
run's own readings, and the bias that the temperature still to come leaves in a point's figures.

A card whose temperature still moves reads away from its steady state.

The reasoning: docs/precision.md, "powersweep.analysis.thermal_drift".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

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
# Time constants tried across TAU_RANGE_S (log-spaced) before the bounded search around the best.
TAU_GRID = 24
# The longest span of a lag summed at once, in time constants (e^600 is within a float's range).
_LAG_SPAN_TAUS = 600.0


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

    An output-error fit: for a time constant ``tau`` the draw passed through the model's own
    first-order lag predicts the temperature, ``T = ambient + r * lag(P) + c * exp(-t / tau)``
    (the last term the state the readings start from), linear in the rest; ``tau`` is the one
    whose prediction is closest (a grid, then a bounded search). A fit of ``dT/dt`` on the draw
    instead reads a bursty draw's noise in its regressor and shrinks ``r`` towards none: its
    steady level then sits at the readings' mean, above a card cooling to a lower cap
    (docs/precision.md, term 3).
    """
    t = np.asarray(t_s, dtype=float)
    temp = np.asarray(temp_c, dtype=float)
    power = np.asarray(power_w, dtype=float)
    ok = np.isfinite(t) & np.isfinite(temp) & np.isfinite(power)
    t, temp, power = t[ok][-TAU_MAX_TICKS:], temp[ok][-TAU_MAX_TICKS:], power[ok][-TAU_MAX_TICKS:]
    if len(t) < TAU_MIN_TICKS or not (np.all(np.diff(t) > 0) and np.ptp(temp) > 0):
        return None
    if np.ptp(power) <= 0:
        return None
    lo, hi = TAU_RANGE_S

    def fit(log_tau: float) -> tuple[float, np.ndarray]:
        return _output_error(t, temp, power, math.exp(log_tau))

    grid = np.linspace(math.log(lo), math.log(hi), TAU_GRID)
    best = min(grid, key=lambda g: fit(g)[0])
    step = grid[1] - grid[0]
    found = minimize_scalar(
        lambda g: fit(g)[0],
        bounds=(max(grid[0], best - step), min(grid[-1], best + step)),
        method="bounded",
    )
    log_tau = float(found.x) if found.success else float(best)
    if not (grid[0] + 0.5 * step < log_tau < grid[-1] - 0.5 * step):
        return None  # at an end of the range: the readings do not hold a time constant
    _, (ambient, r, _) = fit(log_tau)
    if not r > 0:
        return None
    return ThermalModel(float(ambient), float(r), math.exp(log_tau))


def _output_error(
    t: np.ndarray, temp: np.ndarray, power: np.ndarray, tau_s: float
) -> tuple[float, np.ndarray]:
    """The squared error of the temperature predicted through a lag of ``tau_s`` and its
    coefficients ``(ambient, r, start)``."""
    lagged = _lag(t, power, tau_s)
    design = np.column_stack([np.ones_like(lagged), lagged, np.exp(-(t - t[0]) / tau_s)])
    coef, *_ = np.linalg.lstsq(design, temp, rcond=None)
    resid = design @ coef - temp
    return float(resid @ resid), coef


def _lag(t: np.ndarray, x: np.ndarray, tau_s: float) -> np.ndarray:
    """``x`` through a first-order lag of ``tau_s`` (each reading held since the one before),
    from ``x[0]``: ``y_n = e^(-t_n/tau) (y_0 + sum_k e^(t_k/tau) (1 - e^(-dt_k/tau)) x_k)``,
    summed in spans of at most :data:`_LAG_SPAN_TAUS` time constants so no exponential
    overflows (scipy.signal's filter would import scipy.stats: seconds of a sweep's CPU)."""
    y = np.empty_like(x)
    y[0] = x[0]
    start = 0
    while start < len(x) - 1:
        end = int(np.searchsorted(t, t[start] + _LAG_SPAN_TAUS * tau_s, side="right"))
        end = max(end, start + 2)
        rel = (t[start:end] - t[start]) / tau_s
        gain = -np.expm1(-np.diff(rel)) * np.exp(rel[1:])
        y[start + 1 : end] = np.exp(-rel[1:]) * (y[start] + np.cumsum(gain * x[start + 1 : end]))
        start = end - 1
    return y


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
