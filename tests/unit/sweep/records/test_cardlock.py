"""The machine-wide card locks: one holder per card, all or none, released when the holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from powersweep.errors import UsageError
from powersweep.sweep.records.cardlock import (
    ROOT_LOCK_DIR,
    CardHolder,
    CardLocks,
    card_key,
    default_lock_dir,
)


def _card_locks(tmp: Path, command: str = "sweep", pid: int | None = None) -> CardLocks:
    holder = CardHolder(pid or os.getpid(), command, "/state/" + command, "2026-12-02T10:00:00Z")
    return CardLocks(tmp, holder)


def test_a_card_held_by_one_holder_is_refused_to_another_with_who_holds_it(tmp_path: Path) -> None:
    first = _card_locks(tmp_path, "sweep", pid=4242)
    first.take([("gpu:GPU-a", "GPU 0")])
    with pytest.raises(UsageError) as refused:
        _card_locks(tmp_path, "apply").take([("gpu:GPU-a", "GPU 0")])
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith("GPU 0 is in use by another powersweep sweep (PID 4242")
    assert "state dir /state/sweep" in line and "since 2026-12-02T10:00:00Z" in line
    first.release()
    again = _card_locks(tmp_path, "apply")
    again.take([("gpu:GPU-a", "GPU 0")])
    assert again.held == {"gpu:GPU-a"}
    again.release()


def test_taking_several_cards_is_all_or_none(tmp_path: Path) -> None:
    other = _card_locks(tmp_path, "sweep")
    other.take([("gpu:GPU-b", "GPU 1")])
    mine = _card_locks(tmp_path, "apply")
    with pytest.raises(UsageError, match="GPU 1 is in use"):
        mine.take([("gpu:GPU-a", "GPU 0"), ("gpu:GPU-b", "GPU 1")])
    assert mine.held == frozenset()
    # GPU 0 was let go again: a third process can take it
    third = _card_locks(tmp_path, "restore")
    third.take([("gpu:GPU-a", "GPU 0")])
    third.release()
    other.release()


def test_a_holder_takes_its_own_cards_again_and_cards_without_a_key_need_no_lock(
    tmp_path: Path,
) -> None:
    with _card_locks(tmp_path) as locks:
        locks.take([("gpu:GPU-a", "GPU 0"), (None, "GPU 9")])
        locks.take([("gpu:GPU-a", "GPU 0"), ("gpu:GPU-b", "GPU 1")])
        assert locks.held == {"gpu:GPU-a", "gpu:GPU-b"}
    assert locks.held == frozenset()


def test_a_killed_holders_cards_are_free_at_once(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path\n"
        "from powersweep.sweep.records.cardlock import locks_for\n"
        "locks = locks_for('sweep', Path('/s'))\n"
        "locks.take([('gpu:GPU-a', 'GPU 0')]); print('held', flush=True); time.sleep(60)\n"
    )
    env = {**os.environ, "POWERSWEEP_LOCK_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=f"powersweep sweep \\(PID {proc.pid}"):
            _card_locks(tmp_path, "restore").take([("gpu:GPU-a", "GPU 0")])
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 5
    while True:  # the kernel drops a dead process's flock as its files close
        try:
            _card_locks(tmp_path, "restore").take([("gpu:GPU-a", "GPU 0")])
            break
        except UsageError:
            assert time.monotonic() < deadline
            time.sleep(0.01)


def test_card_keys_name_real_cards_by_uuid_and_simulated_ones_by_their_state_file() -> None:
    assert card_key({"kind": "nvml"}, "GPU-x") == "gpu:GPU-x"
    assert card_key({"kind": "amdsmi"}, "GPU-x") == card_key({"kind": "auto"}, "GPU-x")
    assert card_key({"kind": "sim", "sim_state": "/tmp/s.json"}, "GPU-x") == (
        "sim:/tmp/s.json:GPU-x"
    )
    assert card_key({"kind": "sim", "sim_state": None}, "GPU-x") is None


def test_the_lock_directory_is_machine_wide_for_root() -> None:
    assert default_lock_dir({"POWERSWEEP_LOCK_DIR": "/x"}, euid=0) == Path("/x")
    # whatever the state directory or the invoking user's environment
    assert default_lock_dir({"POWERSWEEP_STATE_DIR": "/a", "XDG_RUNTIME_DIR": "/r"}, 0) == (
        ROOT_LOCK_DIR
    )
    assert default_lock_dir({"XDG_RUNTIME_DIR": "/run/user/7"}, euid=7) == Path(
        "/run/user/7/powersweep"
    )
    assert default_lock_dir({}, euid=7) == Path("/tmp/powersweep-7")
