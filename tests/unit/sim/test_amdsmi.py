"""powersweep.sim.amdsmi: the amdsmi-shaped module over fake cards, as amdsmi behaves. Nothing
answers before ``amdsmi_init``; handles and argument types are checked; every call is recorded
by card; caps in microwatts within the card's range (else INVAL, NOT_SUPPORTED for a guest or a
card without caps, a silent floor kept); socket power as ``N/A`` or clamped to the cap; the
energy counter and its tick; clock levels in Hz; a clock range within the levels; the
performance level's names, AUTO freeing the ranges."""

from __future__ import annotations

from typing import Any

import pytest

from powersweep.sim.amdsmi import AmdCard, FakeAmdsmi
from powersweep.sim.amdsmi_types import (
    AMDSMI_STATUS_INVAL,
    AMDSMI_STATUS_NOT_INIT,
    AMDSMI_STATUS_NOT_SUPPORTED,
    AMDSMI_STATUS_UNKNOWN_ERROR,
    AmdSmiClkType,
    AmdSmiDevPerfLevel,
    AmdSmiLibraryException,
    AmdSmiParameterException,
    AmdSmiTemperatureMetric,
    AmdSmiTemperatureType,
    AmdSmiVirtualizationMode,
)


def _started(*cards: AmdCard) -> tuple[FakeAmdsmi, AmdCard]:
    smi = FakeAmdsmi(list(cards) or None)
    smi.amdsmi_init()
    return smi, smi.cards[0]


def _code(call: Any, *args: Any) -> int:
    with pytest.raises(AmdSmiLibraryException) as caught:
        call(*args)
    return caught.value.err_code


def test_nothing_answers_before_init_and_after_the_last_shutdown() -> None:
    smi = FakeAmdsmi()
    card = smi.cards[0]
    assert _code(smi.amdsmi_get_processor_handles) == AMDSMI_STATUS_NOT_INIT
    assert _code(smi.amdsmi_get_power_info, card) == AMDSMI_STATUS_NOT_INIT
    smi.amdsmi_init()
    smi.amdsmi_init()
    assert smi.amdsmi_get_processor_handles() == [card]
    smi.amdsmi_shut_down()
    assert smi.amdsmi_get_gpu_device_uuid(card) == card.uuid  # still one init left
    smi.amdsmi_shut_down()
    assert _code(smi.amdsmi_get_gpu_device_uuid, card) == AMDSMI_STATUS_NOT_INIT
    assert (smi.init_count, smi.shutdown_calls) == (0, 2)


def test_a_module_call_can_be_made_to_fail() -> None:
    smi = FakeAmdsmi(fail={"amdsmi_init": AMDSMI_STATUS_UNKNOWN_ERROR})
    assert _code(smi.amdsmi_init) == AMDSMI_STATUS_UNKNOWN_ERROR
    assert smi.init_count == 0 and smi.calls == [("amdsmi_init", None)]


def test_handles_and_argument_types_are_checked_as_amdsmi_checks_them() -> None:
    smi, card = _started()
    with pytest.raises(AmdSmiParameterException):
        smi.amdsmi_get_power_info(AmdCard())  # a card this module does not hold
    with pytest.raises(AmdSmiParameterException):
        smi.amdsmi_set_power_cap(card, 0, 500.0e6)  # type: ignore[arg-type]
    with pytest.raises(AmdSmiParameterException):
        smi.amdsmi_get_clock_info(card, 0)  # a plain int, not the enum
    with pytest.raises(AmdSmiParameterException):
        smi.amdsmi_init(2)  # type: ignore[arg-type]


def test_calls_are_recorded_with_the_cards_index() -> None:
    smi, _ = _started(AmdCard(uuid="a"), AmdCard(uuid="b"))
    smi.amdsmi_get_gpu_device_uuid(smi.cards[1])
    smi.amdsmi_get_gpu_device_uuid(smi.cards[0])
    assert smi.calls[-2:] == [("amdsmi_get_gpu_device_uuid", 1), ("amdsmi_get_gpu_device_uuid", 0)]
    assert smi.calls_to("amdsmi_get_gpu_device_uuid") == 2 and smi.calls_to("amdsmi_init") == 1
    smi.cards[1].fail["amdsmi_get_gpu_device_uuid"] = AMDSMI_STATUS_UNKNOWN_ERROR
    assert _code(smi.amdsmi_get_gpu_device_uuid, smi.cards[1]) == AMDSMI_STATUS_UNKNOWN_ERROR
    assert smi.amdsmi_get_gpu_device_uuid(smi.cards[0]) == "a"


