"""Memory clock offsets (issue 45) in the restore journal and its put-back: journalled only when
a sweep sets one (an older journal has none: nothing to put back), put back before the SM offset,
the locks and the limit, by ``restore_gpus`` (``powersweep restore``), by the sweep's
``Restorer`` and by a memory ``ClockOffsetter``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from powersweep.sweep.gpu import LockResult
from powersweep.sweep.measurement.restorer import Restorer
from powersweep.sweep.offsets import ClockOffsetter
from powersweep.sweep.records.entry import JournalEntry, JournalGpu
from powersweep.sweep.records.put_back import put_back_offset, restore_gpus
from tests.fakes.fake_gpu import FakeGpu
from tests.helpers.journal import sim_journal_entry

UUID = "GPU-00000000-0000-0000-0000-000000000000"


class _Backend:
    def __init__(self, *gpus: FakeGpu) -> None:
        self.gpus = gpus

    def device_count(self) -> int:
        return len(self.gpus)

    def gpu(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def close(self) -> None:
        return None


def test_a_memory_offset_is_journalled_only_when_set_and_reads_back(tmp_path: Path) -> None:
    plain = sim_journal_entry(JournalGpu(UUID, 0, "card", 350.0)).to_dict()
    assert "mem_offset_set" not in plain["gpus"][0]  # older journals stay as they were
    entry = sim_journal_entry(
        JournalGpu(UUID, 0, "card", 350.0, mem_offset_set=True, original_mem_offset_mhz=500.0)
    )
    data = entry.to_dict()
    assert data["gpus"][0]["mem_offset_set"] is True and "offset_set" not in data["gpus"][0]
    back = JournalEntry.from_dict(data, tmp_path)
    assert back.gpus[0].original_mem_offset_mhz == 500.0 and back.holds_clock_offsets
    old = JournalEntry.from_dict(plain, tmp_path)
    assert not old.gpus[0].mem_offset_set and not old.holds_clock_offsets


def test_restore_puts_the_memory_offset_back_before_the_sm_one_and_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu = FakeGpu(0)
    gpu.set_mem_clock_offset(2000.0)
    gpu.set_sm_clock_offset(150.0)
    order: list[str] = []
    for name in ("set_mem_clock_offset", "set_sm_clock_offset", "set_power_limit"):
        real = getattr(gpu, name)
        monkeypatch.setattr(gpu, name, lambda v, n=name, f=real: order.append(n) or f(v))
    journalled = JournalGpu(
        gpu.identity().uuid,
        0,
        "card",
        300.0,
        offset_set=True,
        original_sm_offset_mhz=0.0,
        mem_offset_set=True,
        original_mem_offset_mhz=500.0,
    )
    (r,) = restore_gpus(sim_journal_entry(journalled), _Backend(gpu))
    assert r.ok
    assert r.offset == "memory clock offset put back to 500 MHz; SM clock offset put back to 0 MHz"
    assert (gpu.mem_offset_mhz, gpu.sm_offset_mhz) == (500.0, 0.0)
    assert order == ["set_mem_clock_offset", "set_sm_clock_offset", "set_power_limit"]


def test_a_memory_offset_the_driver_refuses_keeps_the_card_not_restored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu = FakeGpu(0)
    monkeypatch.setattr(gpu, "set_mem_clock_offset", lambda m: LockResult(m, False, "no (test)"))
    journalled = JournalGpu(gpu.identity().uuid, 0, "card", 300.0, mem_offset_set=True)
    (r,) = restore_gpus(sim_journal_entry(journalled), _Backend(gpu))
    assert not r.ok
    assert r.offset == (
        "memory clock offset NOT put back: could not put the memory clock offset back to 0 MHz: "
        "no (test)"
    )


def test_put_back_offset_names_the_clock() -> None:
    gpu = FakeGpu(0)
    gpu.set_mem_clock_offset(1000.0)
    assert put_back_offset(gpu, None, "mem") == "memory clock offset put back to 0 MHz"
    assert gpu.mem_offset_mhz == 0.0


def test_a_memory_offsetter_reads_sets_and_puts_back_the_memory_clock_only() -> None:
    gpu = FakeGpu(0)
    gpu.set_mem_clock_offset(400.0)
    offsetter = ClockOffsetter([gpu], lambda _m: None, clock="mem")
    assert offsetter.originals[0].offset_mhz == 400.0
    assert offsetter.apply(1500.0) == [] and gpu.mem_offset_mhz == 1500.0
    assert gpu.sm_offset_mhz == 0.0 and gpu.calls["set_sm_clock_offset"] == 0
    assert offsetter.apply(9000.0) == ["GPU 0: 9000 MHz is outside -2000..6000 MHz"]
    assert offsetter.put_back() == {0: (True, "memory clock offset put back to 400 MHz")}
    assert gpu.mem_offset_mhz == 400.0


class _Journal:
    def __init__(self) -> None:
        self.entry: JournalEntry | None = None

    def claim(self, entry: JournalEntry) -> None:
        self.entry = entry


def test_the_restorer_journals_and_puts_back_both_offsets_memory_first() -> None:
    gpu = FakeGpu(0)
    sm = ClockOffsetter([gpu], lambda _m: None)
    mem = ClockOffsetter([gpu], lambda _m: None, clock="mem")
    journal = _Journal()
    restorer = Restorer(
        [gpu],
        {0: 350.0},
        journal=journal,  # type: ignore[arg-type]
        backend={"kind": "sim"},
        locker=None,
        no_reset=True,
        warn=lambda _m: None,
        offsetter=sm,
        mem_offsetter=mem,
    )
    restorer.write_journal("run")
    assert journal.entry is not None
    (journalled,) = journal.entry.gpus
    assert (journalled.offset_set, journalled.original_sm_offset_mhz) == (True, 0.0)
    assert (journalled.mem_offset_set, journalled.original_mem_offset_mhz) == (True, 0.0)
    sm.apply(100.0)
    mem.apply(2000.0)
    done: list[dict[str, Any]] = restorer.restore(set())
    assert done == [
        {
            "gpu_index": 0,
            "limit_w": None,
            "ok": True,
            "message": "",
            "offset": "memory clock offset put back to 0 MHz; SM clock offset put back to 0 MHz",
        }
    ]
    assert (gpu.mem_offset_mhz, gpu.sm_offset_mhz) == (0.0, 0.0)
