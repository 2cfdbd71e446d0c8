"""``apply`` through the restore journal (``sweep/settings/journaled.py``), on fake cards: what
the journal holds (SM and memory clock offsets included, so ``restore`` puts them back), written
before the first change, removed once the write is complete or undone,
and kept only while a card still holds a value it could not be put back from."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu import LockedClocks, LockResult, SetLimitResult
from powersweep.sweep.records.journal import Journal
from powersweep.sweep.records.owner import process_start
from powersweep.sweep.records.put_back import restore_gpus
from powersweep.sweep.settings.applier import plan_caps
from powersweep.sweep.settings.clock_locks import ClockChange, plan_clocks
from powersweep.sweep.settings.clock_offsets import plan_offsets
from powersweep.sweep.settings.journaled import (
    apply_all_journaled,
    apply_journaled,
    journal_entry,
)
from tests.fakes.fake_gpu import FakeGpu
from tests.helpers.settings import named_target


class _Watched(FakeGpu):
    """Records whether the journal existed at each write; refuses ``refuse`` exactly."""

    def __init__(self, index: int, journal: Journal | None, **kw: Any) -> None:
        self.journal = journal
        self.journal_at_write: list[bool] = []
        self.stuck: float | None = kw.pop("stuck", None)
        super().__init__(index, **kw)

    def set_power_limit(self, watts: float) -> SetLimitResult:
        if self.journal is not None:
            self.journal_at_write.append(self.journal.exists())
        if self.stuck is not None and watts != self.stuck:
            # keeps the value it took: cannot be put back
            return SetLimitResult(watts, self.limit_w, self.limit_w, False, "stuck")
        return super().set_power_limit(watts)


def test_the_entry_holds_each_cards_limit_and_locks_before_the_apply() -> None:
    a, b = FakeGpu(0, limit_w=320.0), FakeGpu(1, limit_w=300.0)
    ta, tb = named_target(a), named_target(b)
    caps = plan_caps([ta], 250.0, strict=False, warn=print)  # only GPU 0 gets a limit
    clocks = [ClockChange(tb, LockedClocks(False, user_clock_setting_active=True), 1500.0)]
    entry = journal_entry([ta, tb], caps, clocks, {"kind": "nvml"})
    first, second = entry.gpus
    assert (first.uuid, first.original_limit_w, first.clocks_locked) == ("GPU-fake-0", 320.0, False)
    assert (second.original_limit_w, second.clocks_locked, second.locks_known) == (
        300.0,
        True,
        False,
    )
    assert (second.original_sm_lock_mhz, second.original_mem_lock_mhz) == (None, None)
    assert dict(entry.backend) == {"kind": "nvml"} and entry.pid == os.getpid()
    assert entry.run_dir is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", entry.created_at)


def _apply_journaled(
    tmp_path: Path, gpus: list[_Watched], cap: float = 250.0
) -> tuple[Journal, list[str], Any]:
    journal = Journal(tmp_path)
    for g in gpus:
        g.journal = journal
    targets = [named_target(g) for g in gpus]
    caps = plan_caps(targets, cap, strict=False, warn=print)
    entry = journal_entry(targets, caps, [], {"kind": "nvml"})
    warnings: list[str] = []
    try:
        return journal, warnings, apply_journaled(journal, entry, caps, [], warnings.append)
    except (GpuError, KeyboardInterrupt) as exc:
        return journal, warnings, exc


def test_the_journal_is_written_before_the_first_change_and_removed_after(tmp_path: Path) -> None:
    a, b = _Watched(0, None), _Watched(1, None)
    journal, warnings, (caps, clocks) = _apply_journaled(tmp_path, [a, b])
    assert a.journal_at_write == [True] and b.journal_at_write == [True]
    assert [r.readback_w for r in caps] == [250.0, 250.0] and clocks == []
    assert not journal.exists() and warnings == []


def test_a_refusal_undone_everywhere_removes_the_journal(tmp_path: Path) -> None:
    a, b = _Watched(0, None, limit_w=320.0), _Watched(1, None, refuse=(250.0,))
    journal, warnings, exc = _apply_journaled(tmp_path, [a, b])
    assert isinstance(exc, GpuError) and "put back" in str(exc)
    assert a.limit_w == 320.0 and not journal.exists() and warnings == []


def test_a_card_that_cannot_be_put_back_keeps_the_journal(tmp_path: Path) -> None:
    a = _Watched(0, None, limit_w=320.0, stuck=250.0)  # takes 250 W, then keeps it
    b = _Watched(1, None, refuse=(250.0,))
    journal, warnings, exc = _apply_journaled(tmp_path, [a, b])
    assert isinstance(exc, GpuError) and "NOT put back: GPU 0 (320 W)" in str(exc)
    assert journal.exists()
    assert warnings == [
        f"the restore journal {journal.path} keeps the originals: `powersweep restore`"
    ]
    entry = journal.read()
    assert entry is not None and entry.gpus[0].original_limit_w == 320.0


def test_an_interrupt_follows_the_same_rule(tmp_path: Path) -> None:
    class Interrupted(_Watched):
        def set_power_limit(self, watts: float) -> SetLimitResult:
            if watts == 250.0:
                raise KeyboardInterrupt
            return super().set_power_limit(watts)

    a, b = _Watched(0, None, limit_w=320.0), Interrupted(1, None)
    journal, _, exc = _apply_journaled(tmp_path, [a, b])
    assert isinstance(exc, KeyboardInterrupt)
    assert a.limit_w == 320.0 and not journal.exists()


def test_without_a_journal_the_apply_is_the_same(tmp_path: Path) -> None:
    gpu = FakeGpu(0)
    caps = plan_caps([named_target(gpu)], 260.0, strict=False, warn=print)
    entry = journal_entry([named_target(gpu)], caps, [], {"kind": "sim"})
    results, _ = apply_journaled(None, entry, caps, [], print)
    assert results[0].readback_w == 260.0 and gpu.limit_w == 260.0


def test_a_live_sweeps_journal_refuses_the_apply_before_any_change(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    gpu = FakeGpu(0)
    caps = plan_caps([named_target(gpu)], 260.0, strict=False, warn=print)
    entry = journal_entry([named_target(gpu)], caps, [], {"kind": "nvml"})
    parent = os.getppid()  # a live process that is not this one
    journal.write(dataclasses.replace(entry, pid=parent, pid_start=process_start(parent)))
    with pytest.raises(UsageError, match=rf"another sweep \(PID {parent}\) is running"):
        apply_journaled(journal, entry, caps, [], print)
    assert gpu.limits_set == []


# --- SM clock offsets (an undervolt run's answer) ------------------------------------------


class _Backend:
    """The cards ``restore`` finds by UUID."""

    def __init__(self, *gpus: FakeGpu) -> None:
        self.gpus = gpus

    def device_count(self) -> int:
        return len(self.gpus)

    def gpu(self, index: int) -> FakeGpu:
        return self.gpus[index]


class _Killed(FakeGpu):
    """Dies (as under SIGKILL: nothing runs after) once its offset is set."""

    def set_sm_clock_offset(self, mhz: float) -> LockResult:
        result = super().set_sm_clock_offset(mhz)
        if mhz != 0.0:
            raise SystemExit("killed (test)")
        return result


def test_the_entry_records_the_offset_in_force_only_on_the_cards_that_get_one() -> None:
    a, b = FakeGpu(0), FakeGpu(1)
    a.sm_offset_mhz = 30.0
    ta, tb = named_target(a), named_target(b)
    offsets = plan_offsets([ta], 180.0)
    entry = journal_entry([ta, tb], [], [], {"kind": "nvml"}, offsets)
    first, second = entry.gpus
    assert (first.offset_set, first.original_sm_offset_mhz) == (True, 30.0)
    assert (second.offset_set, second.original_sm_offset_mhz) == (False, None)
    assert entry.holds_clock_offsets


def test_a_killed_undervolt_apply_leaves_what_restore_needs_to_put_the_offset_back(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    card = _Killed(0, limit_w=320.0)
    targets = [named_target(card)]
    caps = plan_caps(targets, 300.0, strict=False, warn=print)
    clocks = plan_clocks(targets, 1500.0, None, strict=False, warn=print)
    offsets = plan_offsets(targets, 180.0)
    entry = journal_entry(targets, caps, clocks, {"kind": "nvml"}, offsets)
    with pytest.raises(SystemExit):
        apply_all_journaled(journal, entry, caps, clocks, offsets, print)
    assert (card.limit_w, card.sm_lock_mhz, card.sm_offset_mhz) == (300.0, 1500.0, 180.0)
    kept = journal.read()
    assert kept is not None and kept.gpus[0].offset_set
    (result,) = restore_gpus(kept, _Backend(card))  # type: ignore[arg-type]
    assert result.ok and result.offset == "SM clock offset put back to 0 MHz"
    assert (card.limit_w, card.sm_lock_mhz, card.sm_offset_mhz) == (320.0, None, 0.0)


def test_a_complete_undervolt_apply_removes_the_journal_and_keeps_the_offset(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    card = _Watched(0, journal)
    targets = [named_target(card)]
    clocks = plan_clocks(targets, 1500.0, None, strict=False, warn=print)
    offsets = plan_offsets(targets, 180.0)
    entry = journal_entry(targets, [], clocks, {"kind": "nvml"}, offsets)
    caps, locks, done = apply_all_journaled(journal, entry, [], clocks, offsets, print)
    assert caps == [] and len(locks) == 1
    assert [r.readback_mhz for r in done] == [180.0] and card.sm_offset_mhz == 180.0
    assert not journal.exists()


# --- memory clock offsets (issue 45) -------------------------------------------------------


class _MemKilled(FakeGpu):
    """Dies (as under SIGKILL) once its memory offset is set."""

    def set_mem_clock_offset(self, mhz: float) -> LockResult:
        result = super().set_mem_clock_offset(mhz)
        if mhz != 0.0:
            raise SystemExit("killed (test)")
        return result


def test_the_entry_records_the_memory_offset_in_force_apart_from_the_sm_one() -> None:
    a, b = FakeGpu(0), FakeGpu(1)
    a.mem_offset_mhz, b.sm_offset_mhz = 400.0, 30.0
    ta, tb = named_target(a), named_target(b)
    offsets = plan_offsets([ta], 1000.0, "mem") + plan_offsets([tb], 180.0)
    first, second = journal_entry([ta, tb], [], [], {"kind": "nvml"}, offsets).gpus
    assert (first.mem_offset_set, first.original_mem_offset_mhz) == (True, 400.0)
    assert (first.offset_set, first.original_sm_offset_mhz) == (False, None)
    assert (second.mem_offset_set, second.original_mem_offset_mhz) == (False, None)
    assert (second.offset_set, second.original_sm_offset_mhz) == (True, 30.0)


def test_a_killed_memory_offset_apply_leaves_what_restore_needs_to_put_both_offsets_back(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    card = _MemKilled(0, limit_w=320.0)
    targets = [named_target(card)]
    clocks = plan_clocks(targets, 1500.0, None, strict=False, warn=print)
    offsets = plan_offsets(targets, 180.0) + plan_offsets(targets, 1000.0, "mem")
    entry = journal_entry(targets, [], clocks, {"kind": "nvml"}, offsets)
    with pytest.raises(SystemExit):
        apply_all_journaled(journal, entry, [], clocks, offsets, print)
    assert (card.sm_lock_mhz, card.sm_offset_mhz, card.mem_offset_mhz) == (1500.0, 180.0, 1000.0)
    kept = journal.read()
    assert kept is not None and kept.gpus[0].mem_offset_set and kept.gpus[0].offset_set
    (result,) = restore_gpus(kept, _Backend(card))  # type: ignore[arg-type]
    assert result.ok and "memory clock offset put back to 0 MHz" in result.offset
    assert (card.sm_lock_mhz, card.sm_offset_mhz, card.mem_offset_mhz) == (None, 0.0, 0.0)


def test_a_refused_memory_offset_is_undone_and_the_journal_removed(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    card = _Watched(0, journal)
    card.mem_offset_mhz = 200.0
    targets = [named_target(card)]
    offsets = plan_offsets(targets, 5000.0, "mem")  # within range: the card refuses it below

    def refuse(mhz: float) -> LockResult:
        if mhz != 200.0:
            return LockResult(mhz, False, "refused (test)")
        card.mem_offset_mhz = mhz
        return LockResult(mhz, True)

    card.set_mem_clock_offset = refuse  # type: ignore[method-assign]
    entry = journal_entry(targets, [], [], {"kind": "nvml"}, offsets)
    with pytest.raises(
        GpuError, match=r"^refused \(test\); the GPUs already changed were put back$"
    ):
        apply_all_journaled(journal, entry, [], [], offsets, print)
    assert card.mem_offset_mhz == 200.0 and not journal.exists()
