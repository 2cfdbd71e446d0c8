"""powersweep.analysis.pooling: the rows of each cap that stand (a re-measurement replaces, a
failed last try leaves none), the confirm phase's readings pooled (TPS by window, draw by
samples, counts summed), the per-cap table, and rows turned into points and table rows."""

from __future__ import annotations

import math

import polars as pl
import pytest

from powersweep.analysis.pooling import (
    cap_rows,
    current_rows,
    curve_points,
    pool_repeats,
    table_rows,
    usable,
)


def _caps() -> pl.DataFrame:
    """200 W: a reading and its confirm re-measurement; 250 W: failed, then ok on a retry;
    300 W: measured twice (a recheck); 350 W: ok, then its recheck failed."""
    return pl.DataFrame(
        {
            "cap_w": [200.0, 200.0, 250.0, 250.0, 300.0, 300.0, 350.0, 350.0],
            "narr_tps": [20.0, 24.0, 25.0, 26.0, 30.0, 31.0, 35.0, None],
            "power_w": [200.0, 204.0, 249.0, 250.0, 299.0, 298.0, 349.0, None],
            "status": ["ok", "ok", "failed", "ok", "ok", "ok", "ok", "failed"],
            "reason": [None, "confirm", None, None, None, None, None, None],
            "window_s": [10.0, 30.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0],
            "n_samples": [20.0, 60.0, 20.0, 20.0, 20.0, 20.0, 20.0, 20.0],
            "energy_j": [100.0, 300.0, 1.0, 2.0, 3.0, 4.0, 5.0, None],
            "tps_per_w": [0.0] * 8,
            "sm_clock_mhz": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        }
    )


def test_current_rows_drop_a_cap_whose_last_try_failed() -> None:
    rows = current_rows(_caps())
    assert rows["cap_w"].to_list() == [200.0, 200.0, 250.0, 250.0, 300.0, 300.0]
    # a confirm row after an ok reading does not decide: the reading before it does
    confirm_failed = pl.DataFrame(
        {"cap_w": [200.0, 200.0], "status": ["ok", "failed"], "reason": [None, "confirm"]}
    )
    assert current_rows(confirm_failed).height == 2
    # without a status or the keys, nothing to judge
    no_status = pl.DataFrame({"cap_w": [1.0]})
    assert current_rows(no_status) is no_status


def test_usable_pools_the_confirm_phase_and_keeps_the_last_recheck() -> None:
    ok = usable(_caps(), "narr_tps")
    assert ok["cap_w"].to_list() == [200.0, 250.0, 300.0]
    first = ok.row(0, named=True)
    assert first["narr_tps"] == pytest.approx((20 * 10 + 24 * 30) / 40)  # by window: 23
    assert first["power_w"] == pytest.approx((200 * 20 + 204 * 60) / 80)  # by samples: 203
    assert first["n_samples"] == 80.0 and first["energy_j"] == 400.0
    assert first["n_measurements"] == 2
    assert first["tps_per_w"] == pytest.approx(23 / 203)
    assert first["sm_clock_mhz"] == 2.0  # the last reading's
    # the seconds add up as the energies do (the energy check reads them together)
    assert first["window_s"] == 40.0
    # 300 W: a plain repeat replaces the earlier reading
    assert ok.row(2, named=True)["narr_tps"] == 31.0
    assert ok["n_measurements"].to_list() == [2, 1, 1]
    assert ok.columns == [*_caps().columns, "n_measurements"]


def test_a_sum_over_a_missing_reading_is_unknown_and_missing_weights_are_equal() -> None:
    ok = pl.DataFrame(
        {
            "cap_w": [200.0, 200.0],
            "narr_tps": [20.0, 30.0],
            "power_w": [200.0, 210.0],
            "reason": [None, "confirm"],
            "energy_j": [100.0, None],
        }
    )
    row = pool_repeats(ok, "narr_tps").row(0, named=True)
    assert row["energy_j"] is None
    assert (row["narr_tps"], row["power_w"]) == (25.0, 205.0)
    assert "tps_per_w" not in row  # a column the input lacks is not added


def test_pool_repeats_of_nothing_or_without_keys_counts_one_measurement() -> None:
    empty = pl.DataFrame({"cap_w": [], "narr_tps": [], "power_w": []}, schema_overrides={})
    assert pool_repeats(empty, "narr_tps")["n_measurements"].to_list() == []
    no_key = pl.DataFrame({"narr_tps": [1.0, 2.0], "power_w": [1.0, 1.0]})
    assert pool_repeats(no_key, "narr_tps")["n_measurements"].to_list() == [1, 1]


