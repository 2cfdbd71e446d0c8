"""SM and memory clock offsets on chosen cards (``sweep/settings/clock_offsets.py``), on fake
cards: the plan refuses a card without an offset, one whose offset in force cannot be read and an
offset out of range, before any write; ``--reset`` plans 0 only where another offset is in force;
a write is read back; an undo puts back the offset read before and names the cards it could not;
offsets that shrink come off memory first, offsets that grow go on SM first."""

from __future__ import annotations

import math
from typing import Any

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu import ClockOffset, LockResult
from powersweep.sweep.settings.clock_offsets import (
    OffsetChange,
    OffsetResult,
    check_offset,
    coming_off,
    going_on,
    offset_line,
    plan_offset_reset,
    plan_offsets,
    undo_offsets,
    write_offset,
)
from tests.fakes.fake_gpu import FakeGpu
from tests.helpers.settings import named_target

LABEL = "GPU 0 (Fake GPU, GPU-fake-0)"


class _Card(FakeGpu):
    """A fake card whose offset can be unsupported, unreadable, refused or read back wrong (the
    memory offset's the same, with ``mem_`` options)."""

    def __init__(self, index: int = 0, **kw: Any) -> None:
        self.supported: bool = kw.pop("supported", True)
        self.readable: bool = kw.pop("readable", True)
        self.refused_offsets: set[float] = set(kw.pop("refuse_offsets", ()))
        self.drift: float = kw.pop("drift", 0.0)
        offset: float = kw.pop("offset", 0.0)
        self.mem_supported: bool = kw.pop("mem_supported", True)
        self.mem_readable: bool = kw.pop("mem_readable", True)
        self.refused_mem_offsets: set[float] = set(kw.pop("refuse_mem_offsets", ()))
        self.mem_drift: float = kw.pop("mem_drift", 0.0)
        mem_offset: float = kw.pop("mem_offset", 0.0)
        super().__init__(index, **kw)
        self.sm_offset_mhz = offset
        self.mem_offset_mhz = mem_offset

    def mem_clock_offset(self) -> ClockOffset:
        if not self.mem_supported:
            return ClockOffset(False, message=f"GPU {self.index} has no memory offset (test)")
        if not self.mem_readable:
            return ClockOffset(True, None, -2000.0, 6000.0, "read failed (test)")
        return ClockOffset(True, self.mem_offset_mhz + self.mem_drift, -2000.0, 6000.0)

    def set_mem_clock_offset(self, mhz: float) -> LockResult:
        if mhz in self.refused_mem_offsets:
            return LockResult(mhz, False, f"GPU {self.index} refused {mhz:+g} MHz (test)")
        return super().set_mem_clock_offset(mhz)

    def sm_clock_offset(self) -> ClockOffset:
        if not self.supported:
            return ClockOffset(False, message=f"GPU {self.index} has no offset (test)")
        if not self.readable:
            return ClockOffset(True, None, -200.0, 1000.0, "read failed (test)")
        return ClockOffset(True, self.sm_offset_mhz + self.drift, -200.0, 1000.0)

    def set_sm_clock_offset(self, mhz: float) -> LockResult:
        if mhz in self.refused_offsets:
            return LockResult(mhz, False, f"GPU {self.index} refused {mhz:+g} MHz (test)")
        return super().set_sm_clock_offset(mhz)


def test_the_plan_reads_each_cards_offset_in_force_before_any_write() -> None:
    a, b = _Card(0, offset=30.0), _Card(1)
    plan = plan_offsets([named_target(a), named_target(b)], 180.0)
    assert [(c.before_mhz, c.after_mhz, c.raises) for c in plan] == [
        (30.0, 180.0, True),
        (0.0, 180.0, True),
    ]
    assert a.calls["set_sm_clock_offset"] == b.calls["set_sm_clock_offset"] == 0
    assert plan_offsets([named_target(a)], None) == []


