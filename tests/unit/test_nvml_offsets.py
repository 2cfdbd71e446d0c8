"""The SM clock's offset on the voltage/frequency curve (issue 36) through NVML
(``sweep/gpu/nvidia/nvml_clocks.py``, handed on by ``NvmlGpu``), against the fake pynvml, and the
nvidia-ml-py bindings it relies on (they raise on a failed call; the newer ones do not)."""

from __future__ import annotations

import ctypes
import math
from typing import Any

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.nvidia.nvml_api import NVML_API_USED
from powersweep.sweep.gpu.nvidia.nvml_clocks import NvmlClocks
from powersweep.sweep.gpu.nvml import NvmlBackend, NvmlGpu
from powersweep.sweep.gpu.protocol import ClockOffset
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml

LABEL = "GPU 0 (NVIDIA GeForce RTX 3090)"
SET = "nvmlDeviceSetGpcClkVfOffset"
GET = "nvmlDeviceGetGpcClkVfOffset"
RANGE = "nvmlDeviceGetGpcClkMinMaxVfOffset"
OFFSET_CALLS = (GET, RANGE, SET)


class _Label:
    """The label callable, counting its calls (messages only need it on a failure)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return LABEL


def _clocks(**device: Any) -> tuple[FakeNvml, NvmlClocks, _Label]:
    fake = FakeNvml([FakeDevice(**device)])
    fake.nvmlInit()
    label = _Label()
    return fake, NvmlClocks(fake, fake.devices[0], label), label


def _gpu(**device: Any) -> tuple[FakeNvml, NvmlGpu]:
    fake = FakeNvml([FakeDevice(**device)])
    return fake, NvmlBackend(nvml=fake).gpu(0)


# --- reading --------------------------------------------------------------------------------


def test_the_offset_and_its_range_are_read_in_mhz() -> None:
    _, clocks, label = _clocks(sm_offset_mhz=-75, sm_offset_range_mhz=(-300, 1500))
    assert clocks.sm_clock_offset() == ClockOffset(True, -75.0, -300.0, 1500.0, "")
    assert label.calls == 0


def test_the_default_fake_card_has_no_offset_in_a_minus_200_to_1000_range() -> None:
    _, gpu = _gpu()
    assert gpu.sm_clock_offset() == ClockOffset(True, 0.0, -200.0, 1000.0, "")


@pytest.mark.parametrize(
    "code", [fake_pynvml.NVML_ERROR_NOT_SUPPORTED, fake_pynvml.NVML_ERROR_FUNCTION_NOT_FOUND]
)
def test_a_card_or_driver_without_the_offset_is_unsupported_with_the_reason(code: int) -> None:
    fake, clocks, _ = _clocks(fail={GET: code})
    got = clocks.sm_clock_offset()
    assert not got.supported
    assert (got.sm_offset_mhz, got.min_mhz, got.max_mhz) == (None, None, None)
    assert got.message == (
        f"{LABEL} does not support an SM clock offset (NVML: {fake_pynvml.make_error(code)}): "
        "the driver is too old or the card does not allow it"
    )
    assert fake.calls_to(RANGE) == 0


def test_the_fake_switch_makes_every_offset_call_unsupported() -> None:
    fake, gpu = _gpu(sm_offset_supported=False)
    assert not gpu.sm_clock_offset().supported
    result = gpu.set_sm_clock_offset(100.0)
    assert not result.accepted and "does not support an SM clock offset" in result.message
    assert "\n" not in result.message
    for name in OFFSET_CALLS:
        with pytest.raises(fake_pynvml.NVMLError_NotSupported):
            getattr(fake, name)(fake.devices[0], *([0] if name == SET else []))


def test_a_failed_read_is_supported_with_no_value_and_the_cause() -> None:
    _, clocks, _ = _clocks(fail={GET: fake_pynvml.NVML_ERROR_UNKNOWN})
    got = clocks.sm_clock_offset()
    assert got.supported and got.sm_offset_mhz is None
    assert (got.min_mhz, got.max_mhz) == (-200.0, 1000.0)
    assert got.message == f"cannot read the SM clock offset of {LABEL} (NVML: Unknown Error)"


def test_a_failed_range_read_leaves_the_range_unknown_and_says_why() -> None:
    _, clocks, _ = _clocks(sm_offset_mhz=50, fail={RANGE: fake_pynvml.NVML_ERROR_GPU_IS_LOST})
    got = clocks.sm_clock_offset()
    assert (got.supported, got.sm_offset_mhz, got.min_mhz, got.max_mhz) == (True, 50.0, None, None)
    assert got.message == f"cannot read the SM clock offset range of {LABEL} (NVML: GPU is lost)"


def test_both_reads_failing_say_both_on_one_line() -> None:
    lost = fake_pynvml.NVML_ERROR_GPU_IS_LOST
    _, clocks, _ = _clocks(fail={GET: lost, RANGE: lost})
    got = clocks.sm_clock_offset()
    assert got.supported and got.sm_offset_mhz is None and got.min_mhz is None
    assert "offset of" in got.message and "offset range of" in got.message
    assert "\n" not in got.message


def test_an_unsupported_range_alone_is_an_unknown_range_without_a_message() -> None:
    _, clocks, _ = _clocks(fail={RANGE: fake_pynvml.NVML_ERROR_NOT_SUPPORTED})
    assert clocks.sm_clock_offset() == ClockOffset(True, 0.0, None, None, "")


def test_a_range_with_min_above_max_is_unknown() -> None:
    _, clocks, _ = _clocks(sm_offset_range_mhz=(500, -500))
    got = clocks.sm_clock_offset()
    assert (got.min_mhz, got.max_mhz) == (None, None)
    assert got.message == f"{LABEL} reports a 500 to -500 MHz SM clock offset range"


# --- setting --------------------------------------------------------------------------------


def test_an_offset_in_range_is_set_in_whole_mhz_and_read_back() -> None:
    fake, clocks, label = _clocks()
    result = clocks.set_sm_clock_offset(150.4)
    assert (result.requested_mhz, result.accepted, result.message) == (150.4, True, "")
    assert fake.devices[0].sm_offset_mhz == 150
    assert clocks.sm_clock_offset().sm_offset_mhz == 150.0
    assert fake.calls_to(GET) == 2  # the read-back, then the read above
    assert label.calls == 0


@pytest.mark.parametrize("mhz", [-200.0, 1000.0, 1000.4, -200.49])
def test_the_range_ends_are_accepted(mhz: float) -> None:
    fake, clocks, _ = _clocks()
    assert clocks.set_sm_clock_offset(mhz).accepted
    assert fake.devices[0].sm_offset_mhz == round(mhz)


@pytest.mark.parametrize(("mhz", "shown"), [(1001.0, "1001"), (-250.5, "-250.5"), (5000.0, "5000")])
def test_an_offset_outside_the_range_is_refused_without_setting(mhz: float, shown: str) -> None:
    fake, clocks, _ = _clocks(sm_offset_mhz=100)
    result = clocks.set_sm_clock_offset(mhz)
    assert not result.accepted
    assert result.message == (
        f"{LABEL} accepts SM clock offsets from -200 to 1000 MHz, not {shown} MHz"
    )
    assert fake.calls_to(SET) == 0
    assert fake.devices[0].sm_offset_mhz == 100


def test_with_the_range_unknown_the_driver_decides() -> None:
    fake, clocks, _ = _clocks(fail={RANGE: fake_pynvml.NVML_ERROR_UNKNOWN})
    assert clocks.set_sm_clock_offset(300.0).accepted
    refused = clocks.set_sm_clock_offset(1200.0)  # the fake driver's range still applies
    assert not refused.accepted
    assert refused.message == (
        f"{LABEL} rejected a 1200 MHz SM clock offset as invalid (NVML: Invalid Argument)"
    )
    assert fake.calls_to(SET) == 2 and fake.devices[0].sm_offset_mhz == 300


@pytest.mark.parametrize("mhz", [math.nan, math.inf, -math.inf, 60_000.0, -60_000.0])
def test_an_offset_that_is_not_a_sane_number_is_a_usage_error(mhz: float) -> None:
    fake, clocks, _ = _clocks(fail={RANGE: fake_pynvml.NVML_ERROR_NOT_SUPPORTED})
    with pytest.raises(UsageError, match="clock offset must be a number of MHz"):
        clocks.set_sm_clock_offset(mhz)
    assert fake.calls_to(SET) == 0


def test_setting_without_root_is_a_one_line_gpu_error_asking_for_sudo() -> None:
    fake, gpu = _gpu(fail={SET: fake_pynvml.NVML_ERROR_NO_PERMISSION})
    with pytest.raises(GpuError) as info:
        gpu.set_sm_clock_offset(100.0)
    assert str(info.value) == (
        f"setting the SM clock offset of {LABEL} needs root: re-run with sudo "
        "(NVML: Insufficient Permissions)"
    )
    assert fake.devices[0].sm_offset_mhz == 0


def test_another_driver_failure_is_a_gpu_error() -> None:
    _, clocks, _ = _clocks(fail={SET: fake_pynvml.NVML_ERROR_GPU_IS_LOST})
    with pytest.raises(
        GpuError, match=r"^setting the SM clock offset of .* to 100 MHz failed: GPU"
    ):
        clocks.set_sm_clock_offset(100.0)


@pytest.mark.parametrize(
    "code", [fake_pynvml.NVML_ERROR_NOT_SUPPORTED, fake_pynvml.NVML_ERROR_FUNCTION_NOT_FOUND]
)
def test_a_set_the_driver_does_not_support_is_not_accepted_with_the_reason(code: int) -> None:
    _, clocks, _ = _clocks(fail={SET: code})
    result = clocks.set_sm_clock_offset(100.0)
    assert not result.accepted
    assert result.message.startswith(f"{LABEL} does not support an SM clock offset (NVML: ")
    assert result.message.endswith(": the driver is too old or the card does not allow it")


def test_a_read_back_that_differs_is_not_accepted() -> None:
    fake, clocks, _ = _clocks(sm_offset_mhz=25, sm_offset_applies=False)
    result = clocks.set_sm_clock_offset(200.0)
    assert not result.accepted
    assert result.message == f"{LABEL} kept a 25 MHz SM clock offset when 200 MHz was set"
    assert fake.calls_to(SET) == 1


def test_a_read_back_that_fails_is_not_accepted() -> None:
    fake, clocks, _ = _clocks(fail={GET: fake_pynvml.NVML_ERROR_UNKNOWN})
    result = clocks.set_sm_clock_offset(200.0)
    assert not result.accepted
    assert result.message == (
        f"{LABEL} took a 200 MHz SM clock offset but it could not be read back "
        "(NVML: Unknown Error)"
    )
    assert fake.devices[0].sm_offset_mhz == 200


def test_setting_0_puts_the_curve_back() -> None:
    fake, gpu = _gpu(sm_offset_mhz=-120)
    original = gpu.sm_clock_offset().sm_offset_mhz
    assert gpu.set_sm_clock_offset(250.0).accepted
    assert gpu.sm_clock_offset().sm_offset_mhz == 250.0
    assert gpu.set_sm_clock_offset(0.0).accepted
    assert fake.devices[0].sm_offset_mhz == 0
    assert original is not None and gpu.set_sm_clock_offset(original).accepted
    assert fake.devices[0].sm_offset_mhz == -120


# --- the bindings -----------------------------------------------------------------------------


def test_the_offset_calls_are_in_the_api_list_and_the_unchecked_ones_are_not() -> None:
    import pynvml

    assert set(OFFSET_CALLS) <= set(NVML_API_USED)
    assert all(hasattr(pynvml, name) and hasattr(FakeNvml(), name) for name in OFFSET_CALLS)
    assert "nvmlDeviceGetClockOffsets" not in NVML_API_USED
    assert "nvmlDeviceSetClockOffsets" not in NVML_API_USED


class _Stub:
    """An NVML function pointer: records its arguments, fills the out-parameters, returns
    ``ret``."""

    def __init__(self, ret: int, *outs: int) -> None:
        self.ret = ret
        self.outs = outs
        self.args: tuple[Any, ...] = ()

    def __call__(self, *args: Any) -> int:
        self.args = args
        refs = [a for a in args[1:] if hasattr(a, "_obj")]  # byref(...) out-parameters
        for ref, value in zip(refs, self.outs, strict=False):
            ref._obj.value = value
        return self.ret


def _stub_pynvml(monkeypatch: pytest.MonkeyPatch, stub: _Stub) -> Any:
    import pynvml

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lambda _name: stub)
    return pynvml


def test_the_real_bindings_return_what_the_backend_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml = _stub_pynvml(monkeypatch, stub := _Stub(0, -150))
    assert pynvml.nvmlDeviceGetGpcClkVfOffset(None) == -150
    stub.outs = (-200, 1000)
    assert tuple(pynvml.nvmlDeviceGetGpcClkMinMaxVfOffset(None)) == (-200, 1000)
    pynvml.nvmlDeviceSetGpcClkVfOffset(None, 125)
    assert isinstance(stub.args[1], ctypes.c_int32) and stub.args[1].value == 125


@pytest.mark.parametrize("name", OFFSET_CALLS)
def test_the_real_bindings_raise_the_drivers_error(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    pynvml = _stub_pynvml(monkeypatch, _Stub(fake_pynvml.NVML_ERROR_NOT_SUPPORTED))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        getattr(pynvml, name)(None, *([0] if name == SET else []))


@pytest.mark.parametrize("name", ["nvmlDeviceGetClockOffsets", "nvmlDeviceSetClockOffsets"])
def test_why_not_the_clock_offsets_bindings(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    pynvml = _stub_pynvml(monkeypatch, _Stub(fake_pynvml.NVML_ERROR_NOT_SUPPORTED))
    if not hasattr(pynvml, name):
        pytest.skip(f"this nvidia-ml-py has no {name}")
    try:
        ret = getattr(pynvml, name)(None, None)
    except pynvml.NVMLError:
        pytest.skip(f"this nvidia-ml-py's {name} checks the return code (the comment can go)")
    assert ret == pynvml.NVML_SUCCESS  # the driver said NOT_SUPPORTED; the binding, success
