"""The AMD backend against the fake amdsmi: units, NaN tolerance, card quirks, verified writes,
clock locks through the performance level, and one-line errors."""

from __future__ import annotations

import math

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu import Gpu, GpuBackend
from powersweep.sweep.gpu.amd import AmdsmiBackend, AmdsmiGpu
from powersweep.sweep.gpu.combined import CombinedBackend
from powersweep.sweep.gpu.nvml import NvmlBackend
from powersweep.sweep.gpu_choice import select_gpus
from tests.fakes.fake_amdsmi import (
    AMDSMI_STATUS_NO_PERM,
    AMDSMI_STATUS_NOT_SUPPORTED,
    AMDSMI_STATUS_UNKNOWN_ERROR,
    AmdCard,
    AmdSmiDevPerfLevel,
    FakeAmdsmi,
    mi210,
    mi250x_dies,
    mi300x,
    rx7900xtx,
    vm_guest,
)
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml


def _backend_gpu(card: AmdCard | None = None) -> tuple[FakeAmdsmi, AmdsmiGpu]:
    fake = FakeAmdsmi([card or mi300x()])
    return fake, AmdsmiBackend(amdsmi=fake).gpu(0)


# --- identity and caps -----------------------------------------------------------------------


def test_identity_reads_name_uuid_vram_driver_and_says_amd() -> None:
    _, gpu = _backend_gpu(mi300x(uuid="1fff74a1-aaaa", vram_mb=196592, driver_version="6.10.5"))
    ident = gpu.identity()
    assert (ident.index, ident.name, ident.uuid) == (0, "AMD Instinct MI300X", "1fff74a1-aaaa")
    assert (ident.vram_mib, ident.driver_version, ident.vendor) == (196592, "6.10.5", "amd")


def test_identity_failure_is_a_one_line_gpu_error() -> None:
    _, gpu = _backend_gpu(mi300x(fail={"amdsmi_get_gpu_device_uuid": AMDSMI_STATUS_UNKNOWN_ERROR}))
    with pytest.raises(GpuError, match="cannot identify GPU 0") as info:
        gpu.identity()
    assert "\n" not in str(info.value) and "AMDSMI_STATUS_UNKNOWN_ERROR" in str(info.value)


def test_envelope_converts_microwatts_and_keeps_the_mi300x_zero_floor() -> None:
    _, gpu = _backend_gpu(mi300x(cap_uw=600_500_000))
    env = gpu.envelope()
    assert (env.min_w, env.default_w, env.max_w, env.current_w) == (0.0, 750.0, 750.0, 600.5)
    _, radeon = _backend_gpu(rx7900xtx())
    env = radeon.envelope()
    assert (env.min_w, env.default_w, env.max_w) == (320.0, 355.0, 408.0)


def test_envelope_without_power_cap_names_the_card_and_cause() -> None:
    _, gpu = _backend_gpu(mi300x(power_capped=False))
    with pytest.raises(GpuError) as info:
        gpu.envelope()
    message = str(info.value)
    assert "GPU 0 (AMD Instinct MI300X) has no settable power cap" in message
    assert "NOT_SUPPORTED" in message and "\n" not in message
    _, zero = _backend_gpu(mi300x(max_cap_uw=0, default_cap_uw=0, cap_uw=0))
    with pytest.raises(GpuError, match="N/A"):
        zero.envelope()


def test_slowdown_temp_is_the_hotspot_critical_or_nan() -> None:
    fake, gpu = _backend_gpu(mi300x(hotspot_critical_c=100))
    assert gpu.slowdown_temp_c() == 100.0
    fake.cards[0].hotspot_critical_c = None  # amdsmi says NOT_SUPPORTED
    assert math.isnan(gpu.slowdown_temp_c())


# --- samples ---------------------------------------------------------------------------------


def test_sample_units_and_the_mi300x_current_power() -> None:
    fake, gpu = _backend_gpu(
        mi300x(
            current_power_w=612,
            energy_ticks=1_000_000,
            energy_resolution_uj=15.259,
            hotspot_c=71,
            gfx_clk_mhz=1900,
            mem_clk_mhz=1300,
            gfx_activity=97,
        )
    )
    assert gpu.power_source == "current"
    s = gpu.read_sample()
    assert s.power_w == 612.0
    assert s.energy_mj == pytest.approx(1_000_000 * 15.259 / 1000.0)
    assert (s.temp_c, s.sm_clock_mhz, s.mem_clock_mhz, s.util_pct) == (71.0, 1900.0, 1300.0, 97.0)
    assert s.pstate is None and s.clock_event_bits == 0 and s.read_errors == 0
    assert fake.calls_to("amdsmi_get_power_info") >= 2  # the probe, then the sample


