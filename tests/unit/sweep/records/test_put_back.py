"""Putting back what a restore journal holds (``sweep/records/put_back.py``) on fake cards: the
clock locks reset and relocked, each card's limit found by UUID, and a failure on one card
reported without stopping the others."""

from __future__ import annotations

from typing import Any

import pytest

from powersweep.errors import GpuError, PowersweepError
from powersweep.sweep.gpu import LockResult, SetLimitResult
from powersweep.sweep.records.entry import JournalEntry, JournalGpu
from powersweep.sweep.records.put_back import RestoreResult, put_back_locks, restore_gpus
from tests.fakes.fake_gpu import FakeGpu


class _Refusing(FakeGpu):
    """A card that refuses SM locks (or raises on its limit)."""

    def __init__(self, index: int, *, limit_error: Exception | None = None) -> None:
        super().__init__(index)
        self.limit_error = limit_error

    def lock_sm_clock(self, mhz: float, min_mhz: float | None = None) -> LockResult:
        return LockResult(mhz, False, "not today")

    def set_power_limit(self, watts: float) -> SetLimitResult:
        if self.limit_error is not None:
            raise self.limit_error
        return super().set_power_limit(watts)


class _Backend:
    """Cards by index; the indices in ``broken`` cannot be opened."""

    def __init__(self, gpus: list[Any], broken: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.gpus, self.broken = gpus, broken

    def device_count(self) -> int:
        return len(self.gpus)

    def gpu(self, index: int) -> Any:
        if index in self.broken:
            raise GpuError(f"GPU {index} is lost")
        return self.gpus[index]

    def close(self) -> None:
        pass


def test_locks_that_could_not_be_read_are_only_unlocked() -> None:
    gpu = FakeGpu(0)
    gpu.lock_sm_clock(1500.0)
    gpu.lock_mem_clock(9501.0)
    said = put_back_locks(gpu, 1200.0, None, known=False)
    assert said == "clocks unlocked (the locks before the sweep could not be read)"
    assert (gpu.sm_lock_mhz, gpu.mem_lock_mhz) == (None, None)


def test_the_locks_a_card_had_are_set_again() -> None:
    gpu = FakeGpu(0)
    gpu.lock_sm_clock(1500.0)
    assert put_back_locks(gpu, 1200.0, 5001.0) == (
        "clocks locked back to SM 1200 MHz / memory 5001 MHz"
    )
    assert (gpu.sm_lock_mhz, gpu.mem_lock_mhz) == (1200.0, 5001.0)
    assert put_back_locks(gpu, None, None) == "clocks unlocked"
    assert gpu.calls["reset_clock_locks"] == 2


def test_a_lock_the_card_refuses_to_take_back_is_an_error() -> None:
    with pytest.raises(PowersweepError, match=r"^could not lock SM back to 1200 MHz: not today$"):
        put_back_locks(_Refusing(0), 1200.0, None)


def _nvml_entry(*gpus: JournalGpu) -> JournalEntry:
    return JournalEntry({"kind": "nvml"}, gpus, 1, "2026-05-01T10:00:00Z")


def test_limits_go_back_to_the_cards_found_by_uuid_wherever_they_are_now() -> None:
    a, b = FakeGpu(0, limit_w=200.0), FakeGpu(1, limit_w=200.0)
    entry = _nvml_entry(
        JournalGpu(b.identity().uuid, 0, "Fake GPU", 320.0),  # was GPU 0 at the sweep
        JournalGpu("GPU-gone", 5, "Fake GPU", 300.0),
    )
    results = restore_gpus(entry, _Backend([a, b]))
    assert results == [
        RestoreResult(b.identity().uuid, 1, 320.0, True, ""),
        RestoreResult("GPU-gone", None, 300.0, False, "GPU not found"),
    ]
    assert (a.limit_w, b.limit_w) == (200.0, 320.0)


def test_a_card_that_cannot_be_opened_is_warned_and_the_others_are_restored() -> None:
    a, b = FakeGpu(0), FakeGpu(1, limit_w=150.0)
    warnings: list[str] = []
    entry = _nvml_entry(
        JournalGpu(a.identity().uuid, 0, "Fake GPU", 300.0),
        JournalGpu(b.identity().uuid, 1, "Fake GPU", 310.0),
    )
    results = restore_gpus(entry, _Backend([a, b], broken={0}), warnings.append)
    assert warnings == ["cannot open GPU 0: GPU 0 is lost"]
    assert [(r.index, r.ok) for r in results] == [(None, False), (1, True)]
    assert b.limit_w == 310.0


def test_clocks_go_back_first_and_a_failure_fails_the_card() -> None:
    locked, refusing = FakeGpu(0), _Refusing(1)
    locked.lock_sm_clock(1500.0)
    entry = _nvml_entry(
        JournalGpu(locked.identity().uuid, 0, "Fake GPU", 300.0, clocks_locked=True,
                   original_sm_lock_mhz=1410.0),
        JournalGpu(refusing.identity().uuid, 1, "Fake GPU", 300.0, clocks_locked=True,
                   original_sm_lock_mhz=1410.0),
    )  # fmt: skip
    first, second = restore_gpus(entry, _Backend([locked, refusing]))
    assert (first.ok, first.clocks) == (True, "clocks locked back to SM 1410 MHz")
    assert locked.sm_lock_mhz == 1410.0
    assert not second.ok
    assert (
        second.clocks == "clock locks NOT put back: could not lock SM back to 1410 MHz: not today"
    )
    assert refusing.limit_w == 300.0  # the limit still went back


def test_a_limit_the_card_refuses_or_cannot_take_is_a_failed_result() -> None:
    kept, raising = FakeGpu(0, refuse=(300.0,)), _Refusing(1, limit_error=GpuError("needs root"))
    entry = _nvml_entry(
        JournalGpu(kept.identity().uuid, 0, "Fake GPU", 300.0),
        JournalGpu(raising.identity().uuid, 1, "Fake GPU", 300.0),
    )
    first, second = restore_gpus(entry, _Backend([kept, raising]))
    assert (first.ok, first.message) == (False, "fake GPU 0 kept 350 W")
    assert (second.ok, second.message) == (False, "needs root")
