"""The helpers of the NVIDIA backend (``sweep/gpu/nvidia/nvml_api.py``): loading pynvml, NVML's
strings, its "not available" sentinels, field values by their type, and the API name list."""

from __future__ import annotations

import math
import sys

import pytest

from powersweep.errors import GpuError
from powersweep.sweep.gpu.nvidia import nvml_api
from powersweep.sweep.gpu.nvidia.nvml_api import (
    NOT_AVAILABLE,
    NVML_API_USED,
    available,
    cause,
    field_number,
    load_pynvml,
    or_nan,
    text,
)
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeFieldValue, FakeNvml, FakeValue, make_error


def test_text_decodes_old_bindings_bytes_and_replaces_bad_utf8() -> None:
    assert text(b"NVIDIA GeForce RTX 3090") == "NVIDIA GeForce RTX 3090"
    assert text("575.51.03") == "575.51.03"
    assert text(b"RTX \xff") == "RTX \ufffd"
    assert text(42) == "42"


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (0.0, True),
        (250_000.0, True),
        (0xFFFFFFFE, True),
        (0xFFFFFFFF, False),
        (0xFFFFFFFFFFFFFFFF, False),
        (-1.0, False),
        (math.nan, False),
        (math.inf, False),
    ],
)
def test_available_refuses_sentinels_negatives_and_non_finite(value: float, ok: bool) -> None:
    assert available(value) is ok
    assert set(NOT_AVAILABLE) == {0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF}


@pytest.mark.parametrize(
    ("value_type", "member"),
    [
        (fake_pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal"),
        (fake_pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal"),
        (fake_pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG, "ulVal"),
        (fake_pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal"),
        (fake_pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sllVal"),
        (fake_pynvml.NVML_VALUE_TYPE_SIGNED_INT, "siVal"),
        (fake_pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, "usVal"),
    ],
)
def test_a_field_value_is_read_from_the_member_its_type_names(value_type: int, member: str) -> None:
    # every member a different number: only the right one may come back
    members = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
    value = FakeValue(**{m: i + 1 for i, m in enumerate(members)})  # type: ignore[arg-type]
    field = FakeFieldValue(fieldId=186, valueType=value_type, value=value)
    got = field_number(FakeNvml(), field)
    assert got == float(members.index(member) + 1)
    assert isinstance(got, float)


def test_a_field_of_an_unknown_value_type_is_none() -> None:
    field = FakeFieldValue(fieldId=186, valueType=99, value=FakeValue.of(5))
    assert field_number(FakeNvml(), field) is None


def test_cause_and_or_nan() -> None:
    assert cause(make_error(fake_pynvml.NVML_ERROR_NOT_SUPPORTED)) == " (NVML: Not Supported)"
    assert math.isnan(or_nan(None))
    assert or_nan(0.0) == 0.0


def test_load_pynvml_imports_the_installed_module() -> None:
    module = load_pynvml()
    assert module.__name__ == "pynvml"
    assert all(hasattr(module, name) for name in ("nvmlInit", "NVMLError"))


def test_load_pynvml_without_nvidia_ml_py_is_a_gpu_error_naming_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes the import fail
    with pytest.raises(GpuError, match=r"nvidia-ml-py package is not installed.*pip install"):
        nvml_api.load_pynvml()


def test_the_api_list_names_each_attribute_once() -> None:
    assert len(NVML_API_USED) == len(set(NVML_API_USED))
    # pynvml's function-pointer lookup is the one private name: it reaches the offset calls whose
    # bindings drop the return code (nvml_offsets.py)
    public = [name for name in NVML_API_USED if name != "_nvmlGetFunctionPointer"]
    assert len(public) == len(NVML_API_USED) - 1
    assert all(name.startswith(("nvml", "NVML")) for name in public)
