"""Clock locks on chosen cards (``sweep/settings/clock_locks.py``), on fake cards: clocks checked
and snapped to the ones a card lists, written memory first and verified where locks can be read,
put back newest first, and how a lock reads in words."""

from __future__ import annotations

import math
from typing import Any

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu import LockedClocks, LockResult, SupportedClocks
from powersweep.sweep.settings.clock_locks import (
    ClockChange,
    check_clock,
    describe_after,
    describe_locks,
    plan_clocks,
    plan_unlock,
    undo_clocks,
    write_clocks,
)
from tests.fakes.fake_gpu import FakeGpu
from tests.helpers.settings import named_target

SUPPORTED = SupportedClocks(
    (9501.0, 5001.0), {9501.0: (1800.0, 1500.0, 1200.0), 5001.0: (1005.0, 900.0)}
)


class _Card(FakeGpu):
    """A fake card with its own clock list, an optional refusal, misreport or unreadable locks."""

    def __init__(self, index: int = 0, **kw: Any) -> None:
        self.listed: SupportedClocks | None = kw.pop("listed", SUPPORTED)
        self.refuse_mem: bool = kw.pop("refuse_mem", False)
        self.reads_sm: float | None = kw.pop("reads_sm", None)
        self.unknown: bool = kw.pop("unknown", False)
        self.user_setting: bool | None = kw.pop("user_setting", None)
        self.fail_reset: bool = kw.pop("fail_reset", False)
        self.order: list[str] = []
        super().__init__(index, **kw)

    def supported_clocks(self) -> SupportedClocks:
        if self.listed is None:
            raise GpuError(f"GPU {self.index} does not list its supported clocks")
        return self.listed

    def lock_sm_clock(self, mhz: float, min_mhz: float | None = None) -> LockResult:
        self.order.append(f"sm {mhz:g}")
        return super().lock_sm_clock(mhz)

    def lock_mem_clock(self, mhz: float) -> LockResult:
        self.order.append(f"mem {mhz:g}")
        if self.refuse_mem:
            return LockResult(mhz, False, "")
        return super().lock_mem_clock(mhz)

    def reset_clock_locks(self, sm: bool = True, mem: bool = True) -> None:
        if self.fail_reset:
            raise GpuError("reset refused")
        self.order.append(f"reset sm={sm} mem={mem}")
        super().reset_clock_locks(sm, mem)

    def locked_clocks(self) -> LockedClocks:
        if self.unknown:
            return LockedClocks(False, user_clock_setting_active=self.user_setting)
        sm = self.reads_sm if self.reads_sm is not None else self.sm_lock_mhz
        return LockedClocks(True, sm, self.mem_lock_mhz)


def _plan_locks(gpu: FakeGpu, sm: float | None, mem: float | None, strict: bool = False) -> Any:
    warnings: list[str] = []
    plan = plan_clocks([named_target(gpu)], sm, mem, strict=strict, warn=warnings.append)
    return plan, warnings


@pytest.mark.parametrize("mhz", [0.0, -900.0, math.nan, math.inf, 50_001.0])
def test_a_clock_that_no_card_takes_is_refused_with_its_flag(mhz: float) -> None:
    with pytest.raises(UsageError, match=r"^--sm-clock takes a positive number of MHz, at most"):
        check_clock(mhz, "--sm-clock")
    with pytest.raises(UsageError, match=r"^--mem-clock takes"):
        plan_clocks([], None, mhz, strict=False, warn=print)
    check_clock(None, "--sm-clock")


def test_no_clock_asked_for_plans_nothing_and_reads_nothing() -> None:
    gpu = _Card()
    assert _plan_locks(gpu, None, None) == ([], [])
    assert gpu.calls["locked_clocks"] == 0


def test_clocks_snap_to_the_nearest_listed_one_of_the_memory_tier() -> None:
    (change,), warnings = _plan_locks(_Card(), 1000.0, 5000.0)
    assert (change.sm_mhz, change.mem_mhz) == (1005.0, 5001.0)  # the SM list of the 5001 tier
    assert warnings == [
        "5000 MHz is not a supported memory clock of GPU 0 (Fake GPU, GPU-fake-0) (5001-9501 "
        "MHz): snapped to 5001 MHz",
        "1000 MHz is not a supported SM clock of GPU 0 (Fake GPU, GPU-fake-0) (900-1005 MHz): "
        "snapped to 1005 MHz",
    ]
    assert change.before == LockedClocks(True, None, None)


def test_a_tie_snaps_to_the_lower_clock_and_half_a_mhz_is_no_snap() -> None:
    (change,), warnings = _plan_locks(_Card(), 1350.0, None)  # 1200 and 1500 both 150 away
    assert change.sm_mhz == 1200.0 and len(warnings) == 1
    (exact,), quiet = _plan_locks(_Card(), 1500.4, None)
    assert exact.sm_mhz == 1500.0 and quiet == []


def test_strict_refuses_what_it_would_snap() -> None:
    with pytest.raises(UsageError, match=r"\(--strict\): nothing was changed$"):
        _plan_locks(_Card(), 1350.0, None, strict=True)


