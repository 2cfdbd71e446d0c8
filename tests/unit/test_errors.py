"""powersweep.errors: the errors a user can act on. Each carries its one-line message and the exit
code the CLI uses: 1 for a runtime failure (a GPU's too, unless it says otherwise), 2 for bad
input; the CLI prints one ``error:`` line and exits with that code."""

from __future__ import annotations

import pytest

from powersweep.cli import main
from powersweep.errors import GpuError, PowersweepError, UsageError


def test_a_failure_exits_1_unless_it_says_otherwise() -> None:
    exc = PowersweepError("disk full")
    assert str(exc) == "disk full" and exc.exit_code == 1
    assert PowersweepError("needs root", exit_code=2).exit_code == 2


def test_bad_input_exits_2() -> None:
    exc = UsageError("--caps takes watts")
    assert isinstance(exc, PowersweepError) and exc.exit_code == 2
    assert str(exc) == "--caps takes watts"


def test_a_gpu_error_is_a_runtime_failure_with_any_code_it_gives() -> None:
    assert GpuError("GPU 0 rejected 100 W").exit_code == 1
    assert GpuError("no permission", exit_code=2).exit_code == 2
    assert not isinstance(GpuError("x"), UsageError)


def test_the_cli_prints_one_error_line_and_exits_with_the_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--simulate", "rtx3090-air", "--step-size", "0", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --step-size")
    assert "Traceback" not in err
