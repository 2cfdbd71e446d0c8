"""Setting power limits, clock locks and SM clock offsets on chosen cards
(``sweep/settings/applier.py``), on fake cards: the plan clamped to each card's own range, writes
verified card by card in a safe order (an offset on only after its lock, off before an unlock),
all or nothing (an interrupt included), the note that says what was put back, and persistence
mode."""

from __future__ import annotations

import math
from typing import Any

import pytest

from powersweep.errors import GpuError, PowersweepError, UsageError
from powersweep.sweep.gpu import LockResult, SetLimitResult
from powersweep.sweep.settings.applier import (
    NOT_PUT_BACK,
    apply_all,
    apply_caps,
    apply_settings,
    enable_persistence,
    plan_caps,
    undo,
    undo_settings,
)
from powersweep.sweep.settings.clock_locks import plan_clocks, plan_unlock
from powersweep.sweep.settings.clock_offsets import plan_offset_reset, plan_offsets
from tests.fakes.fake_gpu import FakeGpu
from tests.helpers.settings import named_target


class _Card(FakeGpu):
    """A fake card that can refuse a lock, raise on a limit, or fail persistence mode."""

    def __init__(self, index: int, **kw: Any) -> None:
        self.raise_at: float | None = kw.pop("raise_at", None)
        self.interrupt_at: float | None = kw.pop("interrupt_at", None)
        self.refuse_sm: bool = kw.pop("refuse_sm", False)
        self.persistence: bool | None = kw.pop("persistence", True)
        self.persistence_error: bool = kw.pop("persistence_error", False)
        super().__init__(index, **kw)

    def set_power_limit(self, watts: float) -> SetLimitResult:
        if watts == self.interrupt_at:
            raise KeyboardInterrupt
        if watts == self.raise_at:
            raise GpuError(f"GPU {self.index}: NVML failed")
        return super().set_power_limit(watts)

    def lock_sm_clock(self, mhz: float, min_mhz: float | None = None) -> LockResult:
        if self.refuse_sm:
            return LockResult(mhz, False, f"GPU {self.index} refused the SM lock")
        return super().lock_sm_clock(mhz)

    def persistence_mode(self) -> bool | None:
        return self.persistence

    def set_persistence_mode(self, enabled: bool) -> bool | None:
        if self.persistence_error:
            raise GpuError("needs root")
        self.persistence = enabled
        return enabled


def test_each_card_is_clamped_to_its_own_range() -> None:
    small, big = _Card(0, min_w=100.0, max_w=300.0), _Card(1, min_w=150.0, max_w=450.0)
    warnings: list[str] = []
    plan = plan_caps(
        [named_target(small), named_target(big)], 400.0, strict=False, warn=warnings.append
    )
    assert [(c.after_w, c.clamped) for c in plan] == [(300.0, True), (400.0, False)]
    assert warnings == [
        "400 W is outside the range of GPU 0 (Fake GPU, GPU-fake-0), 100-300 W: clamped to 300 W"
    ]
    assert (plan[0].before_w, plan[0].default_w, plan[0].min_w) == (350.0, 350.0, 100.0)


@pytest.mark.parametrize("cap", [0.0, -1.0, math.nan, math.inf, 5000.5])
def test_a_limit_that_no_card_takes_is_refused_before_any_read(cap: float) -> None:
    gpu = _Card(0)
    with pytest.raises(UsageError, match="a power limit must be a positive number of watts"):
        plan_caps([named_target(gpu)], cap, strict=False, warn=lambda _m: None)
    assert gpu.calls["envelope"] == 0


def test_a_card_already_at_its_limit_is_unchanged_within_half_a_watt() -> None:
    (c,) = plan_caps([named_target(_Card(0, limit_w=290.0))], 290.4, strict=True, warn=print)
    assert c.unchanged and not c.clamped
    (d,) = plan_caps([named_target(_Card(0, limit_w=290.0))], 291.0, strict=True, warn=print)
    assert not d.unchanged


def test_apply_sets_every_card_and_reads_back() -> None:
    a, b = _Card(0), _Card(1)
    plan = plan_caps([named_target(a), named_target(b)], 280.0, strict=False, warn=print)
    results = apply_caps(plan, lambda _m: None)
    assert [(r.readback_w, r.note) for r in results] == [(280.0, ""), (280.0, "")]
    assert (a.limit_w, b.limit_w) == (280.0, 280.0)


