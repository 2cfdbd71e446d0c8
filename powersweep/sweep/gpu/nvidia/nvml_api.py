"""The names of ``pynvml`` (nvidia-ml-py) the NVIDIA backend uses, how it is loaded, and small
helpers for NVML's values.

The reasoning: docs/architecture.md, "powersweep.sweep.gpu.nvidia.nvml_api".
"""

from __future__ import annotations

import ctypes
import importlib
import math
from types import ModuleType
from typing import Any

from powersweep.errors import GpuError

# Every attribute of ``pynvml`` the NVIDIA backend uses. A unit test checks each one exists in the
# installed nvidia-ml-py and in the fake, and that the backend's modules use no name missing here.
NVML_API_USED: tuple[str, ...] = (
    # errors
    "NVMLError",
    "NVMLError_NoPermission",
    "NVMLError_NotSupported",
    "NVMLError_InvalidArgument",
    "NVMLError_FunctionNotFound",
    # constants
    "NVML_SUCCESS",
    "NVML_FI_DEV_POWER_INSTANT",
    "NVML_VALUE_TYPE_DOUBLE",
    "NVML_VALUE_TYPE_UNSIGNED_INT",
    "NVML_VALUE_TYPE_UNSIGNED_LONG",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG",
    "NVML_VALUE_TYPE_SIGNED_INT",
    "NVML_VALUE_TYPE_UNSIGNED_SHORT",
    "NVML_TEMPERATURE_GPU",
    "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN",
    "NVML_CLOCK_SM",
    "NVML_CLOCK_MEM",
    # functions
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetPowerManagementLimitConstraints",
    "nvmlDeviceGetPowerManagementDefaultLimit",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceSetPowerManagementLimit",
    # persistence mode (powersweep status / apply)
    "NVML_FEATURE_DISABLED",
    "NVML_FEATURE_ENABLED",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceSetPersistenceMode",
    # clock locks (issue 15)
    "nvmlDeviceGetSupportedMemoryClocks",
    "nvmlDeviceGetSupportedGraphicsClocks",
    "nvmlDeviceSetGpuLockedClocks",
    "nvmlDeviceResetGpuLockedClocks",
    "nvmlDeviceSetMemoryLockedClocks",
    "nvmlDeviceResetMemoryLockedClocks",
    # the SM clock's voltage/frequency offset (issues 36 and 45): nvmlDevice{Get,Set}ClockOffsets
    # through the function-pointer lookup, not their bindings, which ignore NVML's return code
    # (nvml_offsets.py says more); the older calls where the driver lacks them
    "_nvmlGetFunctionPointer",
    "NVML_CLOCK_GRAPHICS",
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    "nvmlDeviceGetGpcClkVfOffset",
    "nvmlDeviceGetGpcClkMinMaxVfOffset",
    "nvmlDeviceSetGpcClkVfOffset",
    # the memory clock's offset (issue 45): the same current calls with NVML_CLOCK_MEM, or the
    # older memory calls (NVML_CLOCK_MEM is listed with the readings)
    "nvmlDeviceGetMemClkVfOffset",
    "nvmlDeviceGetMemClkMinMaxVfOffset",
    "nvmlDeviceSetMemClkVfOffset",
    # which cards serve the model (issue 14)
    "nvmlDeviceGetComputeRunningProcesses",
    # Xid events, the driver's GPU fault reports (issue 36's stability checks)
    "NVML_ERROR_TIMEOUT",
    "nvmlEventTypeXidCriticalError",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
)


# NVML's "value not available" sentinels (all bits set in a 32- or 64-bit unsigned field).
NOT_AVAILABLE = (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)


def load_pynvml() -> ModuleType:
    """Import the installed nvidia-ml-py's ``pynvml``.

    Raises:
        GpuError: nvidia-ml-py is not installed.
    """
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise GpuError(
            "NVML not available: the nvidia-ml-py package is not installed "
            "(pip install nvidia-ml-py)"
        ) from exc


def text(value: object) -> str:
    """Return an NVML string as ``str`` (older bindings return bytes)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def available(value: float) -> bool:
    """Whether an NVML number is a reading (finite, not negative, not an N/A sentinel)."""
    return math.isfinite(value) and value >= 0 and value not in NOT_AVAILABLE


def field_number(nvml: ModuleType, field: Any) -> float | None:
    """The number an ``nvmlFieldValue_t`` carries, by its value type; None for an unknown type."""
    member = {
        nvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        nvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
    }.get(field.valueType)
    if member is None:
        return None
    return float(getattr(field.value, member))


def same_device(a: object, b: object) -> bool:
    """Whether two NVML device handles name the same card.

    Real handles are ctypes pointers, and NVML hands out a new pointer object each time (an
    event's ``device`` is one), which ``==`` tells apart: they compare by the address they hold.
    Any other handle (a fake's device object) compares by identity.
    """
    if isinstance(a, ctypes._Pointer) and isinstance(b, ctypes._Pointer):
        return ctypes.cast(a, ctypes.c_void_p).value == ctypes.cast(b, ctypes.c_void_p).value
    return a is b


def cause(exc: BaseException) -> str:
    """`` (NVML: ...)``: an NVML error's text, appended to a message."""
    return f" (NVML: {exc})"


def or_nan(value: float | None) -> float:
    """NaN for a field that could not be read."""
    return math.nan if value is None else value
