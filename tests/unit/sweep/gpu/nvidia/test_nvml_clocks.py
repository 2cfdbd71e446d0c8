"""Clock locks of one NVIDIA card (``sweep/gpu/nvidia/nvml_clocks.py``) against the fake pynvml:
the supported clocks in NVML's order, locks as min = max in whole MHz, what a refusal says, and
resets that tolerate a card that never allowed the lock."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.nvidia.nvml_clocks import NvmlClocks
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml

LABEL = "GPU 0 (NVIDIA GeForce RTX 3090)"


class _Label:
    """The label callable, counting its calls (messages only need it on a failure)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return LABEL


def _nvml_clocks(**device: Any) -> tuple[FakeDevice, NvmlClocks, _Label]:
    fake = FakeNvml([FakeDevice(**device)])
    fake.nvmlInit()
    label = _Label()
    return fake.devices[0], NvmlClocks(fake, fake.devices[0], label), label


def test_supported_clocks_are_sorted_descending_whatever_order_nvml_lists() -> None:
    _, clocks, _ = _nvml_clocks(
        supported_mem_mhz=[5001, 9751, 405],
        supported_sm_mhz={5001: [600, 1500, 900], 9751: [2100, 1800], 405: [300]},
    )
    got = clocks.supported_clocks()
    assert got.mem_mhz == (9751.0, 5001.0, 405.0)
    assert got.sm_mhz_by_mem == {
        9751.0: (2100.0, 1800.0),
        5001.0: (1500.0, 900.0, 600.0),
        405.0: (300.0,),
    }


def test_a_card_that_lists_no_memory_clock_asks_for_them_by_hand() -> None:
    _, clocks, _ = _nvml_clocks(supported_mem_mhz=[])
    with pytest.raises(GpuError, match=rf"^{re.escape(LABEL)} lists no supported clocks: give"):
        clocks.supported_clocks()


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (fake_pynvml.NVML_ERROR_NOT_SUPPORTED, "does not list its supported clocks (NVML: Not "),
        (fake_pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, "give --sm-clocks (and --mem-clocks) by hand"),
        (fake_pynvml.NVML_ERROR_UNKNOWN, "cannot list the supported clocks of GPU 0 (NVIDIA"),
    ],
)
def test_a_card_that_cannot_list_its_clocks_says_why(code: int, message: str) -> None:
    _, clocks, _ = _nvml_clocks(fail={"nvmlDeviceGetSupportedGraphicsClocks": code})
    with pytest.raises(GpuError) as info:
        clocks.supported_clocks()
    assert message in str(info.value)


def test_a_lock_is_min_equal_max_in_whole_mhz_and_names_the_request() -> None:
    device, clocks, label = _nvml_clocks()
    result = clocks.lock_sm_clock(1410.4)
    assert (result.requested_mhz, result.accepted, result.message) == (1410.4, True, "")
    assert device.locked_sm == (1410, 1410)
    assert clocks.lock_mem_clock(5000.6).accepted
    assert device.locked_mem == (5001, 5001)
    assert label.calls == 0  # the name is read only for a message


@pytest.mark.parametrize("mhz", [0.0, -5.0, math.nan, math.inf])
def test_a_lock_that_is_not_a_positive_number_is_refused_before_nvml(mhz: float) -> None:
    device, clocks, _ = _nvml_clocks()
    with pytest.raises(UsageError, match="positive number of MHz"):
        clocks.lock_sm_clock(mhz)
    assert device.locked_sm is None


def test_a_refused_memory_lock_is_a_result_with_the_geforce_hint() -> None:
    _, clocks, _ = _nvml_clocks(mem_locks_supported=False, sm_locks_supported=False)
    mem = clocks.lock_mem_clock(9501.0)
    assert not mem.accepted
    assert mem.message == (
        f"{LABEL} does not support memory clock locks (NVML: Not Supported): many GeForce cards "
        "and drivers refuse memory clock locks"
    )
    sm = clocks.lock_sm_clock(1500.0)
    assert not sm.accepted and "the driver is too old or the card does not allow it" in sm.message


def test_an_invalid_lock_is_a_result_and_other_failures_are_errors() -> None:
    device, clocks, _ = _nvml_clocks()
    invalid = clocks.lock_sm_clock(5.0)  # below every listed clock
    assert not invalid.accepted
    assert (
        invalid.message == f"{LABEL} rejected a 5 MHz SM lock as invalid (NVML: Invalid Argument)"
    )
    device.fail["nvmlDeviceSetGpuLockedClocks"] = fake_pynvml.NVML_ERROR_NO_PERMISSION
    with pytest.raises(GpuError, match=r"SM clock of .* needs root: re-run with sudo"):
        clocks.lock_sm_clock(1500.0)
    device.fail["nvmlDeviceSetGpuLockedClocks"] = fake_pynvml.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(GpuError, match=r"at 1500 MHz failed: GPU is lost$"):
        clocks.lock_sm_clock(1500.0)


def test_reset_clears_only_the_locks_asked_for() -> None:
    device, clocks, _ = _nvml_clocks()
    clocks.lock_sm_clock(1500.0)
    clocks.lock_mem_clock(5001.0)
    clocks.reset_clock_locks(sm=True, mem=False)
    assert (device.locked_sm, device.locked_mem) == (None, (5001, 5001))
    clocks.reset_clock_locks(sm=False, mem=False)
    assert device.locked_mem == (5001, 5001)
    clocks.reset_clock_locks()
    assert device.locked_mem is None


def test_a_reset_a_card_does_not_support_is_no_failure() -> None:
    device, clocks, _ = _nvml_clocks(mem_locks_supported=False)
    clocks.lock_sm_clock(1500.0)
    clocks.reset_clock_locks()  # the memory reset answers NOT_SUPPORTED: nothing was locked
    assert device.locked_sm is None


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (fake_pynvml.NVML_ERROR_NO_PERMISSION, "memory clock lock of .* needs root"),
        (fake_pynvml.NVML_ERROR_UNKNOWN, r"memory clock lock of .* failed: Unknown Error$"),
    ],
)
def test_a_reset_the_driver_refuses_is_an_error(code: int, message: str) -> None:
    _, clocks, _ = _nvml_clocks(fail={"nvmlDeviceResetMemoryLockedClocks": code})
    with pytest.raises(GpuError, match=message):
        clocks.reset_clock_locks()
