"""powersweep.analysis.fleet_grid: a group's grid of settings (by tier, then setting), its
pooled tokens per joule with coverage, the one setting for the group (pooled, or the median of
the cards' own bests under three cards), and the settings tied with it when the cards are
resampled."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from powersweep.analysis.fleet_axis import AXES
from powersweep.analysis.fleet_cards import CardCurve
from powersweep.analysis.fleet_grid import (
    RESAMPLES,
    Grid,
    fleet_setting,
    group_grid,
    pooled_curve,
    within_noise,
)
from powersweep.analysis.result_types import known

NAN = math.nan


def _card(
    label: str,
    x: Sequence[float],
    best: float,
    tier: Sequence[float] | None = None,
    best_tier: float = NAN,
) -> CardCurve:
    n = len(x)
    return CardCurve(
        label=label,
        run_dir=f"/runs/{label}",
        key=("GPU", 1, "decode-single", "m", "power"),
        axis=AXES["power"],
        metric="narr_tps",
        x=np.array(x, dtype=float),
        tier=np.array(tier if tier is not None else [NAN] * n, dtype=float),
        tps=np.ones(n),
        power_w=np.ones(n),
        temp_c=np.full(n, NAN),
        thermal_pct=np.zeros(n),
        best=(best, best_tier),
        near_peak=(NAN, NAN),
        envelope_w=(100.0, 300.0, 400.0),
        status="complete",
        error=None,
    )


def test_group_grid_is_every_setting_rounded_by_tier_then_setting() -> None:
    a = _card("a", [250.04, 200.0], 200.0)
    b = _card("b", [200.0, 300.0], 300.0)
    grid = group_grid([a, b])
    assert grid.x.tolist() == [200.0, 250.0, 300.0]
    assert np.isnan(grid.tier).all() and len(grid) == 3
    locks = _card("g", [1500.0, 1200.0, 1500.0], 1500.0, tier=[9001.0, 7001.0, 7001.0])
    grid = group_grid([locks])
    assert list(zip(grid.tier.tolist(), grid.x.tolist(), strict=True)) == [
        (7001.0, 1200.0),
        (7001.0, 1500.0),
        (9001.0, 1500.0),
    ]


def test_a_grid_finds_its_tiers_and_the_nearest_point() -> None:
    grid = Grid(
        np.array([1200.0, 1500.0, 1500.0, 1800.0]), np.array([7001.0, 7001.0, 9001.0, 9001.0])
    )
    assert grid.in_tier(7001.0).tolist() == [True, True, False, False]
    assert grid.nearest(1400.0, 7001.0) == 1
    assert grid.nearest(1700.0, 7001.0) == 1  # the tier's nearest, not 1800 in another tier
    assert grid.nearest(1750.0, 5001.0) == 3  # a tier nobody measured: any tier
    flat = Grid(np.array([200.0, 250.0]), np.array([NAN, NAN]))
    assert flat.in_tier(NAN).tolist() == [True, True]
    assert flat.nearest(226.0, NAN) == 1


def test_pooled_curve_is_all_tokens_over_all_watts_where_enough_cards_measured() -> None:
    tps = np.array([[20.0, 30.0, NAN], [22.0, NAN, NAN], [18.0, 30.0, 33.0], [20.0, 30.0, 33.0]])
    power = np.array(
        [[200.0, 250.0, NAN], [200.0, NAN, NAN], [200.0, 250.0, 300.0], [200.0, 250.0, 300.0]]
    )
    pooled = pooled_curve(tps, power, np.ones((1, 4)))[0]
    assert pooled[0] == pytest.approx(80.0 / 800.0)
    assert pooled[1] == pytest.approx(90.0 / 750.0)  # three cards of four: 75% is enough
    assert math.isnan(pooled[2])  # two of four is not
    # weights count a card as often as a resample drew it
    twice = pooled_curve(tps, power, np.array([[2.0, 0.0, 1.0, 1.0]]))[0]
    assert twice[0] == pytest.approx((40 + 18 + 20) / 800.0)


def _matrix(rows: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    tps = np.array(rows, dtype=float)
    power = np.tile(np.array([200.0, 250.0, 300.0]), (len(rows), 1))
    return tps, power


def test_three_cards_or_more_take_the_pooled_best() -> None:
    grid = Grid(np.array([200.0, 250.0, 300.0]), np.full(3, NAN))
    cards = [_card(k, [200.0, 250.0, 300.0], 300.0) for k in "abc"]
    tps, power = _matrix([[20, 30, 33], [21, 30, 33], [19, 31, 33]])
    use = np.ones(3, dtype=bool)
    assert fleet_setting(cards, grid, tps, power, use) == 1  # 250 W, though each said 300 W


def test_fewer_than_three_cards_take_the_median_of_their_own_bests() -> None:
    grid = Grid(np.array([200.0, 250.0, 300.0]), np.full(3, NAN))
    cards = [_card("a", [200.0, 300.0], 200.0), _card("b", [200.0, 300.0], 290.0)]
    tps, power = _matrix([[20, 30, 33], [21, 30, 33]])
    # the median of 200 and 290 is 245: the nearest grid point is 250 W
    assert fleet_setting(cards, grid, tps, power, np.ones(2, dtype=bool)) == 1
    # outliers' own bests are left out of the median (all of them only when none is left)
    three = [*cards, _card("c", [200.0, 300.0], 300.0)]
    use = np.array([True, False, False])
    assert fleet_setting(three, grid, tps[:1], power[:1], use) == 0
    none = np.zeros(3, dtype=bool)
    assert fleet_setting(three, grid, tps[:0], power[:0], none) == 2  # median of 200, 290, 300


def test_a_pooled_curve_with_no_covered_setting_falls_back_to_the_median() -> None:
    grid = Grid(np.array([200.0, 250.0, 300.0]), np.full(3, NAN))
    cards = [_card(k, [200.0, 300.0], b) for k, b in zip("abc", (200.0, 300.0, 300.0), strict=True)]
    tps = np.array([[20, NAN, NAN], [NAN, 30, NAN], [NAN, NAN, 33]], dtype=float)
    power = np.where(np.isnan(tps), NAN, 250.0)
    assert fleet_setting(cards, grid, tps, power, np.ones(3, dtype=bool)) == 2


def test_within_noise_is_unknown_under_three_cards() -> None:
    grid = Grid(np.array([200.0, 250.0]), np.full(2, NAN))
    tps, power = _matrix([[20, 30, 33], [21, 30, 33]])
    out = within_noise(grid, tps[:, :2], power[:, :2], 1)
    # no tier: null, as fleet.json writes it
    assert out.x == [250.0] and out.resamples == 0 and out.tier is None


def test_a_clear_winner_has_no_ties_and_a_flat_top_has_some() -> None:
    grid = Grid(np.array([200.0, 250.0, 300.0]), np.full(3, NAN))
    clear, power = _matrix([[20, 30, 33]] * 4)
    out = within_noise(grid, clear, power, 1)
    assert out.to_json() == {"x": [250.0], "tier": None, "share": [1.0], "resamples": RESAMPLES}
    # the cards disagree between 250 and 300 W: both win some resamples
    split, power = _matrix([[20, 30, 37], [20, 30, 35], [20, 31, 36], [20, 31.5, 35]])
    out = within_noise(grid, split, power, 1)
    assert out.x == [250.0, 300.0]
    assert sum(known(out.share) or []) == pytest.approx(1.0)
    again = within_noise(grid, split, power, 1)  # seeded: the same answer each time
    assert (again.x, again.share) == (out.x, out.share)


def test_ties_are_only_counted_in_the_answer_s_tier() -> None:
    grid = Grid(np.array([1500.0, 1500.0]), np.array([7001.0, 9001.0]))
    tps = np.array([[30.0, 30.2], [30.2, 30.0], [30.1, 30.1]])
    power = np.full((3, 2), 200.0)
    out = within_noise(grid, tps, power, 0)
    assert out.tier == 7001.0 and out.x == [1500.0] and len(known(out.share) or []) == 1
