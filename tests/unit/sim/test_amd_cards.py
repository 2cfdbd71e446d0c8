"""powersweep.sim.amd_cards: simulated AMD cards behind the amdsmi-shaped module. Each card's
facts and quirks come from its profile, readings from its physics (in amdsmi's units), and caps,
clock ranges and performance levels go to the simulated card's settings."""

from __future__ import annotations

from dataclasses import replace

import pytest

from powersweep.clock import ManualClock
from powersweep.sim.amd_cards import ENERGY_RESOLUTION_UJ, SimAmdsmi
from powersweep.sim.amdsmi_types import (
    AMDSMI_STATUS_INVAL,
    AmdSmiClkType,
    AmdSmiDevPerfLevel,
    AmdSmiLibraryException,
)
from powersweep.sim.physics import Locks, Workload
from powersweep.sim.profiles import get_profile
from powersweep.sim.sim_gpu import SimGpu


def _amdsmi(*names: str, serving: bool = True) -> tuple[ManualClock, list[SimGpu], SimAmdsmi]:
    clock = ManualClock()
    gpus = [SimGpu(get_profile(n), clock, index=i, serving=serving) for i, n in enumerate(names)]
    smi = SimAmdsmi(gpus, clock)
    smi.amdsmi_init()
    return clock, gpus, smi


def test_each_card_gets_its_profiles_facts_in_amdsmi_units() -> None:
    _, _, smi = _amdsmi("mi300x", "rx7900xtx")
    mi300x, navi = smi.amdsmi_get_processor_handles()
    assert smi.amdsmi_get_gpu_asic_info(mi300x)["market_name"] == "AMD Instinct MI300X (simulated)"
    assert smi.amdsmi_get_gpu_device_uuid(navi) == "GPU-sim-rx7900xtx-1"
    assert smi.amdsmi_get_gpu_vram_info(navi)["vram_size"] == 24560
    assert smi.amdsmi_get_power_cap_info(navi) == {
        "power_cap": 355_000_000,
        "default_power_cap": 355_000_000,
        "dpm_cap": 408_000_000,
        "min_power_cap": 320_000_000,
        "max_power_cap": 408_000_000,
    }
    # three graphics levels (lowest, middle, highest bin); the memory clocks the profile lists
    freq = smi.amdsmi_get_clk_freq(mi300x, AmdSmiClkType.GFX)["frequency"]
    assert freq == [500_000_000, 1_300_000_000, 2_100_000_000]
    mem = smi.amdsmi_get_clk_freq(navi, AmdSmiClkType.MEM)["frequency"]
    assert mem == [m * 1_000_000 for m in (96, 456, 772, 1249)]
    assert mi300x.energy_resolution_uj == ENERGY_RESOLUTION_UJ


def test_power_fields_and_violation_status_follow_the_profile() -> None:
    clock, gpus, smi = _amdsmi("mi300x", "rx7900xtx")
    for g in gpus:
        g.set_workload(Workload("decode"))
    clock.advance(30.0)
    mi300x, navi = smi.amdsmi_get_processor_handles()
    mi = smi.amdsmi_get_power_info(mi300x)
    assert mi["average_socket_power"] == "N/A"  # the MI300X fills the current field only
    assert mi["current_socket_power"] == mi["socket_power"] > 100
    nv = smi.amdsmi_get_power_info(navi)
    assert nv["current_socket_power"] == "N/A"  # RDNA3 fills the average only
    assert nv["average_socket_power"] == nv["socket_power"] > 100
    assert set(smi.amdsmi_get_violation_status(mi300x)) >= {"active_ppt_pwr"}
    with pytest.raises(AmdSmiLibraryException):
        smi.amdsmi_get_violation_status(navi)  # RDNA3 does not report it


