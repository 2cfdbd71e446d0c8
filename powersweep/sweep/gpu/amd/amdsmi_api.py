"""What powersweep knows of the ``amdsmi`` package: the names it uses, amdsmi's status codes,
the quiet lazy import, and small helpers for its values and errors.

Shared by the AMD backend's modules (:mod:`.amd_gpu`, :mod:`.amd_clocks`,
:mod:`.amd_backend`); this is the only module that imports ``amdsmi``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from powersweep.errors import GpuError
from powersweep.sweep.gpu.protocol import Fault, Refusal

# Every attribute of ``amdsmi`` the AMD backend uses. A unit test checks each one against the
# installed package's source and the fakes, and that the backend uses no name missing here.
AMDSMI_API_USED: tuple[str, ...] = (
    # errors
    "AmdSmiException",
    # enums
    "AmdSmiInitFlags",
    "AmdSmiClkType",
    "AmdSmiTemperatureType",
    "AmdSmiTemperatureMetric",
    "AmdSmiDevPerfLevel",
    "AmdSmiVirtualizationMode",
    # library and identity
    "amdsmi_init",
    "amdsmi_shut_down",
    "amdsmi_get_processor_handles",
    "amdsmi_get_gpu_asic_info",
    "amdsmi_get_gpu_device_uuid",
    "amdsmi_get_gpu_vram_info",
    "amdsmi_get_gpu_driver_info",
    "amdsmi_get_gpu_virtualization_mode",
    # power caps and readings
    "amdsmi_get_power_cap_info",
    "amdsmi_set_power_cap",
    "amdsmi_get_power_info",
    "amdsmi_get_energy_count",
    "amdsmi_get_temp_metric",
    "amdsmi_get_clock_info",
    "amdsmi_get_gpu_activity",
    "amdsmi_get_violation_status",
    # clock locks
    "amdsmi_get_clk_freq",
    "amdsmi_set_gpu_clk_range",
    "amdsmi_get_gpu_perf_level",
    "amdsmi_set_gpu_perf_level",
    # which cards serve the model
    "amdsmi_get_gpu_process_list",
)

# The members of those enums used, as ``Enum.MEMBER`` (checked against the package too).
AMDSMI_ENUM_MEMBERS_USED: tuple[str, ...] = (
    "AmdSmiInitFlags.INIT_AMD_GPUS",
    "AmdSmiClkType.GFX",
    "AmdSmiClkType.MEM",
    "AmdSmiTemperatureType.HOTSPOT",
    "AmdSmiTemperatureMetric.CURRENT",
    "AmdSmiTemperatureMetric.CRITICAL",
    "AmdSmiDevPerfLevel.AUTO",
    "AmdSmiDevPerfLevel.MANUAL",
    "AmdSmiVirtualizationMode.GUEST",
)

# amdsmi's status codes (``amdsmi_wrapper.AMDSMI_STATUS_*``, which this module does not import:
# the wrapper is an implementation detail); a unit test checks the values against the package.
AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NOT_YET_IMPLEMENTED = 3
AMDSMI_STATUS_NO_PERM = 10
AMDSMI_STATUS_SETTING_UNAVAILABLE = 55
UNSUPPORTED = (
    AMDSMI_STATUS_NOT_SUPPORTED,
    AMDSMI_STATUS_NOT_YET_IMPLEMENTED,
    AMDSMI_STATUS_SETTING_UNAVAILABLE,
)

_T = TypeVar("_T")

INSTALL_HINT = "pip install 'powersweep[amd]', and ROCm's amd-smi library (apt install amd-smi-lib)"


def status_code(exc: BaseException) -> int | None:
    code = getattr(exc, "err_code", None)
    return code if isinstance(code, int) else None


def fault_of(exc: BaseException) -> Fault:
    """The :data:`~powersweep.sweep.gpu.protocol.Fault` an amdsmi error is, by its status code:
    the one place amdsmi's codes are told apart."""
    code = status_code(exc)
    if code == AMDSMI_STATUS_NO_PERM:
        return "no_permission"
    if code in UNSUPPORTED:
        return "unsupported"
    if code == AMDSMI_STATUS_INVAL:
        return "invalid"
    return "failed"


