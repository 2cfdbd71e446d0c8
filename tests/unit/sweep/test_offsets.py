"""SM clock offsets during a sweep (``sweep/offsets.py``) on fake cards: the originals read
before any change, unsupported or unreadable cards refused, every card set, every touched card
put back to what it had (0 where that was unknown), a refusal never stops the others."""

from __future__ import annotations

import pytest

from powersweep.errors import UsageError
from powersweep.sweep.gpu import ClockOffset, LockResult
from powersweep.sweep.offsets import ClockOffsetter
from tests.fakes.fake_gpu import FakeGpu


class _Fixed(FakeGpu):
    """A card whose offset reading is scripted."""

    def __init__(self, index: int, offset: ClockOffset) -> None:
        super().__init__(index)
        self.scripted = offset

    def sm_clock_offset(self) -> ClockOffset:
        return self.scripted


def test_the_offsets_in_force_are_read_before_any_change_and_put_back() -> None:
    a, b = FakeGpu(0), FakeGpu(1)
    b.sm_offset_mhz = 60.0  # the user's own undervolt
    offsets = ClockOffsetter([a, b], print)
    offsets.check_supported()
    assert offsets.range_mhz() == (-200.0, 1000.0)
    assert offsets.apply(150.0) == []
    assert (a.sm_offset_mhz, b.sm_offset_mhz) == (150.0, 150.0)
    assert offsets.put_back() == {
        0: (True, "SM clock offset put back to 0 MHz"),
        1: (True, "SM clock offset put back to 60 MHz"),
    }
    assert (a.sm_offset_mhz, b.sm_offset_mhz) == (0.0, 60.0)


def test_nothing_is_put_back_on_a_card_never_touched() -> None:
    gpu = FakeGpu(0)
    offsets = ClockOffsetter([gpu], print)
    assert offsets.put_back() == {} and gpu.calls["set_sm_clock_offset"] == 0


def test_a_card_without_an_offset_or_an_unreadable_one_is_refused() -> None:
    cards = [
        _Fixed(0, ClockOffset(False, message="an AMD card")),
        _Fixed(1, ClockOffset(True, None, -200.0, 1000.0, "driver failed")),
        FakeGpu(2),
    ]
    offsets = ClockOffsetter(cards, print)
    with pytest.raises(UsageError) as caught:
        offsets.check_supported()
    assert str(caught.value) == (
        "GPU 0 has no clock offset (an AMD card); GPU 1's clock offset in force cannot be read "
        "(driver failed): an undervolt search needs an offset it can read and set"
    )
    assert offsets.range_mhz() is None  # a card that does not say its range


def test_the_common_range_is_the_narrowest_and_a_refusal_is_said_per_card() -> None:
    narrow = _Fixed(1, ClockOffset(True, 0.0, -100.0, 500.0))
    offsets = ClockOffsetter([FakeGpu(0), narrow], print)
    assert offsets.range_mhz() == (-100.0, 500.0)
    assert offsets.apply(1500.0) == [
        "GPU 0: 1500 MHz is outside -200..1000 MHz",
        "GPU 1: 1500 MHz is outside -200..1000 MHz",
    ]
    assert offsets.touched == {0, 1}  # a refused call is put back too: it may have changed


def test_a_card_that_refuses_to_go_back_is_reported_and_the_others_still_go_back() -> None:
    stuck, fine = FakeGpu(0), FakeGpu(1)
    warnings: list[str] = []
    offsets = ClockOffsetter([stuck, fine], warnings.append)
    offsets.apply(100.0)
    stuck.set_sm_clock_offset = lambda m: LockResult(m, False, "busy")  # type: ignore[method-assign]
    result = offsets.put_back()
    assert result[0] == (False, "could not put the SM clock offset back to 0 MHz: busy")
    assert result[1] == (True, "SM clock offset put back to 0 MHz") and fine.sm_offset_mhz == 0.0
    assert warnings and warnings[0].startswith("could not put back the clock offset of GPU 0")