def test_mi210_reads_average_power_when_current_is_not_reported() -> None:
    _, gpu = _backend_gpu(mi210(average_power_w=233))
    assert gpu.power_source == "average"
    s = gpu.read_sample()
    assert s.power_w == 233.0 and s.read_errors == 0
    assert s.clock_event_bits is None  # no violation status on an MI210: unknown, not an error


def test_power_reads_clamp_to_the_cap_in_the_fake() -> None:
    # the fake's draw follows the cap, which the driver-level tests rely on
    fake, gpu = _backend_gpu(mi300x(current_power_w=700))
    gpu.set_power_limit(500)
    assert gpu.read_sample().power_w == 500.0
    assert fake.cards[0].cap_uw == 500_000_000


def test_a_card_without_any_socket_power_is_nan_and_not_an_error() -> None:
    _, gpu = _backend_gpu(mi300x(current_power_w=None, average_power_w=None))
    assert gpu.power_source == "none"
    s = gpu.read_sample()
    assert math.isnan(s.power_w) and s.read_errors == 0


def test_na_after_good_reads_is_a_counted_failure_and_heals() -> None:
    fake, gpu = _backend_gpu(mi300x(current_power_w=500, hotspot_c=60))
    assert gpu.read_sample().read_errors == 0
    fake.cards[0].current_power_w = None  # "N/A" in a call that succeeded
    fake.cards[0].gfx_activity = None
    s = gpu.read_sample()
    assert math.isnan(s.power_w) and math.isnan(s.util_pct)
    assert s.read_errors == 2 and gpu.read_error_count == 2
    fake.cards[0].current_power_w = 480
    fake.cards[0].gfx_activity = 90
    healed = gpu.read_sample()
    assert healed.power_w == 480.0 and healed.util_pct == 90.0 and healed.read_errors == 0


def test_failed_reads_become_nan_and_count_without_raising() -> None:
    failing = [
        "amdsmi_get_power_info",
        "amdsmi_get_energy_count",
        "amdsmi_get_temp_metric",
        "amdsmi_get_clock_info",  # SM and memory clocks: two fields
        "amdsmi_get_gpu_activity",
        "amdsmi_get_violation_status",
    ]
    fake, gpu = _backend_gpu()
    fake.cards[0].fail.update(dict.fromkeys(failing, AMDSMI_STATUS_UNKNOWN_ERROR))
    s = gpu.read_sample()
    for value in (s.power_w, s.energy_mj, s.temp_c, s.sm_clock_mhz, s.mem_clock_mhz, s.util_pct):
        assert math.isnan(value)
    assert s.clock_event_bits is None and s.read_errors == 7
    fake.cards[0].fail.clear()
    healed = gpu.read_sample()
    assert healed.read_errors == 0 and healed.temp_c == 62.0
    assert gpu.read_error_count == 7


def test_unsupported_fields_are_nan_not_errors_and_not_asked_again() -> None:
    fake, gpu = _backend_gpu(mi300x(energy_ticks=None, violation=None, gfx_activity=None))
    samples = [gpu.read_sample() for _ in range(3)]
    assert all(math.isnan(s.energy_mj) and math.isnan(s.util_pct) for s in samples)
    assert all(s.read_errors == 0 and s.clock_event_bits is None for s in samples)
    assert fake.calls_to("amdsmi_get_energy_count") == 1
    assert fake.calls_to("amdsmi_get_violation_status") == 1
    # an MI300X fills no average socket power: a capability, asked for no more
    assert gpu.unsupported_fields == frozenset({"energy", "clock_events", "util", "power_average"})


def test_energy_counter_follows_the_draw_and_its_resolution() -> None:
    fake, gpu = _backend_gpu(
        mi300x(current_power_w=400, energy_ticks=0, energy_resolution_uj=15.259)
    )
    first = gpu.read_sample().energy_mj
    fake.cards[0].tick(2.0)  # 400 W for 2 s = 800 J
    assert gpu.read_sample().energy_mj - first == pytest.approx(800_000.0, rel=1e-4)


def test_old_amdsmi_energy_key_is_read_too() -> None:
    _, gpu = _backend_gpu(mi300x(energy_key="power", energy_ticks=2_000, energy_resolution_uj=10.0))
    assert gpu.read_sample().energy_mj == 20.0