def test_caps_are_set_in_microwatts_within_the_range() -> None:
    smi, card = _started(AmdCard(min_cap_uw=100_000_000, max_cap_uw=750_000_000))
    smi.amdsmi_set_power_cap(card, 0, 500_000_000)
    info = smi.amdsmi_get_power_cap_info(card)
    assert info["power_cap"] == 500_000_000 and info["max_power_cap"] == 750_000_000
    assert info["min_power_cap"] == 100_000_000 and info["dpm_cap"] == 750_000_000
    assert _code(smi.amdsmi_set_power_cap, card, 0, 99_999_999) == AMDSMI_STATUS_INVAL
    assert _code(smi.amdsmi_set_power_cap, card, 0, 750_000_001) == AMDSMI_STATUS_INVAL
    assert _code(smi.amdsmi_set_power_cap, card, 1, 500_000_000) == AMDSMI_STATUS_INVAL
    assert card.cap_uw == 500_000_000


@pytest.mark.parametrize(
    "changes",
    [{"virtualization_mode": AmdSmiVirtualizationMode.GUEST}, {"power_capped": False}],
    ids=["guest", "no caps"],
)
def test_a_guest_or_a_card_without_caps_cannot_be_capped(changes: dict[str, Any]) -> None:
    smi, card = _started(AmdCard(**changes))
    assert _code(smi.amdsmi_set_power_cap, card, 0, 500_000_000) == AMDSMI_STATUS_NOT_SUPPORTED
    assert card.cap_uw == 750_000_000


def test_a_cap_under_the_silent_floor_says_yes_and_changes_nothing() -> None:
    smi, card = _started(AmdCard(silent_floor_uw=300_000_000))
    smi.amdsmi_set_power_cap(card, 0, 200_000_000)
    assert card.cap_uw == 750_000_000
    smi.amdsmi_set_power_cap(card, 0, 300_000_000)
    assert card.cap_uw == 300_000_000


def test_socket_power_is_na_where_unread_and_clamped_to_the_cap() -> None:
    smi, card = _started(AmdCard(current_power_w=None, average_power_w=420, cap_uw=400_000_000))
    info = smi.amdsmi_get_power_info(card)
    assert info["current_socket_power"] == "N/A"
    assert info["average_socket_power"] == 400 and info["socket_power"] == 400
    assert info["power_limit"] == 400
    card.clamp_power = False
    assert smi.amdsmi_get_power_info(card)["average_socket_power"] == 420
    card.average_power_w = None
    assert smi.amdsmi_get_power_info(card)["socket_power"] == "N/A"


def test_the_energy_counter_ticks_with_the_draw() -> None:
    smi, card = _started(AmdCard(current_power_w=500, energy_ticks=0, energy_resolution_uj=10.0))
    card.tick(2.0)  # 500 W for 2 s: 1,000 J in 10 uJ ticks
    counter = smi.amdsmi_get_energy_count(card)
    assert counter == {
        "energy_accumulator": 100_000_000,
        "counter_resolution": 10.0,
        "timestamp": 0,
    }
    card.current_power_w, card.average_power_w = None, 100
    card.tick(1.0)  # no current reading: the average draws
    assert card.energy_ticks == 110_000_000
    card.energy_key = "power"  # amdsmi before 6.2.1
    assert "power" in smi.amdsmi_get_energy_count(card)
    card.energy_ticks = None
    assert _code(smi.amdsmi_get_energy_count, card) == AMDSMI_STATUS_NOT_SUPPORTED


def test_the_hotspot_temperatures_and_nothing_else() -> None:
    smi, card = _started(AmdCard(hotspot_c=71, hotspot_critical_c=105))
    hot, cur, crit = (
        AmdSmiTemperatureType.HOTSPOT,
        AmdSmiTemperatureMetric.CURRENT,
        AmdSmiTemperatureMetric.CRITICAL,
    )
    assert smi.amdsmi_get_temp_metric(card, hot, cur) == 71
    assert smi.amdsmi_get_temp_metric(card, hot, crit) == 105
    edge = AmdSmiTemperatureType.EDGE
    assert _code(smi.amdsmi_get_temp_metric, card, edge, cur) == AMDSMI_STATUS_NOT_SUPPORTED
    card.hotspot_c = None
    assert _code(smi.amdsmi_get_temp_metric, card, hot, cur) == AMDSMI_STATUS_NOT_SUPPORTED


