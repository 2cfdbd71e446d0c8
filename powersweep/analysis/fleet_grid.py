"""A fleet group's settings and its pooled answer: the grid of every setting the group's cards
measured, the setting with the most tokens per joule over the cards, and the settings tied with
it within the card-to-card noise (the cards resampled).

The reasoning: docs/fleets.md, "powersweep.analysis.fleet_grid".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from powersweep.analysis.fleet_cards import SAME, CardCurve
from powersweep.analysis.fleet_result_types import WithinNoise
from powersweep.runformat import as_float

NAN = math.nan
# The fleet setting is chosen among settings that at least this share of the group measured.
MIN_COVERAGE = 0.75


@dataclass(frozen=True)
class Grid:
    """A group's settings: every (x, tier) some card measured, by tier then x.

    Attributes:
        x: The swept setting (W or MHz) per grid point.
        tier: The grid's second lock (MHz) per point; NaN on a one-axis sweep.
    """

    x: np.ndarray
    tier: np.ndarray

    def __len__(self) -> int:
        return len(self.x)

    def in_tier(self, tier: float) -> np.ndarray:
        """The grid points of one tier (NaN: a one-axis sweep's)."""
        if math.isnan(tier):
            return np.isnan(self.tier)
        return np.abs(self.tier - tier) <= SAME

    def nearest(self, x: float, tier: float) -> int:
        """The grid point closest to a setting: its tier's nearest x (any tier when none)."""
        use = self.in_tier(tier)
        if not use.any():
            use = np.ones(len(self.x), dtype=bool)
        idx = np.flatnonzero(use)
        return int(idx[np.abs(self.x[idx] - x).argmin()])


def group_grid(cards: Sequence[CardCurve]) -> Grid:
    """Every setting some card of the group measured (rounded as CSVs round them)."""
    pairs = {
        (round(float(x), 1), round(float(t), 1) if math.isfinite(t) else NAN)
        for c in cards
        for x, t in zip(c.x, c.tier, strict=True)
    }
    ordered = sorted(pairs, key=lambda p: (p[1] if math.isfinite(p[1]) else -1.0, p[0]))
    return Grid(np.array([p[0] for p in ordered]), np.array([p[1] for p in ordered]))


def pooled_curve(tps: np.ndarray, power: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Pooled TPS/W per grid setting for each row of card weights (settings too few cards
    measured are NaN)."""
    covered = np.isfinite(tps) & np.isfinite(power)
    with np.errstate(all="ignore"):
        num = weights @ np.where(covered, tps, 0.0)
        den = weights @ np.where(covered, power, 0.0)
        coverage = (weights @ covered) / weights.sum(axis=1, keepdims=True)
        pooled = num / den
    pooled[coverage < MIN_COVERAGE] = NAN
    return pooled


def fleet_setting(
    cards: Sequence[CardCurve],
    grid: Grid,
    tps: np.ndarray,
    power: np.ndarray,
    use: np.ndarray,
) -> int:
    """One setting for the group (its grid index): the most tokens per joule over its
    (non-outlier) cards.

    Pooling cards averages their noise; with fewer than three cards the pooled curve is as noisy
    as one card, so the median of the cards' own best settings is used instead.
    """
    own = [c.best for c, u in zip(cards, use, strict=True) if u] or [c.best for c in cards]
    median = (float(np.median([o[0] for o in own])), _median_tier([o[1] for o in own]))
    if len(own) < 3 or tps.size == 0:
        return grid.nearest(*median)
    pooled = pooled_curve(tps, power, np.ones((1, tps.shape[0])))[0]
    if not np.isfinite(pooled).any():
        return grid.nearest(*median)
    return int(np.nanargmax(pooled))


# Card resamples for the settings tied with the fleet's answer, and the share of them a
# setting must win to count as tied (the answer itself always does).
RESAMPLES = 200
TIED_SHARE = 0.05


def within_noise(grid: Grid, tps: np.ndarray, power: np.ndarray, pick: int) -> WithinNoise:
    """The settings statistically tied with the fleet's answer: the group's cards resampled
    (with replacement) and the pooled best found again; a setting that wins at least
    :data:`TIED_SHARE` of the resamples is tied. With fewer than three cards, none is known."""
    n = tps.shape[0]
    if n < 3:
        return WithinNoise(
            x=[as_float(grid.x[pick], None)], tier=as_float(grid.tier[pick], None), resamples=0
        )
    rng = np.random.default_rng(0)
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=RESAMPLES).astype(float)
    pooled = pooled_curve(tps, power, weights)
    ok = np.isfinite(pooled).any(axis=1)
    wins = np.bincount(
        np.nanargmax(np.where(np.isfinite(pooled[ok]), pooled[ok], -np.inf), axis=1),
        minlength=len(grid),
    )
    share = wins / max(int(ok.sum()), 1)
    tied = sorted({pick, *np.flatnonzero(share >= TIED_SHARE).tolist()})
    same_tier = [i for i in tied if grid.in_tier(float(grid.tier[pick]))[i]]
    return WithinNoise(
        x=[as_float(grid.x[i], None) for i in same_tier],
        tier=as_float(grid.tier[pick], None),
        share=[as_float(share[i], None) for i in same_tier],
        resamples=int(ok.sum()),
    )


def _median_tier(tiers: Sequence[float]) -> float:
    finite = [t for t in tiers if math.isfinite(t)]
    return float(np.median(finite)) if finite else NAN