def test_a_counter_that_runs_backwards_falls_back_to_sampled_power() -> None:
    fake, gpu = _backend_gpu(mi300x(energy_ticks=5_000_000))
    assert math.isfinite(gpu.read_sample().energy_mj)
    fake.cards[0].energy_ticks = 1_000  # a firmware reset
    s = gpu.read_sample()
    assert math.isnan(s.energy_mj) and s.read_errors == 0
    assert "ran backwards" in gpu.energy_fallback and "sampled draw" in gpu.energy_fallback
    fake.cards[0].energy_ticks = 9_000_000
    assert math.isnan(gpu.read_sample().energy_mj)  # not trusted again


def test_violation_status_becomes_power_and_thermal_throttle_bits() -> None:
    fake, gpu = _backend_gpu()
    assert not gpu.read_sample().throttle_power
    fake.cards[0].violation = {"active_ppt_pwr": True, "active_socket_thrm": "N/A"}
    s = gpu.read_sample()
    assert s.throttle_power and not s.throttle_thermal
    fake.cards[0].violation = {"active_ppt_pwr": False, "active_socket_thrm": True}
    s = gpu.read_sample()
    assert s.throttle_thermal and not s.throttle_power


def test_lost_gpu_never_raises_from_read_sample() -> None:
    fake, gpu = _backend_gpu()
    names = [n for n in dir(type(fake)) if n.startswith("amdsmi_get")]
    fake.cards[0].fail.update(dict.fromkeys(names, AMDSMI_STATUS_UNKNOWN_ERROR))
    s = gpu.read_sample()
    assert math.isnan(s.power_w) and s.read_errors == 7


# --- MI250X: two dies, one module ------------------------------------------------------------


def test_mi250x_second_die_reads_zero_and_the_module_is_counted_once() -> None:
    fake = FakeAmdsmi(mi250x_dies())
    backend = AmdsmiBackend(amdsmi=fake)
    first, second = backend.gpu(0), backend.gpu(1)
    assert first.power_reported_by is None and second.power_reported_by == 0
    a, b = first.read_sample(), second.read_sample()
    assert a.power_w == 410.0 and b.power_w == 0.0  # summed: the module's 410 W once
    assert math.isnan(b.energy_mj) and b.read_errors == 0  # its counter is the module's too


def test_sweeping_the_second_die_alone_is_refused_with_the_fix() -> None:
    backend = AmdsmiBackend(amdsmi=FakeAmdsmi(mi250x_dies()))
    with pytest.raises(UsageError, match=r"GPU 1 reads 0 W.*--gpus 0,1"):
        select_gpus(backend, (1,), lambda _m: None)
    assert [g.index for g in select_gpus(backend, (0, 1), lambda _m: None).gpus] == [0, 1]


def test_two_mi300x_are_not_taken_for_dies() -> None:
    backend = AmdsmiBackend(amdsmi=FakeAmdsmi([mi300x(), mi300x(current_power_w=0)]))
    assert backend.gpu(1).power_reported_by is None


# --- setting caps ----------------------------------------------------------------------------


def test_set_cap_in_microwatts_is_read_back_and_accepted() -> None:
    fake, gpu = _backend_gpu()
    result = gpu.set_power_limit(450.5)
    assert fake.cards[0].cap_uw == 450_500_000
    assert result.accepted and (result.requested_w, result.readback_w) == (450.5, 450.5)
    assert math.isnan(result.enforced_w) and result.message == ""
    assert gpu.envelope().current_w == 450.5


def test_a_cap_the_card_silently_keeps_is_not_accepted() -> None:
    fake, gpu = _backend_gpu(rx7900xtx(silent_floor_uw=340_000_000))
    result = gpu.set_power_limit(330)
    assert not result.accepted and result.readback_w == 355.0
    assert "355 W" in result.message and "330 W" in result.message
    assert fake.cards[0].cap_uw == 355_000_000


def test_a_cap_outside_the_range_is_a_rejected_result_with_the_range() -> None:
    _, gpu = _backend_gpu(rx7900xtx())
    result = gpu.set_power_limit(250)
    assert not result.accepted and result.readback_w == 355.0
    assert "invalid" in result.message and "320-408 W" in result.message


def test_setting_a_cap_without_root_asks_for_sudo_in_one_line() -> None:
    _, gpu = _backend_gpu(mi300x(fail={"amdsmi_set_power_cap": AMDSMI_STATUS_NO_PERM}))
    with pytest.raises(
        GpuError, match=r"GPU 0 \(AMD Instinct MI300X\) needs root: re-run with sudo"
    ):
        gpu.set_power_limit(500)


