"""The memory clock's offset (issue 45) through NVML (``NvmlOffsets(clock="mem")``, handed on
by ``NvmlClocks`` and ``NvmlGpu``), against the fake pynvml: the same current calls as the SM
offset with type NVML_CLOCK_MEM, the older ``...MemClkVfOffset`` calls where the driver lacks
them, P0 and P2, return codes checked, a driver that does not report applied offsets; and that
the SM offset is left alone (the two share the calls, not the state)."""

from __future__ import annotations

from typing import Any

import pytest

from powersweep.errors import GpuError
from powersweep.sweep.gpu.nvidia.nvml_clocks import NvmlClocks
from powersweep.sweep.gpu.nvml import NvmlBackend
from powersweep.sweep.gpu.protocol import ClockOffset
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml

LABEL = "GPU 0 (NVIDIA GeForce RTX 3090)"
NEW_GET = "nvmlDeviceGetClockOffsets"
NEW_SET = "nvmlDeviceSetClockOffsets"
OLD_SET = "nvmlDeviceSetMemClkVfOffset"
APIS = pytest.mark.parametrize("api", ["current", "older"])
MEM = fake_pynvml.NVML_CLOCK_MEM


def _mem_offset_clocks(api: str = "current", **device: Any) -> tuple[FakeNvml, NvmlClocks]:
    fake = FakeNvml([FakeDevice(**device)], clock_offsets_api=api == "current")
    fake.nvmlInit()
    return fake, NvmlClocks(fake, fake.devices[0], lambda: LABEL)


def _mem_sets(fake: FakeNvml) -> list[tuple[int, int]]:
    """(pstate, MHz) of each current-API set of the memory clock."""
    return [
        (p, mhz)
        for name, _, _, kind, p, mhz in fake.offset_structs
        if name == NEW_SET and kind == MEM
    ]


@APIS
def test_the_memory_offset_and_its_range_are_read(api: str) -> None:
    _, clocks = _mem_offset_clocks(api, mem_offset_mhz=1000, mem_offset_p2_mhz=1000)
    assert clocks.mem_clock_offset() == ClockOffset(True, 1000.0, -2000.0, 6000.0, "")


def test_the_current_api_reads_the_memory_clock_type_in_p0() -> None:
    fake, clocks = _mem_offset_clocks()
    clocks.mem_clock_offset()
    kinds = {(kind, p) for name, _, _, kind, p, _ in fake.offset_structs if name == NEW_GET}
    assert (MEM, 0) in kinds and all(kind == MEM for kind, _ in kinds)


@APIS
def test_a_memory_offset_is_set_in_p0_and_p2_and_read_back(api: str) -> None:
    fake, clocks = _mem_offset_clocks(api)
    result = clocks.set_mem_clock_offset(1500)
    assert result.accepted and result.verified and result.applied_mhz == 1500.0
    device = fake.devices[0]
    assert (device.mem_offset_mhz, device.mem_offset_p2_mhz) == (1500, 1500)
    assert (device.sm_offset_mhz, device.sm_offset_p2_mhz) == (0, 0)
    if api == "current":
        assert _mem_sets(fake) == [(0, 1500), (2, 1500)]


@APIS
def test_a_memory_offset_outside_the_range_is_not_sent(api: str) -> None:
    fake, clocks = _mem_offset_clocks(api)
    result = clocks.set_mem_clock_offset(7000)
    assert not result.accepted
    assert result.message == (
        f"{LABEL} accepts memory clock offsets from -2000 to 6000 MHz, not 7000 MHz"
    )
    assert _mem_sets(fake) == [] and fake.devices[0].mem_offset_mhz == 0


@APIS
def test_a_card_without_a_memory_offset_says_so_and_refuses_a_set(api: str) -> None:
    _, clocks = _mem_offset_clocks(api, mem_offset_supported=False)
    offset = clocks.mem_clock_offset()
    assert not offset.supported
    assert offset.message == (
        f"{LABEL} does not support a memory clock offset (NVML: Not Supported)"
    )
    assert not clocks.set_mem_clock_offset(500).accepted
    assert clocks.sm_clock_offset().supported  # the SM offset is another matter


