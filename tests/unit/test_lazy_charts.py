"""Matplotlib loads only when a chart is drawn: half a second of every run without charts."""

from __future__ import annotations

import subprocess
import sys

from powersweep import report
from tests.paths import REPO


def test_the_command_and_the_report_load_without_matplotlib() -> None:
    code = (
        "import sys, powersweep.cli, powersweep.report, powersweep.sweep.session; "
        "sys.exit('matplotlib' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=60)
    assert done.returncode == 0


def test_the_charts_come_when_asked() -> None:
    assert report._plots().render_charts.__module__ == "powersweep.plots.render"