def test_clock_levels_are_in_hz_and_the_current_one_is_the_nearest() -> None:
    smi, card = _started(AmdCard(gfx_clk_mhz=1250, gfx_levels_mhz=[500, 1300, 2100]))
    freq = smi.amdsmi_get_clk_freq(card, AmdSmiClkType.GFX)
    assert freq == {
        "num_supported": 3,
        "current": 1,
        "frequency": [500_000_000, 1_300_000_000, 2_100_000_000],
    }
    info = smi.amdsmi_get_clock_info(card, AmdSmiClkType.GFX)
    assert (info["clk"], info["min_clk"], info["max_clk"], info["clk_locked"]) == (
        1250,
        500,
        2100,
        False,
    )
    assert _code(smi.amdsmi_get_clk_freq, card, AmdSmiClkType.DF) == AMDSMI_STATUS_NOT_SUPPORTED


def test_a_clock_range_within_the_levels_is_held_and_read() -> None:
    smi, card = _started(AmdCard(gfx_clk_mhz=2100))
    gfx = AmdSmiClkType.GFX
    smi.amdsmi_set_gpu_clk_range(card, 1300, 1300, gfx)
    assert card.gfx_range_mhz == (1300, 1300)
    info = smi.amdsmi_get_clock_info(card, gfx)
    assert info["clk"] == 1300 and info["clk_locked"] is True  # the clock follows the lock
    card.clocks_follow_locks = False
    assert smi.amdsmi_get_clock_info(card, gfx)["clk"] == 2100
    for lo, hi in ((400, 1300), (1300, 2200), (1500, 1300)):
        assert _code(smi.amdsmi_set_gpu_clk_range, card, lo, hi, gfx) == AMDSMI_STATUS_INVAL
    # an MI300X's memory clock is fixed
    mem = AmdSmiClkType.MEM
    assert _code(smi.amdsmi_set_gpu_clk_range, card, 1300, 1300, mem) == (
        AMDSMI_STATUS_NOT_SUPPORTED
    )


def test_the_performance_level_reads_as_amdsmis_names_and_auto_frees_the_ranges() -> None:
    smi, card = _started()
    assert smi.amdsmi_get_gpu_perf_level(card) == "AMDSMI_DEV_PERF_LEVEL_AUTO"
    smi.amdsmi_set_gpu_perf_level(card, AmdSmiDevPerfLevel.MANUAL)
    smi.amdsmi_set_gpu_clk_range(card, 1300, 1300, AmdSmiClkType.GFX)
    assert smi.amdsmi_get_gpu_perf_level(card) == "AMDSMI_DEV_PERF_LEVEL_MANUAL"
    smi.amdsmi_set_gpu_perf_level(card, AmdSmiDevPerfLevel.AUTO)
    assert card.gfx_range_mhz is None and card.mem_range_mhz is None
    guest = AmdCard(virtualization_mode=AmdSmiVirtualizationMode.GUEST)
    smi.cards.append(guest)
    level = AmdSmiDevPerfLevel.MANUAL
    assert _code(smi.amdsmi_set_gpu_perf_level, guest, level) == AMDSMI_STATUS_NOT_SUPPORTED


def test_identity_and_processes_come_back_in_amdsmis_shapes() -> None:
    proc = {"pid": 4, "mem": 1}
    smi, card = _started(AmdCard(market_name="", processes=[proc]))
    assert smi.amdsmi_get_gpu_asic_info(card)["market_name"] == "N/A"
    assert smi.amdsmi_get_gpu_vram_info(card)["vram_size"] == card.vram_mb
    assert smi.amdsmi_get_gpu_driver_info(card)["driver_name"] == "amdgpu"
    mode = smi.amdsmi_get_gpu_virtualization_mode(card)["mode"]
    assert mode is AmdSmiVirtualizationMode.BAREMETAL
    listed = smi.amdsmi_get_gpu_process_list(card)
    assert listed == [proc] and listed[0] is not proc  # a copy: the card's list stays its own
    card.gfx_activity = None
    assert smi.amdsmi_get_gpu_activity(card)["gfx_activity"] == "N/A"
