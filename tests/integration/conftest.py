"""Helpers for end-to-end tests: run the CLI as users do, in a subprocess."""

from __future__ import annotations

import functools
import json
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.analysis.cross_result_types import CrossModeResult
from powersweep.analysis.fleet_result_types import FleetReport
from powersweep.analysis.result_types import JsonRecord, PowerAnalysis
from powersweep.analysis.undervolt_result_types import UndervoltAnalysis
from tests.helpers.files import read_csv as read_csv
from tests.integration import cli_child
from tests.paths import REPO as REPO
from tests.paths import SHARED_3090


def _cli_env(env: dict[str, str] | None) -> dict[str, str]:
    """The test's environment plus ``env``, without the caller's API key unless ``env`` sets
    one (a key from the shell would be sent to the simulated server)."""
    full_env = {**os.environ, **(env or {})}
    if env is None or "OPENAI_API_KEY" not in env:
        full_env.pop("OPENAI_API_KEY", None)
    return full_env


def powersweep(
    *args: str, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m powersweep ARGS`` and capture its output (in a child forked from a
    process that imported the package already: :mod:`tests.integration.cli_child`)."""
    return _Child(args, env).finish(timeout)


class _Child:
    """One ``python -m powersweep ARGS`` forked from this test process's forkserver, its
    stdout and stderr in files of its own."""

    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.command = [sys.executable, "-m", "powersweep", *args]
        self.tmp = tempfile.TemporaryDirectory(prefix="powersweep-cli-")
        self.out, self.err = (os.path.join(self.tmp.name, n) for n in ("out", "err"))
        self.process = _forkserver().Process(
            target=cli_child.run, args=(list(args), _cli_env(env), str(REPO), self.out, self.err)
        )
        self.process.start()

    def finish(self, timeout: float) -> subprocess.CompletedProcess[str]:
        """Wait for it (killed past ``timeout``: TimeoutExpired); its code and output."""
        with self.tmp:
            self.process.join(timeout)
            if self.process.exitcode is None:
                self.process.kill()
                self.process.join()
                raise subprocess.TimeoutExpired(self.command, timeout)
            rc = self.process.exitcode
            self.process.close()
            stdout, stderr = Path(self.out).read_text(), Path(self.err).read_text()
        return subprocess.CompletedProcess(self.command, rc, stdout, stderr)


@functools.cache
def _forkserver() -> multiprocessing.context.ForkServerContext:
    """The forkserver of this test process, the package imported (one BLAS thread, as the
    command itself runs)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.integration.cli_child", "powersweep.cli"])
    had = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        if had is None:
            del os.environ["OPENBLAS_NUM_THREADS"]
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = had
    return ctx


def powersweep_started(
    *args: str, stdout: int | None = subprocess.PIPE, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start ``python -m powersweep ARGS`` without waiting (sweeps run side by side, or one a
    test signals), stderr captured; ``stdout`` piped unless told otherwise."""
    return subprocess.Popen(
        [sys.executable, "-m", "powersweep", *args],
        cwd=REPO,
        env=_cli_env(env),
        text=True,
        stdout=stdout,
        stderr=subprocess.PIPE,
    )


def powersweeps_side_by_side(
    arg_lists: list[list[str]], at_once: int = 3, timeout: float = 240
) -> list[tuple[int, str]]:
    """Run one ``python -m powersweep`` per argument list, ``at_once`` at a time (simulated
    sweeps mostly wait on their clocks); each one's exit code and stderr, in the lists' order."""
    results: list[tuple[int, str]] = []
    running: list[_Child] = []

    def finish(child: _Child) -> None:
        done = child.finish(timeout)
        results.append((done.returncode, done.stderr))

    for args in arg_lists:
        running.append(_Child(args))
        if len(running) >= at_once:
            finish(running.pop(0))
    for child in running:
        finish(child)
    return results


def sim_rig(tmp: Path, cards: dict[str, Any]) -> tuple[Path, Path, Path, dict[str, str]]:
    """A simulated rig's state file holding ``cards`` (limits and locks by UUID), an out dir, a
    state dir and the environment pointing there (without the caller's API key)."""
    tmp.mkdir(parents=True, exist_ok=True)
    state = tmp / "sim-state.json"
    state.write_text(json.dumps(cards))
    state_dir = tmp / "state"
    env = {**os.environ, "POWERSWEEP_STATE_DIR": str(state_dir)}
    env.pop("OPENAI_API_KEY", None)
    return state, tmp / "runs", state_dir, env


def only_run_dir(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def sweep_done(out: Path, *args: str, timeout: float = 240, check: bool = True) -> tuple[Path, str]:
    """``python -m powersweep ARGS --out OUT``: its run directory and stderr. With ``check``
    (the default) it must exit 0 without a traceback."""
    done = powersweep(*args, "--out", str(out), timeout=timeout)
    if check:
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
    return only_run_dir(out), done.stderr


def sweep_run_dir(out: Path, *args: str, timeout: float = 240, check: bool = True) -> Path:
    """:func:`sweep_done`'s run directory."""
    return sweep_done(out, *args, timeout=timeout, check=check)[0]


def read_json(path: Path) -> Any:
    """A JSON file; an analysis.json, fleet.json or cross-mode.json is also checked against its
    typed model, both ways, so every end-to-end run proves the model holds all the tool writes
    (no key lost or mistyped)."""
    data = json.loads(path.read_text())
    if path.name == "analysis.json" and isinstance(data, dict):
        kinds: dict[Any, type[JsonRecord]] = {
            "clocks": ClockAnalysis,
            "undervolt": UndervoltAnalysis,
        }
        typed = kinds.get(data.get("kind"), PowerAnalysis)
        assert typed.from_json(data).to_json() == data, f"{path} does not round-trip"
    if path.name == "fleet.json" and isinstance(data, dict):
        assert FleetReport.from_json(data).to_json() == data, f"{path} does not round-trip"
    if path.name == "cross-mode.json" and isinstance(data, dict):
        assert CrossModeResult.from_json(data).to_json() == data, f"{path} does not round-trip"
    return data


@pytest.fixture
def shared_3090_csv() -> Path:
    path = SHARED_3090
    if not path.exists():
        pytest.skip(f"measured curve not found at {path} (shared/ beside the repo)")
    return path
