"""The coverage benchmark runs its sweeps and prints a measured coverage per figure.

Not a check of the coverage itself (the estimators' work): what is checked is that each figure
was counted from real sweeps against their truth, in the table and in the JSON.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_coverage_benchmark_prints_and_writes_a_coverage_per_figure(tmp_path: Path) -> None:
    out = tmp_path / "coverage.json"
    script = str(REPO / "scripts" / "bench_coverage.py")
    args = ["--seeds", "1", "--models", "hiccups", "--modes", "decode-single", "--caps", "260,320"]
    proc = subprocess.run(
        [sys.executable, script, *args, "--jobs", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = re.search(r"^hiccups\s+decode-single\s+(.*)$", proc.stdout, re.M)
    assert row is not None, proc.stdout
    cells = re.findall(r"(\d+)% (\d+)/(\d+)", row.group(1))
    assert len(cells) == 3, row.group(0)
    assert "1 sweeps (0 failed)" in proc.stdout
    report = json.loads(out.read_text())
    assert report["seeds"] == 1 and report["failed_sweeps"] == 0
    figures = {r["figure"]: r for r in report["results"]}
    assert set(figures) == {"tps", "power_w", "tps_per_w"}
    for (pct, covered, points), figure in zip(cells, ("tps", "power_w", "tps_per_w"), strict=True):
        r = figures[figure]
        assert r["model"] == "hiccups" and r["mode"] == "decode-single"
        assert r["points"] == int(points) >= 2 and r["covered"] == int(covered)
        assert r["coverage"] == pytest.approx(int(covered) / int(points))
        assert abs(100 * r["coverage"] - int(pct)) <= 0.5
