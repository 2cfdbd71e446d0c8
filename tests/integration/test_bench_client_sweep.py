"""The real-sweep benchmark's smoke mode runs the CLI end to end and prints every figure.

Not a timed assertion: the figures' plumbing (the sweep in its own process, the server's count,
the per-window comparison, the goals' lines) is what is checked, whatever the machine's load.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_smoke_sweep_prints_its_figures(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench_client_sweep.py"),
            "--smoke",
            "--keep",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=tmp_path,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    row = re.search(
        r"^\s+8\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)\s+(\d+)",
        out,
        re.M,
    )
    assert row, out
    wall, cpu, tokens, per_1k, measured, true, ratio, windows, _restarts = map(float, row.groups())
    assert wall > 0 and cpu > 0 and tokens > 0 and per_1k > 0, out
    assert measured > 0 and true > 0 and windows >= 4, out  # two caps, narrative and code
    assert 0.5 < ratio < 1.5, out  # the two counts describe the same spans
    # each window compared with the server's count over its span
    assert len(re.findall(r"^\s+(350|300)\s+(narr|code)\s", out, re.M)) == windows, out
    assert re.search(
        r"^CPU per 1k tokens at   8 streams: [\d.]+ core-s \(goal <= 0\.033\)", out, re.M
    )
    assert re.search(r"^measured/true at   8 streams: [\d.]+ \(goal >= 0\.98\)", out, re.M)
    assert re.search(r"load average [\d.]+", out)
    # the imports' share, measured apart: positive, and below the whole process's CPU
    imports = re.search(r"imports alone ([\d.]+) CPU s \(([\d.]+) s/1k", out)
    assert imports, out
    assert 0 < float(imports.group(1)) < cpu, out
    assert "smoke: figures finite and positive" in out
