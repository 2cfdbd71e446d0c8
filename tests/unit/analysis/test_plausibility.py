"""powersweep.analysis.plausibility: draws no card can show (implausible) and readings a curve's
physics forbids (outliers), each named with why; never a rule relative to a run's median."""

from __future__ import annotations

import numpy as np
import polars as pl

from powersweep.analysis.plausibility import (
    IMPLAUSIBLE,
    OUTLIER,
    mark_implausible,
    mark_outliers,
)


def _caps(**cols: list) -> pl.DataFrame:
    n = len(next(iter(cols.values())))
    base = {"status": ["ok"] * n, "error": [None] * n, "n_gpus": [1.0] * n}
    return pl.DataFrame({**base, **cols}, schema_overrides={"error": pl.String})


def test_implausible_draws_are_marked_with_why() -> None:
    caps = _caps(
        cap_w=[300.0, 300.0, 300.0, 300.0, 300.0, 300.0],
        power_w=[0.5, 6000.0, 318.0, 316.0, 600.0, 300.0],
        narr_tps=[30.0, 30.0, 30.0, 30.0, 30.0, 30.0],
        n_gpus=[1.0, 1.0, 1.0, 1.0, 2.0, 1.0],
    )
    out = mark_implausible(caps)
    # 316 W is within the sensor's 5% + 2 W of a 300 W cap; 318 W is not
    assert out["status"].to_list() == [IMPLAUSIBLE, IMPLAUSIBLE, IMPLAUSIBLE, "ok", "ok", "ok"]
    assert out["error"].to_list()[:3] == [
        "draw 0.5 W per card is implausible (under 1 W or over 5 kW)",
        "draw 6000.0 W per card is implausible (under 1 W or over 5 kW)",
        "draw 318.0 W per card is over its 300.0 W cap beyond the sensor's 5% tolerance (a card "
        "holds its limit)",
    ]
    assert out.columns == caps.columns


def test_a_fast_card_and_a_slow_one_are_judged_by_physics_not_by_a_median() -> None:
    # a bandwidth-capped memory tier reads 10x slower than the fast tiers: both are real
    caps = _caps(
        cap_w=[300.0] * 6,
        sm_lock_mhz=[900.0, 1200.0, 1500.0, 900.0, 1200.0, 1500.0],
        mem_lock_mhz=[405.0, 405.0, 405.0, 9501.0, 9501.0, 9501.0],
        power_w=[150.0, 152.0, 154.0, 250.0, 270.0, 290.0],
        narr_tps=[50.0, 51.0, 51.5, 400.0, 480.0, 520.0],
    )
    assert mark_outliers(caps)["status"].to_list() == ["ok"] * 6


def test_a_spike_above_both_neighbours_is_an_outlier_named_with_its_neighbours() -> None:
    rng = np.random.default_rng(1)
    tps = list(135.0 * (1 + 0.04 * rng.standard_normal(11)))
    tps[5] = 1.36 * (tps[4] + tps[6]) / 2
    caps = _caps(
        cap_w=[200.0 + 10 * k for k in range(11)],
        power_w=[199.0, 208.0, 217.0, 226.0, 228.0, 229.0, 229.0, 230.0, 229.0, 231.0, 230.0],
        narr_tps=tps,
    )
    out = mark_outliers(caps)
    assert out["status"].to_list() == ["ok"] * 5 + [OUTLIER] + ["ok"] * 5
    assert out["error"][5].startswith(f"narr_tps {tps[5]:.4g} at 250 W stands above its neighbours")
    assert "(" + f"{tps[4]:.4g} at 240 W, {tps[6]:.4g} at 260 W" + ")" in out["error"][5]


def test_wiggles_within_the_curves_own_noise_are_no_outliers() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        tps = list(135.0 * (1 + 0.04 * rng.standard_normal(15)))
        caps = _caps(
            cap_w=[200.0 + 10 * k for k in range(15)],
            power_w=[230.0 + rng.normal(0, 1) for _ in range(15)],
            narr_tps=tps,
        )
        assert OUTLIER not in mark_outliers(caps)["status"].to_list()