def test_a_vm_guest_cannot_set_caps_or_clocks_and_is_told_why() -> None:
    fake, gpu = _backend_gpu(vm_guest())
    assert gpu.envelope().current_w == 750.0  # reading works
    with pytest.raises(GpuError) as info:
        gpu.set_power_limit(500)
    message = str(info.value)
    assert "VM guest" in message and "run powersweep on the host" in message
    assert "\n" not in message
    with pytest.raises(GpuError, match="VM guest"):
        gpu.lock_sm_clock(1500)
    assert fake.cards[0].cap_uw == 750_000_000


def test_a_card_that_does_not_allow_caps_names_the_cause() -> None:
    _, gpu = _backend_gpu(mi300x(fail={"amdsmi_set_power_cap": AMDSMI_STATUS_NOT_SUPPORTED}))
    with pytest.raises(GpuError, match=r"does not allow setting the power cap.*NOT_SUPPORTED"):
        gpu.set_power_limit(500)


@pytest.mark.parametrize("watts", [0.0, -5.0, math.nan, math.inf])
def test_set_cap_refuses_nonsense_watts(watts: float) -> None:
    fake, gpu = _backend_gpu()
    with pytest.raises(UsageError):
        gpu.set_power_limit(watts)
    assert fake.calls_to("amdsmi_set_power_cap") == 0


# --- clock locks -------------------------------------------------------------------------------


def test_supported_clocks_convert_hz_and_fill_the_gfx_range() -> None:
    _, gpu = _backend_gpu(rx7900xtx())
    clocks = gpu.supported_clocks()
    assert clocks.mem_mhz == (1249.0, 772.0, 456.0, 96.0)
    sm = clocks.sm_mhz_by_mem[1249.0]
    assert sm[0] == 2500.0 and sm[-1] == 500.0 and 1500.0 in sm
    assert list(sm) == sorted(sm, reverse=True)


def test_sm_lock_is_a_manual_range_and_auto_unlocks() -> None:
    fake, gpu = _backend_gpu()
    card = fake.cards[0]
    assert gpu.locked_clocks().known and gpu.locked_clocks().user_clock_setting_active is False
    assert gpu.lock_sm_clock(1500.4).accepted
    assert card.gfx_range_mhz == (1500, 1500) and card.perf_level == AmdSmiDevPerfLevel.MANUAL
    assert gpu.read_sample().sm_clock_mhz == 1500.0
    held = gpu.locked_clocks()
    assert not held.known and held.user_clock_setting_active is True
    gpu.reset_clock_locks()
    assert card.gfx_range_mhz is None and card.perf_level == AmdSmiDevPerfLevel.AUTO


def test_unlocking_one_clock_keeps_the_other_lock_of_this_process() -> None:
    fake, gpu = _backend_gpu(rx7900xtx())
    card = fake.cards[0]
    assert gpu.lock_mem_clock(772).accepted and gpu.lock_sm_clock(2000).accepted
    gpu.reset_clock_locks(sm=True, mem=False)
    assert card.gfx_range_mhz is None and card.mem_range_mhz == (772, 772)
    assert card.perf_level == AmdSmiDevPerfLevel.MANUAL


def test_mi300x_memory_lock_is_refused_in_one_line_and_leaves_auto() -> None:
    fake, gpu = _backend_gpu()
    result = gpu.lock_mem_clock(1300)
    assert not result.accepted and "fixed memory clock" in result.message
    assert "\n" not in result.message
    assert fake.cards[0].perf_level == AmdSmiDevPerfLevel.AUTO  # not left in MANUAL


def test_a_lock_outside_the_levels_is_rejected_not_raised() -> None:
    _, gpu = _backend_gpu()
    result = gpu.lock_sm_clock(3000)
    assert not result.accepted and "invalid" in result.message


def test_locking_without_root_asks_for_sudo() -> None:
    _, gpu = _backend_gpu(mi300x(fail={"amdsmi_set_gpu_perf_level": AMDSMI_STATUS_NO_PERM}))
    with pytest.raises(GpuError, match="needs root"):
        gpu.lock_sm_clock(1500)
    with pytest.raises(GpuError, match="needs root"):
        gpu.reset_clock_locks()


def test_clock_lists_unreadable_is_a_one_line_gpu_error() -> None:
    _, gpu = _backend_gpu(mi300x(fail={"amdsmi_get_clk_freq": AMDSMI_STATUS_NOT_SUPPORTED}))
    with pytest.raises(GpuError, match="--sm-clocks") as info:
        gpu.supported_clocks()
    assert "\n" not in str(info.value)


# --- persistence, processes ---------------------------------------------------------------------


def test_persistence_reads_on_and_cannot_be_turned_off() -> None:
    _, gpu = _backend_gpu()
    assert gpu.persistence_mode() is True and gpu.set_persistence_mode(True) is True
    with pytest.raises(GpuError, match="no persistence mode to turn off"):
        gpu.set_persistence_mode(False)


