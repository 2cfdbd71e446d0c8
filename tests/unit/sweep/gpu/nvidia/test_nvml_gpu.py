"""The NVML backend against a fake pynvml, and its API names against the real nvidia-ml-py."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu import Gpu, GpuBackend
from powersweep.sweep.gpu import nvidia as nvidia_package
from powersweep.sweep.gpu import nvml as nvml_backend
from powersweep.sweep.gpu.nvml import NVML_API_USED, NvmlBackend, NvmlGpu
from tests.paths import FAKES


def _load_fake() -> ModuleType:
    """Import tests/fakes/fake_pynvml.py whether or not the repo root is on sys.path."""
    name = "tests.fakes.fake_pynvml"
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except ImportError:
        path = FAKES / "fake_pynvml.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module


fake_pynvml: Any = _load_fake()
FakeNvml = fake_pynvml.FakeNvml
FakeDevice = fake_pynvml.FakeDevice


def _nvml_gpu(**device: Any) -> tuple[Any, NvmlGpu]:
    fake = FakeNvml(devices=[FakeDevice(**device)])
    return fake, NvmlBackend(nvml=fake).gpu(0)


# --- identity and envelope -----------------------------------------------------------------


@pytest.mark.parametrize("as_bytes", [False, True])
def test_identity_reads_name_uuid_vram_and_driver(as_bytes: bool) -> None:
    fake = FakeNvml(
        devices=[FakeDevice(name="NVIDIA RTX A6000", uuid="GPU-abc", vram_mib=49140)],
        driver_version="575.51.03",
        strings_as_bytes=as_bytes,
    )
    ident = NvmlBackend(nvml=fake).gpu(0).identity()
    assert ident.index == 0
    assert ident.name == "NVIDIA RTX A6000"
    assert ident.uuid == "GPU-abc"
    assert ident.vram_mib == 49140
    assert ident.driver_version == "575.51.03"


def test_identity_failure_is_a_gpu_error() -> None:
    _, gpu = _nvml_gpu(fail={"nvmlDeviceGetUUID": fake_pynvml.NVML_ERROR_GPU_IS_LOST})
    with pytest.raises(GpuError, match=r"GPU 0.*GPU is lost"):
        gpu.identity()


def test_envelope_converts_milliwatts_to_watts() -> None:
    _, gpu = _nvml_gpu(min_mw=100_000, default_mw=370_000, max_mw=390_500, limit_mw=350_000)
    env = gpu.envelope()
    assert (env.min_w, env.default_w, env.max_w, env.current_w) == (100.0, 370.0, 390.5, 350.0)


def test_envelope_without_power_management_names_gpu_and_cause() -> None:
    _, gpu = _nvml_gpu(name="NVIDIA GeForce RTX 4060 Laptop GPU", power_managed=False)
    with pytest.raises(GpuError) as info:
        gpu.envelope()
    message = str(info.value)
    assert "GPU 0 (NVIDIA GeForce RTX 4060 Laptop GPU)" in message
    assert "Not Supported" in message
    assert "\n" not in message


def test_envelope_reported_as_zero_is_not_available() -> None:
    _, gpu = _nvml_gpu(min_mw=0, max_mw=0, default_mw=0, limit_mw=0)
    with pytest.raises(GpuError, match=r"no settable power limit.*N/A"):
        gpu.envelope()


def test_slowdown_temp_and_enforced_limit() -> None:
    fake, gpu = _nvml_gpu(slowdown_temp_c=87, limit_mw=300_000, enforced_cap_mw=280_000)
    assert gpu.slowdown_temp_c() == 87.0
    assert gpu.enforced_limit_w() == 280.0
    device = fake.devices[0]
    device.fail["nvmlDeviceGetTemperatureThreshold"] = fake_pynvml.NVML_ERROR_UNKNOWN
    device.fail["nvmlDeviceGetEnforcedPowerLimit"] = fake_pynvml.NVML_ERROR_UNKNOWN
    assert math.isnan(gpu.slowdown_temp_c())
    assert math.isnan(gpu.enforced_limit_w())


# --- samples -------------------------------------------------------------------------------


def test_sample_converts_units_and_uses_instant_power() -> None:
    _, gpu = _nvml_gpu(
        power_mw=250_000,
        instant_power_mw=262_500,
        energy_mj=123_456_789,
        temp_c=71,
        sm_clock_mhz=1695,
        mem_clock_mhz=9501,
        util_pct=98,
        pstate=2,
        clock_event_bits=0x4,
    )
    assert gpu.power_source == "instant"
    s = gpu.read_sample()
    assert s.gpu_index == 0
    # both readings: the driver's (averaged) power usage and the instant field, which the
    # figures use
    assert (s.power_w, s.power_instant_w, s.draw_w) == (250.0, 262.5, 262.5)
    assert s.energy_mj == 123_456_789.0
    assert (s.temp_c, s.sm_clock_mhz, s.mem_clock_mhz, s.util_pct) == (71.0, 1695.0, 9501.0, 98.0)
    assert s.pstate == 2
    assert s.clock_event_bits == 0x4
    assert s.throttle_power and not s.throttle_thermal
    assert s.read_errors == 0
    assert gpu.read_error_count == 0


def test_sample_power_is_clamped_by_the_fake_to_the_cap() -> None:
    # The fake's draw follows the enforced limit, which the driver tests rely on.
    _, gpu = _nvml_gpu(power_mw=300_000, instant_power_mw=310_000, limit_mw=200_000)
    assert gpu.read_sample().power_w == 200.0


def test_average_power_when_instant_field_is_unsupported() -> None:
    fake, gpu = _nvml_gpu(power_mw=250_000, instant_power_mw=None)
    assert gpu.power_source == "average"
    s = gpu.read_sample()
    assert s.power_w == 250.0 and s.draw_w == 250.0
    assert math.isnan(s.power_instant_w) and s.read_errors == 0  # a capability, not a failure
    assert fake.calls_to("nvmlDeviceGetFieldValues") == 1  # the probe only


@pytest.mark.parametrize(
    "failure",
    [
        {"fail_fields": {186: 3}},  # the field carries its own error, the call succeeds
        {"fail": {"nvmlDeviceGetFieldValues": 13}},  # the driver lacks the call
    ],
)
def test_average_power_when_instant_read_fails_at_probe(failure: dict[str, Any]) -> None:
    _, gpu = _nvml_gpu(power_mw=240_000, instant_power_mw=260_000, **failure)
    assert gpu.power_source == "average"
    assert gpu.read_sample().draw_w == 240.0


def test_zero_instant_next_to_nonzero_average_means_instant_is_not_measured() -> None:
    _, gpu = _nvml_gpu(power_mw=80_000, instant_power_mw=0)
    assert gpu.power_source == "average"
    s = gpu.read_sample()
    assert s.draw_w == 80.0 and math.isnan(s.power_instant_w)


def test_instant_falls_back_to_average_per_read() -> None:
    fake, gpu = _nvml_gpu(power_mw=250_000, instant_power_mw=262_000)
    assert gpu.power_source == "instant"
    fake.devices[0].fail_fields[fake_pynvml.NVML_FI_DEV_POWER_INSTANT] = 999
    s = gpu.read_sample()
    assert math.isnan(s.power_instant_w)
    assert s.draw_w == 250.0  # the sample is not lost: the average still tells
    assert s.read_errors == 1  # a failed field, counted as every other
    assert gpu.instant_fallbacks == 1
    assert gpu.power_source == "instant"  # decided once; the next read tries instant again
    del fake.devices[0].fail_fields[fake_pynvml.NVML_FI_DEV_POWER_INSTANT]
    assert gpu.read_sample().draw_w == 262.0


def test_instant_field_decoded_by_its_value_type() -> None:
    fake, gpu = _nvml_gpu()
    fv = fake_pynvml.FakeFieldValue(
        fieldId=fake_pynvml.NVML_FI_DEV_POWER_INSTANT,
        valueType=fake_pynvml.NVML_VALUE_TYPE_DOUBLE,
        value=fake_pynvml.FakeValue(dVal=123_400.0),
    )
    fake.nvmlDeviceGetFieldValues = lambda handle, ids: [fv]
    assert gpu.read_sample().power_instant_w == pytest.approx(123.4)


def test_failed_reads_become_nan_and_count_without_raising() -> None:
    unknown = fake_pynvml.NVML_ERROR_UNKNOWN
    failing = [
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetClockInfo",  # SM and memory clocks: two fields
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetPerformanceState",
        "nvmlDeviceGetCurrentClocksEventReasons",
    ]
    fake, gpu = _nvml_gpu()
    fake.devices[0].fail.update(dict.fromkeys(failing, unknown))
    first = gpu.read_sample()
    for value in (first.power_w, first.energy_mj, first.temp_c, first.sm_clock_mhz):
        assert math.isnan(value)
    assert math.isnan(first.mem_clock_mhz) and math.isnan(first.util_pct)
    assert first.pstate is None and first.clock_event_bits is None
    assert math.isnan(first.power_instant_w) and math.isnan(first.draw_w)
    # nine reads: the instant field and the average power are two
    assert first.read_errors == 9
    assert gpu.read_sample().read_errors == 9
    assert gpu.read_error_count == 18
    # Transient errors are retried: the next good read has every field again.
    fake.devices[0].fail.clear()
    healed = gpu.read_sample()
    assert healed.read_errors == 0
    assert healed.temp_c == 60.0 and healed.power_w == 250.0 and healed.power_instant_w == 260.0
    assert gpu.read_error_count == 18


def test_lost_gpu_never_raises_from_read_sample() -> None:
    fake, gpu = _nvml_gpu()
    lost = fake_pynvml.NVML_ERROR_GPU_IS_LOST
    names = [n for n in NVML_API_USED if n.startswith("nvmlDevice")]
    fake.devices[0].fail.update(dict.fromkeys(names, lost))
    s = gpu.read_sample()
    assert math.isnan(s.draw_w) and s.read_errors == 9


def test_unsupported_energy_is_nan_not_an_error_and_not_asked_again() -> None:
    fake, gpu = _nvml_gpu(energy_mj=None)
    samples = [gpu.read_sample() for _ in range(3)]
    assert all(math.isnan(s.energy_mj) for s in samples)
    assert all(s.read_errors == 0 for s in samples)
    assert fake.calls_to("nvmlDeviceGetTotalEnergyConsumption") == 1
    assert gpu.unsupported_fields == frozenset({"energy"})
    assert samples[-1].temp_c == 60.0


def test_unknown_pstate_is_none_without_an_error() -> None:
    _, gpu = _nvml_gpu(pstate=fake_pynvml.NVML_PSTATE_UNKNOWN)
    s = gpu.read_sample()
    assert s.pstate is None and s.read_errors == 0


def test_energy_counter_follows_the_fake_draw() -> None:
    fake, gpu = _nvml_gpu(power_mw=200_000, energy_mj=0)
    fake.devices[0].tick(2.5)
    assert gpu.read_sample().energy_mj == 500_000.0


# --- setting limits ------------------------------------------------------------------------


def test_compute_processes_in_mib_with_unknown_memory_as_nan() -> None:
    proc = fake_pynvml.FakeProcessInfo
    _, gpu = _nvml_gpu(processes=[proc(pid=4242, usedGpuMemory=3 * 2**30), proc(77, None)])
    procs = gpu.compute_processes()
    assert procs is not None and [p.pid for p in procs] == [4242, 77]
    assert procs[0].used_memory_mib == 3072.0 and math.isnan(procs[1].used_memory_mib)
    _, idle = _nvml_gpu()
    assert idle.compute_processes() == ()


def test_compute_processes_unreadable_is_none() -> None:
    _, gpu = _nvml_gpu(
        fail={"nvmlDeviceGetComputeRunningProcesses": fake_pynvml.NVML_ERROR_NO_PERMISSION}
    )
    assert gpu.compute_processes() is None


def test_set_limit_accepted_reads_back_and_uses_the_non_v2_call() -> None:
    fake, gpu = _nvml_gpu(limit_mw=350_000)
    result = gpu.set_power_limit(250.4)
    assert fake.devices[0].limit_mw == 250_400
    assert result.accepted
    assert (result.requested_w, result.readback_w, result.enforced_w) == (250.4, 250.4, 250.4)
    assert result.message == ""
    assert fake.calls_to("nvmlDeviceSetPowerManagementLimit") == 1
    assert gpu.envelope().current_w == 250.4


def test_set_limit_silently_kept_is_not_accepted() -> None:
    fake, gpu = _nvml_gpu(
        name="NVIDIA GeForce RTX 5090",
        min_mw=400_000,
        max_mw=600_000,
        default_mw=575_000,
        limit_mw=575_000,
    )
    fake.devices[0].min_mw = 150_000  # NVML advertises a range the card does not honour
    fake.devices[0].silent_floor_mw = 400_000
    result = gpu.set_power_limit(300)
    assert not result.accepted
    assert result.readback_w == 575.0
    assert "575 W" in result.message and "300 W" in result.message
    assert fake.devices[0].limit_mw == 575_000


def test_set_limit_invalid_argument_is_a_rejected_result() -> None:
    fake, gpu = _nvml_gpu(min_mw=100_000, max_mw=390_000, limit_mw=350_000)
    result = gpu.set_power_limit(50)
    assert not result.accepted
    assert result.requested_w == 50 and result.readback_w == 350.0
    assert "invalid" in result.message and "100-390 W" in result.message
    assert fake.devices[0].limit_mw == 350_000


def test_set_limit_without_root_asks_for_sudo() -> None:
    _, gpu = _nvml_gpu(
        fail={"nvmlDeviceSetPowerManagementLimit": fake_pynvml.NVML_ERROR_NO_PERMISSION}
    )
    with pytest.raises(GpuError, match=r"GPU 0 .*needs root: re-run with sudo"):
        gpu.set_power_limit(250)


def test_set_limit_not_supported_names_the_cause() -> None:
    _, gpu = _nvml_gpu(
        fail={"nvmlDeviceSetPowerManagementLimit": fake_pynvml.NVML_ERROR_NOT_SUPPORTED}
    )
    with pytest.raises(GpuError) as info:
        gpu.set_power_limit(250)
    assert "Not Supported" in str(info.value) and "SYS_ADMIN" in str(info.value)


def test_set_limit_other_nvml_error_is_a_gpu_error() -> None:
    _, gpu = _nvml_gpu(fail={"nvmlDeviceSetPowerManagementLimit": fake_pynvml.NVML_ERROR_UNKNOWN})
    with pytest.raises(GpuError, match="250 W failed: Unknown Error"):
        gpu.set_power_limit(250)


def test_set_limit_with_lower_enforced_limit_is_accepted_with_a_note() -> None:
    _, gpu = _nvml_gpu(enforced_cap_mw=200_000)
    result = gpu.set_power_limit(300)
    assert result.accepted
    assert (result.readback_w, result.enforced_w) == (300.0, 200.0)
    assert "200 W" in result.message and "300 W" in result.message


@pytest.mark.parametrize("watts", [0.0, -5.0, math.nan, math.inf])
def test_set_limit_refuses_nonsense_watts(watts: float) -> None:
    fake, gpu = _nvml_gpu()
    with pytest.raises(UsageError):
        gpu.set_power_limit(watts)
    assert fake.calls_to("nvmlDeviceSetPowerManagementLimit") == 0


# --- backend -------------------------------------------------------------------------------


def test_backend_counts_and_caches_gpus() -> None:
    fake = FakeNvml(devices=[FakeDevice(uuid="GPU-a"), FakeDevice(uuid="GPU-b")])
    backend: GpuBackend = NvmlBackend(nvml=fake)  # mypy checks the protocols are met
    first: Gpu = backend.gpu(0)
    assert first.index == 0
    assert backend.device_count() == 2
    assert backend.gpu(1).identity().uuid == "GPU-b"
    assert backend.gpu(1) is backend.gpu(1)
    with pytest.raises(UsageError, match="no GPU 2: NVML sees GPUs 0-1"):
        backend.gpu(2)


def test_close_is_idempotent_and_closes_the_backend() -> None:
    fake = FakeNvml()
    backend = NvmlBackend(nvml=fake)
    backend.gpu(0)
    backend.close()
    backend.close()
    assert fake.shutdown_calls == 1 and fake.init_count == 0
    with pytest.raises(GpuError, match="closed"):
        backend.device_count()
    with pytest.raises(GpuError, match="closed"):
        backend.gpu(0)


def test_context_manager_shuts_nvml_down_and_tolerates_shutdown_failure() -> None:
    fake = FakeNvml(fail={"nvmlShutdown": fake_pynvml.NVML_ERROR_UNKNOWN})
    with NvmlBackend(nvml=fake) as backend:
        assert backend.device_count() == 1
    assert fake.calls_to("nvmlShutdown") == 1


@pytest.mark.parametrize("code", ["NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED"])
def test_init_failure_is_a_one_line_gpu_error(code: str) -> None:
    fake = FakeNvml(fail={"nvmlInit": getattr(fake_pynvml, code)})
    with pytest.raises(GpuError) as info:
        NvmlBackend(nvml=fake)
    message = str(info.value)
    assert message.startswith("NVML not available: is the NVIDIA driver installed? (")
    assert "\n" not in message


def test_real_pynvml_either_works_or_raises_gpu_error() -> None:
    # On a machine without the driver this is the init-failure path with the real bindings.
    try:
        backend = NvmlBackend()
    except GpuError as exc:
        assert str(exc).startswith("NVML not available")
        return
    try:
        assert backend.device_count() >= 0
    finally:
        backend.close()


# --- persistence mode and clock-lock reads ---------------------------------------------------


def test_persistence_mode_reads_and_sets_with_the_real_enum_values() -> None:
    fake, gpu = _nvml_gpu(persistence_mode=fake_pynvml.NVML_FEATURE_DISABLED)
    assert gpu.persistence_mode() is False
    assert gpu.set_persistence_mode(True) is True
    assert fake.devices[0].persistence_mode == fake_pynvml.NVML_FEATURE_ENABLED == 1
    assert fake.calls_to("nvmlDeviceSetPersistenceMode") == 1
    assert gpu.set_persistence_mode(False) is False
    assert fake.devices[0].persistence_mode == 0


def test_persistence_mode_unreadable_is_none_and_unsupported_set_says_why() -> None:
    fake, gpu = _nvml_gpu(persistence_supported=False)
    assert gpu.persistence_mode() is None
    with pytest.raises(GpuError, match=r"GPU 0 .*no persistence mode.*Not Supported"):
        gpu.set_persistence_mode(True)
    fake.devices[0].persistence_supported = True
    fake.devices[0].fail["nvmlDeviceSetPersistenceMode"] = fake_pynvml.NVML_ERROR_NO_PERMISSION
    with pytest.raises(GpuError, match=r"persistence mode on on GPU 0 .*needs root"):
        gpu.set_persistence_mode(True)
    assert fake.devices[0].persistence_mode == fake_pynvml.NVML_FEATURE_DISABLED


def test_locked_clocks_are_unknown_through_nvml_but_a_user_setting_shows() -> None:
    fake, gpu = _nvml_gpu(clock_event_bits=0)
    locks = gpu.locked_clocks()
    assert locks.known is False and locks.sm_mhz is None and locks.mem_mhz is None
    assert locks.user_clock_setting_active is False
    fake.devices[0].clock_event_bits = nvml_backend.CLOCK_EVENT_APP_CLOCKS
    assert gpu.locked_clocks().user_clock_setting_active is True
    fake.devices[0].fail["nvmlDeviceGetCurrentClocksEventReasons"] = fake_pynvml.NVML_ERROR_UNKNOWN
    assert gpu.locked_clocks().user_clock_setting_active is None


# --- the pynvml surface --------------------------------------------------------------------


def test_every_name_used_exists_in_the_installed_nvidia_ml_py() -> None:
    import pynvml

    missing = [name for name in NVML_API_USED if not hasattr(pynvml, name)]
    assert missing == []
    # The deprecated throttle-reasons call and the _v2 setter must not creep back in.
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" not in NVML_API_USED
    assert "nvmlDeviceSetPowerManagementLimit_v2" not in NVML_API_USED


def test_every_name_used_exists_in_the_fake() -> None:
    fake = FakeNvml()
    assert [name for name in NVML_API_USED if not hasattr(fake, name)] == []


def test_fake_constants_match_the_real_module() -> None:
    import pynvml

    names = [n for n in NVML_API_USED if n.startswith(("NVML_", "nvmlEventType"))]
    assert "nvmlEventTypeXidCriticalError" in names and "NVML_ERROR_TIMEOUT" in names
    assert {n: getattr(FakeNvml(), n) for n in names} == {n: getattr(pynvml, n) for n in names}


def test_the_backend_uses_no_pynvml_name_missing_from_the_list() -> None:
    # every module of the NVIDIA backend (the facade and the nvidia/ subpackage it names)
    package = Path(nvidia_package.__file__).parent
    trees = [ast.parse(p.read_text()) for p in [Path(nvml_backend.__file__), *package.glob("*.py")]]
    used = set()
    for node in (n for tree in trees for n in ast.walk(tree)):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        via_local = isinstance(base, ast.Name) and base.id == "nvml"
        via_self = isinstance(base, ast.Attribute) and base.attr == "_nvml"
        if via_local or via_self:
            used.add(node.attr)
    assert len(used) > 20
    assert used - set(NVML_API_USED) == set()
    assert set(NVML_API_USED) - used == set()


def test_real_result_structures_have_the_fields_read() -> None:
    import pynvml

    assert "total" in dict(pynvml.c_nvmlMemory_t._fields_)
    assert "gpu" in dict(pynvml.c_nvmlUtilization_t._fields_)
    # Feed a real ctypes field value through the backend: attribute names must match.
    fake, gpu = _nvml_gpu()
    values = (pynvml.c_nvmlFieldValue_t * 1)()
    values[0].fieldId = pynvml.NVML_FI_DEV_POWER_INSTANT
    values[0].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    values[0].nvmlReturn = pynvml.NVML_SUCCESS
    values[0].value.uiVal = 301_250
    fake.nvmlDeviceGetFieldValues = lambda handle, ids: values
    assert gpu.read_sample().power_instant_w == 301.25
    values[0].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    assert gpu.read_sample().draw_w == 250.0  # fell back to the average reading


# --- clock locks (issue 15) ------------------------------------------------------------------


def test_supported_clocks_list_memory_tiers_and_sm_clocks_per_tier_descending() -> None:
    _, gpu = _nvml_gpu(supported_mem_mhz=[9751, 9501, 5001, 810, 405])
    clocks = gpu.supported_clocks()
    assert clocks.mem_mhz == (9751.0, 9501.0, 5001.0, 810.0, 405.0)
    assert clocks.sm_mhz_by_mem[9751.0][0] == 2100.0
    assert clocks.sm_mhz_by_mem[405.0][0] == 1005.0
    assert list(clocks.sm_mhz_by_mem[5001.0]) == sorted(clocks.sm_mhz_by_mem[5001.0], reverse=True)


def test_supported_clocks_not_supported_is_a_one_line_gpu_error() -> None:
    fake, gpu = _nvml_gpu()
    fake.devices[0].fail["nvmlDeviceGetSupportedMemoryClocks"] = (
        fake_pynvml.NVML_ERROR_NOT_SUPPORTED
    )
    with pytest.raises(GpuError, match="--sm-clocks") as err:
        gpu.supported_clocks()
    assert "\n" not in str(err.value)


def test_sm_lock_sets_min_equal_max_and_reset_clears_it() -> None:
    fake, gpu = _nvml_gpu()
    assert gpu.lock_sm_clock(1410.0).accepted
    assert fake.devices[0].locked_sm == (1410, 1410)
    assert gpu.lock_mem_clock(5001.0).accepted
    assert fake.devices[0].locked_mem == (5001, 5001)
    gpu.reset_clock_locks(sm=True, mem=False)
    assert fake.devices[0].locked_sm is None and fake.devices[0].locked_mem == (5001, 5001)
    gpu.reset_clock_locks()
    assert fake.devices[0].locked_mem is None
    assert not gpu.locked_clocks().known


def test_memory_lock_refused_by_a_geforce_card_is_a_one_line_explanation() -> None:
    _fake, gpu = _nvml_gpu(mem_locks_supported=False)
    result = gpu.lock_mem_clock(9501.0)
    assert not result.accepted
    assert "GeForce" in result.message and "Not Supported" in result.message
    assert "\n" not in result.message
    gpu.reset_clock_locks()  # nothing was locked: resetting is no failure


def test_lock_outside_the_listed_clocks_is_rejected_not_raised() -> None:
    _, gpu = _nvml_gpu()
    result = gpu.lock_sm_clock(5000.0)
    assert not result.accepted and "invalid" in result.message


@pytest.mark.parametrize("call", ["lock_sm_clock", "lock_mem_clock"])
def test_lock_without_root_asks_for_sudo(call: str) -> None:
    fake, gpu = _nvml_gpu()
    name = (
        "nvmlDeviceSetGpuLockedClocks"
        if call == "lock_sm_clock"
        else ("nvmlDeviceSetMemoryLockedClocks")
    )
    fake.devices[0].fail[name] = fake_pynvml.NVML_ERROR_NO_PERMISSION
    with pytest.raises(GpuError, match="sudo"):
        getattr(gpu, call)(1410.0)


def test_reset_without_root_is_a_gpu_error() -> None:
    fake, gpu = _nvml_gpu()
    fake.devices[0].fail["nvmlDeviceResetGpuLockedClocks"] = fake_pynvml.NVML_ERROR_NO_PERMISSION
    with pytest.raises(GpuError, match="sudo"):
        gpu.reset_clock_locks()
