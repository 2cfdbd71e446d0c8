"""A run's slow drift, from readings of one point taken apart in time: the rate at which the server
or the card changed over the run, and what is left between readings beyond it.

The reasoning: docs/precision.md, "powersweep.analysis.run_drift".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PairGap:
    """Two readings of one point: their log difference (later over earlier), the seconds between
    them and the variance of the difference that their own widths state."""

    log_diff: float
    dt_s: float
    own_var: float
    own_dof: float = math.inf


@dataclass(frozen=True)
class DriftFit:
    """The drift rate through a run's pairs and the variance they show beyond it.

    Attributes:
        rate_per_s: Relative change per second (signed; 0: none measured).
        rate_var: Its variance (from the pairs' own widths, scaled up where they disagree).
        rate_dof: Its degrees of freedom: the pairs' own (their sum), or the pairs' count less
            one where their disagreement scaled it.
        between_var: Variance between two readings of a point beyond the drift and their own
            widths (a random term: method of moments on the residuals).
        between_dof: Pairs' worth of evidence on ``between_var``: their effective count
            ``(sum w)^2 / sum w^2``, less one spent on the rate (0: none).
    """

    rate_per_s: float = 0.0
    rate_var: float = 0.0
    rate_dof: float = math.inf
    between_var: float = 0.0
    between_dof: float = 0.0

    @property
    def shown(self) -> bool:
        """True when the pairs show a drift: the rate's square beyond its own variance (the
        method of moments, as for the term between readings: a rate within its noise is
        estimated as none, and a pair read at two temperatures, whose own variance carries
        them, shows none)."""
        return self.rate_per_s**2 > self.rate_var > 0


def fit_drift(gaps: Sequence[PairGap]) -> DriftFit:
    """The drift rate through ``gaps`` by weighted least squares (weights: the inverse of each
    pair's own variance), through the origin (a point read twice at once differs by nothing).

    What the pairs leave beyond the rate is the random term between readings (DerSimonian and
    Laird's moments on the residuals, ``Q - (K - 1)`` over twice the weights: each difference
    carries two readings' share). The rate's variance is the weighted fit's, widened by the
    Birge ratio where the pairs disagree beyond their widths. Pairs without a time apart (rows
    written before readings carried their time) give no rate: all of them go to the random
    term, as before.
    """
    usable = [g for g in gaps if math.isfinite(g.log_diff) and g.own_var > 0]
    timed = [g for g in usable if math.isfinite(g.dt_s) and g.dt_s != 0.0]
    if not usable:
        return DriftFit()
    if len(timed) < len(usable):
        return _between_only(usable)
    weights = [1.0 / g.own_var for g in timed]
    sxx = sum(w * g.dt_s**2 for w, g in zip(weights, timed, strict=True))
    rate = sum(w * g.dt_s * g.log_diff for w, g in zip(weights, timed, strict=True)) / sxx
    q = sum(w * (g.log_diff - rate * g.dt_s) ** 2 for w, g in zip(weights, timed, strict=True))
    spare = len(timed) - 1
    birge = q / spare if spare > 0 else 1.0
    between = max(0.0, (q - spare) / (2.0 * sum(weights))) if spare > 0 else 0.0
    rate_dof = float(spare) if birge > 1.0 else sum(g.own_dof for g in timed)
    return DriftFit(
        rate, max(1.0, birge) / sxx, rate_dof, between, max(0.0, _effective(weights) - 1.0)
    )


def _between_only(gaps: Sequence[PairGap]) -> DriftFit:
    """No rate: every pair's difference is the random term's (the method of moments)."""
    weights = [1.0 / g.own_var for g in gaps]
    q = sum(w * g.log_diff**2 for w, g in zip(weights, gaps, strict=True))
    between = max(0.0, (q - len(gaps)) / (2.0 * sum(weights)))
    return DriftFit(0.0, 0.0, math.inf, between, _effective(weights))


def _effective(weights: Sequence[float]) -> float:
    """How many equal pairs ``weights`` are worth: a pair whose own variance is large (a first
    point still heating) weighs little."""
    return sum(weights) ** 2 / sum(w * w for w in weights)