def test_compute_processes_in_mib_and_unreadable_is_none() -> None:
    proc = {"name": "llama-server", "pid": 4242, "mem": 1, "memory_usage": {"vram_mem": 3 << 30}}
    fake, gpu = _backend_gpu(mi300x(processes=[proc, {"pid": 7, "mem": "N/A"}]))
    procs = gpu.compute_processes()
    assert procs is not None and [p.pid for p in procs] == [4242, 7]
    assert procs[0].used_memory_mib == 3072.0 and math.isnan(procs[1].used_memory_mib)
    fake.cards[0].fail["amdsmi_get_gpu_process_list"] = AMDSMI_STATUS_NO_PERM
    assert gpu.compute_processes() is None


# --- backend -----------------------------------------------------------------------------------


def test_backend_counts_caches_and_numbers_after_the_nvidia_cards() -> None:
    fake = FakeAmdsmi([mi300x(uuid="a"), mi300x(uuid="b")])
    backend: GpuBackend = AmdsmiBackend(amdsmi=fake, first_index=2)  # mypy: protocols met
    first: Gpu = backend.gpu(0)
    assert backend.device_count() == 2 and first.index == 2
    assert backend.gpu(1).identity().uuid == "b" and backend.gpu(1) is backend.gpu(1)
    assert backend.gpu(1).read_sample().gpu_index == 3
    with pytest.raises(UsageError, match="no GPU 4: amdsmi sees AMD GPUs 0-1"):
        backend.gpu(2)


def test_close_is_idempotent_and_tolerates_a_shutdown_failure() -> None:
    fake = FakeAmdsmi(fail={"amdsmi_shut_down": AMDSMI_STATUS_UNKNOWN_ERROR})
    with AmdsmiBackend(amdsmi=fake) as backend:
        backend.gpu(0)
    backend.close()
    assert fake.calls_to("amdsmi_shut_down") == 1
    with pytest.raises(GpuError, match="closed"):
        backend.device_count()


def test_init_failure_is_a_one_line_gpu_error() -> None:
    fake = FakeAmdsmi(fail={"amdsmi_init": 34})  # AMDSMI_STATUS_DRIVER_NOT_LOADED
    with pytest.raises(GpuError) as info:
        AmdsmiBackend(amdsmi=fake)
    assert str(info.value).startswith("amdsmi cannot start: is the amdgpu driver loaded?")
    assert "\n" not in str(info.value)


def test_the_installed_amdsmi_without_rocm_is_one_quiet_error_naming_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # This machine has the amdsmi package (a dev dependency) but not ROCm's libamd_smi.so;
    # where ROCm is there the backend starts (with or without cards).
    try:
        backend = AmdsmiBackend()
    except GpuError as exc:
        message = str(exc)
        assert message.startswith("amdsmi not available")
        assert "pip install 'powersweep[amd]'" in message and "amd-smi" in message
        assert "\n" not in message
        assert capsys.readouterr().out == ""  # amdsmi's own print is swallowed
        return
    try:
        assert backend.device_count() >= 0
    finally:
        backend.close()


def test_combined_backend_numbers_nvidia_first_then_amd() -> None:
    nvml = NvmlBackend(nvml=FakeNvml(devices=[FakeDevice(uuid="GPU-n0")]))
    amd = AmdsmiBackend(amdsmi=FakeAmdsmi([rx7900xtx(uuid="amd-0")]), first_index=1)
    both = CombinedBackend([nvml, amd])
    assert both.device_count() == 2
    assert [both.gpu(i).identity().vendor for i in range(2)] == ["nvidia", "amd"]
    assert both.gpu(1).index == 1 and both.gpu(1).identity().uuid == "amd-0"
    with pytest.raises(UsageError, match="no GPU 2"):
        both.gpu(2)
    both.close()


def test_a_card_with_both_socket_powers_reads_average_as_usage_and_current_as_instant() -> None:
    # issue 24: the current socket power is the instant reading the figures use; the average is
    # the driver's own (its window is firmware's)
    _, gpu = _backend_gpu(mi300x(current_power_w=540, average_power_w=500))
    assert gpu.power_source == "current"
    s = gpu.read_sample()
    assert (s.power_w, s.power_instant_w, s.draw_w) == (500.0, 540.0, 540.0)
    assert s.read_errors == 0
    # an average-only card has no instant reading: its draw is the average
    _, radeon = _backend_gpu(mi210(average_power_w=233))
    r = radeon.read_sample()
    assert math.isnan(r.power_instant_w) and r.draw_w == 233.0 and r.read_errors == 0
