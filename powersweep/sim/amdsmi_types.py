"""amdsmi's vocabulary, as the fake amdsmi module speaks it: status codes, exceptions and enums.

Names and values as in amdsmi (the Python wrapper of ROCm's libamd_smi); a unit test checks them
against the installed package. Kept apart from :mod:`powersweep.sim.amdsmi`, which holds the
fake cards and the module surface over them, so each module holds one concern.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

# --- status codes and errors (values and names as in amdsmi) -------------------------------

AMDSMI_STATUS_SUCCESS = 0
AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NOT_YET_IMPLEMENTED = 3
AMDSMI_STATUS_NO_PERM = 10
AMDSMI_STATUS_INIT_ERROR = 18
AMDSMI_STATUS_NOT_INIT = 32
AMDSMI_STATUS_DRIVER_NOT_LOADED = 34
AMDSMI_STATUS_SETTING_UNAVAILABLE = 55
AMDSMI_STATUS_UNKNOWN_ERROR = 4294967295

_ERROR_INFO = {
    AMDSMI_STATUS_INVAL: "AMDSMI_STATUS_INVAL - Invalid parameters",
    AMDSMI_STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    AMDSMI_STATUS_NOT_YET_IMPLEMENTED: "AMDSMI_STATUS_NOT_YET_IMPLEMENTED - Feature not yet "
    "implemented",
    AMDSMI_STATUS_NO_PERM: "AMDSMI_STATUS_NO_PERM - Permission Denied",
    AMDSMI_STATUS_INIT_ERROR: "AMDSMI_STATUS_INIT_ERROR - Initialization error",
    AMDSMI_STATUS_NOT_INIT: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
    AMDSMI_STATUS_DRIVER_NOT_LOADED: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
    AMDSMI_STATUS_SETTING_UNAVAILABLE: "AMDSMI_STATUS_SETTING_UNAVAILABLE - Setting is not "
    "available",
}


class AmdSmiException(Exception):
    """Base amdsmi error."""


class AmdSmiLibraryException(AmdSmiException):
    """An error status of libamd_smi (``err_code``, ``err_info``), as amdsmi raises it."""

    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _ERROR_INFO.get(
            err_code, "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred"
        )

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_code(self) -> int:
        return self.err_code

    def get_error_info(self, detailed: bool = True) -> str:
        return self.err_info if detailed else self.err_info.split(" - ")[0]


class AmdSmiParameterException(AmdSmiException):
    """A call given the wrong type (amdsmi checks every argument's type)."""

    def __init__(self, receivedValue: Any, expectedType: Any, msg: str | None = None) -> None:
        super().__init__(msg)
        self.err_code = None
        self.err_msg = msg or f"Invalid parameter: {type(receivedValue)}, expected {expectedType}"

    def __str__(self) -> str:
        return self.err_msg


# --- enums (member values as in amdsmi) ------------------------------------------------------


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 4294967295
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_AMD_APUS = 3
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2
    CRITICAL = 5
    EMERGENCY = 7


class AmdSmiDevPerfLevel(IntEnum):
    AUTO = 0
    LOW = 1
    HIGH = 2
    MANUAL = 3
    STABLE_STD = 4
    STABLE_PEAK = 5
    STABLE_MIN_MCLK = 6
    STABLE_MIN_SCLK = 7
    DETERMINISM = 8
    UNKNOWN = 256


class AmdSmiVirtualizationMode(IntEnum):
    UNKNOWN = 0
    BAREMETAL = 1
    HOST = 2
    GUEST = 3
    PASSTHROUGH = 4
