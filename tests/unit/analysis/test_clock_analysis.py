"""Clock-curve analysis from CSVs alone: a bare community-style grid, one axis, the comparison
with a power-cap run, and the clock planning helpers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from powersweep.analysis import load_curve
from powersweep.analysis.clock_analysis import analyze_clocks
from powersweep.analysis.clock_curve import clock_points, pareto_front
from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.analysis.clock_summary import clocks_versus_power
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.cli import app
from powersweep.errors import UsageError
from powersweep.report import build_clock_comparison, build_report
from powersweep.sweep.gpu import SupportedClocks
from powersweep.sweep.planning.clock_points import (
    SweepPoint,
    coarse_points,
    parse_clocks,
    plan_clock_points,
    refine_points,
    sm_step_mhz,
    thin_sm_clocks,
)

TIERS = (14001, 13501, 10001, 7001)
SMS = (1200, 1500, 1800, 2100, 2400, 2700, 2880)


def _grid_row(sm: float, mem: float) -> tuple[float, float]:
    """A roofline grid: TPS = min(compute, bandwidth) softened; draw follows V/f and memory."""
    compute = sm / 40.0
    bandwidth = mem / 230.0
    tps = 1.0 / (1.0 / compute**4 + 1.0 / bandwidth**4) ** 0.25
    v = 0.8 + 0.25 * max(0.0, (sm - 1800) / 1080)
    power = 120 + 0.1 * sm * v * v + 0.012 * mem
    return tps, power


def _write_grid(path: Path) -> Path:
    lines = ["sm_lock_mhz,mem_lock_mhz,narr_tps,power_w"]
    for mem in TIERS:
        for sm in SMS:
            tps, power = _grid_row(sm, mem)
            lines.append(f"{sm},{mem},{tps:.3f},{power:.1f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _truth() -> tuple[tuple[int, int], set[tuple[int, int]]]:
    rows = {(sm, mem): _grid_row(sm, mem) for mem in TIERS for sm in SMS}
    peak = max(rows, key=lambda k: rows[k][0] / rows[k][1])
    front = {
        k
        for k, (t, w) in rows.items()
        if not any(
            o != k and ot >= t and ow <= w and (ot > t or ow < w) for o, (ot, ow) in rows.items()
        )
    }
    return peak, front


def test_a_bare_28_point_clock_grid_gives_peak_front_and_capped_tiers(tmp_path: Path) -> None:
    csv = _write_grid(tmp_path / "grid.csv")
    analysis = build_report(csv, charts=True).result.to_json()
    peak, front = _truth()
    assert analysis["kind"] == "clocks" and analysis["axis"] == "grid"
    assert len(analysis["points"]) == 28
    assert (analysis["peak"]["sm_lock_mhz"], analysis["peak"]["mem_lock_mhz"]) == peak
    found = {(p["sm_lock_mhz"], p["mem_lock_mhz"]) for p in analysis["pareto_front"]}
    assert found == front
    # the two slow tiers cannot reach the fast tiers' TPS whatever the SM clock
    assert analysis["bandwidth_capped_tiers"] == [10001.0, 7001.0]
    slow = next(t for t in analysis["tiers"] if t["mem_lock_mhz"] == 7001.0)
    assert slow["tps_stops_rising_at_sm_mhz"] is not None
    assert slow["tps_stops_rising_at_sm_mhz"] < 2880
    assert (tmp_path / "charts" / "clock-efficiency.png").is_file()
    assert (tmp_path / "charts" / "clock-pareto.png").is_file()
    summary = (tmp_path / "summary.md").read_text()
    assert "caps TPS" in summary and "Pareto front" in summary


def test_analyze_json_on_a_bare_clock_csv_prints_only_the_json(tmp_path: Path) -> None:
    csv = _write_grid(tmp_path / "grid.csv")
    result = CliRunner().invoke(app, ["analyze", str(csv), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    peak, _ = _truth()
    assert (data["peak"]["sm_lock_mhz"], data["peak"]["mem_lock_mhz"]) == peak
    assert data["pareto_front"] and data["bandwidth_capped_tiers"]


def test_one_sm_axis_finds_where_tps_stops_rising(tmp_path: Path) -> None:
    points = [(sm, _grid_row(sm, 7001.0)) for sm in SMS]
    csv_rows = "\n".join(f"{sm},{t:.3f},{w:.1f}" for sm, (t, w) in points)
    path = tmp_path / "sm-axis.csv"
    path.write_text("sm_lock_mhz,narr_tps,power_w\n" + csv_rows + "\n")
    analysis = analyze_clocks(load_curve(path)).to_json()
    assert analysis["axis"] == "sm-clock"
    assert analysis["saturation"]["sm_lock_mhz"] == 2100  # 29.6 TPS, within 3% of 30.2
    assert any(f["code"] == "bandwidth_bound" for f in analysis["findings"])
    assert analysis["near_peak"]["tps_loss_pct"] <= 5.0


def test_pareto_front_drops_dominated_points(tmp_path: Path) -> None:
    curve_path = tmp_path / "pareto.csv"
    curve_path.write_text(
        "sm_lock_mhz,mem_lock_mhz,narr_tps,power_w\n"
        "1000,5000,10,100\n1200,5000,12,110\n1400,5000,12.5,140\n1600,5000,15,150\n"
        "1400,9000,13,130\n"
    )
    front = pareto_front(clock_points(load_curve(curve_path).caps, "narr_tps"))
    # SM 1400 MHz at memory 5000 MHz: slower and hungrier than at memory 9000 MHz
    assert [(p.sm_lock_mhz, p.mem_lock_mhz) for p in front] == [
        (1000.0, 5000.0),
        (1200.0, 5000.0),
        (1400.0, 9000.0),
        (1600.0, 5000.0),
    ]


def test_clock_versus_power_states_the_gain_and_the_cost_in_tps() -> None:
    power = {"sweet_spot": {"cap_w": 250.0, "tps": 30.0, "power_w": 240.0, "tps_per_w": 0.125}}
    clocks = {
        "peak": {
            "sm_lock_mhz": 1410.0,
            "mem_lock_mhz": 9001.0,
            "tps": 28.0,
            "power_w": 180.0,
            "tps_per_w": 28.0 / 180.0,
        }
    }
    out = clocks_versus_power(PowerAnalysis.from_json(power), ClockAnalysis.from_json(clocks))
    assert out.tps_per_w_gain_pct == pytest.approx(24.4, abs=0.1)
    assert out.statement.startswith("SM 1410 MHz / mem 9001 MHz gives 0.156 TPS/W, 24% more")
    assert "best cap (0.125 at 250 W)" in out.statement
    assert "(-7%)" in out.statement
    assert out.caps_bind
    flat = [
        {"cap_w": c, "status": "ok", "tps_per_w": 0.125 + 0.0001 * (c % 3)}
        for c in (350.0, 500.0, 700.0)
    ]
    out = clocks_versus_power(
        PowerAnalysis.from_json({**power, "caps": flat}), ClockAnalysis.from_json(clocks)
    )
    assert not out.caps_bind
    assert out.statement.endswith("power caps do not bind here")
    no_sweet_spot = PowerAnalysis.from_json({"sweet_spot": None})
    with pytest.raises(UsageError):
        clocks_versus_power(no_sweet_spot, ClockAnalysis.from_json(clocks))


def test_analyze_a_power_run_and_a_clock_run_compares_them(tmp_path: Path) -> None:
    (tmp_path / "clocks").mkdir()
    grid = _write_grid(tmp_path / "clocks" / "caps.csv")
    power = tmp_path / "power.csv"
    power.write_text(
        "cap_w,narr_tps,power_w\n"
        + "\n".join(f"{c},{min(70.0, c / 6.5):.2f},{c - 2}" for c in range(400, 601, 25))
        + "\n"
    )
    compared = build_clock_comparison([power, grid], out_dir=tmp_path / "out")
    assert "than the best cap" in compared.markdown
    assert (tmp_path / "out" / "clocks-vs-power.json").is_file()
    assert (tmp_path / "out" / "charts" / "clocks-vs-power.png").is_file()
    result = CliRunner().invoke(app, ["analyze", str(power), str(grid), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["best_clock"]["sm_lock_mhz"] > 0
    with pytest.raises(UsageError, match="one power-axis run and one clock run"):
        build_clock_comparison([grid, grid], write=False)


# --- planning ------------------------------------------------------------------------------


def test_parse_clocks_accepts_mhz_suffixes_and_rejects_nonsense() -> None:
    assert parse_clocks("900, 1200MHz,1500", "--sm-clocks") == (900.0, 1200.0, 1500.0)
    for bad in ("", "fast", "-5", "nan"):
        with pytest.raises(UsageError, match="--sm-clocks"):
            parse_clocks(bad, "--sm-clocks")


def test_default_sm_clocks_are_thinned_to_about_eleven_supported_ones() -> None:
    listed = list(range(210, 2101, 15))
    thinned = thin_sm_clocks(listed)
    assert 10 <= len(thinned) <= 12
    assert thinned[-1] == 2100 and thinned[0] >= 0.35 * 2100
    assert set(thinned) <= set(listed)


def test_grid_plan_takes_every_load_memory_tier_and_skips_idle_ones() -> None:
    supported = SupportedClocks(
        (9751.0, 9501.0, 5001.0, 810.0, 405.0),
        {m: tuple(float(f) for f in range(2100, 209, -15)) for m in (9751, 9501, 5001, 810, 405)},
    )
    points = plan_clock_points("grid", supported, sm_clocks=None, mem_clocks=None, cap_w=300.0)
    mems = sorted({p.mem_lock_mhz for p in points if p.mem_lock_mhz is not None})
    assert mems == [5001.0, 9501.0, 9751.0]
    assert all(p.cap_w == 300.0 for p in points)
    assert sm_step_mhz(points) is not None
    sm_only = plan_clock_points(
        "grid", supported, sm_clocks=(900.0, 1200.0), mem_clocks=None, cap_w=None, mem_locks=False
    )
    assert [p.mem_lock_mhz for p in sm_only] == [None, None]


def test_adaptive_grid_refines_next_to_each_tier_peak_and_the_front() -> None:
    cands = [SweepPoint(None, float(sm), float(mem)) for mem in (5000, 9000) for sm in SMS]
    coarse = coarse_points(cands)
    assert len(coarse) == 8  # 4 per tier: every other SM lock plus the top
    measured = {p: _grid_row(p.sm_lock_mhz or 0, p.mem_lock_mhz or 0) for p in coarse}
    more = refine_points(cands, measured)
    assert more and not set(more) & set(coarse)
    for p in more:
        tier = sorted(c.sm_lock_mhz or 0 for c in cands if c.mem_lock_mhz == p.mem_lock_mhz)
        i = tier.index(p.sm_lock_mhz or 0)
        neighbours = {tier[j] for j in (i - 1, i + 1) if 0 <= j < len(tier)}
        assert any(SweepPoint(None, n, p.mem_lock_mhz) in measured for n in neighbours)
    assert math.isfinite(sum(t for t, _ in measured.values()))


def test_pareto_knee_is_the_point_farthest_above_the_chord(tmp_path: Path) -> None:
    path = tmp_path / "knee.csv"
    path.write_text(
        "sm_lock_mhz,narr_tps,power_w\n900,20,200\n1200,38,240\n1500,40,300\n1800,41,400\n"
    )
    analysis = analyze_clocks(load_curve(path)).to_json()
    assert analysis["pareto_knee"]["sm_lock_mhz"] == 1200.0


def test_tps_falling_as_a_lock_rises_beyond_noise_is_named(tmp_path: Path) -> None:
    path = tmp_path / "falls.csv"
    # a run that states each point's own precision (0.5%): a 5% fall is far beyond it
    rows = [(900, 30, 150), (1200, 36, 180), (1500, 40, 210), (1800, 38, 240), (2100, 41, 270)]
    path.write_text(
        "sm_lock_mhz,mem_lock_mhz,narr_tps,power_w,tps_per_w,tps_u95_pct,tps_per_w_u95_pct,"
        "tps_per_w_stat_u95_pct\n"
        + "".join(f"{sm},9501,{t},{w},{t / w},0.5,0.6,0.6\n" for sm, t, w in rows)
    )
    found = [
        f
        for f in analyze_clocks(load_curve(path)).to_json()["findings"]
        if f["code"] == "tps_falls_with_clock"
    ]
    (fall,) = found
    assert "40 at SM 1500 MHz / mem 9501 MHz -> 38 at SM 1800 MHz / mem 9501 MHz" in fall["message"]
    # the grid of the same physics without the fall names none
    _write_grid(tmp_path / "grid.csv")
    codes = {
        f["code"] for f in analyze_clocks(load_curve(tmp_path / "grid.csv")).to_json()["findings"]
    }
    assert "tps_falls_with_clock" not in codes