def test_a_card_that_lists_no_clocks_takes_them_as_given_unless_strict() -> None:
    (change,), warnings = _plan_locks(_Card(listed=None), 1350.0, 7000.0)
    assert (change.sm_mhz, change.mem_mhz) == (1350.0, 7000.0)
    assert warnings == [
        "GPU 0 does not list its supported clocks; the clocks are used as given (the driver "
        "checks them)"
    ]
    with pytest.raises(UsageError, match="does not list its supported clocks \\(--strict\\)"):
        _plan_locks(_Card(listed=None), 1350.0, None, strict=True)


def test_a_change_touches_the_clocks_it_names_and_an_unlock_both() -> None:
    t = named_target(_Card())
    only_sm = ClockChange(t, LockedClocks(True), sm_mhz=1500.0)
    assert only_sm.kinds() == ("sm",) and only_sm.after("mem") is None
    (unlock,) = plan_unlock([t])
    assert unlock.kinds() == ("sm", "mem") and unlock.after("sm") is None
    assert describe_after(unlock) == "SM unlocked, memory unlocked"
    assert describe_after(ClockChange(t, LockedClocks(True), 1410.0, 9501.0)) == (
        "SM 1410 MHz, memory 9501 MHz"
    )


def test_memory_is_locked_before_sm_and_each_write_is_recorded() -> None:
    gpu = _Card()
    change = ClockChange(named_target(gpu), LockedClocks(True), 1500.0, 9501.0)
    touched: list[Any] = []
    result = write_clocks(change, touched)
    assert gpu.order == ["mem 9501", "sm 1500"]
    assert [kind for _, kind in touched] == ["mem", "sm"]
    assert result.verified and result.readback == LockedClocks(True, 1500.0, 9501.0)


def test_a_refused_lock_and_a_wrong_read_back_are_errors() -> None:
    refusing = _Card(refuse_mem=True)
    touched: list[Any] = []
    with pytest.raises(
        GpuError, match=r"^GPU 0 \(Fake GPU, GPU-fake-0\) refused a 9501 MHz memory"
    ):
        write_clocks(ClockChange(named_target(refusing), LockedClocks(True), None, 9501.0), touched)
    assert touched == []
    misreading = _Card(reads_sm=1400.0)
    with pytest.raises(GpuError) as info:
        write_clocks(ClockChange(named_target(misreading), LockedClocks(True), 1500.0), touched)
    assert str(info.value).endswith("reads back 1400 MHz for its SM clock after 1500 MHz was set")


def test_locks_that_cannot_be_read_are_set_but_not_verified() -> None:
    gpu = _Card(unknown=True, reads_sm=1400.0)
    result = write_clocks(ClockChange(named_target(gpu), LockedClocks(False), 1500.0), [])
    assert not result.verified and gpu.sm_lock_mhz == 1500.0


def test_an_unlock_resets_both_and_verifies_they_read_unlocked() -> None:
    gpu = _Card()
    gpu.lock_sm_clock(1500.0)
    touched: list[Any] = []
    (unlock,) = plan_unlock([named_target(gpu)])
    write_clocks(unlock, touched)
    assert gpu.order[-1] == "reset sm=True mem=True" and gpu.sm_lock_mhz is None
    assert [k for _, k in touched] == ["sm", "mem"]


def test_undo_relocks_what_was_read_before_newest_first() -> None:
    gpu = _Card()
    before = LockedClocks(True, 1200.0, None)
    change = ClockChange(named_target(gpu), before, 1500.0, 9501.0)
    touched: list[Any] = []
    write_clocks(change, touched)
    gpu.order.clear()
    assert undo_clocks(touched, print) == []
    assert gpu.order == ["reset sm=True mem=False", "sm 1200", "reset sm=False mem=True"]
    assert (gpu.sm_lock_mhz, gpu.mem_lock_mhz) == (1200.0, None)


def test_locks_that_could_not_be_read_before_are_left_unlocked_and_counted() -> None:
    held = _Card(unknown=True, user_setting=True)
    free = _Card(1, unknown=True, user_setting=False)
    held_before = LockedClocks(False, user_clock_setting_active=True)
    free_before = LockedClocks(False, user_clock_setting_active=False)
    touched = [
        (ClockChange(named_target(held), held_before, 1500.0), "sm"),
        (ClockChange(named_target(free), free_before, 1500.0), "sm"),
    ]
    assert undo_clocks(touched, print) == [
        "GPU 0 (SM clock: the lock before could not be read, left unlocked)"
    ]


def test_a_reset_that_fails_is_warned_and_counted() -> None:
    gpu = _Card(fail_reset=True)
    warnings: list[str] = []
    change = ClockChange(named_target(gpu), LockedClocks(True, 1200.0, None), 1500.0)
    assert undo_clocks([(change, "sm")], warnings.append) == ["GPU 0 (SM 1200 MHz)"]
    assert warnings == [
        "GPU 0 (Fake GPU, GPU-fake-0): could not put back its SM clock: reset refused"
    ]


def test_locks_in_words() -> None:
    assert describe_locks(LockedClocks(True, 1410.0, None)) == "SM 1410 MHz, memory unlocked"
    assert describe_locks(LockedClocks(True, None, 9501.0), ("mem",)) == "memory 9501 MHz"
    assert describe_locks(LockedClocks(False)) == "unknown (NVML cannot read clock locks)"
