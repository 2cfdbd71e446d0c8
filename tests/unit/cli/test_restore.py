"""powersweep.cli.restore: ``powersweep restore`` puts back what a killed sweep left, from its
restore journal (here a simulated rig's), removes the journal only when every card is back, and
never takes the cards of a sweep that may still run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from powersweep.sim.limit_store import LimitStore
from powersweep.sweep.records.owner import process_start
from tests.helpers.cli import run_cli as run

UUID = "GPU-sim-rtx3090-air-0"


def _journal(state_dir: Path, sim_state: Path, **changes: Any) -> Path:
    """A simulated sweep's journal: GPU 0's original limit 370 W."""
    entry: dict[str, Any] = {
        "version": 1,
        "pid": os.getpid(),  # this process now: the sweep is gone
        "created_at": "2025-01-01T00:00:00Z",
        "backend": {"kind": "sim", "profiles": ["rtx3090-air"], "sim_state": str(sim_state)},
        "gpus": [{"uuid": UUID, "index": 0, "name": "RTX 3090", "original_limit_w": 370.0}],
    }
    entry.update(changes)
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "journal.json"
    path.write_text(json.dumps(entry))
    return path


def test_without_a_journal_there_is_nothing_to_restore(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "restore", "--state-dir", str(tmp_path))
    assert (code, out) == (0, "")
    assert err == f"nothing to restore: no journal at {tmp_path / 'journal.json'}\n"


def test_a_killed_sweeps_limit_is_put_back_and_its_journal_removed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sim_state = tmp_path / "sim.json"
    LimitStore(sim_state).put(UUID, 250.0)  # what the killed sweep left
    journal = _journal(tmp_path / "sd", sim_state)
    code, out, err = run(capsys, "restore", "--state-dir", str(tmp_path / "sd"))
    assert (code, out) == (0, ""), err
    assert err.splitlines() == [
        f"GPU 0 ({UUID}): power limit restored to 370 W",
        f"journal removed: {journal}",
    ]
    assert LimitStore(sim_state).get(UUID) == 370.0
    assert not journal.exists()


def test_a_card_not_put_back_keeps_the_journal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sim_state = tmp_path / "sim.json"
    gpus = [{"uuid": UUID, "index": 0, "name": "RTX 3090", "original_limit_w": 1000.0}]
    journal = _journal(tmp_path / "sd", sim_state, gpus=gpus)
    code, out, err = run(capsys, "restore", "--state-dir", str(tmp_path / "sd"))
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"warning: GPU 0 ({UUID}): NOT restored to 1000 W: ")
    assert lines[-1] == (
        f"error: 1 of 1 GPUs not restored; the journal stays at {journal} (fix the cause and "
        "run `powersweep restore` again)"
    )
    assert journal.exists()


def test_a_sweep_that_still_runs_keeps_its_cards_even_with_force(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    parent = os.getppid()
    started = process_start(parent)
    assert started is not None
    sim_state = tmp_path / "sim.json"
    LimitStore(sim_state).put(UUID, 250.0)
    journal = _journal(tmp_path / "sd", sim_state, pid=parent, pid_start=started)
    for extra in ([], ["--force"]):
        code, out, err = run(capsys, "restore", "--state-dir", str(tmp_path / "sd"), *extra)
        assert code == 2 and out == ""
        (line,) = err.strip().splitlines()
        assert line.startswith(f"error: the sweep that wrote {journal} (PID {parent}) is still")
        assert "running on GPU 0" in line
    assert LimitStore(sim_state).get(UUID) == 250.0 and journal.exists()


def test_a_doubt_about_the_owner_needs_force(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sim_state = tmp_path / "sim.json"
    LimitStore(sim_state).put(UUID, 250.0)
    # a live PID and no start time (an older journal): it cannot be told from the sweep
    journal = _journal(tmp_path / "sd", sim_state, pid=os.getppid())
    code, _, err = run(capsys, "restore", "--state-dir", str(tmp_path / "sd"))
    assert code == 2
    assert err.startswith(f"error: cannot tell whether the sweep that wrote {journal} still runs")
    assert err.strip().endswith("if it is gone, `powersweep restore --force` puts the cards back")
    assert LimitStore(sim_state).get(UUID) == 250.0
    code, _, err = run(capsys, "restore", "--state-dir", str(tmp_path / "sd"), "--force")
    assert code == 0, err
    assert err.splitlines()[0].endswith("; restoring anyway (--force)")
    assert LimitStore(sim_state).get(UUID) == 370.0 and not journal.exists()


def test_a_backend_override_does_not_apply_to_a_simulated_rig(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    journal = _journal(tmp_path / "sd", tmp_path / "sim.json")
    code, _, err = run(capsys, "restore", "--state-dir", str(tmp_path / "sd"), "--backend", "nvml")
    assert code == 2
    assert err.strip() == "error: --backend does not apply to a simulated rig's journal"
    assert journal.exists()


def test_a_damaged_journal_is_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "journal.json").write_text('{"version": 1, "gpus": "x"}')
    code, _, err = run(capsys, "restore", "--state-dir", str(tmp_path))
    assert code != 0
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: the restore journal {tmp_path / 'journal.json'} is damaged")
