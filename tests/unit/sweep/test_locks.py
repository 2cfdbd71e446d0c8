"""Clock locks during a sweep (``sweep/locks.py``) on fake cards: what a backend that cannot read
locks is warned about, the memory-lock probe and the grid's fall-back to the SM axis, locking each
point, putting every touched card back, and reading the measured clocks against the locks."""

from __future__ import annotations

from typing import Any

import pytest

from powersweep.errors import GpuError, PowersweepError
from powersweep.sweep.gpu import LockedClocks, LockResult
from powersweep.sweep.gpu.nvml import NvmlBackend
from powersweep.sweep.gpu.protocol import CLOCK_EVENT_APP_CLOCKS
from powersweep.sweep.locks import ClockLocker, usable_points, verify
from powersweep.sweep.planning.points import SweepPoint
from tests.fakes.fake_gpu import FakeGpu
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml


class _NoMemLocks(FakeGpu):
    """A card that refuses memory locks (a GeForce)."""

    def lock_mem_clock(self, mhz: float) -> LockResult:
        self.calls["lock_mem_clock"] += 1
        return LockResult(mhz, False, "memory locks refused")


class _BrokenReset(FakeGpu):
    """A card whose reset fails."""

    def __init__(self, index: int, error: Exception) -> None:
        super().__init__(index)
        self.error = error

    def reset_clock_locks(self, sm: bool = True, mem: bool = True) -> None:
        raise self.error


def _locker(*gpus: Any) -> tuple[ClockLocker, list[str]]:
    warnings: list[str] = []
    return ClockLocker(list(gpus), warnings.append), warnings


def test_cards_whose_locks_can_be_read_need_no_warning() -> None:
    gpu = FakeGpu(0)
    gpu.sm_lock_mhz = 1200.0
    locker, warnings = _locker(gpu, FakeGpu(1))
    assert warnings == []
    assert locker.originals[0] == LockedClocks(True, 1200.0, None)


def test_nvml_cards_are_warned_to_end_unlocked_and_a_held_setting_is_named() -> None:
    nvml = FakeNvml([FakeDevice(clock_event_bits=CLOCK_EVENT_APP_CLOCKS), FakeDevice()])
    backend = NvmlBackend(nvml=nvml)
    _, warnings = _locker(backend.gpu(0), backend.gpu(1), FakeGpu(2))
    assert warnings == [
        "GPU 0 reports a user clock setting in force now; NVML cannot read clock locks, so GPU "
        "0, 1 ends the sweep unlocked: re-apply any locks of your own (nvidia-smi -lgc / -lmc)"
    ]


def test_the_memory_probe_stops_at_the_first_refusal() -> None:
    locker, _ = _locker(FakeGpu(0), _NoMemLocks(1), FakeGpu(2))
    probe = locker.probe_mem_locks(9501.0)
    assert (probe.ok, probe.message) == (False, "GPU 1: memory locks refused")
    assert locker.touched == {0, 1}
    ok, _ = _locker(FakeGpu(0))
    assert ok.probe_mem_locks(9501.0).ok


def test_apply_locks_every_card_and_names_each_refusal() -> None:
    a, b = FakeGpu(0), _NoMemLocks(1)
    locker, _ = _locker(a, b)
    assert locker.apply(SweepPoint(300.0)) is None
    assert locker.touched == set()  # a bare cap locks nothing
    assert locker.apply(SweepPoint(None, 1500.0, None)) is None
    assert (a.sm_lock_mhz, b.sm_lock_mhz) == (1500.0, 1500.0)
    why = locker.apply(SweepPoint(None, 1410.0, 9501.0))
    assert why == "GPU 1: memory 9501 MHz: memory locks refused"
    assert locker.touched == {0, 1}


