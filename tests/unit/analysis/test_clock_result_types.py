"""powersweep.analysis.clock_result_types: a clock analysis's typed records read back unchanged,
the keys only some analyses write left out again (``UNSET``), nested points, ties and tiers typed,
and a wrong type one error naming analysis.json and the key."""

from __future__ import annotations

import pytest
from msgspec import UNSET

from powersweep.analysis.clock_result_types import (
    ClockAnalysis,
    LimitBinds,
    LockPoint,
    LockRow,
    Locks,
    LockShare,
    Tier,
)
from powersweep.analysis.findings import Finding, Severity
from powersweep.errors import UsageError

PEAK = {
    "sm_lock_mhz": 1500.0,
    "mem_lock_mhz": 9001.0,
    "cap_w": None,
    "tps": 36.0,
    "power_w": 220.0,
    "tps_per_w": 0.1636,
    "sm_clock_mhz": 1500.0,
    "mem_clock_mhz": 9001.0,
    "j_per_token": None,
    "j_per_token_sampled": None,
    "kwh_per_mtok": None,
    "energy_tokens": None,
    "ttft_p50_ms": None,
    "ttft_p95_ms": None,
    "itl_p50_ms": None,
    "itl_p95_ms": None,
    "tps_per_w_vs_fastest_pct": 8.2,
    "tied_points": [{"sm_lock_mhz": 1500.0, "mem_lock_mhz": 9001.0}],
    "noise_source": "own",
    "best_share": [{"sm_lock_mhz": 1500.0, "mem_lock_mhz": 9001.0, "share": 0.9}],
}


def test_a_point_with_optional_keys_round_trips_and_types_its_nested_records() -> None:
    point = LockPoint.from_json(PEAK)
    assert point.to_json() == PEAK
    assert list(point.to_json()) == list(PEAK)  # the order the analysis writes
    assert point.tied_points == [Locks(1500.0, 9001.0)]
    assert point.best_share == [LockShare(1500.0, 9001.0, 0.9)]
    assert point.figures.ttft_p95_hi_ms is UNSET and "ttft_p95_hi_ms" not in point.to_json()
    assert point.tps_loss_pct is UNSET


def test_a_whole_clock_analysis_round_trips() -> None:
    doc = {
        "schema_version": 1,
        "tool": {"name": "powersweep", "version": "0"},
        "kind": "clocks",
        "axis": "grid",
        "metric": "narr_tps",
        "source": "clocks.csv",
        "run": {"gpu_name": "RTX 3090"},
        "points": [PEAK],
        "rows": [
            {
                "sm_lock_mhz": 2100.0,
                "mem_lock_mhz": 9001.0,
                "cap_w": None,
                "narr_tps": None,
                "power_w": None,
                "sm_clock_mhz": None,
                "mem_clock_mhz": None,
                "pwr_throttle_pct": None,
                "status": "failed",
                "error": "crashed",
                "tps": None,
                "tps_per_w": None,
            }
        ],
        "peak": PEAK,
        "sweet_spot": PEAK,
        "tiers": [
            {
                "mem_lock_mhz": 9001.0,
                "n_points": 1,
                "peak": PEAK,
                "top_tps": 36.0,
                "top_tps_sm_lock_mhz": 1500.0,
                "below_fastest_tier_pct": 0.0,
                "caps_tps": False,
                "tps_stops_rising_at_sm_mhz": None,
                "points": [PEAK],
            }
        ],
        "power_cap_binds": {
            "limit_w": 350.0,
            "max_draw_w": 220.0,
            "max_draw_pct_of_limit": 62.9,
            "binds": False,
        },
        "findings": [{"severity": "info", "code": "peak", "message": "m", "hint": None}],
    }
    typed = ClockAnalysis.from_json(doc)
    # a key the document left out stays out (lists come back empty), the rest unchanged
    assert typed.to_json() == {**doc, "pareto_front": [], "bandwidth_capped_tiers": []}
    assert typed.saturation is None and typed.pareto_knee is None and typed.fastest is UNSET
    assert isinstance(typed.tiers[0], Tier) and isinstance(typed.tiers[0].peak, LockPoint)
    assert isinstance(typed.rows[0], LockRow) and typed.rows[0].narr_tps is None
    assert typed.rows[0].prefill_tps is UNSET
    assert typed.power_cap_binds == LimitBinds(350.0, 220.0, 62.9, False)
    assert typed.findings == [Finding(Severity.INFO, "peak", "m", None)]


def test_defaults_and_a_wrong_type() -> None:
    empty = ClockAnalysis.from_json({})
    assert (empty.kind, empty.axis, empty.metric, empty.peak) == (
        "clocks",
        "sm-clock",
        "narr_tps",
        None,
    )
    with pytest.raises(
        UsageError, match=r"^analysis\.json does not follow its schema: .*\$\.tiers\[0\]\.n_points"
    ):
        ClockAnalysis.from_json({"tiers": [{"n_points": "three"}]})
