"""The read-floor benchmark runs its server and clients and prints a figure per loop.

Not a timed assertion: what is checked is that every figure was measured (reads counted, CPU
taken), whatever the machine's load.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_read_floor_prints_a_measured_figure_per_loop() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench_read_floor.py"),
            "--streams",
            "4",
            "--aggregate",
            "200",
            "--seconds",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    rows = re.findall(r"^\s+4\s+(uvloop|asyncio)\s+(\d+)\s+([\d.]+)\s+([\d.]+)$", out, re.M)
    assert [r[0] for r in rows] == ["uvloop", "asyncio"], out
    for _, reads_per_s, us_per_read, per_1k in rows:
        # 200 tokens/s written: most of them read (one read per token, a few merged)
        assert 100 <= float(reads_per_s) <= 220, out
        assert float(us_per_read) > 0 and float(per_1k) > 0, out
    assert "load average" in out