def test_a_refusal_on_the_first_card_changes_nothing() -> None:
    a = _Card(0, refuse=(280.0,))
    plan = plan_caps([named_target(a), named_target(_Card(1))], 280.0, strict=False, warn=print)
    with pytest.raises(GpuError) as info:
        apply_caps(plan, lambda _m: None)
    assert str(info.value) == "fake GPU 0 kept 350 W; nothing was changed"


def test_a_refused_lock_puts_every_limit_and_lock_back() -> None:
    a, b = _Card(0, limit_w=320.0), _Card(1, limit_w=330.0, refuse_sm=True)
    targets = [named_target(a), named_target(b)]
    caps = plan_caps(targets, 250.0, strict=False, warn=print)
    clocks = plan_clocks(targets, 1500.0, 9501.0, strict=False, warn=print)
    with pytest.raises(GpuError) as info:
        apply_settings(caps, clocks, lambda _m: None)
    assert str(info.value) == ("GPU 1 refused the SM lock; the GPUs already changed were put back")
    assert (a.limit_w, b.limit_w) == (320.0, 330.0)
    assert (a.sm_lock_mhz, a.mem_lock_mhz, b.mem_lock_mhz) == (None, None, None)


def test_an_interrupt_puts_the_changed_cards_back_and_says_so_in_a_note() -> None:
    a, b = _Card(0, limit_w=320.0), _Card(1, interrupt_at=250.0)
    caps = plan_caps([named_target(a), named_target(b)], 250.0, strict=False, warn=print)
    with pytest.raises(KeyboardInterrupt) as info:
        apply_caps(caps, lambda _m: None)
    assert info.value.__notes__ == ["; the GPUs already changed were put back"]
    assert a.limit_w == 320.0


def test_a_card_that_cannot_be_put_back_is_named_in_the_note() -> None:
    a, b = _Card(0, limit_w=320.0, raise_at=320.0), _Card(1, limit_w=300.0, refuse=(300.0,))
    caps = plan_caps([named_target(a), named_target(b)], 250.0, strict=False, warn=print)
    for gpu in (a, b):
        gpu.set_power_limit(250.0)
    warnings: list[str] = []
    note = undo(caps, warnings.append)
    assert note == (
        f"; {NOT_PUT_BACK}: GPU 1 (300 W), GPU 0 (320 W) (set them with nvidia-smi -pl / -lgc / "
        "-lmc)"
    )
    assert warnings == [
        "GPU 0 (Fake GPU, GPU-fake-0): could not put back 320 W: GPU 0: NVML failed"
    ]
    assert undo([], print) == "; nothing was changed"
    assert undo([], print, clocks_touched=True) == "; the GPUs already changed were put back"
    assert NOT_PUT_BACK in undo([], print, True, ["GPU 3 (SM 1410 MHz)"])


def test_undo_settings_puts_back_what_an_apply_set() -> None:
    a = _Card(0, limit_w=320.0)
    targets = [named_target(a)]
    caps, clocks = apply_settings(
        plan_caps(targets, 250.0, strict=False, warn=print),
        plan_clocks(targets, 1500.0, None, strict=False, warn=print),
        print,
    )
    assert (a.limit_w, a.sm_lock_mhz) == (250.0, 1500.0)
    assert undo_settings(caps, clocks, print) == "; the GPUs already changed were put back"
    assert (a.limit_w, a.sm_lock_mhz) == (320.0, None)


def test_persistence_is_turned_on_only_where_it_is_off_and_a_refusal_warns() -> None:
    on, off, unknown, refusing = (
        _Card(0, persistence=True),
        _Card(1, persistence=False),
        _Card(2, persistence=None),
        _Card(3, persistence=False, persistence_error=True),
    )
    warnings: list[str] = []
    out = enable_persistence(
        [named_target(g) for g in (on, off, unknown, refusing)], warnings.append
    )
    assert [(before, after) for _, before, after in out] == [
        (True, True),
        (False, True),
        (None, True),
        (False, False),
    ]
    assert warnings == ["GPU 3 (Fake GPU, GPU-fake-3): persistence mode stays off: needs root"]


