"""The run-to-run term end to end: every run reads its first settled point again at the end, on
every axis and load mode, measures the term and the run's drift from its pairs and carries them
in every row."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from powersweep.analysis.precision import Reading, t_quantile
from powersweep.sweep.measurement.run_to_run import best_reference
from tests.integration.conftest import only_run_dir, powersweep, read_csv, read_json

BASE = ("--simulate", "rtx3090-air", "--cooling", "air", "--no-charts", "--quiet")


def _reference(rows: list[dict[str, str]], keys: tuple[str, ...]) -> dict[str, float | None]:
    """The point the run should have read again (:func:`best_reference` of its first
    readings, which the end of the run restates without changing what it reads)."""
    ok = [r for r in rows if r["status"] == "ok" and r["reason"] not in ("reread", "confirm")]
    by_key = {tuple(r[k] for k in keys): r for r in ok}
    points = [(key, Reading.of(r)) for key, r in by_key.items()]
    best = best_reference(points)
    assert best is not None
    return {k: float(v) if v else None for k, v in zip(keys, best, strict=True)}


def _check_run_to_run(
    run: Path, keys: tuple[str, ...], *, power: bool = True
) -> list[dict[str, str]]:
    meta = read_json(run / "run.json")
    term = meta["run_to_run"]
    assert term["skipped"] is None
    rows = read_csv(run / "caps.csv")
    assert {k: term["reference"][k] for k in keys} == _reference(rows, keys)
    t_ref = term["t_ref_s"]
    assert t_ref == pytest.approx(max(float(r["t_mid_s"]) for r in rows) / 2.0)
    again = [r for r in rows if r["reason"] == "reread"]
    assert len(again) == 1 and again[0]["status"] == "ok"
    # the metric's prompt only, as the confirm phase
    assert again[0]["code_tps"] == ""
    assert any(p["reason"] == "reread" for p in term["pairs"])
    # the simulated rig's own server: no real server's floor
    assert term["floor_sd_pct"] == 0.0
    for row in rows:
        if row["status"] != "ok":
            continue
        # every row carries the run's term, restated once it was measured
        assert float(row["run_to_run_sd_pct"]) == pytest.approx(term["tps_per_w_sd_pct"], abs=1e-3)
        assert int(row["run_to_run_pairs"]) == len(term["pairs"])
        reading = Reading.of(row)
        stat = reading.stat_u95_rel / t_quantile(reading.dof if reading.dof > 0 else math.inf)
        sd = term["tps_per_w_sd_pct"] / 100.0
        # the run's drift, where its pairs show one (its rate beyond the rate's own SD): a bias
        # from the run's middle, its rate's uncertainty a variance
        # (within the pairs' span: a rate is not drawn out beyond the readings it came from)
        lo, hi = term["span_s"]
        lag_min = (min(max(reading.t_s, lo), hi) - min(max(t_ref, lo), hi)) / 60.0
        shown = abs(term["drift_pct_per_min"]) > term["drift_sd_pct_per_min"]
        drift = term["drift_pct_per_min"] * lag_min if shown else 0.0
        assert float(row["run_drift_bias_pct"]) == pytest.approx(drift, rel=1e-3, abs=1e-4)
        rate_sd = term["drift_sd_pct_per_min"] / 100.0 * abs(lag_min) if shown else 0.0
        # the term is measured beyond each reading's fast scale: a point states the larger of
        # its own batch means and its fast variance with the term
        own = reading.within_var
        part = max(own, reading.fast_var + sd * sd)
        assert stat == pytest.approx(math.sqrt(part + rate_sd**2), rel=2e-3, abs=1e-5)
        assert reading.u95_rel == pytest.approx(
            math.hypot(reading.stat_u95_rel, reading.bias_rel + drift / 100.0), rel=1e-3
        )
    # the repeat is pooled with the point's reading (a power curve says so), never taken for
    # a duplicate
    codes = [f["code"] for f in read_json(run / "analysis.json")["findings"]]
    assert "duplicate_cap" not in codes
    assert ("confirm_pooled" in codes) == power
    return rows


@pytest.mark.parametrize(
    "mode", ["decode-single", "decode-concurrent", "prefill-heavy"], ids=lambda m: m
)
def test_every_load_mode_reads_its_first_point_again(tmp_path: Path, mode: str) -> None:
    extra = ("--concurrency", "4") if mode == "decode-concurrent" else ()
    proc = powersweep(
        *BASE,
        "--load-mode",
        mode,
        *extra,
        "--caps",
        "300,290",
        "--no-confirm",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    _check_run_to_run(only_run_dir(tmp_path), ("cap_w",))


def test_a_clock_sweep_reads_its_first_point_again(tmp_path: Path) -> None:
    proc = powersweep(
        *BASE,
        "--axis",
        "sm-clock",
        "--sm-clocks",
        "1695,1500",
        "--no-confirm",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    run = only_run_dir(tmp_path)
    rows = _check_run_to_run(run, ("sm_lock_mhz",), power=False)
    reference = read_json(run / "run.json")["run_to_run"]["reference"]["sm_lock_mhz"]
    assert [float(r["sm_lock_mhz"]) for r in rows if r["reason"] == "reread"] == [reference]


def test_a_one_cap_sweep_reads_its_cap_twice(tmp_path: Path) -> None:
    proc = powersweep(*BASE, "--caps", "300", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    rows = _check_run_to_run(only_run_dir(tmp_path), ("cap_w",))
    assert [r["reason"] for r in rows] == ["dense", "reread"]