def test_a_draw_cut_mid_write_and_an_absurd_tps_are_outliers() -> None:
    caps = _caps(
        cap_w=[200.0, 220.0, 240.0, 260.0, 280.0, 300.0, 320.0],
        power_w=[199.0, 219.0, 2.0, 259.0, 279.0, 299.0, 318.0],
        narr_tps=[20.0, 22.0, 23.5, 25.0, 26.0, 1e308, 27.5],
    )
    out = mark_outliers(caps)
    assert out["status"].to_list() == ["ok", "ok", OUTLIER, "ok", "ok", OUTLIER, "ok"]
    assert out["error"][2].startswith("draw (W) 2 at 240 W stands below its neighbours")


def test_an_end_reading_is_judged_against_its_next_two() -> None:
    caps = _caps(
        cap_w=[200.0, 210.0, 220.0, 230.0],
        power_w=[199.0, 209.0, 219.0, 229.0],
        # the top cap reads 40% faster for a 4.5% higher draw: no card speeds up so
        narr_tps=[20.0, 21.0, 22.0, 30.8],
    )
    assert mark_outliers(caps)["status"].to_list() == ["ok", "ok", "ok", OUTLIER]
    # the lowest cap faster than the two above it: TPS fell as the cap rose
    low = caps.with_columns(pl.Series("narr_tps", [26.0, 21.0, 22.0, 23.0]))
    assert mark_outliers(low)["status"].to_list() == [OUTLIER, "ok", "ok", "ok"]
    # a real boost-state escape (the published RTX 3090: +2.6% TPS for +8% draw) is no outlier
    escape = _caps(
        cap_w=[350.0, 360.0, 370.0, 380.0],
        power_w=[334.09, 333.93, 334.0, 361.67],
        narr_tps=[34.67, 34.66, 34.66, 35.56],
    )
    assert mark_outliers(escape)["status"].to_list() == ["ok"] * 4


def test_a_points_own_precision_widens_what_it_may_do() -> None:
    caps = _caps(
        cap_w=[200.0, 210.0, 220.0, 230.0, 240.0],
        power_w=[199.0, 209.0, 219.0, 229.0, 239.0],
        narr_tps=[20.0, 21.0, 26.0, 22.0, 23.0],
    )
    # 18% above the cap above it: past 4 sigma of the 1.5% floor of a reading's noise
    assert mark_outliers(caps)["status"][2] == OUTLIER
    noisy = caps.with_columns(pl.lit(12.0).alias("tps_u95_pct"))
    assert mark_outliers(noisy)["status"][2] == "ok"


def test_clock_curves_are_judged_along_each_lock_and_undervolt_steps_not_at_all() -> None:
    caps = _caps(
        cap_w=[300.0] * 8,
        sm_lock_mhz=[900.0, 1100.0, 1300.0, 1500.0] * 2,
        mem_lock_mhz=[5001.0] * 4 + [9501.0] * 4,
        power_w=[150.0, 170.0, 190.0, 210.0, 160.0, 180.0, 200.0, 220.0],
        narr_tps=[40.0, 44.0, 70.0, 48.0, 50.0, 55.0, 60.0, 64.0],
    )
    out = mark_outliers(caps)
    assert out["status"].to_list() == ["ok", "ok", OUTLIER] + ["ok"] * 5
    assert "(along the SM lock at memory lock 5001, cap 300)" in out["error"][2]
    offsets = caps.with_columns(pl.Series("sm_offset_mhz", [0.0, 30.0, 60.0, 90.0] * 2))
    assert mark_outliers(offsets)["status"].to_list() == ["ok"] * 8


def test_runs_marked_together_are_each_judged_alone() -> None:
    one = _caps(
        cap_w=[200.0, 220.0, 240.0], power_w=[199.0, 219.0, 239.0], narr_tps=[2.0, 2.2, 2.4]
    )
    two = one.with_columns(pl.Series("power_w", [199.0, 219.0, 2.0]))
    both = pl.concat(
        [one.with_columns(pl.lit(0).alias("run")), two.with_columns(pl.lit(1).alias("run"))]
    )
    out = mark_outliers(both, group="run")
    assert out["status"].to_list() == ["ok"] * 5 + [OUTLIER]
    assert out.columns == both.columns
