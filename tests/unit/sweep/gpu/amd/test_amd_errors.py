"""The one place amdsmi's errors become powersweep's (amdsmi_api): the fault of each status code,
a setter's refusals (none in a VM guest but an invalid value) and errors, and the N/A read."""

from __future__ import annotations

from typing import Any

import pytest

from powersweep.errors import GpuError
from powersweep.sim import amdsmi as fake_module
from powersweep.sim.amdsmi_types import (
    AMDSMI_STATUS_NOT_YET_IMPLEMENTED,
    AMDSMI_STATUS_SETTING_UNAVAILABLE,
)
from powersweep.sweep.gpu.amd.amdsmi_api import AmdSetter, amd_read, amd_set, fault_of
from powersweep.sweep.gpu.protocol import Fault
from tests.fakes.fake_amdsmi import (
    AMDSMI_STATUS_INVAL,
    AMDSMI_STATUS_NO_PERM,
    AMDSMI_STATUS_NOT_SUPPORTED,
    AMDSMI_STATUS_UNKNOWN_ERROR,
    FakeAmdsmi,
)


def _library_error(code: int) -> Exception:
    return fake_module.AmdSmiLibraryException(code)


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        (AMDSMI_STATUS_NO_PERM, "no_permission"),
        (AMDSMI_STATUS_NOT_SUPPORTED, "unsupported"),
        (AMDSMI_STATUS_NOT_YET_IMPLEMENTED, "unsupported"),
        (AMDSMI_STATUS_SETTING_UNAVAILABLE, "unsupported"),
        (AMDSMI_STATUS_INVAL, "invalid"),
        (AMDSMI_STATUS_UNKNOWN_ERROR, "failed"),
    ],
)
def test_each_status_code_is_one_fault(code: int, fault: Fault) -> None:
    assert fault_of(_library_error(code)) == fault


def test_an_error_without_a_status_code_is_a_failure() -> None:
    assert fault_of(fake_module.AmdSmiParameterException(1, str, "bad handle")) == "failed"


def _set(code: int, *, guest: bool) -> Any:
    def call() -> None:
        raise _library_error(code)

    setter = AmdSetter(
        lambda exc: f"error: {fault_of(exc)}",
        lambda: guest,
        refuses=frozenset({"unsupported", "invalid"}),
        unsupported=lambda exc: "cannot",
        invalid=lambda exc: "invalid",
    )
    return amd_set(FakeAmdsmi([]), call, setter)


@pytest.mark.parametrize(
    ("code", "guest", "refused", "error"),
    [
        (AMDSMI_STATUS_NOT_SUPPORTED, False, "cannot", None),
        # a VM guest's host owns the setting: an unsupported set there is an error
        (AMDSMI_STATUS_NOT_SUPPORTED, True, None, "error: unsupported"),
        (AMDSMI_STATUS_INVAL, False, "invalid", None),
        (AMDSMI_STATUS_INVAL, True, "invalid", None),
        (AMDSMI_STATUS_NO_PERM, False, None, "error: no_permission"),
        (AMDSMI_STATUS_UNKNOWN_ERROR, False, None, "error: failed"),
    ],
)
def test_a_setter_refuses_what_it_takes_and_raises_the_rest(
    code: int, guest: bool, refused: str | None, error: str | None
) -> None:
    if error is not None:
        with pytest.raises(GpuError, match=f"^{error}$"):
            _set(code, guest=guest)
        return
    refusal = _set(code, guest=guest)
    assert refusal is not None and refusal.message == refused


def test_a_set_that_took_is_no_refusal() -> None:
    setter = AmdSetter(lambda exc: "error", lambda: False)
    assert amd_set(FakeAmdsmi([]), lambda: None, setter) is None


def test_a_tolerant_read_is_its_value_or_none_with_the_fault_told() -> None:
    smi = FakeAmdsmi([])
    faults: list[Fault] = []

    def fails() -> None:
        raise _library_error(AMDSMI_STATUS_NOT_SUPPORTED)

    assert amd_read(smi, lambda: 3, faults.append) == 3
    assert amd_read(smi, fails, faults.append) is None
    assert faults == ["unsupported"]
    with pytest.raises(KeyError):
        amd_read(smi, lambda: {"a": 1}["x"])
