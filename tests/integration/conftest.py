"""Helpers for end-to-end tests: run the CLI as users do, in a subprocess."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"


def powersweep(
    *args: str, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m powersweep ARGS`` and capture its output."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("OPENAI_API_KEY", None) if env is None or "OPENAI_API_KEY" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "powersweep", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=REPO,
    )


def only_run_dir(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


@pytest.fixture
def shared_3090_csv() -> Path:
    path = SHARED_DATA / "power-cap-3090-qwen36.csv"
    if not path.exists():
        pytest.skip(f"measured curve not found at {path} (shared/ beside the repo)")
    return path