def test_a_driver_with_neither_api_is_too_old_for_a_memory_offset() -> None:
    fake = FakeNvml([FakeDevice()], clock_offsets_api=False, gpc_offset_api=False)
    fake.nvmlInit()
    clocks = NvmlClocks(fake, fake.devices[0], lambda: LABEL)
    assert clocks.mem_clock_offset() == ClockOffset(
        False,
        message=(
            f"{LABEL} cannot have a memory clock offset: its driver is too old (it has neither "
            "nvmlDevice{Get,Set}ClockOffsets nor the older nvmlDevice{Get,Set}MemClkVfOffset) "
            "(NVML: Function Not Found)"
        ),
    )


def test_the_older_memory_calls_are_used_where_the_current_ones_are_missing() -> None:
    fake, clocks = _mem_offset_clocks("older")
    assert clocks.set_mem_clock_offset(800).accepted
    assert fake.devices[0].mem_offset_mhz == 800 and fake.devices[0].mem_offset_p2_mhz == 800
    assert not _mem_sets(fake)


@APIS
def test_a_refused_memory_set_code_is_a_loud_error_without_permission(api: str) -> None:
    name = NEW_SET if api == "current" else OLD_SET
    _, clocks = _mem_offset_clocks(api, fail={name: fake_pynvml.NVML_ERROR_NO_PERMISSION})
    with pytest.raises(GpuError, match=r"setting the memory clock offset of .* needs root"):
        clocks.set_mem_clock_offset(1000)


@APIS
def test_a_memory_offset_on_the_drivers_grid_is_the_offset_set(api: str) -> None:
    _, clocks = _mem_offset_clocks(api, sm_offset_grid_mhz=15)
    result = clocks.set_mem_clock_offset(1007)
    assert result.accepted and result.applied_mhz == 1005.0
    assert "applied as +1005 MHz" in result.message


@APIS
def test_a_memory_offset_the_driver_does_not_report_is_accepted_unverified(api: str) -> None:
    _, clocks = _mem_offset_clocks(api, sm_offset_reported=False)
    result = clocks.set_mem_clock_offset(1000)
    assert result.accepted and not result.verified and result.applied_mhz is None
    assert "memory clock offset but reads back 0 MHz" in result.message
    assert clocks.mem_clock_offset().offset_mhz is None  # a 0 read back proves nothing now


def test_p2_refusing_a_memory_offset_is_said_not_fatal() -> None:
    fake, clocks = _mem_offset_clocks(mem_offset_p2_mhz=None)
    result = clocks.set_mem_clock_offset(1000)
    assert result.accepted and "P2 refused it" in result.message
    assert fake.devices[0].mem_offset_mhz == 1000 and fake.devices[0].mem_offset_p2_mhz is None


def test_the_nvml_gpu_hands_the_memory_offset_on() -> None:
    fake = FakeNvml([FakeDevice(mem_offset_mhz=500, mem_offset_p2_mhz=500)])
    gpu = NvmlBackend(nvml=fake).gpu(0)
    assert gpu.mem_clock_offset().offset_mhz == 500.0
    assert gpu.set_mem_clock_offset(0).accepted
    assert gpu.mem_clock_offset().offset_mhz == 0.0
    assert gpu.sm_clock_offset().offset_mhz == 0.0


def test_the_old_range_read_of_the_memory_clock_is_its_own() -> None:
    _, clocks = _mem_offset_clocks("older", mem_offset_range_mhz=(-1000, 3000))
    offset = clocks.mem_clock_offset()
    assert (offset.min_mhz, offset.max_mhz) == (-1000.0, 3000.0)
    assert (clocks.sm_clock_offset().min_mhz, clocks.sm_clock_offset().max_mhz) == (-200.0, 1000.0)
