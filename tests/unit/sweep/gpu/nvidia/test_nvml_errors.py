"""The one place NVML's errors become powersweep's (nvml_errors): the faults of pynvml's error
classes (the fake's and the installed nvidia-ml-py's), a setter's refusals and errors, and the
N/A-tolerant read."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import pytest

from powersweep.errors import GpuError
from powersweep.sweep.gpu.nvidia.nvml_errors import NvmlSetter, fault_of, nvml_read, nvml_set
from powersweep.sweep.gpu.protocol import Fault
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeNvml

CODES: list[tuple[int, Fault]] = [
    (fake_pynvml.NVML_ERROR_NO_PERMISSION, "no_permission"),
    (fake_pynvml.NVML_ERROR_NOT_SUPPORTED, "unsupported"),
    (fake_pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, "unsupported"),
    (fake_pynvml.NVML_ERROR_INVALID_ARGUMENT, "invalid"),
    (fake_pynvml.NVML_ERROR_GPU_IS_LOST, "failed"),
    (fake_pynvml.NVML_ERROR_UNKNOWN, "failed"),
    (fake_pynvml.NVML_ERROR_TIMEOUT, "failed"),
]


def _modules() -> list[Any]:
    mods: list[Any] = [pytest.param(FakeNvml([]), id="fake")]
    if importlib.util.find_spec("pynvml") is not None:
        mods.append(pytest.param(importlib.import_module("pynvml"), id="nvidia-ml-py"))
    return mods


@pytest.mark.parametrize("nvml", _modules())
@pytest.mark.parametrize(("code", "fault"), CODES)
def test_each_nvml_error_class_is_one_fault(nvml: ModuleType, code: int, fault: Fault) -> None:
    # NVMLError(code) is the code's subclass in nvidia-ml-py as in the fake
    assert fault_of(nvml, nvml.NVMLError(code)) == fault


def _setter(**changes: Any) -> NvmlSetter:
    words: dict[str, Any] = dict(
        doing="setting the thing of GPU 0 (Card)",
        target=" to 5 X",
        refuses=frozenset({"invalid"}),
        unsupported=lambda exc: f"GPU 0 (Card) has no thing ({exc})",
        invalid="GPU 0 (Card) rejected 5 X as invalid",
    )
    return NvmlSetter(**(words | changes))


def _raise(code: int) -> Any:
    def call() -> None:
        raise fake_pynvml.make_error(code)

    return call


def test_a_set_that_took_is_no_refusal_and_its_words_are_never_built() -> None:
    def words() -> NvmlSetter:
        raise AssertionError("built without an error")

    assert nvml_set(FakeNvml([]), lambda: None, words) is None


def test_a_refused_fault_comes_back_with_its_message_and_error() -> None:
    refusal = nvml_set(FakeNvml([]), _raise(fake_pynvml.NVML_ERROR_INVALID_ARGUMENT), _setter)
    assert refusal is not None
    assert refusal.fault == "invalid"
    assert refusal.message == "GPU 0 (Card) rejected 5 X as invalid (NVML: Invalid Argument)"
    assert isinstance(refusal.exc, fake_pynvml.NVMLError_InvalidArgument)


@pytest.mark.parametrize(
    ("code", "refuses", "message"),
    [
        (
            fake_pynvml.NVML_ERROR_NO_PERMISSION,
            {"unsupported", "invalid"},
            "setting the thing of GPU 0 (Card) needs root: re-run with sudo (or as root) "
            "(NVML: Insufficient Permissions)",
        ),
        (
            fake_pynvml.NVML_ERROR_NOT_SUPPORTED,
            {"invalid"},
            "GPU 0 (Card) has no thing (Not Supported)",
        ),
        (
            fake_pynvml.NVML_ERROR_INVALID_ARGUMENT,
            set(),  # its words, raised
            "GPU 0 (Card) rejected 5 X as invalid (NVML: Invalid Argument)",
        ),
        (
            fake_pynvml.NVML_ERROR_GPU_IS_LOST,
            {"unsupported", "invalid"},
            "setting the thing of GPU 0 (Card) to 5 X failed: GPU is lost",
        ),
    ],
)
def test_a_fault_not_refused_is_a_gpu_error_in_the_setters_words(
    code: int, refuses: set[Fault], message: str
) -> None:
    def setter() -> NvmlSetter:
        return _setter(refuses=frozenset(refuses), root_hint=" (or as root)")

    with pytest.raises(GpuError) as caught:
        nvml_set(FakeNvml([]), _raise(code), setter)
    assert str(caught.value) == message
    assert isinstance(caught.value.__cause__, fake_pynvml.NVMLError)


def test_a_fault_without_its_own_words_reads_as_a_failure() -> None:
    setter = _setter(refuses=frozenset(), unsupported=None, invalid=None)
    for code, name in [
        (fake_pynvml.NVML_ERROR_NOT_SUPPORTED, "Not Supported"),
        (fake_pynvml.NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"),
    ]:
        with pytest.raises(
            GpuError, match=f"^setting the thing of GPU 0 \\(Card\\) to 5 X failed: {name}$"
        ):
            nvml_set(FakeNvml([]), _raise(code), lambda: setter)


def test_a_tolerant_read_is_its_value_or_none_with_the_fault_told() -> None:
    nvml = FakeNvml([])
    faults: list[Fault] = []
    assert nvml_read(nvml, lambda: 7, faults.append) == 7
    assert nvml_read(nvml, _raise(fake_pynvml.NVML_ERROR_NOT_SUPPORTED), faults.append) is None
    assert nvml_read(nvml, _raise(fake_pynvml.NVML_ERROR_UNKNOWN)) is None
    assert faults == ["unsupported"]
    # anything but an NVML error is a bug, not an N/A
    with pytest.raises(ZeroDivisionError):
        nvml_read(nvml, lambda: 1 / 0)