def test_a_powersweep_error_from_the_write_is_a_gpu_error_with_the_note() -> None:
    a = _Card(0, raise_at=250.0)
    caps = plan_caps([named_target(a)], 250.0, strict=False, warn=print)
    with pytest.raises(GpuError, match=r"^GPU 0: NVML failed; nothing was changed$") as info:
        apply_caps(caps, print)
    assert isinstance(info.value.__cause__, PowersweepError)


# --- SM clock offsets (an undervolt run's answer) ------------------------------------------


class _Ordered(_Card):
    """Records every write in order; can refuse offsets (exact MHz) or fail to take one back."""

    def __init__(self, index: int, log: list[str], **kw: Any) -> None:
        self.log = log
        self.refused_offsets: set[float] = set(kw.pop("refuse_offsets", ()))
        super().__init__(index, **kw)

    def set_power_limit(self, watts: float) -> SetLimitResult:
        self.log.append(f"{self.index} limit {watts:g}")
        return super().set_power_limit(watts)

    def lock_sm_clock(self, mhz: float, min_mhz: float | None = None) -> LockResult:
        self.log.append(f"{self.index} lock {mhz:g}")
        return super().lock_sm_clock(mhz)

    def reset_clock_locks(self, sm: bool = True, mem: bool = True) -> None:
        self.log.append(f"{self.index} unlock")
        super().reset_clock_locks(sm, mem)

    def set_sm_clock_offset(self, mhz: float) -> LockResult:
        self.log.append(f"{self.index} offset {mhz:+g}")
        if mhz in self.refused_offsets:
            return LockResult(mhz, False, f"GPU {self.index} refused {mhz:+g} MHz")
        return super().set_sm_clock_offset(mhz)

    def set_mem_clock_offset(self, mhz: float) -> LockResult:
        self.log.append(f"{self.index} mem offset {mhz:+g}")
        if mhz in self.refused_offsets:
            return LockResult(mhz, False, f"GPU {self.index} refused {mhz:+g} MHz")
        return super().set_mem_clock_offset(mhz)


def test_an_undervolt_goes_on_after_its_lock_and_a_reset_takes_it_off_before_the_unlock() -> None:
    log: list[str] = []
    card = _Ordered(0, log, limit_w=320.0)
    targets = [named_target(card)]
    caps, clocks, offsets = apply_all(
        plan_caps(targets, 300.0, strict=False, warn=print),
        plan_clocks(targets, 1500.0, None, strict=False, warn=print),
        plan_offsets(targets, 180.0),
        print,
    )
    assert log == ["0 limit 300", "0 lock 1500", "0 offset +180"]
    assert [r.readback_w for r in caps] == [300.0] and clocks[0].verified
    assert [(r.change.before_mhz, r.readback_mhz) for r in offsets] == [(0.0, 180.0)]
    assert (card.limit_w, card.sm_lock_mhz, card.sm_offset_mhz) == (300.0, 1500.0, 180.0)

    log.clear()
    apply_all(
        plan_caps(targets, None, strict=False, warn=print),
        plan_unlock(targets),
        plan_offset_reset(targets, print),
        print,
    )
    assert log == ["0 limit 350", "0 offset +0", "0 unlock"]
    assert (card.sm_lock_mhz, card.sm_offset_mhz) == (None, 0.0)


def test_a_refused_offset_puts_back_every_limit_lock_and_offset_already_set() -> None:
    log: list[str] = []
    a = _Ordered(0, log, limit_w=320.0)
    b = _Ordered(1, log, limit_w=330.0, refuse_offsets=(180.0,))
    targets = [named_target(a), named_target(b)]
    with pytest.raises(GpuError) as info:
        apply_all(
            plan_caps(targets, 300.0, strict=False, warn=print),
            plan_clocks(targets, 1500.0, None, strict=False, warn=print),
            plan_offsets(targets, 180.0),
            print,
        )
    assert str(info.value) == "GPU 1 refused +180 MHz; the GPUs already changed were put back"
    assert [(g.limit_w, g.sm_lock_mhz, g.sm_offset_mhz) for g in (a, b)] == [
        (320.0, None, 0.0),
        (330.0, None, 0.0),
    ]
    # the offsets come off first (newest first), then the locks, then the limits
    assert log[log.index("1 offset +180") + 1 :] == [
        "1 offset +0",
        "0 offset +0",
        "1 unlock",
        "0 unlock",
        "1 limit 330",
        "0 limit 320",
    ]