@pytest.mark.parametrize(
    ("card", "message"),
    [
        (
            {"supported": False},
            "GPU 0 has no offset (test): the +180 MHz SM clock offset cannot be applied; "
            "nothing was changed",
        ),
        (
            {"readable": False},
            f"the SM clock offset in force on {LABEL} cannot be read (read failed (test)), so a "
            "failure could not put it back; nothing was changed",
        ),
    ],
)
def test_a_card_that_cannot_take_or_give_back_an_offset_is_refused_in_one_line(
    card: dict[str, Any], message: str
) -> None:
    good, bad = _Card(1), _Card(0, **card)
    with pytest.raises(UsageError) as info:
        plan_offsets([named_target(good), named_target(bad)], 180.0)
    assert str(info.value) == message
    assert good.calls["set_sm_clock_offset"] == bad.calls["set_sm_clock_offset"] == 0


def test_an_offset_outside_the_cards_range_is_refused() -> None:
    with pytest.raises(UsageError) as info:
        plan_offsets([named_target(_Card())], 1200.0)
    assert str(info.value) == (
        f"+1200 MHz is outside the SM clock offsets of {LABEL} (-200 to +1000 MHz); nothing was "
        "changed"
    )


@pytest.mark.parametrize("mhz", [math.nan, math.inf, -math.inf, 60_000.0])
def test_an_offset_no_card_takes_is_refused_before_any_read(mhz: float) -> None:
    card = _Card()
    with pytest.raises(UsageError, match="--sm-offset takes a number of MHz"):
        plan_offsets([named_target(card)], mhz)
    assert card.calls["sm_clock_offset"] == 0
    check_offset(None, "--sm-offset")  # nothing asked: nothing to refuse


def test_reset_plans_zero_only_where_another_offset_is_in_force() -> None:
    shifted, zero, none, unread = (
        _Card(0, offset=180.0),
        _Card(1),
        _Card(2, supported=False),
        _Card(3, readable=False),
    )
    warnings: list[str] = []
    plan = plan_offset_reset(
        [named_target(g) for g in (shifted, zero, none, unread)], warnings.append
    )
    assert [(c.target.identity.index, c.before_mhz, c.after_mhz, c.raises) for c in plan] == [
        (0, 180.0, 0.0, False)
    ]
    assert warnings == [
        "GPU 3 (Fake GPU, GPU-fake-3): its SM clock offset cannot be read (read failed (test)): "
        "left alone"
    ]


def test_a_write_is_read_back_and_recorded_before_the_call() -> None:
    card = _Card()
    (change,) = plan_offsets([named_target(card)], 180.0)
    touched: list[OffsetChange] = []
    result = write_offset(change, touched)
    assert (result.readback_mhz, result.verified, card.sm_offset_mhz) == (180.0, True, 180.0)
    assert touched == [change]
    assert offset_line(change, result) == (
        f"{LABEL}: SM clock offset +0 MHz -> +180 MHz (verified: reads back +180 MHz)"
    )
    assert offset_line(change, OffsetResult(change, None)).endswith(
        "(set; not verified: the offset cannot be read back)"
    )


def test_a_refused_or_misread_offset_is_a_gpu_error_and_counts_as_touched() -> None:
    refusing = _Card(refuse_offsets=(180.0,))
    (change,) = plan_offsets([named_target(refusing)], 180.0)
    touched: list[OffsetChange] = []
    with pytest.raises(GpuError, match=r"^GPU 0 refused \+180 MHz \(test\)$"):
        write_offset(change, touched)
    assert touched == [change]  # a failed call may still have changed the card

    drifting = _Card(drift=15.0)
    (change,) = plan_offsets([named_target(drifting)], 180.0)
    with pytest.raises(GpuError) as info:
        write_offset(change, [])
    assert str(info.value) == (
        f"{LABEL} reads back an SM clock offset of +195 MHz after +180 MHz was set"
    )