def test_pool_repeats_by_clock_locks() -> None:
    ok = pl.DataFrame(
        {
            "sm_lock_mhz": [1500.0, 1500.0, 1500.0],
            "mem_lock_mhz": [9000.0, 9000.0, 7000.0],
            "narr_tps": [30.0, 32.0, 25.0],
            "power_w": [250.0, 254.0, 220.0],
            "reason": [None, "confirm", None],
        }
    )
    out = pool_repeats(ok, "narr_tps", ("sm_lock_mhz", "mem_lock_mhz"))
    assert out.select("mem_lock_mhz", "narr_tps", "power_w", "n_measurements").rows() == [
        (9000.0, 31.0, 252.0, 2),
        (7000.0, 25.0, 220.0, 1),
    ]


def test_table_rows_add_the_caps_never_measured_ok() -> None:
    caps = _caps()
    rows = table_rows(caps, usable(caps, "narr_tps"))
    # 350 W's ok reading was replaced by its failed recheck: only the recheck is a row
    assert rows["cap_w"].to_list() == [200.0, 250.0, 300.0, 350.0]
    assert rows["n_measurements"].to_list() == [2, 1, 1, 1]
    assert rows["status"].to_list() == ["ok", "ok", "ok", "failed"]


def test_a_reading_replaced_by_a_failed_recheck_is_not_an_ok_row_of_the_table() -> None:
    caps = _caps()
    rows = table_rows(caps, usable(caps, "narr_tps")).filter(pl.col("cap_w") == 350.0)
    assert "ok" not in rows["status"].to_list()


def test_curve_points_carry_each_cap_with_nan_for_unknowns() -> None:
    ok = pl.DataFrame(
        {
            "cap_w": [200.0, 250.0],
            "power_w": [390.0, 480.0],
            "prefill_tps": [3000.0, 3500.0],
            "n_gpus": [2.0, None],
            "sm_clock_mhz": [1500.0, None],
        }
    )
    a, b = curve_points(ok, "prefill_tps")
    assert (a.cap_w, a.cap_total_w, a.power_w, a.tps, a.sm_clock_mhz) == (
        200.0,
        400.0,
        390.0,
        3000.0,
        1500.0,
    )
    assert b.cap_total_w == 250.0  # a missing count is one card
    assert math.isnan(b.sm_clock_mhz) and math.isnan(a.temp_max_c) and math.isnan(a.pstate)


def test_cap_rows_give_tps_per_w_only_where_both_figures_are_usable() -> None:
    caps = pl.DataFrame(
        {
            "cap_w": [200.0, 250.0, 300.0],
            "narr_tps": [20.0, float("nan"), 30.0],
            "power_w": [200.0, 250.0, 0.0],
            "status": ["ok", "ok", "ok"],
            "j_per_token": [2.0, None, float("inf")],
        }
    )
    rows = cap_rows(caps, "narr_tps")
    assert [r.figures.tps_per_w for r in rows] == [0.1, None, None]
    assert rows[0].figures.tps == 20.0 and rows[0].figures.code_tps is None
    assert [r.figures.j_per_token for r in rows] == [2.0, None, None]  # not finite: not measured
    assert rows[0].figures.n_measurements is None
    # a run that states no precision writes no half-width keys (older analyses read back whole)
    written = rows[0].to_json()
    assert "tps_u95_pct" not in written and "tps_per_w_u95_pct" not in written


def test_cap_rows_carry_each_rows_stated_half_widths_where_the_run_states_them() -> None:
    caps = pl.DataFrame(
        {
            "cap_w": [200.0, 250.0],
            "narr_tps": [20.0, 25.0],
            "power_w": [200.0, 250.0],
            "status": ["ok", "failed"],
            "tps_u95_pct": [1.5, None],
            "tps_per_w_u95_pct": [2.0, float("nan")],
        }
    )
    rows = cap_rows(caps, "narr_tps")
    assert (rows[0].figures.tps_u95_pct, rows[0].figures.tps_per_w_u95_pct) == (1.5, 2.0)
    assert (rows[1].figures.tps_u95_pct, rows[1].figures.tps_per_w_u95_pct) == (None, None)
