"""The restore of one sweep's cards (``sweep/measurement/restorer.py``) on fake cards: the journal
written before the first change (with the locks the cards had), its watch, every touched card put
back, and the journal removed only once nothing is left to restore."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from powersweep.clock import ManualClock
from powersweep.errors import GpuError
from powersweep.sweep.gpu import SetLimitResult
from powersweep.sweep.locks import ClockLocker
from powersweep.sweep.measurement.restorer import JOURNAL_CHECK_S, Restorer
from powersweep.sweep.offsets import ClockOffsetter
from powersweep.sweep.records.journal import Journal, JournalLost
from tests.fakes.fake_gpu import FakeGpu


class _Raising(FakeGpu):
    def set_power_limit(self, watts: float) -> SetLimitResult:
        raise GpuError("needs root")


def _restorer(
    gpus: list[Any],
    journal: Journal | None,
    *,
    locker: ClockLocker | None = None,
    no_reset: bool = False,
) -> tuple[Restorer, list[str]]:
    warnings: list[str] = []
    originals = {g.index: g.limit_w for g in gpus}
    restorer = Restorer(
        gpus,
        originals,
        journal=journal,
        backend={"kind": "sim", "profiles": ["x"]},
        locker=locker,
        no_reset=no_reset,
        warn=warnings.append,
    )
    return restorer, warnings


def test_the_journal_holds_each_cards_own_limit_before_the_first_change(tmp_path: Path) -> None:
    gpus = [FakeGpu(0, limit_w=320.0), FakeGpu(1, limit_w=280.0)]
    journal = Journal(tmp_path)
    restorer, _ = _restorer(gpus, journal)
    restorer.ensure_owned()  # nothing written yet: nothing to check
    restorer.write_journal("/runs/r1")
    entry = journal.read()
    assert entry is not None and restorer.written
    assert [(g.uuid, g.index, g.original_limit_w) for g in entry.gpus] == [
        ("GPU-fake-0", 0, 320.0),
        ("GPU-fake-1", 1, 280.0),
    ]
    assert (entry.pid, entry.run_dir, dict(entry.backend)) == (
        os.getpid(),
        "/runs/r1",
        {"kind": "sim", "profiles": ["x"]},
    )
    assert not entry.holds_clock_locks


def test_a_clock_sweeps_journal_holds_the_locks_the_cards_had(tmp_path: Path) -> None:
    gpu = FakeGpu(0)
    gpu.sm_lock_mhz = 1200.0
    locker = ClockLocker([gpu], lambda _m: None)
    journal = Journal(tmp_path)
    restorer, _ = _restorer([gpu], journal, locker=locker)
    restorer.write_journal("/runs/r1")
    entry = journal.read()
    assert entry is not None
    (g,) = entry.gpus
    assert (g.clocks_locked, g.original_sm_lock_mhz, g.original_mem_lock_mhz, g.locks_known) == (
        True,
        1200.0,
        None,
        True,
    )


def test_without_a_journal_nothing_is_written_or_checked() -> None:
    restorer, warnings = _restorer([FakeGpu(0)], None)
    restorer.write_journal("/runs/r1")
    restorer.ensure_owned()
    restorer.close_journal([], {"status": "complete"})
    assert not restorer.written and warnings == []


def test_a_journal_removed_while_the_sweep_runs_stops_it(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    restorer, _ = _restorer([FakeGpu(0)], journal)
    restorer.write_journal("/runs/r1")
    journal.path.unlink()
    with pytest.raises(JournalLost, match="was removed while this sweep ran"):
        restorer.ensure_owned()


def test_the_watch_cancels_the_sweep_within_a_check_of_the_loss(tmp_path: Path) -> None:
    clock = ManualClock()
    journal = Journal(tmp_path)
    restorer, _ = _restorer([FakeGpu(0)], journal)
    restorer.write_journal("/runs/r1")

    lost_at: list[float] = []

    async def main() -> bool:
        sweep = asyncio.create_task(asyncio.Event().wait())
        watch = asyncio.create_task(restorer.watch(clock, sweep))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not sweep.done() and restorer.lost is None and clock.now() > 0
        lost_at.append(clock.now())
        journal.path.unlink()
        await watch
        await asyncio.gather(sweep, return_exceptions=True)
        return sweep.cancelled()

    assert asyncio.run(main())
    assert isinstance(restorer.lost, JournalLost)
    assert lost_at[0] <= clock.now() <= lost_at[0] + JOURNAL_CHECK_S


def test_restore_puts_back_the_touched_cards_and_names_each_failure() -> None:
    kept, raising, untouched = FakeGpu(0, limit_w=320.0), _Raising(1), FakeGpu(2, limit_w=300.0)
    restorer, warnings = _restorer([kept, raising, untouched], None)
    kept.set_power_limit(200.0)
    untouched.set_power_limit(150.0)  # set, but the sweep says it never touched it
    kept.refuse.add(320.0)
    restored = restorer.restore({0, 1})
    assert restored == [
        {"gpu_index": 0, "limit_w": 320.0, "ok": False, "message": "fake GPU 0 kept 200 W"},
        {"gpu_index": 1, "limit_w": 350.0, "ok": False, "message": "needs root"},
    ]
    assert untouched.limit_w == 150.0
    assert warnings == [
        "could not restore GPU 0 to 320 W: fake GPU 0 kept 200 W; run: sudo nvidia-smi -i 0 "
        "-pl 320",
        "could not restore GPU 1 to 350 W: needs root; run: sudo nvidia-smi -i 1 -pl 350",
    ]


def test_restore_puts_the_locks_back_too_even_on_cards_whose_limit_was_not_touched() -> None:
    a, b = FakeGpu(0, limit_w=320.0), FakeGpu(1)
    locker = ClockLocker([a, b], lambda _m: None)
    restorer, _ = _restorer([a, b], None, locker=locker)
    locker.touched = {0, 1}
    a.lock_sm_clock(1500.0)
    b.lock_sm_clock(1500.0)
    a.set_power_limit(250.0)
    restored = restorer.restore({0})
    assert restored == [
        {"gpu_index": 1, "limit_w": None, "ok": True, "message": "", "clocks": "clocks unlocked"},
        {"gpu_index": 0, "limit_w": 320.0, "ok": True, "message": "", "clocks": "clocks unlocked"},
    ]
    assert (a.limit_w, a.sm_lock_mhz, b.sm_lock_mhz) == (320.0, None, None)


def test_no_reset_leaves_everything_as_the_sweep_set_it() -> None:
    gpu = FakeGpu(0, limit_w=320.0)
    restorer, _ = _restorer([gpu], None, no_reset=True)
    gpu.set_power_limit(200.0)
    assert restorer.restore({0}) == [] and gpu.limit_w == 200.0


def test_the_journal_goes_once_every_card_is_back_and_stays_otherwise(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    restorer, warnings = _restorer([FakeGpu(0)], journal)
    restorer.write_journal("/runs/r1")
    restorer.close_journal([{"gpu_index": 0, "ok": False}], {"status": "complete"})
    assert journal.exists()
    assert warnings == [
        f"the original limits stay in {journal.path}: `powersweep restore` retries putting them "
        "back"
    ]
    restorer.close_journal([{"gpu_index": 0, "ok": True}], {"status": "complete"})
    assert not journal.exists()


def test_an_unwritten_run_json_leaves_the_outcome_in_the_journal(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    restorer, warnings = _restorer([FakeGpu(0)], journal)
    restorer.write_journal("/runs/r1")
    restored = [{"gpu_index": 0, "ok": True}]
    restorer.close_journal(restored, {"status": "complete"}, record_error="disk full")
    entry = journal.read()
    assert entry is not None and entry.outcome == {
        "status": "complete",
        "restored": restored,
        "record_error": "disk full",
    }
    assert warnings == [
        f"disk full; the outcome is kept in {journal.path} (the limits were restored)"
    ]


def test_an_outcome_that_cannot_be_recorded_is_warned_and_the_journal_goes(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    restorer, warnings = _restorer([FakeGpu(0)], journal)
    restorer.write_journal("/runs/r1")
    journal.path.unlink()
    restorer.close_journal([{"gpu_index": 0, "ok": True}], {}, record_error="disk full")
    assert warnings == [f"the restore journal {journal.path} is gone: cannot record"]
    assert not journal.exists()


def test_offsets_are_journalled_and_put_back_first(tmp_path: Path) -> None:
    gpu = FakeGpu(0, limit_w=320.0)
    gpu.sm_offset_mhz = 40.0
    journal = Journal(tmp_path)
    warnings: list[str] = []
    offsets = ClockOffsetter([gpu], warnings.append)
    restorer = Restorer(
        [gpu],
        {0: 320.0},
        journal=journal,
        backend={"kind": "sim", "profiles": ["x"]},
        locker=None,
        no_reset=False,
        warn=warnings.append,
        offsetter=offsets,
    )
    restorer.write_journal("/runs/r1")
    entry = journal.read()
    assert entry is not None and entry.holds_clock_offsets
    assert entry.gpus[0].original_sm_offset_mhz == 40.0
    offsets.apply(200.0)
    gpu.set_power_limit(250.0)
    (done,) = restorer.restore({0})
    assert done["ok"] and done["offset"] == "SM clock offset put back to 40 MHz"
    assert gpu.sm_offset_mhz == 40.0 and gpu.limit_w == 320.0


def test_no_reset_never_leaves_an_offset(tmp_path: Path) -> None:
    # the last offset a search set is the one that failed its check: --no-reset keeps the
    # limit it left, never the offset (the options refuse the pair; this is the last guard)
    gpu = FakeGpu(0, limit_w=320.0)
    offsets = ClockOffsetter([gpu], lambda _m: None)
    restorer = Restorer(
        [gpu],
        {0: 320.0},
        journal=None,
        backend={"kind": "sim", "profiles": ["x"]},
        locker=None,
        no_reset=True,
        warn=lambda _m: None,
        offsetter=offsets,
    )
    offsets.apply(180.0)
    gpu.set_power_limit(250.0)
    (done,) = restorer.restore({0})
    assert done["ok"] and gpu.sm_offset_mhz == 0.0 and gpu.limit_w == 250.0
