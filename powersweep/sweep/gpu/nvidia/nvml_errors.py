"""Where NVML's errors become powersweep's: the one place pynvml's error classes are told apart.

A setter runs through :func:`nvml_set`, with an :class:`NvmlSetter` that words its errors: no
permission and failures raise :class:`~powersweep.errors.GpuError`, and the faults the setter
takes as a refusal (unsupported, invalid) come back as a ``Refusal`` (``sweep.gpu.protocol``) its
caller turns into a result that is not accepted. A read that tolerates failure goes through
:func:`nvml_read`, which answers None (NVML's N/A), as nvitop's ``libnvml`` wrapper does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TypeVar

from powersweep.errors import GpuError
from powersweep.sweep.gpu.nvidia.nvml_api import cause
from powersweep.sweep.gpu.protocol import Fault, Refusal

_T = TypeVar("_T")


def fault_of(nvml: ModuleType, exc: Exception) -> Fault:
    """The :data:`~powersweep.sweep.gpu.protocol.Fault` an NVML error is (``NVMLError(code)``
    makes the code's subclass; a driver without the function is unsupported)."""
    if isinstance(exc, nvml.NVMLError_NoPermission):
        return "no_permission"
    if isinstance(exc, (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound)):
        return "unsupported"
    if isinstance(exc, nvml.NVMLError_InvalidArgument):
        return "invalid"
    return "failed"


@dataclass(frozen=True)
class NvmlSetter:
    """How one NVML setter's errors read.

    Attributes:
        doing: What it does, naming the GPU (``setting the power limit of GPU 0 (...)``).
        target: The value, appended in the failure message (`` to 250 W``).
        refuses: The faults that come back as a ``Refusal``; the others raise.
        unsupported: The message of an unsupported set (None: it reads as a failure).
        invalid: The message of an invalid value, before the cause (None: a failure).
        root_hint: Appended to "re-run with sudo" (`` (or as root)``).
    """

    doing: str
    target: str = ""
    refuses: frozenset[Fault] = frozenset()
    unsupported: Callable[[Exception], str] | None = None
    invalid: str | None = None
    root_hint: str = ""

    def refusal(self, nvml: ModuleType, exc: Exception) -> Refusal:
        """The refusal an NVML error is for this setter.

        Raises:
            GpuError: No permission, or a fault this setter does not take as a refusal.
        """
        fault = fault_of(nvml, exc)
        if fault in self.refuses:
            return Refusal(fault, self._message(fault, exc), exc)
        raise GpuError(self._message(fault, exc)) from exc

    def _message(self, fault: Fault, exc: Exception) -> str:
        if fault == "no_permission":
            return f"{self.doing} needs root: re-run with sudo{self.root_hint}{cause(exc)}"
        if fault == "unsupported" and self.unsupported is not None:
            return self.unsupported(exc)
        if fault == "invalid" and self.invalid is not None:
            return f"{self.invalid}{cause(exc)}"
        return f"{self.doing}{self.target} failed: {exc}"


def nvml_set(
    nvml: ModuleType, call: Callable[[], object], setter: Callable[[], NvmlSetter]
) -> Refusal | None:
    """Run one NVML set: None when it took, the ``Refusal`` when the card refused it.

    ``setter`` words the errors; it is built only when one happens (naming the GPU may call
    NVML).

    Raises:
        GpuError: No permission, or a fault ``setter`` does not take as a refusal.
    """
    try:
        call()
    except nvml.NVMLError as exc:
        return setter().refusal(nvml, exc)
    return None


def nvml_read(
    nvml: ModuleType, read: Callable[[], _T], on_fault: Callable[[Fault], object] | None = None
) -> _T | None:
    """Run one NVML read that tolerates failure: its value, or None (told to ``on_fault``)."""
    try:
        return read()
    except nvml.NVMLError as exc:
        if on_fault is not None:
            on_fault(fault_of(nvml, exc))
        return None
