"""Clock locks of one AMD card (``sweep/gpu/amd/amd_clocks.py``) against the fake amdsmi: the
locks in force read from the performance level, the SM clocks filled between the card's levels,
a lock as a MANUAL range, unlocking through AUTO (relocking what should stay), and refusals."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.amd.amd_clocks import SM_CLOCK_STEP_MHZ, AmdClocks
from powersweep.sweep.gpu.amd.amdsmi_api import status_code
from tests.fakes.fake_amdsmi import (
    AMDSMI_STATUS_NO_PERM,
    AMDSMI_STATUS_NOT_SUPPORTED,
    AMDSMI_STATUS_UNKNOWN_ERROR,
    AmdCard,
    AmdSmiDevPerfLevel,
    FakeAmdsmi,
    mi300x,
    rx7900xtx,
)

LABEL = "GPU 0 (AMD Test Card)"


def _refusal_text(doing: str, value: str, exc: BaseException) -> str:
    return f"refused: {doing} at {value} (status {status_code(exc)})"


def _amd_clocks(card: AmdCard, *, guest: bool = False) -> tuple[FakeAmdsmi, AmdClocks]:
    fake = FakeAmdsmi([card])
    fake.amdsmi_init()
    return fake, AmdClocks(fake, card, lambda: LABEL, _refusal_text, lambda: guest)


@pytest.mark.parametrize(
    ("level", "known", "active"),
    [
        (AmdSmiDevPerfLevel.AUTO, True, False),
        (AmdSmiDevPerfLevel.MANUAL, False, True),
        (AmdSmiDevPerfLevel.HIGH, False, True),
    ],
)
def test_the_locks_in_force_read_from_the_performance_level(
    level: AmdSmiDevPerfLevel, known: bool, active: bool
) -> None:
    _, clocks = _amd_clocks(mi300x(perf_level=level))
    locks = clocks.locked()
    assert (locks.known, locks.user_clock_setting_active) == (known, active)
    assert locks.sm_mhz is None and locks.mem_mhz is None


def test_an_unreadable_performance_level_is_unknown() -> None:
    _, clocks = _amd_clocks(mi300x(fail={"amdsmi_get_gpu_perf_level": AMDSMI_STATUS_UNKNOWN_ERROR}))
    locks = clocks.locked()
    assert (locks.known, locks.user_clock_setting_active) == (False, None)


def test_the_sm_clocks_fill_the_range_between_the_levels_in_steps() -> None:
    _, clocks = _amd_clocks(
        mi300x(gfx_levels_mhz=[510, 1337, 2100], mem_levels_mhz=[900, 1300, 900])
    )
    supported = clocks.supported()
    assert supported.mem_mhz == (1300.0, 900.0)
    sm = supported.sm_mhz_by_mem[1300.0]
    assert supported.sm_mhz_by_mem[900.0] == sm
    assert sm[0] == 2100.0 and sm[-1] == 510.0
    assert list(sm) == sorted(sm, reverse=True)
    assert 1337.0 in sm  # every level of the card, off the grid or not
    steps = int((2100 - 510) // SM_CLOCK_STEP_MHZ)
    assert len(sm) == steps + 1 + 2  # the grid from the lowest level, plus 1337 and 2100
    assert 510.0 + SM_CLOCK_STEP_MHZ in sm


def test_levels_are_read_from_hz_up_to_the_count_amdsmi_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, clocks = _amd_clocks(mi300x())

    def freq(handle: Any, clk_type: Any) -> dict[str, Any]:
        if clk_type == fake.AmdSmiClkType.GFX:
            return {"num_supported": 2, "frequency": [500e6, 1000e6, 2100e6]}
        return {"num_supported": 3, "frequency": ["N/A", 0, 1300e6]}

    monkeypatch.setattr(fake, "amdsmi_get_clk_freq", freq, raising=False)
    supported = clocks.supported()
    assert supported.mem_mhz == (1300.0,)
    assert max(supported.sm_mhz_by_mem[1300.0]) == 1000.0  # the third level is past the count


@pytest.mark.parametrize(
    ("status", "hint"),
    [(AMDSMI_STATUS_NOT_SUPPORTED, True), (AMDSMI_STATUS_UNKNOWN_ERROR, False)],
)
def test_clock_lists_that_cannot_be_read_are_one_line_errors(status: int, hint: bool) -> None:
    _, clocks = _amd_clocks(mi300x(fail={"amdsmi_get_clk_freq": status}))
    with pytest.raises(GpuError) as info:
        clocks.supported()
    message = str(info.value)
    assert message.startswith(f"cannot list the clocks of {LABEL} (amdsmi: ")
    assert ("give --sm-clocks" in message) is hint
    assert "\n" not in message


def test_a_card_with_no_levels_asks_for_the_clocks_by_hand() -> None:
    _, clocks = _amd_clocks(mi300x(mem_levels_mhz=[]))
    with pytest.raises(
        GpuError, match="^" + re.escape(f"{LABEL} lists no clock levels: give --sm-clocks")
    ):
        clocks.supported()


def test_a_lock_is_a_manual_range_of_whole_mhz() -> None:
    card = rx7900xtx()
    _, clocks = _amd_clocks(card)
    result = clocks.lock("sm", 1410.4)
    assert (result.requested_mhz, result.accepted) == (1410.4, True)
    assert card.perf_level == AmdSmiDevPerfLevel.MANUAL
    assert card.gfx_range_mhz == (1410, 1410)
    assert clocks.lock("mem", 772.0).accepted
    assert card.mem_range_mhz == (772, 772)


@pytest.mark.parametrize("mhz", [0.0, -100.0, math.nan, math.inf])
def test_a_lock_that_is_not_a_positive_number_is_refused(mhz: float) -> None:
    card = rx7900xtx()
    fake, clocks = _amd_clocks(card)
    with pytest.raises(UsageError, match="positive number of MHz"):
        clocks.lock("sm", mhz)
    assert fake.calls_to("amdsmi_set_gpu_perf_level") == 0


def test_a_refused_lock_with_nothing_held_leaves_the_card_in_auto() -> None:
    card = mi300x()  # HBM: memory locks refused
    _, clocks = _amd_clocks(card)
    result = clocks.lock("mem", 1300.0)
    assert not result.accepted
    assert result.message == (
        f"{LABEL} does not support memory clock locks (amdsmi: AMDSMI_STATUS_NOT_SUPPORTED - "
        "Feature not supported): HBM cards (MI300X) keep a fixed memory clock"
    )
    assert card.perf_level == AmdSmiDevPerfLevel.AUTO


def test_a_refused_lock_keeps_the_lock_already_held() -> None:
    card = mi300x()
    _, clocks = _amd_clocks(card)
    assert clocks.lock("sm", 1300.0).accepted
    assert not clocks.lock("mem", 1300.0).accepted
    assert card.perf_level == AmdSmiDevPerfLevel.MANUAL
    assert card.gfx_range_mhz == (1300, 1300)


def test_a_lock_outside_the_levels_is_rejected_as_invalid() -> None:
    _, clocks = _amd_clocks(mi300x())
    result = clocks.lock("sm", 3000.0)
    assert not result.accepted
    assert result.message.startswith(f"{LABEL} rejected a 3000 MHz SM lock as invalid (amdsmi: ")


def test_without_permission_or_in_a_vm_guest_a_lock_is_an_error_in_the_cards_words() -> None:
    _, clocks = _amd_clocks(mi300x(fail={"amdsmi_set_gpu_clk_range": AMDSMI_STATUS_NO_PERM}))
    with pytest.raises(
        GpuError, match=r"^refused: locking the SM clock at 1300 MHz \(status 10\)$"
    ):
        clocks.lock("sm", 1300.0)
    # a guest's NOT_SUPPORTED is the host owning the card, not a card without the feature
    _, guest = _amd_clocks(mi300x(sm_locks_supported=False), guest=True)
    with pytest.raises(GpuError, match=r"^refused: locking the SM clock at 1300 MHz \(status 2\)$"):
        guest.lock("sm", 1300.0)


def test_unlocking_one_clock_relocks_the_other_this_process_held() -> None:
    card = rx7900xtx()
    _, clocks = _amd_clocks(card)
    clocks.lock("sm", 1500.0)
    clocks.lock("mem", 772.0)
    clocks.reset(sm=True, mem=False)
    assert card.perf_level == AmdSmiDevPerfLevel.MANUAL
    assert (card.gfx_range_mhz, card.mem_range_mhz) == (None, (772, 772))
    clocks.reset()
    assert card.perf_level == AmdSmiDevPerfLevel.AUTO
    assert (card.gfx_range_mhz, card.mem_range_mhz) == (None, None)


def test_a_reset_of_nothing_touches_nothing() -> None:
    fake, clocks = _amd_clocks(rx7900xtx())
    clocks.reset(sm=False, mem=False)
    assert fake.calls_to("amdsmi_set_gpu_perf_level") == 0


def test_a_card_without_performance_levels_was_never_locked() -> None:
    card = mi300x(fail={"amdsmi_set_gpu_perf_level": AMDSMI_STATUS_NOT_SUPPORTED})
    _, clocks = _amd_clocks(card)
    clocks.reset()  # nothing to undo, no error


@pytest.mark.parametrize(
    ("status", "guest"),
    [(AMDSMI_STATUS_NOT_SUPPORTED, True), (AMDSMI_STATUS_NO_PERM, False)],
)
def test_an_unlock_the_card_refuses_is_an_error(status: int, guest: bool) -> None:
    _, clocks = _amd_clocks(mi300x(fail={"amdsmi_set_gpu_perf_level": status}), guest=guest)
    with pytest.raises(
        GpuError, match=rf"^refused: unlocking the clocks at level AUTO \(status {status}\)$"
    ):
        clocks.reset()
