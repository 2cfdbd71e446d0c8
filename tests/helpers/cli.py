"""The command line run in this process, as a test drives it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from powersweep.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``powersweep ARGS`` in this process: its exit code, stdout and stderr."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def status_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """``powersweep status --json ARGS``, which must succeed: the status it printed."""
    code, out, err = run_cli(capsys, "status", "--json", *args)
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result
