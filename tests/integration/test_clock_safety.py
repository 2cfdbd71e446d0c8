"""Safety of clock-lock sweeps: locks (and a held cap) come back on SIGTERM, survive SIGKILL in
the journal for ``powersweep restore``, and a new sweep refuses while the journal holds locks.

The simulated card keeps its limit and its locks in the ``--sim-state`` file, like a driver keeps
them after the process that set them is gone. The card starts with the user's own SM lock, which
must come back (not a reset).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import powersweep, powersweep_started, sim_rig

UUID = "GPU-sim-rtx3090-air-0"
USER_LIMIT_W = 350.0
USER_SM_LOCK = 1500.0
USER_CARD = {UUID: USER_LIMIT_W, f"{UUID}#locks": {"sm": USER_SM_LOCK}}
ARGS = (
    "--simulate",
    "rtx3090-air",
    "--axis",
    "sm-clock",
    "--sm-clocks",
    "1800,1650,1350,1200,1050,900,750",
    "--cap",
    "300",
    # paced virtual time (the unpaced run's figures): long enough in wall time for a signal or a
    # kill to land mid-run
    "--sim-pace",
    "10",
    "--target-cap-seconds",
    "2",
    "--warmup-requests",
    "0",
    "--settle-seconds",
    "0.5",
    "--quiet",
    "--no-charts",
    "--cooling",
    "air",
)


def _limit_and_locks(state: Path) -> tuple[float, Any, Any]:
    data = json.loads(state.read_text())
    locks = data.get(f"{UUID}#locks") or {}
    return float(data[UUID]), locks.get("sm"), locks.get("mem")


def _wait_mid_sweep(proc: subprocess.Popen[str], state: Path, journal: Path) -> None:
    """Until the sweep has locked a clock of its own (and the journal is on disk)."""
    deadline = time.monotonic() + 60
    while not journal.exists() or _limit_and_locks(state)[1] in (USER_SM_LOCK, None):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no lock set in time"
        time.sleep(0.02)
    time.sleep(0.3)


@pytest.mark.slow
def test_sigterm_mid_clock_sweep_puts_the_locks_and_the_limit_back(tmp_path: Path) -> None:
    state, out, state_dir, env = sim_rig(tmp_path, USER_CARD)
    journal = state_dir / "journal.json"
    proc = powersweep_started(*ARGS, "--sim-state", str(state), "--out", str(out), env=env)
    try:
        _wait_mid_sweep(proc, state, journal)
        assert _limit_and_locks(state)[0] == 300.0  # the held cap is in force
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    # the user's own SM lock is back, not a reset; the limit too
    assert _limit_and_locks(state) == (USER_LIMIT_W, USER_SM_LOCK, None)
    assert not journal.exists()
    assert "clocks locked back to SM 1500 MHz" in stderr


@pytest.mark.slow
def test_sigkill_mid_clock_sweep_is_undone_by_restore_and_blocks_new_sweeps(
    tmp_path: Path,
) -> None:
    state, out, state_dir, env = sim_rig(tmp_path, USER_CARD)
    journal = state_dir / "journal.json"
    args = [*ARGS, "--sim-state", str(state), "--out", str(out)]
    proc = powersweep_started(*args, env=env)
    try:
        _wait_mid_sweep(proc, state, journal)
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (gpu,) = json.loads(journal.read_text())["gpus"]
    assert gpu["clocks_locked"] and gpu["original_sm_lock_mhz"] == USER_SM_LOCK
    assert gpu["original_mem_lock_mhz"] is None and gpu["locks_known"]
    left = _limit_and_locks(state)
    assert left[1] not in (USER_SM_LOCK, None)  # SIGKILL: nothing could put it back

    # a new sweep refuses while the journal holds locks, even with --force
    for extra in ((), ("--force",)):
        refused = powersweep(*args, *extra, env=env)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.strip().splitlines()[-1].startswith("error: ")
        assert "powersweep restore" in refused.stderr
        assert _limit_and_locks(state) == left

    restored = powersweep("restore", env=env)
    assert restored.returncode == 0, restored.stderr
    assert _limit_and_locks(state) == (USER_LIMIT_W, USER_SM_LOCK, None)
    assert "clocks locked back to SM 1500 MHz" in restored.stderr
    assert not journal.exists()


@pytest.mark.slow
def test_a_failing_server_mid_clock_sweep_still_puts_everything_back(tmp_path: Path) -> None:
    state, out, state_dir, env = sim_rig(tmp_path, USER_CARD)
    done = powersweep(
        *ARGS, "--sim-state", str(state), "--out", str(out), "--sim-http-error", "500", env=env
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in done.stderr
    assert _limit_and_locks(state) == (USER_LIMIT_W, USER_SM_LOCK, None)
    assert not (state_dir / "journal.json").exists()
