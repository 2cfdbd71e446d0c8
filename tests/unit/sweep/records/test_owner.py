"""Who owns the cards (``sweep/records/owner.py``): whether the sweep that wrote a journal still
runs, told by its PID and the kernel's start time of that process, and the refusal while it does."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from powersweep.sweep.records import owner
from powersweep.sweep.records.entry import JournalEntry, JournalGpu
from powersweep.sweep.records.owner import (
    owner_alive,
    owner_refusal,
    owner_state,
    process_start,
)

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def _owned_entry(pid: int, start: str | None, gpus: int = 1) -> JournalEntry:
    cards = tuple(JournalGpu(f"GPU-{i}", i, "card", 300.0) for i in range(gpus))
    return JournalEntry({"kind": "nvml"}, cards, pid, "2026-05-01T10:00:00Z", pid_start=start)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_process_start_is_the_kernels_count_and_none_when_gone() -> None:
    mine = process_start(os.getpid())
    assert mine is not None and mine.isdigit()
    assert process_start(os.getpid()) == mine
    assert process_start(_dead_pid()) is None


def test_the_running_sweep_with_its_start_time_is_alive() -> None:
    parent = os.getppid()
    state = owner_state(_owned_entry(parent, process_start(parent)))
    assert state.alive is True and f"PID {parent} is the sweep" in state.why
    assert owner_alive(_owned_entry(parent, process_start(parent)))


def test_a_reused_pid_is_another_process() -> None:
    parent = os.getppid()
    state = owner_state(_owned_entry(parent, "1"))
    assert state.alive is False
    assert state.why == f"PID {parent} now belongs to a process started after the sweep"
    assert not owner_alive(_owned_entry(parent, "1"))


@pytest.mark.parametrize(
    ("pid", "why"),
    [(0, "the journal names no process"), (-3, "the journal names no process")],
)
def test_a_journal_without_a_process_has_no_owner(pid: int, why: str) -> None:
    assert owner_state(_owned_entry(pid, None)) == owner.OwnerState(False, why)


def test_this_very_process_or_a_gone_one_is_no_owner() -> None:
    me = owner_state(_owned_entry(os.getpid(), process_start(os.getpid())))
    assert me.alive is False and "is this process now" in me.why
    dead = _dead_pid()
    state = owner_state(_owned_entry(dead, "123"))
    assert state == owner.OwnerState(False, f"no process has PID {dead} any more")


def test_an_older_journal_without_a_start_time_cannot_tell_and_counts_as_alive() -> None:
    parent = os.getppid()
    state = owner_state(_owned_entry(parent, None))
    assert state.alive is None and "records no start time" in state.why
    assert owner_alive(_owned_entry(parent, None))  # never take cards whose owner might be alive


def test_a_process_of_another_user_still_counts_and_a_failed_lookup_cannot_tell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent = os.getppid()

    def denied(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(owner.os, "kill", denied)
    assert owner_state(_owned_entry(parent, process_start(parent))).alive is True

    def broken(pid: int, sig: int) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(owner.os, "kill", broken)
    state = owner_state(_owned_entry(parent, "1"))
    assert state == owner.OwnerState(None, f"PID {parent} cannot be looked up (Invalid argument)")


def test_the_refusal_names_the_sweep_its_cards_and_its_journal() -> None:
    path = Path("/state/journal.json")
    assert owner_refusal(_owned_entry(77, None), path) == (
        f"another sweep (PID 77) is running on GPU 0: wait for it to end or stop it (its journal "
        f"{path} is left alone; --force does not override a live sweep)"
    )
    assert "running on GPUs 0, 1, 2:" in owner_refusal(_owned_entry(77, None, gpus=3), path)