def test_put_back_relocks_the_originals_of_the_touched_cards_only() -> None:
    held, free, untouched = FakeGpu(0), FakeGpu(1), FakeGpu(2)
    held.sm_lock_mhz = 1200.0
    untouched.sm_lock_mhz = 900.0
    locker, warnings = _locker(held, free, untouched)
    locker.touched = {0, 1}
    held.lock_sm_clock(1500.0)
    free.lock_sm_clock(1500.0)
    free.lock_mem_clock(9501.0)
    assert locker.put_back() == {
        0: (True, "clocks locked back to SM 1200 MHz"),
        1: (True, "clocks unlocked"),
    }
    assert (held.sm_lock_mhz, free.sm_lock_mhz, free.mem_lock_mhz) == (1200.0, None, None)
    assert untouched.calls["reset_clock_locks"] == 0 and warnings == []


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (GpuError("needs root"), "needs root"),
        (RuntimeError("driver gone"), "RuntimeError: driver gone"),
    ],
)
def test_a_card_that_cannot_be_put_back_is_warned_and_the_others_still_are(
    error: Exception, said: str
) -> None:
    broken, fine = _BrokenReset(0, error), FakeGpu(1)
    locker, warnings = _locker(broken, fine)
    locker.touched = {0, 1}
    fine.lock_sm_clock(1500.0)
    out = locker.put_back()
    assert out == {0: (False, said), 1: (True, "clocks unlocked")}
    assert fine.sm_lock_mhz is None
    assert warnings == [
        f"could not put back the clock locks of GPU 0: {said}; run: sudo nvidia-smi -i 0 -rgc "
        "&& sudo nvidia-smi -i 0 -rmc"
    ]


GRID = [SweepPoint(300.0, sm, mem) for mem in (9501.0, 5001.0) for sm in (1200.0, 1500.0)]


def test_points_without_memory_locks_are_used_as_they_are_without_a_probe() -> None:
    points = [SweepPoint(None, 1500.0), SweepPoint(None, 1200.0)]
    changes: list[int] = []
    locker, _ = _locker(FakeGpu(0))
    assert usable_points(points, locker, lambda: changes.append(1), print) is points
    assert changes == [] and locker.touched == set()


def test_memory_locks_the_cards_take_keep_the_grid_after_the_journal() -> None:
    changes: list[int] = []
    locker, _ = _locker(FakeGpu(0))
    assert usable_points(GRID, locker, lambda: changes.append(1), print) is GRID
    assert changes == [1]


def test_refused_memory_locks_fall_back_to_the_sm_axis_with_a_warning() -> None:
    locker, _ = _locker(_NoMemLocks(0))
    warnings: list[str] = []
    points = usable_points(GRID, locker, lambda: None, warnings.append)
    assert points == [SweepPoint(300.0, 1500.0, None), SweepPoint(300.0, 1200.0, None)]
    assert warnings == [
        "memory clock locks refused (GPU 0: memory locks refused); the grid falls back to the "
        "SM axis (memory at the clock the card picks)"
    ]


def test_refused_memory_locks_leave_a_memory_sweep_nothing_to_measure() -> None:
    locker, _ = _locker(_NoMemLocks(0))
    mem_only = [SweepPoint(None, None, 9501.0), SweepPoint(None, None, 5001.0)]
    with pytest.raises(PowersweepError, match="--axis mem-clock has nothing else to sweep"):
        usable_points(mem_only, locker, lambda: None, print)


@pytest.mark.parametrize(
    ("row", "why"),
    [
        ({"sm_clock_mhz": 2035.0}, None),  # 2% of 2000 MHz is more than 30 MHz
        ({"sm_clock_mhz": 2045.0}, "SM ran at 2045 MHz under a 2000 MHz lock"),
        ({"sm_clock_mhz": 1900.0, "thermal_throttle_pct": 60.0}, None),
        ({"sm_clock_mhz": 1900.0, "thermal_throttle_pct": 40.0}, "SM ran at 1900 MHz"),
        ({"sm_clock_mhz": "1990", "pwr_throttle_pct": "n/a"}, None),  # CSV text
        ({"sm_clock_mhz": "", "mem_clock_mhz": "nan"}, None),  # nothing read
    ],
)
def test_the_sm_lock_is_judged_within_its_tolerance(row: dict[str, Any], why: str | None) -> None:
    got = verify(SweepPoint(None, 2000.0, None), row)
    if why is None:
        assert got is None
    else:
        assert got is not None and got.startswith(why)


def test_both_clocks_off_their_locks_are_named_together() -> None:
    got = verify(
        SweepPoint(None, 1410.0, 5001.0), {"sm_clock_mhz": 1800.0, "mem_clock_mhz": 9501.0}
    )
    assert got == (
        "SM ran at 1800 MHz under a 1410 MHz lock; memory ran at 9501 MHz under a 5001 MHz lock "
        "(the card clamped or ignored the lock)"
    )
    # a memory clock within 2% of a high lock followed it
    assert verify(SweepPoint(None, None, 9501.0), {"mem_clock_mhz": 9690.0}) is None
