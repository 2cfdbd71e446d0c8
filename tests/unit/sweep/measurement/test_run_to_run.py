"""The run-to-run term's pairs, restated rows and record (sweep.measurement.run_to_run)."""

from __future__ import annotations

import math

import pytest

from powersweep.analysis.precision import RunToRun
from powersweep.sweep.measurement.run_to_run import (
    NO_REFERENCE,
    record,
    repeat_pairs,
    restated,
)


def _caps_row(cap: float, reason: str, tpw: float, status: str = "ok") -> dict[str, str]:
    return {
        "cap_w": str(cap),
        "reason": reason,
        "status": status,
        "tps_per_w": str(tpw),
        "power_w": "300.0",
        "tps_per_w_stat_u95_pct": "0.5",
        "tps_per_w_within_u95_pct": "0.5",
        "tps_per_w_within_dof": "30",
        "tps_u95_pct": "0.4",
        "tps_within_u95_pct": "0.4",
        "tps_within_dof": "30",
        "drift_bias_pct": "0.0",
    }


def test_each_repeat_pairs_with_the_reading_that_stood_before_it() -> None:
    rows = [
        _caps_row(300, "dense", 0.110),
        _caps_row(290, "dense", 0.111),
        _caps_row(290, "retry", 0.112),  # a retry replaces the reading: the one that stands
        _caps_row(280, "dense", 0.109, status="failed"),
        _caps_row(290, "confirm", 0.1125),
        _caps_row(280, "reread", 0.109),  # nothing of 280 W stood: no pair
        _caps_row(300, "reread", 0.1102),
    ]
    pairs = repeat_pairs(rows)
    assert [(key[0], reason, a.tps_per_w, b.tps_per_w) for key, reason, a, b in pairs] == [
        (290.0, "confirm", 0.112, 0.1125),
        (300.0, "reread", 0.110, 0.1102),
    ]


def test_a_row_is_restated_with_the_term_and_one_without_a_reading_is_left() -> None:
    term = RunToRun(0.02, 0.02, 3.0, 3.0, pairs=3)
    cols = restated(_caps_row(300, "dense", 0.110), term)
    assert cols["run_to_run_sd_pct"] == pytest.approx(2.0)
    assert cols["tps_per_w_stat_u95_pct"] > 5.0  # t(3 dof) times the term, at least
    assert restated({"status": "failed", "tps_per_w": ""}, term) == {}
    assert "j_per_token_u95_pct" not in cols  # the row stated none


def test_j_per_token_is_restated_with_the_rate_it_divides_by() -> None:
    # J/token's half-width holds the TPS's: a row restated at the run's end with a wider TPS
    # kept its old J/token half-width, narrower than its own TPS's (issue 44: the two agree
    # within their stated precisions)
    counter, sensors = 0.3, 0.2
    row = {
        **_caps_row(300, "dense", 0.110),
        "power_sensors_pct": str(sensors),
        "j_per_token_u95_pct": str(math.sqrt(0.4**2 + counter**2 + sensors**2)),
    }
    cols = restated(row, RunToRun(0.02, 0.02, 3.0, 3.0, pairs=3))
    tps = cols["tps_u95_pct"]
    assert tps > 2.0
    assert cols["j_per_token_u95_pct"] == pytest.approx(math.sqrt(tps**2 + counter**2 + sensors**2))
    # restated again with the same term: the same figures
    again = restated(
        {**row, **{k: str(v) for k, v in cols.items()}}, RunToRun(0.02, 0.02, 3.0, 3.0, pairs=3)
    )
    assert again["j_per_token_u95_pct"] == pytest.approx(cols["j_per_token_u95_pct"])


def test_the_record_says_why_nothing_was_read_again() -> None:
    out = record(RunToRun(), [], None, NO_REFERENCE)
    assert out["reference"] is None and out["skipped"] == NO_REFERENCE
    assert out["tps_per_w_sd_pct"] == 0.0 and out["dof"] is None and out["pairs"] == []
    assert math.isfinite(out["floor_sd_pct"])


def test_the_term_pools_the_pairs_with_what_the_runs_curve_shows() -> None:
    from powersweep.analysis.precision import RunToRun
    from powersweep.analysis.run_drift import DriftFit

    # two pairs that happened to agree: one spent on the run's drift rate, one measured 0
    left = DriftFit(between_dof=1.0)
    agreed = RunToRun(pairs=2, tps_drift=left, drift=left)
    pooled = agreed.with_curve(0.03**2, 6)
    # six degrees of freedom of the curve's 3% against the one pair's 0
    assert pooled.tps_sd_rel == pytest.approx(math.sqrt(6 * 0.03**2 / 7))
    assert pooled.tps_dof == 7 and pooled.pairs == 2
    assert pooled.drift == left  # the rate is carried as it is
    # a curve that shows nothing leaves the pairs' term as it is
    assert agreed.with_curve(0.0, 0) is agreed
    # one pair, spent on the rate, says nothing of the term: the curve's alone
    spent = RunToRun(pairs=1).with_curve(0.03**2, 6)
    assert spent.tps_sd_rel == pytest.approx(0.03) and spent.tps_dof == 6
    # no pair at all: the curve's alone
    assert RunToRun().with_curve(0.02**2, 4).tps_per_w_sd_rel == pytest.approx(0.02)
