"""Clock locks of one NVIDIA GPU through NVML (issue 15): the supported clocks, locks, resets;
and the SM clock's offset on the voltage/frequency curve (issue 36).

NVML sets locks but has no call that reads them back; whether a card follows a lock shows in
the clocks measured under load (:mod:`powersweep.sweep.locks`). The offset it does read back.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.nvidia.nvml_api import cause
from powersweep.sweep.gpu.protocol import MAX_CLOCK_MHZ, ClockOffset, LockResult, SupportedClocks

# The offset calls are nvmlDeviceGetGpcClkVfOffset / ...GetGpcClkMinMaxVfOffset /
# ...SetGpcClkVfOffset, though nvidia-ml-py marks the setter deprecated in favour of
# nvmlDeviceGetClockOffsets / nvmlDeviceSetClockOffsets: in nvidia-ml-py 13.615 those two bindings
# never check NVML's return code (they return NVML_SUCCESS whatever the driver said), so a refused
# or failed offset would read as set. A driver that drops the old calls answers
# FUNCTION_NOT_FOUND, which reads as "not supported" here.
_OFFSET_UNSUPPORTED_HINT = "the driver is too old or the card does not allow it"


class NvmlClocks:
    """The clock-lock calls of one GPU (:class:`~powersweep.sweep.gpu.nvidia.nvml_gpu.NvmlGpu` hands
    them on).

    Args:
        nvml: The ``pynvml`` module (or a fake with the same surface).
        handle: NVML device handle.
        label: Names the GPU in messages (``GPU 0 (NVIDIA GeForce RTX 3090)``).
    """

    def __init__(self, nvml: ModuleType, handle: object, label: Callable[[], str]) -> None:
        self._nvml = nvml
        self._handle = handle
        self._label = label

    def supported_clocks(self) -> SupportedClocks:
        """The memory clocks and, per memory clock, the SM clocks NVML lists, descending.

        Raises:
            GpuError: NVML cannot list them (not supported on this card or driver, or failed).
        """
        nvml = self._nvml
        try:
            mems = [float(m) for m in nvml.nvmlDeviceGetSupportedMemoryClocks(self._handle)]
            by_mem = {
                m: tuple(
                    sorted(
                        (
                            float(f)
                            for f in nvml.nvmlDeviceGetSupportedGraphicsClocks(self._handle, int(m))
                        ),
                        reverse=True,
                    )
                )
                for m in mems
            }
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound) as exc:
            raise GpuError(
                f"{self._label()} does not list its supported clocks{cause(exc)}: give "
                "--sm-clocks (and --mem-clocks) by hand"
            ) from exc
        except nvml.NVMLError as exc:
            raise GpuError(f"cannot list the supported clocks of {self._label()}: {exc}") from exc
        if not mems:
            raise GpuError(
                f"{self._label()} lists no supported clocks: give --sm-clocks (and --mem-clocks)"
            )
        return SupportedClocks(tuple(sorted(mems, reverse=True)), by_mem)

    def lock_sm_clock(self, mhz: float) -> LockResult:
        """Lock the SM clock with ``nvmlDeviceSetGpuLockedClocks(min=max=mhz)``.

        Raises:
            GpuError: No permission (needs root) or an NVML failure.
        """
        nvml, h = self._nvml, self._handle
        return self._lock_clock("SM", mhz, lambda v: nvml.nvmlDeviceSetGpuLockedClocks(h, v, v))

    def lock_mem_clock(self, mhz: float) -> LockResult:
        """Lock the memory clock with ``nvmlDeviceSetMemoryLockedClocks(min=max=mhz)``.

        Raises:
            GpuError: No permission (needs root) or an NVML failure.
        """
        nvml, h = self._nvml, self._handle
        return self._lock_clock(
            "memory", mhz, lambda v: nvml.nvmlDeviceSetMemoryLockedClocks(h, v, v)
        )

    def reset_clock_locks(self, sm: bool = True, mem: bool = True) -> None:
        """Reset the locks (``nvmlDeviceResetGpuLockedClocks`` / ``...MemoryLockedClocks``).

        A lock a card does not support was never set, so NOT_SUPPORTED on reset is no failure.

        Raises:
            GpuError: No permission or another NVML failure.
        """
        nvml, h = self._nvml, self._handle
        calls: list[tuple[bool, str, Callable[[], object]]] = [
            (sm, "SM", lambda: nvml.nvmlDeviceResetGpuLockedClocks(h)),
            (mem, "memory", lambda: nvml.nvmlDeviceResetMemoryLockedClocks(h)),
        ]
        for wanted, what, reset in calls:
            if not wanted:
                continue
            try:
                reset()
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
                continue
            except nvml.NVMLError_NoPermission as exc:
                raise GpuError(
                    f"resetting the {what} clock lock of {self._label()} needs root: re-run "
                    f"with sudo{cause(exc)}"
                ) from exc
            except nvml.NVMLError as exc:
                raise GpuError(
                    f"resetting the {what} clock lock of {self._label()} failed: {exc}"
                ) from exc

    # --- the voltage/frequency curve's offset (issue 36) ---------------------------------------

    def sm_clock_offset(self) -> ClockOffset:
        """The SM (GPC) clock offset in force (``nvmlDeviceGetGpcClkVfOffset``) and the range the
        driver accepts (``nvmlDeviceGetGpcClkMinMaxVfOffset``), in MHz.

        Never raises: ``supported`` is False only when the driver says the offset is not
        supported (or lacks the call); another failed read leaves the value (or the range) None
        and says why in ``message``.
        """
        nvml = self._nvml
        try:
            offset: float | None = float(nvml.nvmlDeviceGetGpcClkVfOffset(self._handle))
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound) as exc:
            return ClockOffset(
                supported=False,
                message=f"{self._label()} does not support an SM clock offset{cause(exc)}: "
                f"{_OFFSET_UNSUPPORTED_HINT}",
            )
        except nvml.NVMLError as exc:
            offset = None
            problems = [f"cannot read the SM clock offset of {self._label()}{cause(exc)}"]
        else:
            problems = []
        bounds, problem = self._offset_range()
        if problem:
            problems.append(problem)
        return ClockOffset(
            supported=True,
            sm_offset_mhz=offset,
            min_mhz=None if bounds is None else float(bounds[0]),
            max_mhz=None if bounds is None else float(bounds[1]),
            message="; ".join(problems),
        )

    def set_sm_clock_offset(self, mhz: float) -> LockResult:
        """Set the SM clock offset to ``mhz`` rounded to whole MHz
        (``nvmlDeviceSetGpcClkVfOffset``), then read it back.

        Not accepted (no exception): a value outside the range the driver reports (refused
        before the set), a card or driver without the offset, a value NVML calls invalid, and a
        read-back that differs from the request or fails.

        Raises:
            UsageError: ``mhz`` is not a finite number within ±MAX_CLOCK_MHZ.
            GpuError: No permission (needs root) or an NVML failure.
        """
        if not (math.isfinite(mhz) and abs(mhz) <= MAX_CLOCK_MHZ):
            raise UsageError(
                f"a clock offset must be a number of MHz within ±{MAX_CLOCK_MHZ:g}, got {mhz}"
            )
        nvml = self._nvml
        wanted = round(mhz)
        bounds, _ = self._offset_range()
        if bounds is not None and not bounds[0] <= wanted <= bounds[1]:
            return LockResult(
                mhz,
                False,
                f"{self._label()} accepts SM clock offsets from {bounds[0]} to {bounds[1]} MHz, "
                f"not {mhz:g} MHz",
            )
        try:
            nvml.nvmlDeviceSetGpcClkVfOffset(self._handle, wanted)
        except nvml.NVMLError_NoPermission as exc:
            raise GpuError(
                f"setting the SM clock offset of {self._label()} needs root: re-run with sudo"
                f"{cause(exc)}"
            ) from exc
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound) as exc:
            return LockResult(
                mhz,
                False,
                f"{self._label()} does not support an SM clock offset{cause(exc)}: "
                f"{_OFFSET_UNSUPPORTED_HINT}",
            )
        except nvml.NVMLError_InvalidArgument as exc:
            return LockResult(
                mhz,
                False,
                f"{self._label()} rejected a {mhz:g} MHz SM clock offset as invalid{cause(exc)}",
            )
        except nvml.NVMLError as exc:
            raise GpuError(
                f"setting the SM clock offset of {self._label()} to {mhz:g} MHz failed: {exc}"
            ) from exc
        try:
            readback = int(nvml.nvmlDeviceGetGpcClkVfOffset(self._handle))
        except nvml.NVMLError as exc:
            return LockResult(
                mhz,
                False,
                f"{self._label()} took a {mhz:g} MHz SM clock offset but it could not be read "
                f"back{cause(exc)}",
            )
        if readback != wanted:
            return LockResult(
                mhz,
                False,
                f"{self._label()} kept a {readback} MHz SM clock offset when {wanted} MHz was set",
            )
        return LockResult(mhz, True)

    def _offset_range(self) -> tuple[tuple[int, int] | None, str]:
        """The offsets the driver accepts, MHz; None when it cannot tell, with why (empty when
        the driver does not support the call)."""
        nvml = self._nvml
        try:
            # Called with the handle only: the binding then returns (min, max). (Its default
            # arguments are ctypes ints shared by every call; read at once, they are harmless.)
            lo, hi = nvml.nvmlDeviceGetGpcClkMinMaxVfOffset(self._handle)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
            return None, ""
        except nvml.NVMLError as exc:
            return None, f"cannot read the SM clock offset range of {self._label()}{cause(exc)}"
        lo, hi = int(lo), int(hi)
        if lo > hi:
            return None, f"{self._label()} reports a {lo} to {hi} MHz SM clock offset range"
        return (lo, hi), ""

    def _lock_clock(self, what: str, mhz: float, lock: Callable[[int], object]) -> LockResult:
        if not (math.isfinite(mhz) and mhz > 0):
            raise UsageError(f"a clock lock must be a positive number of MHz, got {mhz}")
        nvml = self._nvml
        try:
            lock(round(mhz))
        except nvml.NVMLError_NoPermission as exc:
            raise GpuError(
                f"locking the {what} clock of {self._label()} needs root: re-run with sudo"
                f"{cause(exc)}"
            ) from exc
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound) as exc:
            hint = (
                "many GeForce cards and drivers refuse memory clock locks"
                if what == "memory"
                else "the driver is too old or the card does not allow it"
            )
            return LockResult(
                mhz,
                False,
                f"{self._label()} does not support {what} clock locks{cause(exc)}: {hint}",
            )
        except nvml.NVMLError_InvalidArgument as exc:
            return LockResult(
                mhz,
                False,
                f"{self._label()} rejected a {mhz:g} MHz {what} lock as invalid{cause(exc)}",
            )
        except nvml.NVMLError as exc:
            raise GpuError(
                f"locking the {what} clock of {self._label()} at {mhz:g} MHz failed: {exc}"
            ) from exc
        return LockResult(mhz, True)
