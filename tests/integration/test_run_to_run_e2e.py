"""The run-to-run term end to end: every run reads its first point again at the end, on every
axis and load mode, measures the term from its pairs and carries it in every row."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from powersweep.analysis.precision import Reading, t_quantile
from tests.integration.conftest import only_run_dir, powersweep, read_csv, read_json

BASE = ("--simulate", "rtx3090-air", "--cooling", "air", "--no-charts", "--quiet")


def _check(
    run: Path, first: dict[str, float | None], *, power: bool = True
) -> list[dict[str, str]]:
    meta = read_json(run / "run.json")
    term = meta["run_to_run"]
    assert term["skipped"] is None
    assert {k: term["reference"][k] for k in first} == first
    rows = read_csv(run / "caps.csv")
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
        within = reading.within_rel / t_quantile(reading.within_dof or math.inf)
        stat = reading.stat_u95_rel / t_quantile(reading.dof if reading.dof > 0 else math.inf)
        sd = term["tps_per_w_sd_pct"] / 100.0
        assert stat == pytest.approx(math.hypot(within, sd), rel=1e-3, abs=1e-6)
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
    _check(only_run_dir(tmp_path), {"cap_w": 300.0})


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
    rows = _check(run, {"sm_lock_mhz": 1695.0}, power=False)
    assert [r["sm_lock_mhz"] for r in rows if r["reason"] == "reread"] == ["1695.0"]


def test_a_one_cap_sweep_reads_its_cap_twice(tmp_path: Path) -> None:
    proc = powersweep(*BASE, "--caps", "300", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    rows = _check(only_run_dir(tmp_path), {"cap_w": 300.0})
    assert [r["reason"] for r in rows] == ["dense", "reread"]
