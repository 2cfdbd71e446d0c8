"""powersweep.analysis.clock_summary: summary.md of a clock sweep (header, findings, operating
points, Pareto front, memory tiers, points table) drawn from the typed analysis alone, its files
written, and a clock run's best point against a power run's best cap, with its warnings.

(test_clock_analysis.py covers the gain statement and the flat-caps case of the comparison.)"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from powersweep.analysis import load_curve
from powersweep.analysis.clock_analysis import analyze_clocks
from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.analysis.clock_summary import (
    clocks_versus_power,
    render_clock_summary,
    render_clocks_versus_power,
)
from powersweep.analysis.load import Curve
from powersweep.analysis.result_files import write_analysis
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.errors import UsageError


def _curve(tmp_path: Path) -> Curve:
    path = tmp_path / "clocks.csv"
    lines = ["sm_lock_mhz,mem_lock_mhz,narr_tps,power_w,status,error"]
    for mem in (9001, 7001):
        for sm, tps, w in ((1200, 30.0, 200.0), (1500, 36.0, 220.0), (1800, 38.0, 260.0)):
            lines.append(f"{sm},{mem},{tps * mem / 9001:.3f},{w + mem / 1000:.1f},ok,")
    lines.append("2100,9001,,,failed,server | crashed")
    path.write_text("\n".join(lines) + "\n")
    return load_curve(path)


def _point(sm: float | None, mem: float | None, tps: float, power: float) -> dict[str, Any]:
    return {
        "sm_lock_mhz": sm,
        "mem_lock_mhz": mem,
        "tps": tps,
        "power_w": power,
        "tps_per_w": tps / power,
        "j_per_token": power / tps,
        "itl_p95_ms": 1000.0 / tps,
    }


def _section(text: str, title: str) -> list[str]:
    """The lines of one ``###`` section, without its heading and blank lines."""
    lines = text.split(f"### {title}\n", 1)[1].split("\n### ", 1)[0].split("\n<sub>", 1)[0]
    return [line for line in lines.splitlines() if line]


def test_a_hand_made_analysis_renders_every_section(tmp_path: Path) -> None:
    peak = _point(1500.0, 9001.0, 36.0, 240.0)
    doc = {
        "axis": "sm-clock",
        "metric": "prefill_tps",
        "run": {"gpu_name": "RTX *3090*", "load_mode": "prefill-heavy"},
        "power_cap_binds": {"limit_w": 349.6, "binds": False},
        "findings": [
            {"severity": "warning", "code": "a", "message": "1 < 2", "hint": "do `x`"},
            {"severity": "info", "code": "b", "message": "fine", "hint": None},
        ],
        "peak": peak,
        "near_peak": {**_point(1800.0, 9001.0, 38.0, 280.0), "max_tps_loss_pct": 5.0},
        "fastest": _point(None, None, 40.0, 330.0),
        "pareto_front": [peak],
        "tiers": [
            {"mem_lock_mhz": 9001.0, "n_points": 3, "peak": peak, "top_tps": 38.0},
            {
                "mem_lock_mhz": 7001.0,
                "n_points": 2,
                "peak": _point(1500.0, 7001.0, 29.0, 230.0),
                "top_tps": 29.6,
                "below_fastest_tier_pct": 22.1,
                "caps_tps": True,
                "tps_stops_rising_at_sm_mhz": 1500.0,
            },
            {"mem_lock_mhz": 5001.0, "n_points": 1, "peak": None, "below_fastest_tier_pct": 0.4},
        ],
        "rows": [
            {
                "sm_lock_mhz": 1500.0,
                "mem_lock_mhz": 9001.0,
                "tps": 36.0,
                "power_w": 240.0,
                "tps_per_w": 0.15,
                "status": "ok",
                "error": "ignored when ok",
            },
            {"sm_lock_mhz": 2100.0, "status": "failed", "error": "a|b"},
        ],
    }
    text = render_clock_summary(_curve(tmp_path), ClockAnalysis.from_json(doc))
    # the header table every summary carries (issue 47), then the answer's line
    assert text.startswith(
        "## powersweep clock sweep: RTX \\*3090\\*, prefill-heavy (sm-clock)\n\n"
        "| | |\n|---|---|\n| GPU | RTX \\*3090\\* |\n| Cooling | unknown |\n"
        "| Model / engine | unknown / unknown |\n| Load mode | prefill-heavy |\n"
        "| Metric | prefill\\_tps |\n| Date | unknown |\n"
    )
    assert (
        "Power limit in force: 350 W.\n\n### Findings\n\n"
        "- **warning**: 1 &lt; 2 — do \\`x\\`\n- **info**: fine\n"
    ) in text
    assert _section(text, "Operating points")[2:] == [
        "| efficiency peak | SM 1500 MHz / mem 9001 MHz | 0.1500 | 36.0 | 240 | 6.667 | 27.8 |",
        "| near-peak (≤5% TPS loss) | SM 1800 MHz / mem 9001 MHz | 0.1357 | 38.0 | 280 | 7.368 "
        "| 26.3 |",
        "| fastest | unlocked | 0.1212 | 40.0 | 330 | 8.250 | 25.0 |",
    ]
    assert _section(text, "Operating points")[0].endswith(
        "| Prefill TPS | W | J/token | ITL p95 (ms) |"
    )
    assert _section(text, "Pareto front (more TPS for more W)")[2:] == [
        "| SM 1500 MHz / mem 9001 MHz | 36.0 | 240 | 0.1500 |"
    ]
    assert _section(text, "Memory tiers")[2:] == [
        "| 9001 MHz | SM 1500 MHz / mem 9001 MHz | 0.1500 | 38.0 | 0% | still rising |",
        "| 7001 MHz (caps TPS) | SM 1500 MHz / mem 7001 MHz | 0.1261 | 29.6 | -22% | 1500 MHz |",
        "| 5001 MHz | unlocked | — | — | 0% | — |",
    ]
    assert _section(text, "Points")[2:] == [
        "| 1500 | 9001 | — | — | 36.0 | 240 | 0.1500 | ok |",
        "| 2100 | — | — | — | — | — | — | failed: a\\|b |",
    ]
    # the source is escaped as markdown text (the test's folder has underscores)
    assert text.splitlines()[-1].startswith("<sub>source: /")
    assert text.endswith("/clocks.csv</sub>\n")


