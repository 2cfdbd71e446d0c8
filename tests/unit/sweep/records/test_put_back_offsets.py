"""Clock offsets in the restore journal (records/entry.py, records/put_back.py): journalled only
when a sweep sets one, read back, put back first on restore, a refusal keeps the journal."""

from __future__ import annotations

import pytest

from powersweep.errors import PowersweepError, UsageError
from powersweep.sweep.gpu import LockResult
from powersweep.sweep.records.entry import JournalEntry, JournalGpu
from powersweep.sweep.records.journal import Journal
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


def test_an_offset_is_journalled_only_when_set_and_reads_back(tmp_path: object) -> None:
    plain = sim_journal_entry(JournalGpu(UUID, 0, "card", 350.0)).to_dict()
    assert "offset_set" not in plain["gpus"][0]  # older journals stay as they were
    entry = sim_journal_entry(
        JournalGpu(UUID, 0, "card", 350.0, offset_set=True, original_sm_offset_mhz=50.0)
    )
    data = entry.to_dict()
    assert data["gpus"][0]["offset_set"] is True
    back = JournalEntry.from_dict(data, tmp_path)  # type: ignore[arg-type]
    assert back.gpus[0].original_sm_offset_mhz == 50.0 and back.holds_clock_offsets
    assert not JournalEntry.from_dict(plain, tmp_path).holds_clock_offsets  # type: ignore[arg-type]


def test_restore_puts_the_offset_back_first(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(0)
    gpu.set_sm_clock_offset(300.0)
    order: list[str] = []
    real_set, real_limit = gpu.set_sm_clock_offset, gpu.set_power_limit
    monkeypatch.setattr(gpu, "set_sm_clock_offset", lambda m: order.append("offset") or real_set(m))
    monkeypatch.setattr(gpu, "set_power_limit", lambda w: order.append("limit") or real_limit(w))
    uuid = gpu.identity().uuid
    (r,) = restore_gpus(
        sim_journal_entry(JournalGpu(uuid, 0, "card", 300.0, offset_set=True)), _Backend(gpu)
    )
    assert r.ok and r.offset == "SM clock offset put back to 0 MHz"  # unknown before: 0
    assert gpu.sm_offset_mhz == 0.0 and order == ["offset", "limit"]


def test_an_offset_the_driver_refuses_keeps_the_card_not_restored() -> None:
    gpu = FakeGpu(0)
    uuid = gpu.identity().uuid
    entry = sim_journal_entry(
        JournalGpu(uuid, 0, "card", 300.0, offset_set=True, original_sm_offset_mhz=5000.0)
    )
    (r,) = restore_gpus(entry, _Backend(gpu))
    assert not r.ok and r.offset.startswith("SM clock offset NOT put back: could not put")
    assert "5000 MHz is outside -200..1000 MHz" in r.offset


def test_put_back_offset_says_what_it_did() -> None:
    gpu = FakeGpu(0)
    assert put_back_offset(gpu, 75.0) == "SM clock offset put back to 75 MHz"
    assert gpu.sm_offset_mhz == 75.0
    refusing = FakeGpu(0)
    refusing.set_sm_clock_offset = lambda m: LockResult(m, False, "no")  # type: ignore[method-assign]
    with pytest.raises(PowersweepError, match="could not put the SM clock offset back to 0 MHz"):
        put_back_offset(refusing, None)


def test_a_journal_holding_offsets_is_not_taken_over_by_force(tmp_path: object) -> None:
    journal = Journal(tmp_path)  # type: ignore[arg-type]
    journal.write(sim_journal_entry(JournalGpu(UUID, 0, "card", 350.0, offset_set=True)))
    with pytest.raises(UsageError, match=r"left clock offsets .*not override clock offsets"):
        journal.refuse_if_locked()
