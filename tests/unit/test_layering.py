"""The import-linter contracts in pyproject.toml hold, and a breach of each kind is caught."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter not installed")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "tree"
    dst.mkdir()
    shutil.copytree(
        REPO / "powersweep", dst / "powersweep", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO / "pyproject.toml", dst / "pyproject.toml")
    return dst


def test_contracts_hold() -> None:
    result = _lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("analysis/core.py", "import pynvml", "Only the NVML backend imports pynvml"),
        ("sweep/gpu/nvml.py", "import amdsmi", "Only the AMD backend imports amdsmi"),
        ("sweep/driver.py", "import powersweep.sim.sim_rig", "The simulator is used by"),
        ("analysis/load.py", "import powersweep.sweep.driver", "Analysis and plots read CSVs"),
        ("sweep/session.py", "import tqdm", "Only the CLI draws progress"),
        ("sweep/plan.py", "import matplotlib", "Only plots import matplotlib"),
        ("sweep/driver.py", "import powersweep.cli", "Layers"),
        # the old clock loop imported the driver that imported it: one loop, no cycle
        ("sweep/measurement/point.py", "import powersweep.sweep.driver", "without a cycle"),
        ("sweep/loads/base.py", "import powersweep.sweep.measurement.point", "without a cycle"),
    ],
)
def test_breach_is_caught(tmp_path: Path, module: str, line: str, contract: str) -> None:
    tree = _copy(tmp_path)
    target = tree / "powersweep" / module
    target.write_text(target.read_text() + f"\n{line}  # deliberate breach\n")
    result = _lint(tree)
    assert result.returncode != 0
    broken = [ln for ln in result.stdout.splitlines() if ln.endswith("BROKEN")]
    assert any(contract in ln for ln in broken), result.stdout
