"""The SM clock's offset on the voltage/frequency curve (issues 36 and 45) through NVML
(``sweep/gpu/nvidia/nvml_offsets.py``, handed on by ``NvmlClocks`` and ``NvmlGpu``), against the
fake pynvml: the current ``nvmlDevice{Get,Set}ClockOffsets`` through the function-pointer lookup
with the return code checked, per pstate (P0 and P2), the older ``...GpcClkVfOffset`` calls where
the driver lacks them, the driver's 15 MHz grid and a driver that does not report applied offsets;
and the nvidia-ml-py bindings it relies on (or avoids)."""

from __future__ import annotations

import ctypes
import math
from typing import Any

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.nvidia.nvml_api import NVML_API_USED
from powersweep.sweep.gpu.nvidia.nvml_clocks import NvmlClocks
from powersweep.sweep.gpu.nvidia.nvml_offsets import CLOCK_OFFSET_V1, ClockOffsetV1, NvmlOffsets
from powersweep.sweep.gpu.nvml import NvmlBackend, NvmlGpu
from powersweep.sweep.gpu.protocol import ClockOffset, LockResult
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml

LABEL = "GPU 0 (NVIDIA GeForce RTX 3090)"
SET = "nvmlDeviceSetGpcClkVfOffset"
GET = "nvmlDeviceGetGpcClkVfOffset"
RANGE = "nvmlDeviceGetGpcClkMinMaxVfOffset"
OFFSET_CALLS = (GET, RANGE, SET)
NEW_GET = "nvmlDeviceGetClockOffsets"
NEW_SET = "nvmlDeviceSetClockOffsets"
# The call names each API's tests fail: the current API reads value and range in one call.
CALLS = {
    "current": {"get": NEW_GET, "range": NEW_GET, "set": NEW_SET},
    "older": {"get": GET, "range": RANGE, "set": SET},
}
APIS = pytest.mark.parametrize("api", ["current", "older"])
NOT_SUPPORTED = fake_pynvml.NVML_ERROR_NOT_SUPPORTED
NOT_FOUND = fake_pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
INVALID = fake_pynvml.NVML_ERROR_INVALID_ARGUMENT
TOO_OLD = (
    f"{LABEL} cannot have an SM clock offset: its driver is too old (it has neither "
    "nvmlDevice{Get,Set}ClockOffsets nor the older nvmlDevice{Get,Set}GpcClkVfOffset) "
    "(NVML: Function Not Found)"
)