def test_the_drivers_rounding_to_its_grid_is_the_offset_set_and_is_said() -> None:
    # a driver that snaps +100 MHz to its 15 MHz grid reads back +90: the offset set, as rounded
    rounding = _Card(drift=-10.0)
    (change,) = plan_offsets([named_target(rounding)], 100.0)
    result = write_offset(change, [])
    assert result.readback_mhz == 90.0
    assert offset_line(change, result).endswith("(verified: reads back +90 MHz)")


def test_undo_puts_back_the_offset_read_before_and_names_the_ones_it_could_not() -> None:
    back, stuck = _Card(0, offset=30.0), _Card(1, offset=45.0, refuse_offsets=(45.0,))
    plan = plan_offsets([named_target(back), named_target(stuck)], 180.0)
    touched: list[OffsetChange] = []
    for change in plan:
        write_offset(change, touched)
    warnings: list[str] = []
    assert undo_offsets(touched, warnings.append) == ["GPU 1 (SM clock offset +45 MHz)"]
    assert (back.sm_offset_mhz, stuck.sm_offset_mhz) == (30.0, 180.0)
    assert warnings == [
        "GPU 1 (Fake GPU, GPU-fake-1): could not put back its SM clock offset +45 MHz: GPU 1 "
        "refused +45 MHz (test)"
    ]


# --- the memory clock offset (issue 45): the same plan, write, read-back and undo ---------------


def test_a_memory_offset_plan_reads_the_memory_offset_and_leaves_the_sm_one_alone() -> None:
    a, b = _Card(0, mem_offset=500.0, offset=90.0), _Card(1)
    plan = plan_offsets([named_target(a), named_target(b)], 1000.0, "mem")
    assert [(c.before_mhz, c.after_mhz, c.raises, c.clock) for c in plan] == [
        (500.0, 1000.0, True, "mem"),
        (0.0, 1000.0, True, "mem"),
    ]
    assert a.calls["sm_clock_offset"] == a.calls["set_mem_clock_offset"] == 0
    assert plan_offsets([named_target(a)], None, "mem") == []


@pytest.mark.parametrize(
    ("card", "mhz", "message"),
    [
        (
            {"mem_supported": False},
            1000.0,
            "GPU 0 has no memory offset (test): the +1000 MHz memory clock offset cannot be "
            "applied; nothing was changed",
        ),
        (
            {"mem_readable": False},
            1000.0,
            f"the memory clock offset in force on {LABEL} cannot be read (read failed (test)), "
            "so a failure could not put it back; nothing was changed",
        ),
        (
            {},
            7000.0,
            # every card is refused: the first one in line names it
            "+7000 MHz is outside the memory clock offsets of GPU 1 (Fake GPU, GPU-fake-1) "
            "(-2000 to +6000 MHz); nothing was changed",
        ),
    ],
)
def test_a_memory_offset_a_card_cannot_take_is_refused_in_one_line_naming_the_memory_clock(
    card: dict[str, Any], mhz: float, message: str
) -> None:
    good, bad = _Card(1), _Card(0, **card)
    with pytest.raises(UsageError) as info:
        plan_offsets([named_target(good), named_target(bad)], mhz, "mem")
    assert str(info.value) == message
    assert good.calls["set_mem_clock_offset"] == bad.calls["set_mem_clock_offset"] == 0


@pytest.mark.parametrize("mhz", [math.nan, math.inf, -60_000.0])
def test_a_memory_offset_no_card_takes_is_refused_naming_its_option(mhz: float) -> None:
    card = _Card()
    with pytest.raises(UsageError, match=r"^--mem-offset takes a number of MHz"):
        plan_offsets([named_target(card)], mhz, "mem")
    assert card.calls["mem_clock_offset"] == 0