def amd_read(
    smi: ModuleType, read: Callable[[], _T], on_fault: Callable[[Fault], object] | None = None
) -> _T | None:
    """Run one amdsmi read that tolerates failure: its value, or None (told to ``on_fault``)."""
    try:
        return read()
    except smi.AmdSmiException as exc:
        if on_fault is not None:
            on_fault(fault_of(exc))
        return None


@dataclass(frozen=True)
class AmdSetter:
    """How one amdsmi setter's errors read (the AMD side of ``nvml_errors.NvmlSetter``).

    Attributes:
        error: The one-line error of a fault it does not take as a refusal (the card's
            ``_refusal``, which names a VM guest, no permission, unsupported or a failure).
        is_guest: Whether the card runs in a VM guest, whose host owns its settings: there an
            unsupported set is an error, not a refusal. Called only on an error.
        refuses: The faults that come back as a ``Refusal``; the others raise.
        unsupported: The message of an unsupported set, from the error.
        invalid: The message of an invalid value, from the error.
    """

    error: Callable[[BaseException], str]
    is_guest: Callable[[], bool]
    refuses: frozenset[Fault] = frozenset()
    unsupported: Callable[[BaseException], str] | None = None
    invalid: Callable[[BaseException], str] | None = None

    def refusal(self, exc: BaseException) -> Refusal:
        """The refusal an amdsmi error is for this setter.

        Raises:
            GpuError: A fault this setter does not take as a refusal.
        """
        fault = fault_of(exc)
        words = {"invalid": self.invalid, "unsupported": self.unsupported}.get(fault)
        if fault not in self.refuses or (fault == "unsupported" and self.is_guest()):
            raise GpuError(self.error(exc)) from exc
        return Refusal(fault, "" if words is None else words(exc), exc)


def amd_set(smi: ModuleType, call: Callable[[], object], setter: AmdSetter) -> Refusal | None:
    """Run one amdsmi set: None when it took, the ``Refusal`` when the card refused it.

    Raises:
        GpuError: A fault ``setter`` does not take as a refusal.
    """
    try:
        call()
    except smi.AmdSmiException as exc:
        return setter.refusal(exc)
    return None


def cause(exc: BaseException) -> str:
    # the library's own str() spans two lines: its one-line description reads better
    info = getattr(exc, "err_info", None) or " ".join(str(exc).split())
    return f" (amdsmi: {info})"


def perf_level_name(value: Any) -> str:
    """``AUTO``, ``MANUAL``...: amdsmi returns ``AMDSMI_DEV_PERF_LEVEL_AUTO`` (older: an enum)."""
    name = getattr(value, "name", None) or str(value)
    return name.removeprefix("AMDSMI_DEV_PERF_LEVEL_").upper()


def import_amdsmi() -> ModuleType:
    """Import the installed ``amdsmi`` quietly (it prints to stdout when ROCm is missing).

    Raises:
        GpuError: The package is not installed, or it cannot load ROCm's ``libamd_smi.so``.
    """
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return importlib.import_module("amdsmi")
    except ImportError as exc:
        cause_exc: BaseException = exc
        if getattr(exc, "name", None) == "amdsmi":
            raise GpuError(
                f"amdsmi not available: the amdsmi package is not installed ({INSTALL_HINT})"
            ) from exc
    except Exception as exc:  # a missing libamd_smi.so raises KeyError, OSError...
        cause_exc = exc
    raise GpuError(
        "amdsmi not available: the amdsmi package cannot load ROCm's libamd_smi.so "
        f"({type(cause_exc).__name__}: {' '.join(str(cause_exc).split())}); install it: "
        f"{INSTALL_HINT}"
    ) from cause_exc