class _Label:
    """The label callable, counting its calls (messages only need it on a failure)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return LABEL


def _fake(api: str = "current", *, fake: type[FakeNvml] = FakeNvml, **device: Any) -> FakeNvml:
    """A fake driver with one card: the current offset API, or only the older one."""
    nvml = fake([FakeDevice(**device)], clock_offsets_api=api == "current")
    nvml.nvmlInit()
    return nvml


def _offset_clocks(api: str = "current", **device: Any) -> tuple[FakeNvml, NvmlClocks, _Label]:
    fake = _fake(api, **device)
    label = _Label()
    return fake, NvmlClocks(fake, fake.devices[0], label), label


def _offset_gpu(api: str = "current", **device: Any) -> tuple[FakeNvml, NvmlGpu]:
    fake = FakeNvml([FakeDevice(**device)], clock_offsets_api=api == "current")
    return fake, NvmlBackend(nvml=fake).gpu(0)


def _sets(fake: FakeNvml) -> list[tuple[int, int]]:
    """(pstate, MHz) of each current-API set."""
    return [(p, mhz) for name, _, _, _, p, mhz in fake.offset_structs if name == NEW_SET]


# --- reading --------------------------------------------------------------------------------


@APIS
def test_the_offset_and_its_range_are_read_in_mhz(api: str) -> None:
    _, clocks, label = _offset_clocks(
        api, sm_offset_mhz=-75, sm_offset_p2_mhz=-75, sm_offset_range_mhz=(-300, 1500)
    )
    assert clocks.sm_clock_offset() == ClockOffset(True, -75.0, -300.0, 1500.0, "")
    assert label.calls == 0


@APIS
def test_the_default_fake_card_has_no_offset_in_a_minus_200_to_1000_range(api: str) -> None:
    _, gpu = _offset_gpu(api)
    assert gpu.sm_clock_offset() == ClockOffset(True, 0.0, -200.0, 1000.0, "")


def test_the_current_api_reads_p0_and_is_not_the_older_one() -> None:
    fake, clocks, _ = _offset_clocks(sm_offset_mhz=60, sm_offset_p2_mhz=60)
    assert clocks.sm_clock_offset().sm_offset_mhz == 60.0
    assert fake.calls_to(GET) == 0 and fake.calls_to(RANGE) == 0
    pstates = [p for name, _, _, _, p, _ in fake.offset_structs if name == NEW_GET]
    assert pstates == [0, 2]


def test_a_p2_offset_unlike_p0s_is_noted_and_p0s_is_the_one_in_force() -> None:
    _, clocks, _ = _offset_clocks(sm_offset_mhz=120, sm_offset_p2_mhz=0)
    got = clocks.sm_clock_offset()
    assert (got.supported, got.sm_offset_mhz, got.min_mhz) == (True, 120.0, -200.0)
    assert got.message == "P2 has +0 MHz (P0's is shown)"


@pytest.mark.parametrize("refusal", [INVALID, NOT_SUPPORTED])
def test_a_card_without_a_p2_offset_reads_p0s_without_a_note(refusal: int) -> None:
    _, clocks, _ = _offset_clocks(
        sm_offset_mhz=45, sm_offset_p2_mhz=None, sm_offset_p2_refusal=refusal
    )
    assert clocks.sm_clock_offset() == ClockOffset(True, 45.0, -200.0, 1000.0, "")


@APIS
def test_a_card_that_says_not_supported_does_not_support_it(api: str) -> None:
    fake, clocks, _ = _offset_clocks(api, sm_offset_supported=False)
    got = clocks.sm_clock_offset()
    assert not got.supported
    assert (got.sm_offset_mhz, got.min_mhz, got.max_mhz) == (None, None, None)
    assert got.message == f"{LABEL} does not support an SM clock offset (NVML: Not Supported)"
    assert fake.calls_to(RANGE) == 0
    if api == "current":  # the card said no: the older calls are not asked
        assert fake.calls_to(GET) == 0


def test_a_driver_with_neither_api_is_too_old() -> None:
    fake = FakeNvml([FakeDevice()], clock_offsets_api=False, gpc_offset_api=False)
    fake.nvmlInit()
    clocks = NvmlClocks(fake, fake.devices[0], _Label())
    assert clocks.sm_clock_offset() == ClockOffset(False, message=TOO_OLD)
    assert clocks.set_sm_clock_offset(100.0) == LockResult(100.0, False, TOO_OLD)


def test_a_driver_without_the_older_calls_uses_the_current_ones() -> None:
    fake = FakeNvml([FakeDevice(sm_offset_mhz=30, sm_offset_p2_mhz=30)], gpc_offset_api=False)
    fake.nvmlInit()
    clocks = NvmlClocks(fake, fake.devices[0], _Label())
    assert clocks.sm_clock_offset() == ClockOffset(True, 30.0, -200.0, 1000.0, "")
    assert clocks.set_sm_clock_offset(90.0).accepted
    assert fake.calls_to(GET) == 0 and fake.calls_to(SET) == 0


def test_a_driver_without_the_current_calls_falls_back_to_the_older_ones() -> None:
    fake, clocks, _ = _offset_clocks("older", sm_offset_mhz=-30)
    assert clocks.sm_clock_offset() == ClockOffset(True, -30.0, -200.0, 1000.0, "")
    assert fake.calls_to(GET) == 1 and fake.offset_structs == []
    result = clocks.set_sm_clock_offset(200.0)
    assert result == LockResult(200.0, True, "", applied_mhz=200.0)
    assert fake.calls_to(SET) == 1 and fake.calls_to(NEW_SET) == 0
    # the older set is the offset of every pstate
    assert (fake.devices[0].sm_offset_mhz, fake.devices[0].sm_offset_p2_mhz) == (200, 200)


def test_a_driver_that_knows_no_version_1_struct_falls_back_to_the_older_calls() -> None:
    mismatch = fake_pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    fake, clocks, _ = _offset_clocks(fail={NEW_GET: mismatch, NEW_SET: mismatch}, sm_offset_mhz=15)
    assert clocks.sm_clock_offset().sm_offset_mhz == 15.0
    assert clocks.set_sm_clock_offset(75.0).accepted
    assert fake.calls_to(SET) == 1 and fake.devices[0].sm_offset_mhz == 75


@APIS
def test_a_failed_read_is_supported_with_no_value_and_the_cause(api: str) -> None:
    _, clocks, _ = _offset_clocks(api, fail={CALLS[api]["get"]: fake_pynvml.NVML_ERROR_UNKNOWN})
    got = clocks.sm_clock_offset()
    assert got.supported and got.sm_offset_mhz is None
    # the older API reads the range in a call of its own; the current one in the same call
    assert (got.min_mhz, got.max_mhz) == ((-200.0, 1000.0) if api == "older" else (None, None))
    assert got.message == f"cannot read the SM clock offset of {LABEL} (NVML: Unknown Error)"


def test_a_failed_range_read_leaves_the_range_unknown_and_says_why() -> None:
    lost = fake_pynvml.NVML_ERROR_GPU_IS_LOST
    _, clocks, _ = _offset_clocks("older", sm_offset_mhz=50, fail={RANGE: lost})
    got = clocks.sm_clock_offset()
    assert (got.supported, got.sm_offset_mhz, got.min_mhz, got.max_mhz) == (True, 50.0, None, None)
    assert got.message == f"cannot read the SM clock offset range of {LABEL} (NVML: GPU is lost)"


def test_both_reads_failing_say_both_on_one_line() -> None:
    lost = fake_pynvml.NVML_ERROR_GPU_IS_LOST
    _, clocks, _ = _offset_clocks("older", fail={GET: lost, RANGE: lost})
    got = clocks.sm_clock_offset()
    assert got.supported and got.sm_offset_mhz is None and got.min_mhz is None
    assert "offset of" in got.message and "offset range of" in got.message
    assert "\n" not in got.message


def test_an_unsupported_range_alone_is_an_unknown_range_without_a_message() -> None:
    _, clocks, _ = _offset_clocks("older", fail={RANGE: NOT_SUPPORTED})
    assert clocks.sm_clock_offset() == ClockOffset(True, 0.0, None, None, "")


@APIS
def test_a_range_with_min_above_max_is_unknown(api: str) -> None:
    _, clocks, _ = _offset_clocks(api, sm_offset_range_mhz=(500, -500))
    got = clocks.sm_clock_offset()
    assert (got.min_mhz, got.max_mhz) == (None, None)
    assert got.message == f"{LABEL} reports a 500 to -500 MHz SM clock offset range"


# --- setting --------------------------------------------------------------------------------


@APIS
def test_an_offset_in_range_is_set_in_whole_mhz_and_read_back(api: str) -> None:
    fake, clocks, label = _offset_clocks(api)
    result = clocks.set_sm_clock_offset(150.4)
    assert result == LockResult(150.4, True, "", applied_mhz=150.0, verified=True)
    assert (fake.devices[0].sm_offset_mhz, fake.devices[0].sm_offset_p2_mhz) == (150, 150)
    assert clocks.sm_clock_offset().sm_offset_mhz == 150.0
    assert label.calls == 0


def test_the_current_api_sets_p0_then_p2_with_a_version_1_struct_and_reads_each_back() -> None:
    fake, clocks, _ = _offset_clocks()
    assert clocks.set_sm_clock_offset(105.0).accepted
    assert _sets(fake) == [(0, 105), (2, 105)]
    reads = [p for name, _, _, _, p, _ in fake.offset_structs if name == NEW_GET]
    assert reads == [0, 0, 2]  # P0's range first, then the read-back of each pstate set
    assert {(v, t) for _, _, v, t, _, _ in fake.offset_structs} == {
        (0x1000018, fake_pynvml.NVML_CLOCK_GRAPHICS)
    }


@pytest.mark.parametrize("refusal", [INVALID, NOT_SUPPORTED])
def test_a_p2_the_driver_refuses_is_skipped_and_said(refusal: int) -> None:
    fake, clocks, _ = _offset_clocks(sm_offset_p2_mhz=None, sm_offset_p2_refusal=refusal)
    result = clocks.set_sm_clock_offset(60.0)
    error = fake_pynvml.make_error(refusal)
    assert result == LockResult(
        60.0, True, f"P2 refused it (NVML: {error}): set in P0 only", applied_mhz=60.0
    )
    assert fake.devices[0].sm_offset_mhz == 60


def test_a_p2_failing_otherwise_is_a_gpu_error() -> None:
    class P2Lost(FakeNvml):
        def _clock_offsets(self, name: str, handle: Any, info: Any) -> None:
            if name == NEW_SET and info.pstate == 2:
                raise fake_pynvml.NVMLError_GpuIsLost()
            super()._clock_offsets(name, handle, info)

    fake = _fake(fake=P2Lost)
    clocks = NvmlClocks(fake, fake.devices[0], _Label())
    with pytest.raises(GpuError, match=r"^setting the SM clock offset of .* failed: GPU is lost$"):
        clocks.set_sm_clock_offset(60.0)


def test_p2_without_permission_is_the_needs_root_error() -> None:
    class P2Denied(FakeNvml):
        def _clock_offsets(self, name: str, handle: Any, info: Any) -> None:
            if name == NEW_SET and info.pstate == 2:
                raise fake_pynvml.NVMLError_NoPermission()
            super()._clock_offsets(name, handle, info)

    fake = _fake(fake=P2Denied)
    with pytest.raises(GpuError, match=r"needs root: re-run with sudo \(NVML: Insufficient"):
        NvmlClocks(fake, fake.devices[0], _Label()).set_sm_clock_offset(60.0)


def test_a_p2_read_back_that_fails_is_said_and_leaves_the_set_unverified() -> None:
    class P2Unreadable(FakeNvml):
        def _clock_offsets(self, name: str, handle: Any, info: Any) -> None:
            if name == NEW_GET and info.pstate == 2:
                raise fake_pynvml.NVMLError_Unknown()
            super()._clock_offsets(name, handle, info)

    fake = _fake(fake=P2Unreadable)
    result = NvmlClocks(fake, fake.devices[0], _Label()).set_sm_clock_offset(60.0)
    assert result == LockResult(
        60.0,
        True,
        "P2's could not be read back (NVML: Unknown Error)",
        applied_mhz=60.0,
        verified=False,
    )


def test_a_linked_card_takes_p0s_offset_in_p2_too() -> None:
    fake, clocks, _ = _offset_clocks(sm_offset_linked=True, sm_offset_p2_mhz=0)
    fake.devices[0].put_offset([0], 45)  # the fake's model: one set moves both
    assert fake.devices[0].sm_offset_p2_mhz == 45
    assert clocks.set_sm_clock_offset(90.0) == LockResult(90.0, True, "", applied_mhz=90.0)
    assert (fake.devices[0].sm_offset_mhz, fake.devices[0].sm_offset_p2_mhz) == (90, 90)
    assert clocks.sm_clock_offset() == ClockOffset(True, 90.0, -200.0, 1000.0, "")


def test_a_p2_that_keeps_another_offset_is_not_accepted() -> None:
    class P2Stuck(FakeNvml):
        def _clock_offsets(self, name: str, handle: Any, info: Any) -> None:
            if name != NEW_SET or info.pstate != 2:  # P2 says yes and keeps what it had
                super()._clock_offsets(name, handle, info)

    fake = _fake(fake=P2Stuck, sm_offset_p2_mhz=-60)
    result = NvmlClocks(fake, fake.devices[0], _Label()).set_sm_clock_offset(120.0)
    assert result == LockResult(
        120.0, False, f"{LABEL} kept a -60 MHz SM clock offset in P2 when 120 MHz was set"
    )


@APIS
@pytest.mark.parametrize("mhz", [-200.0, 1000.0, 1000.4, -200.49])
def test_the_range_ends_are_accepted(api: str, mhz: float) -> None:
    fake, clocks, _ = _offset_clocks(api)
    assert clocks.set_sm_clock_offset(mhz).accepted
    assert fake.devices[0].sm_offset_mhz == round(mhz)


@APIS
@pytest.mark.parametrize(("mhz", "shown"), [(1001.0, "1001"), (-250.5, "-250.5"), (5000.0, "5000")])
def test_an_offset_outside_the_range_is_refused_without_setting(
    api: str, mhz: float, shown: str
) -> None:
    fake, clocks, _ = _offset_clocks(api, sm_offset_mhz=100)
    result = clocks.set_sm_clock_offset(mhz)
    assert not result.accepted
    assert result.message == (
        f"{LABEL} accepts SM clock offsets from -200 to 1000 MHz, not {shown} MHz"
    )
    assert fake.calls_to(CALLS[api]["set"]) == 0
    assert fake.devices[0].sm_offset_mhz == 100


class _UpsideDownRange(FakeNvml):
    """A driver whose current read reports min above max (it still checks its real range)."""

    def _clock_offsets(self, name: str, handle: Any, info: Any) -> None:
        super()._clock_offsets(name, handle, info)
        if name == NEW_GET:
            info.minClockOffsetMHz, info.maxClockOffsetMHz = 1000, -200


@APIS
def test_with_the_range_unknown_the_driver_decides(api: str) -> None:
    if api == "older":
        fake, clocks, _ = _offset_clocks(api, fail={RANGE: fake_pynvml.NVML_ERROR_UNKNOWN})
    else:
        fake = _fake(fake=_UpsideDownRange)
        clocks = NvmlClocks(fake, fake.devices[0], _Label())
    assert clocks.sm_clock_offset().min_mhz is None
    assert clocks.set_sm_clock_offset(300.0).accepted
    refused = clocks.set_sm_clock_offset(1200.0)  # the fake driver's range still applies
    assert refused == LockResult(
        1200.0,
        False,
        f"{LABEL} rejected a 1200 MHz SM clock offset as invalid (NVML: Invalid Argument)",
    )
    assert fake.calls_to(CALLS[api]["set"]) == (3 if api == "current" else 2)
    assert fake.devices[0].sm_offset_mhz == 300


@APIS
@pytest.mark.parametrize("mhz", [math.nan, math.inf, -math.inf, 60_000.0, -60_000.0])
def test_an_offset_that_is_not_a_sane_number_is_a_usage_error(api: str, mhz: float) -> None:
    fake, clocks, _ = _offset_clocks(api)
    with pytest.raises(UsageError, match="clock offset must be a number of MHz"):
        clocks.set_sm_clock_offset(mhz)
    assert fake.calls_to(CALLS[api]["set"]) == 0 and fake.offset_structs == []


@APIS
def test_setting_without_root_is_a_one_line_gpu_error_asking_for_sudo(api: str) -> None:
    fake, gpu = _offset_gpu(api, fail={CALLS[api]["set"]: fake_pynvml.NVML_ERROR_NO_PERMISSION})
    with pytest.raises(GpuError) as info:
        gpu.set_sm_clock_offset(100.0)
    assert str(info.value) == (
        f"setting the SM clock offset of {LABEL} needs root: re-run with sudo "
        "(NVML: Insufficient Permissions)"
    )
    assert fake.devices[0].sm_offset_mhz == 0


@APIS
def test_another_driver_failure_is_a_gpu_error(api: str) -> None:
    _, clocks, _ = _offset_clocks(api, fail={CALLS[api]["set"]: fake_pynvml.NVML_ERROR_GPU_IS_LOST})
    with pytest.raises(
        GpuError, match=r"^setting the SM clock offset of .* to 100 MHz failed: GPU"
    ):
        clocks.set_sm_clock_offset(100.0)


@APIS
def test_a_set_the_card_does_not_support_is_refused_not_set(api: str) -> None:
    fake, clocks, _ = _offset_clocks(api, fail={CALLS[api]["set"]: NOT_SUPPORTED})
    result = clocks.set_sm_clock_offset(100.0)
    assert result == LockResult(
        100.0, False, f"{LABEL} does not support an SM clock offset (NVML: Not Supported)"
    )
    assert fake.devices[0].sm_offset_mhz == 0
    if api == "current":  # not reported as set, and no fall-back: the card said no
        assert fake.calls_to(SET) == 0


def test_an_invalid_set_through_the_current_call_is_refused() -> None:
    fake, clocks, _ = _offset_clocks(fail={NEW_SET: INVALID})
    assert clocks.set_sm_clock_offset(100.0) == LockResult(
        100.0,
        False,
        f"{LABEL} rejected a 100 MHz SM clock offset as invalid (NVML: Invalid Argument)",
    )
    assert fake.calls_to(NEW_SET) == 1 and fake.devices[0].sm_offset_mhz == 0


def test_a_set_without_the_older_call_and_without_the_current_one_is_too_old() -> None:
    _, clocks, _ = _offset_clocks("older", fail={SET: NOT_FOUND})
    assert clocks.set_sm_clock_offset(100.0) == LockResult(100.0, False, TOO_OLD)


@APIS
def test_a_read_back_that_differs_is_not_accepted(api: str) -> None:
    fake, clocks, _ = _offset_clocks(
        api, sm_offset_mhz=25, sm_offset_p2_mhz=25, sm_offset_applies=False
    )
    result = clocks.set_sm_clock_offset(200.0)
    where = " in P0" if api == "current" else ""
    assert result == LockResult(
        200.0, False, f"{LABEL} kept a 25 MHz SM clock offset{where} when 200 MHz was set"
    )
    assert fake.calls_to(CALLS[api]["set"]) == (2 if api == "current" else 1)


@APIS
def test_a_read_back_that_fails_is_not_accepted(api: str) -> None:
    fake, clocks, _ = _offset_clocks(api, fail={CALLS[api]["get"]: fake_pynvml.NVML_ERROR_UNKNOWN})
    result = clocks.set_sm_clock_offset(200.0)
    assert result == LockResult(
        200.0,
        False,
        f"{LABEL} took a 200 MHz SM clock offset but it could not be read back "
        "(NVML: Unknown Error)",
    )
    assert fake.devices[0].sm_offset_mhz == 200


@APIS
def test_setting_0_puts_the_curve_back(api: str) -> None:
    fake, gpu = _offset_gpu(api, sm_offset_mhz=-120, sm_offset_p2_mhz=-120)
    original = gpu.sm_clock_offset().sm_offset_mhz
    assert gpu.set_sm_clock_offset(250.0).accepted
    assert gpu.sm_clock_offset().sm_offset_mhz == 250.0
    assert gpu.set_sm_clock_offset(0.0).accepted
    assert fake.devices[0].sm_offset_mhz == 0
    assert original is not None and gpu.set_sm_clock_offset(original).accepted
    assert fake.devices[0].sm_offset_mhz == -120


# --- the driver's grid, and a driver that does not report ----------------------------------


@APIS
@pytest.mark.parametrize(("mhz", "applied"), [(100.0, 90), (-100.0, -90), (134.0, 120)])
def test_an_offset_the_driver_rounds_to_its_15_mhz_grid_is_accepted_as_applied(
    api: str, mhz: float, applied: int
) -> None:
    fake, clocks, _ = _offset_clocks(api, sm_offset_grid_mhz=15)
    result = clocks.set_sm_clock_offset(mhz)
    assert result == LockResult(
        mhz, True, f"applied as {applied:+d} MHz (the driver's rounding)", applied_mhz=applied
    )
    assert fake.devices[0].sm_offset_mhz == applied


@pytest.mark.parametrize(("kept", "accepted"), [(25, False), (26, True), (54, True), (55, False)])
def test_a_read_back_within_one_grid_step_is_the_request(kept: int, accepted: bool) -> None:
    _, clocks, _ = _offset_clocks(
        sm_offset_mhz=kept, sm_offset_p2_mhz=kept, sm_offset_applies=False
    )
    assert clocks.set_sm_clock_offset(40.0).accepted is accepted  # |kept - 40| < 15


@APIS
def test_a_driver_that_reads_0_back_is_accepted_unverified(api: str) -> None:
    fake, gpu = _offset_gpu(api, sm_offset_reported=False)
    result = gpu.set_sm_clock_offset(150.0)
    where = " in P0 and in P2" if api == "current" else ""
    assert result == LockResult(
        150.0,
        True,
        f"{LABEL} took a +150 MHz SM clock offset but reads back 0 MHz{where}: applied, not "
        "reported by this driver (unverified)",
        applied_mhz=None,
        verified=False,
    )
    assert fake.devices[0].sm_offset_mhz == 150  # it is there, the driver just does not say
    # From then on a 0 it reads proves nothing: the offset in force is unknown, and a set of 0
    # (putting the curve back) is not verified either.
    got = gpu.sm_clock_offset()
    assert got.supported and got.sm_offset_mhz is None
    assert got.message.endswith("does not report applied offsets: the one in force is unknown")
    back = gpu.set_sm_clock_offset(0.0)
    assert back.accepted and not back.verified and back.applied_mhz is None


def test_a_small_offset_read_back_as_0_is_the_grid_not_a_silent_driver() -> None:
    _, clocks, _ = _offset_clocks(sm_offset_grid_mhz=15)
    assert clocks.set_sm_clock_offset(10.0) == LockResult(
        10.0, True, "applied as +0 MHz (the driver's rounding)", applied_mhz=0.0
    )


def test_a_p2_the_driver_refuses_and_a_silent_read_back_are_both_said_on_one_line() -> None:
    _, clocks, _ = _offset_clocks(sm_offset_reported=False, sm_offset_p2_mhz=None)
    result = clocks.set_sm_clock_offset(75.0)
    assert result.accepted and not result.verified
    assert "reads back 0 MHz in P0: applied" in result.message
    assert result.message.endswith("P2 refused it (NVML: Invalid Argument): set in P0 only")
    assert "\n" not in result.message


# --- the fake ---------------------------------------------------------------------------------


def test_the_fake_switch_makes_every_offset_call_unsupported() -> None:
    fake, gpu = _offset_gpu(sm_offset_supported=False)
    assert not gpu.sm_clock_offset().supported
    result = gpu.set_sm_clock_offset(100.0)
    assert not result.accepted and "does not support an SM clock offset" in result.message
    assert "\n" not in result.message
    for name in OFFSET_CALLS:
        with pytest.raises(fake_pynvml.NVMLError_NotSupported):
            getattr(fake, name)(fake.devices[0], *([0] if name == SET else []))
    for name in (NEW_GET, NEW_SET):
        info = ClockOffsetV1(CLOCK_OFFSET_V1, fake_pynvml.NVML_CLOCK_GRAPHICS, 0, 0)
        assert fake._nvmlGetFunctionPointer(name)(fake.devices[0], ctypes.pointer(info)) == (
            NOT_SUPPORTED
        )


def test_the_fakes_current_calls_check_the_struct_version_and_return_codes() -> None:
    fake = _fake()
    get = fake._nvmlGetFunctionPointer(NEW_GET)
    info = ClockOffsetV1(CLOCK_OFFSET_V1 + 1, fake_pynvml.NVML_CLOCK_GRAPHICS, 0, 0)
    assert get(fake.devices[0], ctypes.pointer(info)) == 25  # ARGUMENT_VERSION_MISMATCH
    info = ClockOffsetV1(CLOCK_OFFSET_V1, fake_pynvml.NVML_CLOCK_GRAPHICS, 5, 0)
    assert get(fake.devices[0], ctypes.pointer(info)) == INVALID  # a pstate without an offset
    older = FakeNvml(clock_offsets_api=False)
    older.nvmlInit()
    with pytest.raises(fake_pynvml.NVMLError_FunctionNotFound):
        older._nvmlGetFunctionPointer(NEW_SET)


def test_the_fakes_nvml_error_maps_a_code_to_its_class_as_pynvml_does() -> None:
    import pynvml

    for module in (pynvml, FakeNvml()):
        error = module.NVMLError(fake_pynvml.NVML_ERROR_NO_PERMISSION)
        assert isinstance(error, module.NVMLError_NoPermission)
        assert error.value == fake_pynvml.NVML_ERROR_NO_PERMISSION


# --- the bindings -----------------------------------------------------------------------------


def test_the_offset_calls_are_in_the_api_list_and_the_unchecked_ones_are_not() -> None:
    import pynvml

    names = (*OFFSET_CALLS, "_nvmlGetFunctionPointer", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH")
    assert set(names) <= set(NVML_API_USED)
    assert all(hasattr(pynvml, name) and hasattr(FakeNvml(), name) for name in names)
    # the current calls are reached through the lookup, never through their bindings
    assert NEW_GET not in NVML_API_USED and NEW_SET not in NVML_API_USED


def test_the_struct_is_nvidia_ml_pys_and_its_version_is_nvml_struct_version_1() -> None:
    import pynvml

    assert CLOCK_OFFSET_V1 == 0x1000018 == ctypes.sizeof(ClockOffsetV1) | 1 << 24
    assert fake_pynvml.nvmlClockOffset_v1 == CLOCK_OFFSET_V1
    if not hasattr(pynvml, "c_nvmlClockOffset_t"):
        pytest.skip("this nvidia-ml-py predates nvmlClockOffset_t")
    assert pynvml.nvmlClockOffset_v1 == CLOCK_OFFSET_V1
    theirs = [(n, ctypes.sizeof(t)) for n, t in pynvml.c_nvmlClockOffset_t._fields_]
    assert [(n, ctypes.sizeof(t)) for n, t in ClockOffsetV1._fields_] == theirs
    assert ctypes.sizeof(pynvml.c_nvmlClockOffset_t) == ctypes.sizeof(ClockOffsetV1)


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


# --- the current calls against the real pynvml, its lookup stubbed ------------------------------


class _Driver:
    """The current offset calls as C functions: record each struct, answer ``ret``, and fill in
    a read."""

    def __init__(self, ret: int, offset: int = 0) -> None:
        self.ret = ret
        self.offset = offset
        self.seen: list[tuple[str, int, int, int, int]] = []

    def lookup(self, name: str) -> Any:
        def fn(handle: Any, info: Any) -> int:
            s = info.contents
            self.seen.append((name, s.version, s.type, s.pstate, s.clockOffsetMHz))
            if name == NEW_GET:
                s.clockOffsetMHz, s.minClockOffsetMHz, s.maxClockOffsetMHz = self.offset, -200, 1000
            return self.ret

        return fn


def _real(monkeypatch: pytest.MonkeyPatch, driver: _Driver) -> NvmlOffsets:
    import pynvml

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", driver.lookup)
    return NvmlOffsets(pynvml, None, lambda: LABEL)


def test_with_the_real_pynvml_a_set_the_driver_refuses_is_refused_not_reported_as_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pynvml

    driver = _Driver(pynvml.NVML_ERROR_NOT_SUPPORTED)
    result = _real(monkeypatch, driver).set(100.0)
    assert result == LockResult(
        100.0, False, f"{LABEL} does not support an SM clock offset (NVML: Not Supported)"
    )
    assert driver.seen[-1] == (NEW_SET, 0x1000018, pynvml.NVML_CLOCK_GRAPHICS, 0, 100)
    driver.ret = pynvml.NVML_ERROR_NO_PERMISSION
    with pytest.raises(GpuError, match="needs root: re-run with sudo"):
        _real(monkeypatch, driver).set(100.0)


def test_with_the_real_pynvml_a_set_the_driver_takes_is_read_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pynvml

    driver = _Driver(pynvml.NVML_SUCCESS, offset=135)
    result = _real(monkeypatch, driver).set(140.0)
    assert result == LockResult(
        140.0, True, "applied as +135 MHz (the driver's rounding)", applied_mhz=135.0
    )
    assert [(n, p) for n, _, _, p, _ in driver.seen] == [
        (NEW_GET, 0),
        (NEW_SET, 0),
        (NEW_SET, 2),
        (NEW_GET, 0),
        (NEW_GET, 2),
    ]


def test_with_the_real_pynvml_a_driver_with_neither_api_is_too_old(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pynvml

    def missing(name: str) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", missing)
    offsets = NvmlOffsets(pynvml, None, lambda: LABEL)
    assert offsets.read() == ClockOffset(False, message=TOO_OLD)
    assert offsets.set(50.0) == LockResult(50.0, False, TOO_OLD)