def test_readings_follow_the_physics_and_the_energy_counter_counts_ticks() -> None:
    clock, (gpu,), smi = _amdsmi("mi300x")
    (card,) = smi.amdsmi_get_processor_handles()
    gpu.set_workload(Workload("prefill", prompt_tokens=8000))
    clock.advance(10.0)
    e0 = smi.amdsmi_get_energy_count(card)["energy_accumulator"]
    clock.advance(10.0)
    e1 = smi.amdsmi_get_energy_count(card)["energy_accumulator"]
    draw = smi.amdsmi_get_power_info(card)["current_socket_power"]
    # ticks of 15.259 uJ over 10 s at about the drawn power
    assert (e1 - e0) * ENERGY_RESOLUTION_UJ / 1e6 / 10.0 == pytest.approx(draw, rel=0.05)
    assert smi.amdsmi_get_gpu_activity(card)["gfx_activity"] == 100
    sample = gpu.read_sample()
    assert smi.amdsmi_get_clock_info(card, AmdSmiClkType.GFX)["clk"] == round(sample.sm_clock_mhz)


def test_a_serving_card_lists_the_server_process_and_an_idle_one_none() -> None:
    _, _, smi = _amdsmi("mi300x")
    (card,) = smi.amdsmi_get_processor_handles()
    (proc,) = smi.amdsmi_get_gpu_process_list(card)
    assert proc["name"] == "llama-server"
    assert proc["mem"] == proc["memory_usage"]["vram_mem"] == int(0.9 * 196592 * 2**20)
    _, _, idle = _amdsmi("mi300x", serving=False)
    assert idle.amdsmi_get_gpu_process_list(idle.amdsmi_get_processor_handles()[0]) == []


def test_a_cap_set_through_amdsmi_is_the_simulated_cards_limit_and_reads_back_at_once() -> None:
    _, (gpu,), smi = _amdsmi("mi300x")
    (card,) = smi.amdsmi_get_processor_handles()
    smi.amdsmi_get_power_info(card)  # a reading just taken...
    smi.amdsmi_set_power_cap(card, 0, 500_000_000)
    assert gpu.limit_w == 500.0
    # ...does not hide the new cap
    assert smi.amdsmi_get_power_cap_info(card)["power_cap"] == 500_000_000
    assert smi.amdsmi_get_power_info(card)["power_limit"] == 500


def test_a_clock_range_locks_the_simulated_card_at_its_top_and_auto_unlocks_it() -> None:
    _, (gpu,), smi = _amdsmi("rx7900xtx")
    (card,) = smi.amdsmi_get_processor_handles()
    smi.amdsmi_set_gpu_clk_range(card, 500, 1500, AmdSmiClkType.GFX)
    smi.amdsmi_set_gpu_clk_range(card, 456, 772, AmdSmiClkType.MEM)
    # the SM range keeps its bottom (an idle card clocks down to it); memory locks at its top
    assert gpu.locks == Locks(1500.0, 772.0, 500.0)
    info = smi.amdsmi_get_clock_info(card, AmdSmiClkType.GFX)
    assert info["clk_locked"] is True
    assert card.gfx_range_mhz == (500, 1500) and card.mem_range_mhz == (772, 772)
    assert smi.amdsmi_get_gpu_perf_level(card) == "AMDSMI_DEV_PERF_LEVEL_MANUAL"
    smi.amdsmi_set_gpu_perf_level(card, AmdSmiDevPerfLevel.AUTO)
    assert gpu.locks == Locks(None, None)
    assert smi.amdsmi_get_clock_info(card, AmdSmiClkType.GFX)["clk_locked"] is False


def test_a_lock_the_simulated_card_refuses_is_amdsmis_invalid_argument() -> None:
    # amdsmi lists whole MHz: a tier of 1249.6 MHz is listed as 1250, above what the card takes
    profile = replace(get_profile("rx7900xtx"), mem_tiers_mhz=(1249.6, 456.0))
    clock = ManualClock()
    gpu = SimGpu(profile, clock)
    smi = SimAmdsmi([gpu], clock)
    smi.amdsmi_init()
    (card,) = smi.amdsmi_get_processor_handles()
    assert max(card.mem_levels_mhz) == 1250
    with pytest.raises(AmdSmiLibraryException) as refused:
        smi.amdsmi_set_gpu_clk_range(card, 1250, 1250, AmdSmiClkType.MEM)
    assert refused.value.get_error_code() == AMDSMI_STATUS_INVAL
    assert gpu.locks == Locks(None, None)