def test_reset_plans_both_offsets_back_to_zero_each_only_where_set_and_readable() -> None:
    both, mem_only, unread = (
        _Card(0, offset=180.0, mem_offset=1000.0),
        _Card(1, mem_offset=-400.0),
        _Card(2, mem_readable=False, offset=30.0),
    )
    warnings: list[str] = []
    plan = plan_offset_reset([named_target(g) for g in (both, mem_only, unread)], warnings.append)
    assert sorted((c.target.identity.index, c.clock, c.before_mhz, c.after_mhz) for c in plan) == [
        (0, "mem", 1000.0, 0.0),
        (0, "sm", 180.0, 0.0),
        (1, "mem", -400.0, 0.0),
        (2, "sm", 30.0, 0.0),
    ]
    assert not any(c.raises for c in plan)
    assert warnings == [
        "GPU 2 (Fake GPU, GPU-fake-2): its memory clock offset cannot be read (read failed "
        "(test)): left alone"
    ]
    assert plan_offset_reset([named_target(_Card(mem_supported=False))], warnings.append) == []


def test_a_memory_offset_is_written_read_back_and_said_as_the_memory_clocks() -> None:
    card = _Card(offset=90.0)
    (change,) = plan_offsets([named_target(card)], 1000.0, "mem")
    touched: list[OffsetChange] = []
    result = write_offset(change, touched)
    assert (result.readback_mhz, card.mem_offset_mhz, card.sm_offset_mhz) == (1000.0, 1000.0, 90.0)
    assert touched == [change]
    assert offset_line(change, result) == (
        f"{LABEL}: memory clock offset +0 MHz -> +1000 MHz (verified: reads back +1000 MHz)"
    )
    # the driver's rounding, less than one grid step away, is the offset set
    (rounded,) = plan_offsets([named_target(_Card(mem_drift=-10.0))], 1000.0, "mem")
    assert write_offset(rounded, []).readback_mhz == 990.0


def test_a_refused_or_misread_memory_offset_is_a_gpu_error() -> None:
    refusing = _Card(refuse_mem_offsets=(1000.0,))
    (change,) = plan_offsets([named_target(refusing)], 1000.0, "mem")
    touched: list[OffsetChange] = []
    with pytest.raises(GpuError, match=r"^GPU 0 refused \+1000 MHz \(test\)$"):
        write_offset(change, touched)
    assert touched == [change]
    (change,) = plan_offsets([named_target(_Card(mem_drift=15.0))], 1000.0, "mem")
    with pytest.raises(GpuError) as info:
        write_offset(change, [])
    assert str(info.value) == (
        f"{LABEL} reads back a memory clock offset of +1015 MHz after +1000 MHz was set"
    )


def test_undo_puts_back_the_memory_offset_and_names_the_one_it_could_not() -> None:
    back, stuck = (
        _Card(0, mem_offset=200.0),
        _Card(1, mem_offset=400.0, refuse_mem_offsets=(400.0,)),
    )
    touched: list[OffsetChange] = []
    for change in plan_offsets([named_target(back), named_target(stuck)], 1000.0, "mem"):
        write_offset(change, touched)
    warnings: list[str] = []
    assert undo_offsets(touched, warnings.append) == ["GPU 1 (memory clock offset +400 MHz)"]
    assert (back.mem_offset_mhz, stuck.mem_offset_mhz) == (200.0, 1000.0)
    assert back.sm_offset_mhz == 0.0 and back.calls["set_sm_clock_offset"] == 0
    assert warnings == [
        "GPU 1 (Fake GPU, GPU-fake-1): could not put back its memory clock offset +400 MHz: "
        "GPU 1 refused +400 MHz (test)"
    ]


def test_offsets_come_off_memory_first_and_go_on_sm_first() -> None:
    card = _Card(offset=180.0, mem_offset=1000.0)
    t = named_target(card)
    down = [OffsetChange(t, 180.0, 0.0, "sm"), OffsetChange(t, 1000.0, 0.0, "mem")]
    up = [OffsetChange(t, 0.0, 1000.0, "mem"), OffsetChange(t, 0.0, 180.0, "sm")]
    assert [o.clock for o in coming_off([*down, *up])] == ["mem", "sm"]
    assert [o.clock for o in going_on([*down, *up])] == ["sm", "mem"]
