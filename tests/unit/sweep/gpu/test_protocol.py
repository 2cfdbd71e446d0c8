"""The GPU protocol's value types (``sweep/gpu/protocol.py``): which draw a sample's figures use,
and how the clock-event bits read as power and thermal throttling."""

from __future__ import annotations

import dataclasses
import math

import pytest

from powersweep.sweep.gpu.protocol import (
    CLOCK_EVENT_APP_CLOCKS,
    CLOCK_EVENT_GPU_IDLE,
    CLOCK_EVENT_HW_POWER_BRAKE,
    CLOCK_EVENT_HW_SLOWDOWN,
    CLOCK_EVENT_HW_THERMAL,
    CLOCK_EVENT_SW_POWER_CAP,
    CLOCK_EVENT_SW_THERMAL,
    POWER_EVENT_MASK,
    THERMAL_EVENT_MASK,
    GpuIdentity,
    GpuSample,
)


def _gpu_sample(**kw: object) -> GpuSample:
    base: dict[str, object] = dict(
        gpu_index=0,
        power_w=250.0,
        energy_mj=1000.0,
        temp_c=60.0,
        sm_clock_mhz=1800.0,
        mem_clock_mhz=9501.0,
        util_pct=97.0,
        pstate=2,
        clock_event_bits=0,
    )
    return GpuSample(**{**base, **kw})  # type: ignore[arg-type]


def test_the_draw_is_the_instant_reading_where_there_is_one() -> None:
    assert _gpu_sample(power_w=250.0, power_instant_w=262.5).draw_w == 262.5
    # the instant reading missing (the default) or failed: the driver's average
    assert _gpu_sample(power_w=250.0).draw_w == 250.0
    assert _gpu_sample(power_w=250.0, power_instant_w=math.inf).draw_w == 250.0
    assert math.isnan(_gpu_sample(power_w=math.nan).draw_w)
    # a real zero is a reading, not a failure
    assert _gpu_sample(power_w=250.0, power_instant_w=0.0).draw_w == 0.0


@pytest.mark.parametrize(
    ("bits", "power", "thermal"),
    [
        (None, False, False),
        (0, False, False),
        (CLOCK_EVENT_SW_POWER_CAP, True, False),
        (CLOCK_EVENT_HW_POWER_BRAKE, True, False),
        (CLOCK_EVENT_SW_THERMAL, False, True),
        (CLOCK_EVENT_HW_THERMAL, False, True),
        (CLOCK_EVENT_HW_SLOWDOWN, False, True),
        (CLOCK_EVENT_GPU_IDLE | CLOCK_EVENT_APP_CLOCKS, False, False),
        (CLOCK_EVENT_SW_POWER_CAP | CLOCK_EVENT_SW_THERMAL, True, True),
    ],
)
def test_clock_event_bits_read_as_power_and_thermal_throttling(
    bits: int | None, power: bool, thermal: bool
) -> None:
    s = _gpu_sample(clock_event_bits=bits)
    assert (s.throttle_power, s.throttle_thermal) == (power, thermal)


def test_the_event_masks_are_nvmls_bits_and_do_not_overlap() -> None:
    assert POWER_EVENT_MASK == 0x84
    assert THERMAL_EVENT_MASK == 0x68
    assert POWER_EVENT_MASK & THERMAL_EVENT_MASK == 0


def test_a_sample_defaults_to_no_errors_and_no_instant_reading_and_is_frozen() -> None:
    s = _gpu_sample()
    assert s.read_errors == 0 and math.isnan(s.power_instant_w)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.power_w = 1.0  # type: ignore[misc]
    assert GpuIdentity(0, "n", "u", 1, "d").vendor == "nvidia"
