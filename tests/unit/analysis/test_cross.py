"""Cross-mode: the mixed-workload cap of the three load modes of one simulated card, as markdown."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from powersweep.analysis import analyze, cross_mode, load_curve
from powersweep.analysis.cross import render_cross_mode
from powersweep.analysis.cross_result_types import CrossModeResult
from powersweep.analysis.load import Curve
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.analysis.synthetic import NoiseModel, synthesize_run
from powersweep.errors import UsageError
from powersweep.report import build_cross_report
from powersweep.sim.profiles import get_profile
from powersweep.sim.sim_rig import ground_truth
from powersweep.sweep.gpu import PowerEnvelope
from powersweep.sweep.planning.caps import default_caps

PROFILE = "rtx3090-air"
MODES = (("decode-single", 1), ("decode-concurrent", 8), ("prefill-heavy", 1))
EXACT = NoiseModel(power_rel=0.0, tps_rel=0.0, request_tps_rel=0.0, temp_sd_c=0.0)


@cache
def _truth(mode: str, concurrency: int) -> dict[str, Any]:
    p = get_profile(PROFILE)
    env = PowerEnvelope(p.min_limit_w, p.default_limit_w, p.max_limit_w, p.user_limit_w)
    return ground_truth([p], mode, default_caps(env), concurrency=concurrency).to_dict()


def _gpu(name: str | None = None) -> dict[str, Any]:
    p = get_profile(PROFILE)
    return {
        "name": name or p.gpu_name,
        "min_limit_w": p.min_limit_w,
        "default_limit_w": p.default_limit_w,
        "max_limit_w": p.max_limit_w,
        "slowdown_temp_c": p.slowdown_temp_c,
    }


def _runs(root: Path, noise: NoiseModel = EXACT) -> list[Path]:
    return [
        synthesize_run(_truth(m, n), _gpu(), root / m, seed=k, noise=noise, raw_files=False)
        for k, (m, n) in enumerate(MODES)
    ]


def _expected_cap() -> tuple[float, float, dict[str, float]]:
    """Minimax TPS/W loss over the modes, straight from the noise-free truth."""
    tables = []
    for mode, n in MODES:
        t = _truth(mode, n)
        best = max(c["tps_per_w"] for c in t["caps"])
        tables.append((mode, {c["cap_w"]: 1 - c["tps_per_w"] / best for c in t["caps"]}))
    caps = sorted(set.intersection(*(set(tab) for _, tab in tables)))
    worst, cap = min((max(tab[c] for _, tab in tables), c) for c in caps)
    return cap, worst * 100, {mode: tab[cap] * 100 for mode, tab in tables}


def _pairs(root: Path) -> list[tuple[Curve, PowerAnalysis]]:
    return [(c, analyze(c, bootstrap=0)) for c in map(load_curve, _runs(root))]


def test_shared_cap_is_the_minimax_of_the_truth(tmp_path: Path) -> None:
    typed = cross_mode(_pairs(tmp_path))
    result = typed.to_json()
    assert CrossModeResult.from_json(result) == typed
    cap, worst, losses = _expected_cap()
    assert result["cap_w"] == cap
    assert result["worst_loss_pct"] == pytest.approx(worst, abs=1e-6)
    got = {m["label"]: m for m in result["modes"]}
    assert set(got) == {m for m, _ in MODES}
    for mode, loss in losses.items():
        assert got[mode]["tps_per_w_loss_pct"] == pytest.approx(loss, abs=1e-6)
    # The three modes really disagree, so the shared cap costs somebody something.
    sweets = {m["sweet_spot_cap_w"] for m in result["modes"]}
    assert len(sweets) > 1 and worst > 0
    assert result["warnings"] == []


def test_markdown_section_shows_the_cap_and_the_cost_to_each_mode(tmp_path: Path) -> None:
    md = render_cross_mode(cross_mode(_pairs(tmp_path)))
    cap, worst, losses = _expected_cap()
    assert md.startswith("## Mixed workload")
    assert f"**Set {cap:.0f} W.**" in md
    assert f"**{worst:.1f}%**" in md
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    for mode, n in MODES:
        cells = [c.strip() for c in rows[mode].strip("|").split("|")]
        assert cells[2] == f"{_truth(mode, n)['sweet_spot']['cap_w']:.0f}"
        assert cells[5] == f"{losses[mode]:.1f}"
    # The mode that pays the worst loss is named in the headline.
    worst_mode = max(losses, key=lambda m: losses[m])
    assert re.search(rf"best TPS/W \({re.escape(worst_mode)}\)", md)
    # The five best shared caps are listed, best first.
    ranked = re.findall(r"(\d+) W: ([\d.]+)%", md)
    assert ranked[0][0] == f"{cap:.0f}"
    assert [float(v) for _, v in ranked] == sorted(float(v) for _, v in ranked)


def test_markdown_escapes_labels_and_renders_warnings() -> None:
    result = {
        "cap_w": 300.0,
        "worst_loss_pct": 2.0,
        "modes": [
            {
                "label": "a|b*c",
                "metric": "narr_tps",
                "sweet_spot_cap_w": 290.0,
                "sweet_spot_tps_per_w": 0.1,
                "tps_per_w": 0.098,
                "tps_per_w_loss_pct": 2.0,
                "tps": None,
                "tps_change_vs_sweet_pct": None,
            }
        ],
        "caps": [{"cap_w": 300.0, "worst_loss_pct": 2.0}],
        "warnings": ["the runs come from different GPUs (x|y)"],
    }
    md = render_cross_mode(CrossModeResult.from_json(result))
    assert "a\\|b\\*c" in md and "x\\|y" in md
    assert "| — | — |" in md  # missing TPS shows a dash, not 0 or None


def test_build_cross_report_writes_beside_the_runs(tmp_path: Path) -> None:
    runs = _runs(tmp_path / "powersweep-runs")
    report = build_cross_report(runs)
    folder = tmp_path / "powersweep-runs"
    assert (folder / "cross-mode.md").read_text(encoding="utf-8") == report.markdown
    saved = json.loads((folder / "cross-mode.json").read_text(encoding="utf-8"))
    assert saved["cap_w"] == report.cross.cap_w == _expected_cap()[0]
    assert CrossModeResult.from_json(saved).to_json() == saved == report.cross.to_json()
    for run in runs:
        assert (run / "analysis.json").is_file() and (run / "summary.md").is_file()
    assert len(report.analyses) == 3
    out = tmp_path / "elsewhere"
    again = build_cross_report(runs, out_dir=out)
    assert (out / "cross-mode.md").is_file() and again.cross == report.cross


def test_noisy_runs_still_agree_with_the_truth_within_a_step(tmp_path: Path) -> None:
    report = build_cross_report(_runs(tmp_path, NoiseModel()), write=False)
    assert abs(report.cross.cap_w - _expected_cap()[0]) <= 10.0
    assert report.paths == ()


def test_errors_and_the_different_gpu_warning(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    with pytest.raises(UsageError, match="at least two"):
        build_cross_report(runs[:1])
    # Runs that share no cap.
    t = _truth("decode-single", 1)
    high = {**t, "caps": [c for c in t["caps"] if c["cap_w"] >= 300]}
    low = {**t, "caps": [c for c in t["caps"] if c["cap_w"] < 300]}
    a = synthesize_run(high, _gpu(), tmp_path / "hi", seed=1, noise=EXACT, raw_files=False)
    b = synthesize_run(low, _gpu(), tmp_path / "lo", seed=1, noise=EXACT, raw_files=False)
    with pytest.raises(UsageError, match="share no measured cap"):
        build_cross_report([a, b], write=False)
    other = synthesize_run(
        _truth("prefill-heavy", 1), _gpu("Another GPU"), tmp_path / "o", seed=2, raw_files=False
    )
    report = build_cross_report([runs[0], other], write=False)
    assert "different GPUs" in report.markdown


def test_cli_analyze_several_runs_prints_the_cross_mode_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from powersweep.cli import main

    runs = _runs(tmp_path / "runs")
    code = main(["analyze", *map(str, runs), "--out", str(tmp_path), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    cap, _, _ = _expected_cap()
    assert data["cap_w"] == cap
    assert (tmp_path / "cross-mode.md").exists() and (tmp_path / "cross-mode.json").exists()
    code = main(["analyze", *map(str, runs), "--out", str(tmp_path)])
    out, _ = capsys.readouterr()
    assert code == 0 and f"{cap:g}" in out
