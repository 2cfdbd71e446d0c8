"""SM clock offsets on chosen cards (``sweep/settings/clock_offsets.py``), on fake cards: the plan
refuses a card without an offset, one whose offset in force cannot be read and an offset out of
range, before any write; ``--reset`` plans 0 only where another offset is in force; a write is
read back; an undo puts back the offset read before and names the cards it could not."""

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
    offset_line,
    plan_offset_reset,
    plan_offsets,
    undo_offsets,
    write_offset,
)
from powersweep.sweep.settings.targets import Target
from tests.fakes.fake_gpu import FakeGpu

LABEL = "GPU 0 (Fake GPU, GPU-fake-0)"


class _Card(FakeGpu):
    """A fake card whose offset can be unsupported, unreadable, refused or read back wrong."""

    def __init__(self, index: int = 0, **kw: Any) -> None:
        self.supported: bool = kw.pop("supported", True)
        self.readable: bool = kw.pop("readable", True)
        self.refused_offsets: set[float] = set(kw.pop("refuse_offsets", ()))
        self.drift: float = kw.pop("drift", 0.0)
        offset: float = kw.pop("offset", 0.0)
        super().__init__(index, **kw)
        self.sm_offset_mhz = offset

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


def _target(gpu: FakeGpu) -> Target:
    return Target(gpu, gpu.identity(), None, "named")  # type: ignore[arg-type]


def test_the_plan_reads_each_cards_offset_in_force_before_any_write() -> None:
    a, b = _Card(0, offset=30.0), _Card(1)
    plan = plan_offsets([_target(a), _target(b)], 180.0)
    assert [(c.before_mhz, c.after_mhz, c.raises) for c in plan] == [
        (30.0, 180.0, True),
        (0.0, 180.0, True),
    ]
    assert a.calls["set_sm_clock_offset"] == b.calls["set_sm_clock_offset"] == 0
    assert plan_offsets([_target(a)], None) == []


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
        plan_offsets([_target(good), _target(bad)], 180.0)
    assert str(info.value) == message
    assert good.calls["set_sm_clock_offset"] == bad.calls["set_sm_clock_offset"] == 0


def test_an_offset_outside_the_cards_range_is_refused() -> None:
    with pytest.raises(UsageError) as info:
        plan_offsets([_target(_Card())], 1200.0)
    assert str(info.value) == (
        f"+1200 MHz is outside the SM clock offsets of {LABEL} (-200 to +1000 MHz); nothing was "
        "changed"
    )


@pytest.mark.parametrize("mhz", [math.nan, math.inf, -math.inf, 60_000.0])
def test_an_offset_no_card_takes_is_refused_before_any_read(mhz: float) -> None:
    card = _Card()
    with pytest.raises(UsageError, match="--sm-offset takes a number of MHz"):
        plan_offsets([_target(card)], mhz)
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
    plan = plan_offset_reset([_target(g) for g in (shifted, zero, none, unread)], warnings.append)
    assert [(c.target.identity.index, c.before_mhz, c.after_mhz, c.raises) for c in plan] == [
        (0, 180.0, 0.0, False)
    ]
    assert warnings == [
        "GPU 3 (Fake GPU, GPU-fake-3): its SM clock offset cannot be read (read failed (test)): "
        "left alone"
    ]


def test_a_write_is_read_back_and_recorded_before_the_call() -> None:
    card = _Card()
    (change,) = plan_offsets([_target(card)], 180.0)
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
    (change,) = plan_offsets([_target(refusing)], 180.0)
    touched: list[OffsetChange] = []
    with pytest.raises(GpuError, match=r"^GPU 0 refused \+180 MHz \(test\)$"):
        write_offset(change, touched)
    assert touched == [change]  # a failed call may still have changed the card

    drifting = _Card(drift=15.0)
    (change,) = plan_offsets([_target(drifting)], 180.0)
    with pytest.raises(GpuError) as info:
        write_offset(change, [])
    assert str(info.value) == (
        f"{LABEL} reads back an SM clock offset of +195 MHz after +180 MHz was set"
    )


def test_the_drivers_rounding_to_its_grid_is_the_offset_set_and_is_said() -> None:
    # a driver that snaps +100 MHz to its 15 MHz grid reads back +90: the offset set, as rounded
    rounding = _Card(drift=-10.0)
    (change,) = plan_offsets([_target(rounding)], 100.0)
    result = write_offset(change, [])
    assert result.readback_mhz == 90.0
    assert offset_line(change, result).endswith("(verified: reads back +90 MHz)")


def test_undo_puts_back_the_offset_read_before_and_names_the_ones_it_could_not() -> None:
    back, stuck = _Card(0, offset=30.0), _Card(1, offset=45.0, refuse_offsets=(45.0,))
    plan = plan_offsets([_target(back), _target(stuck)], 180.0)
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