def test_a_refused_lock_leaves_the_offset_unwritten() -> None:
    log: list[str] = []
    card = _Ordered(0, log, refuse_sm=True)
    targets = [named_target(card)]
    with pytest.raises(GpuError) as info:
        apply_all(
            [],
            plan_clocks(targets, 1500.0, None, strict=False, warn=print),
            plan_offsets(targets, 180.0),
            print,
        )
    assert str(info.value) == "GPU 0 refused the SM lock; nothing was changed"
    assert log == ["0 lock 1500"] and card.sm_offset_mhz == 0.0


def test_an_offset_that_cannot_be_put_back_is_named_and_restore_is_the_way_back() -> None:
    card = _Ordered(0, [], refuse_offsets=(0.0,))
    caps, clocks, done = apply_all([], [], plan_offsets([named_target(card)], 180.0), print)
    warnings: list[str] = []
    assert undo_settings(caps, clocks, warnings.append, done) == (
        f"; {NOT_PUT_BACK}: GPU 0 (SM clock offset +0 MHz) (set them with nvidia-smi -pl / -lgc "
        "/ -lmc; `powersweep restore` puts back the offset)"
    )
    assert warnings == [
        "GPU 0 (Fake GPU, GPU-fake-0): could not put back its SM clock offset +0 MHz: GPU 0 "
        "refused +0 MHz"
    ]
    assert card.sm_offset_mhz == 180.0


def test_undo_settings_puts_back_an_offset_before_the_lock() -> None:
    log: list[str] = []
    card = _Ordered(0, log)
    targets = [named_target(card)]
    caps, clocks, offsets = apply_all(
        [],
        plan_clocks(targets, 1500.0, None, strict=False, warn=print),
        plan_offsets(targets, 90.0),
        print,
    )
    log.clear()
    assert undo_settings(caps, clocks, print, offsets) == "; the GPUs already changed were put back"
    assert log == ["0 offset +0", "0 unlock"]
    assert (card.sm_lock_mhz, card.sm_offset_mhz) == (None, 0.0)


# --- memory clock offsets (issue 45): on after the SM offset, off before it ------------------


def test_a_memory_offset_goes_on_after_the_sm_offset_and_comes_off_before_it() -> None:
    log: list[str] = []
    card = _Ordered(0, log, limit_w=320.0)
    targets = [named_target(card)]
    # planned memory first: the order written is apply_all's, not the plan's
    offsets = plan_offsets(targets, 1000.0, "mem") + plan_offsets(targets, 180.0)
    _, _, done = apply_all(
        [], plan_clocks(targets, 1500.0, None, strict=False, warn=print), offsets, print
    )
    assert log == ["0 lock 1500", "0 offset +180", "0 mem offset +1000"]
    assert [(r.change.clock, r.readback_mhz) for r in done] == [("sm", 180.0), ("mem", 1000.0)]

    log.clear()
    apply_all([], plan_unlock(targets), plan_offset_reset(targets, print), print)
    assert log == ["0 mem offset +0", "0 offset +0", "0 unlock"]
    assert (card.sm_lock_mhz, card.sm_offset_mhz, card.mem_offset_mhz) == (None, 0.0, 0.0)


def test_a_refused_memory_offset_puts_back_the_sm_offset_lock_and_limit() -> None:
    log: list[str] = []
    card = _Ordered(0, log, limit_w=320.0, refuse_offsets=(1000.0,))
    targets = [named_target(card)]
    with pytest.raises(GpuError) as info:
        apply_all(
            plan_caps(targets, 300.0, strict=False, warn=print),
            plan_clocks(targets, 1500.0, None, strict=False, warn=print),
            plan_offsets(targets, 180.0) + plan_offsets(targets, 1000.0, "mem"),
            print,
        )
    assert str(info.value) == "GPU 0 refused +1000 MHz; the GPUs already changed were put back"
    assert log[log.index("0 mem offset +1000") + 1 :] == [
        "0 mem offset +0",
        "0 offset +0",
        "0 unlock",
        "0 limit 320",
    ]
    assert (card.limit_w, card.sm_lock_mhz, card.sm_offset_mhz, card.mem_offset_mhz) == (
        320.0, None, 0.0, 0.0
    )  # fmt: skip