def test_an_analysis_without_a_peak_or_locked_memory_leaves_those_sections_out(
    tmp_path: Path,
) -> None:
    doc = {"tiers": [{"mem_lock_mhz": None, "n_points": 2}], "findings": []}
    text = render_clock_summary(_curve(tmp_path), ClockAnalysis.from_json(doc))
    assert text.startswith("## powersweep clock sweep: unknown GPU, unknown load (sm-clock)\n\n")
    assert "Power limit in force" not in text
    for title in ("Operating points", "Pareto front", "Memory tiers", "Energy and cost"):
        assert f"### {title}" not in text
    assert "### Points" in text


def test_a_clock_analysis_is_written_with_its_summary(tmp_path: Path) -> None:
    curve = _curve(tmp_path)
    doc = json.loads(json.dumps(analyze_clocks(curve, bootstrap=0).to_json()))
    analysis = ClockAnalysis.from_json(doc)
    paths = write_analysis(analysis, render_clock_summary(curve, analysis), tmp_path / "out")
    assert sorted(p.name for p in paths) == ["analysis.json", "summary.md"]
    assert json.loads((tmp_path / "out" / "analysis.json").read_text()) == doc
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert summary == render_clock_summary(curve, analysis)
    assert "| 2100 | 9001 | — | — | — | — | — | failed: server \\| crashed |" in summary


POWER = {
    "run": {"gpu_name": "RTX 3090", "load_mode": "decode-single"},
    "sweet_spot": {"cap_w": 250.0, "tps": 30.0, "power_w": 240.0, "tps_per_w": 0.125},
    "caps": [
        {"cap_w": 200.0, "status": "ok", "tps_per_w": 0.11},
        {"cap_w": 250.0, "status": "ok", "tps_per_w": 0.125},
    ],
}
CLOCKS = {
    "run": {"gpu_name": "RTX 3090", "load_mode": "decode-single"},
    "peak": {"sm_lock_mhz": 1410.0, "tps": 25.0, "power_w": 200.0, "tps_per_w": 0.125 * 0.9},
}


def test_a_clock_peak_worse_than_the_best_cap_is_said_as_less() -> None:
    out = clocks_versus_power(PowerAnalysis.from_json(POWER), ClockAnalysis.from_json(CLOCKS))
    assert out.tps_per_w_gain_pct == pytest.approx(-10.0)
    assert out.tps_change_pct == pytest.approx(100 * (25 / 30 - 1))
    assert out.power_change_pct == pytest.approx(100 * (200 / 240 - 1))
    assert out.statement == (
        "SM 1410 MHz gives 0.113 TPS/W, 10% less than the best cap (0.125 at 250 W); it runs at "
        "25.0 TPS (-17%) and 200 W, where the best cap runs at 30.0 TPS and 240 W"
    )
    assert out.best_clock.to_json() == {
        "sm_lock_mhz": 1410.0,
        "mem_lock_mhz": None,
        "tps": 25.0,
        "power_w": 200.0,
        "tps_per_w": 0.125 * 0.9,
    }
    assert out.warnings == [] and out.caps_bind is True


def test_runs_of_other_gpus_or_load_modes_are_warned_and_rendered() -> None:
    clocks = {**CLOCKS, "run": {"gpu_name": "RTX 4090", "load_mode": "prefill-heavy"}}
    out = clocks_versus_power(PowerAnalysis.from_json(POWER), ClockAnalysis.from_json(clocks))
    assert out.warnings == [
        "the runs come from different GPUs: the comparison may not mean much",
        "the runs ran different load modes: compare like with like",
    ]
    text = render_clocks_versus_power(dataclasses.replace(out, statement="a_b"))
    assert text == (
        "## Clock locks against power caps\n\n- a\\_b\n"
        "- **warning**: the runs come from different GPUs: the comparison may not mean much\n"
        "- **warning**: the runs ran different load modes: compare like with like\n"
    )
    # a run that does not say is no disagreement
    unnamed = {**CLOCKS, "run": {}}
    out = clocks_versus_power(PowerAnalysis.from_json(POWER), ClockAnalysis.from_json(unnamed))
    assert out.warnings == []


def test_one_measured_cap_does_not_say_the_caps_do_not_bind() -> None:
    one = {**POWER, "caps": [{"cap_w": 250.0, "status": "ok", "tps_per_w": 0.125}]}
    out = clocks_versus_power(PowerAnalysis.from_json(one), ClockAnalysis.from_json(CLOCKS))
    assert "power caps do not bind here" not in out.statement and out.caps_bind is True


def test_a_clock_run_without_a_peak_is_refused() -> None:
    with pytest.raises(UsageError, match="the clock run has no efficiency peak"):
        clocks_versus_power(PowerAnalysis.from_json(POWER), ClockAnalysis.from_json({}))
    with pytest.raises(UsageError, match="the power-cap run has no sweet spot"):
        clocks_versus_power(
            PowerAnalysis.from_json({"sweet_spot": {"cap_w": 250.0}}),
            ClockAnalysis.from_json(CLOCKS),
        )
