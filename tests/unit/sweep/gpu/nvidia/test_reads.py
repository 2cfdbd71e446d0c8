"""The readings of one NVIDIA card (``sweep/gpu/nvidia/reads.py``) against the fake pynvml: the
probe that picks the instant or the averaged draw, a failed instant read falling back per
sample, unsupported fields asked once, and the error count across samples."""

from __future__ import annotations

import math
from typing import Any

import pytest

from powersweep.sweep.gpu.nvidia.reads import NvmlReads
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml

INSTANT = fake_pynvml.NVML_FI_DEV_POWER_INSTANT


def _reads(**device: Any) -> tuple[FakeNvml, FakeDevice, NvmlReads]:
    fake = FakeNvml([FakeDevice(**device)])
    fake.nvmlInit()
    dev = fake.devices[0]
    return fake, dev, NvmlReads(fake, dev, 3)


@pytest.mark.parametrize(
    ("device", "source"),
    [
        ({"instant_power_mw": 260_000}, "instant"),
        ({"instant_power_mw": None}, "average"),  # the field is not supported
        ({"fail_fields": {INSTANT: fake_pynvml.NVML_ERROR_UNKNOWN}}, "average"),
        ({"fail": {"nvmlDeviceGetFieldValues": fake_pynvml.NVML_ERROR_UNKNOWN}}, "average"),
        ({"instant_power_mw": 0xFFFFFFFF, "clamp_power": False}, "average"),  # N/A sentinel
        # zero next to a non-zero average: the driver fills the field without measuring it
        ({"instant_power_mw": 0, "power_mw": 250_000}, "average"),
        # zero next to a zero average: an idle card may read 0, the field is trusted
        ({"instant_power_mw": 0, "power_mw": 0}, "instant"),
        (
            {"instant_power_mw": 0, "fail": {"nvmlDeviceGetPowerUsage": 999}},
            "instant",
        ),
    ],
)
def test_the_probe_picks_the_instant_field_only_where_it_measures(
    device: dict[str, Any], source: str
) -> None:
    _, _, reads = _reads(**device)
    assert reads.power_source == source


def test_an_average_source_never_asks_for_the_instant_field_again() -> None:
    fake, _, reads = _reads(instant_power_mw=None, power_mw=240_000)
    probes = fake.calls_to("nvmlDeviceGetFieldValues")
    s = reads.read_sample()
    assert fake.calls_to("nvmlDeviceGetFieldValues") == probes
    assert s.power_w == 240.0 and math.isnan(s.power_instant_w) and s.draw_w == 240.0
    assert s.read_errors == 0 and reads.instant_fallbacks == 0


def test_an_instant_read_that_fails_later_falls_back_to_the_average_for_that_sample() -> None:
    _, dev, reads = _reads(instant_power_mw=262_500, power_mw=250_000)
    assert reads.read_sample().draw_w == 262.5
    dev.fail_fields[INSTANT] = fake_pynvml.NVML_ERROR_TIMEOUT
    s = reads.read_sample()
    assert math.isnan(s.power_instant_w) and s.draw_w == 250.0
    assert (s.read_errors, reads.instant_fallbacks, reads.read_error_count) == (1, 1, 1)
    assert reads.power_source == "instant"  # the next sample tries the field again
    del dev.fail_fields[INSTANT]
    assert reads.read_sample().draw_w == 262.5
    assert reads.instant_fallbacks == 1


def test_unsupported_fields_are_asked_once_and_are_not_errors() -> None:
    fake, _, reads = _reads(
        energy_mj=None,
        fail={
            "nvmlDeviceGetPerformanceState": fake_pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            "nvmlDeviceGetUtilizationRates": fake_pynvml.NVML_ERROR_NOT_SUPPORTED,
        },
    )
    for _ in range(3):
        s = reads.read_sample()
    assert math.isnan(s.energy_mj) and math.isnan(s.util_pct) and s.pstate is None
    assert s.read_errors == 0 and reads.read_error_count == 0
    assert reads.unsupported_fields == frozenset({"energy", "pstate", "util"})
    assert fake.calls_to("nvmlDeviceGetTotalEnergyConsumption") == 1
    assert fake.calls_to("nvmlDeviceGetPerformanceState") == 1


def test_failed_fields_count_per_sample_and_in_total_and_heal() -> None:
    _, dev, reads = _reads()
    dev.fail.update(
        {
            "nvmlDeviceGetTemperature": fake_pynvml.NVML_ERROR_UNKNOWN,
            "nvmlDeviceGetClockInfo": fake_pynvml.NVML_ERROR_TIMEOUT,
        }
    )
    s = reads.read_sample()
    assert s.read_errors == 3  # temperature, SM clock, memory clock
    assert math.isnan(s.temp_c) and math.isnan(s.sm_clock_mhz) and math.isnan(s.mem_clock_mhz)
    reads.read_sample()
    assert reads.read_error_count == 6
    dev.fail.clear()
    healed = reads.read_sample()
    assert healed.read_errors == 0 and healed.temp_c == 60.0
    assert reads.read_error_count == 6
    assert reads.unsupported_fields == frozenset()  # failures are not capabilities


@pytest.mark.parametrize(("pstate", "read"), [(0, 0), (15, 15), (32, None), (16, None)])
def test_pstates_outside_p0_p15_are_unknown_without_an_error(pstate: int, read: int | None) -> None:
    _, _, reads = _reads(pstate=pstate)
    s = reads.read_sample()
    assert s.pstate == read and s.read_errors == 0


def test_a_sample_carries_its_index_and_nvmls_units() -> None:
    _, _, reads = _reads(
        power_mw=250_500,
        instant_power_mw=255_250,
        energy_mj=7_000,
        sm_clock_mhz=1695,
        clock_event_bits=0x20,
        limit_mw=390_000,
    )
    s = reads.read_sample()
    assert s.gpu_index == 3
    assert (s.power_w, s.power_instant_w, s.energy_mj) == (250.5, 255.25, 7000.0)
    assert s.sm_clock_mhz == 1695.0 and s.clock_event_bits == 0x20 and s.throttle_thermal
