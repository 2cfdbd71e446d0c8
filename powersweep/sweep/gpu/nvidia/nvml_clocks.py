"""Clock locks of one NVIDIA GPU through NVML (issue 15): the supported clocks, locks, resets;
and the SM clock's offset on the voltage/frequency curve (issue 36), which :mod:`.nvml_offsets`
reads and sets.

NVML sets locks but has no call that reads them back; whether a card follows a lock shows in
the clocks measured under load (:mod:`powersweep.sweep.locks`).

The reasoning: docs/architecture.md, "powersweep.sweep.gpu.nvidia.nvml_clocks".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from types import ModuleType

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.nvidia.nvml_api import cause
from powersweep.sweep.gpu.nvidia.nvml_errors import NvmlSetter, nvml_set
from powersweep.sweep.gpu.nvidia.nvml_offsets import NvmlOffsets
from powersweep.sweep.gpu.protocol import ClockOffset, LockResult, SupportedClocks


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
        self._offsets = NvmlOffsets(nvml, handle, label)
        self._mem_offsets = NvmlOffsets(nvml, handle, label, clock="mem")

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

    def lock_sm_clock(self, mhz: float, min_mhz: float | None = None) -> LockResult:
        """Lock the SM clock with ``nvmlDeviceSetGpuLockedClocks(min_mhz, mhz)`` (min = max
        when ``min_mhz`` is None).

        Raises:
            UsageError: ``min_mhz`` is not a positive number of MHz at most ``mhz``.
            GpuError: No permission (needs root) or an NVML failure.
        """
        nvml, h = self._nvml, self._handle
        low = _range_min(mhz, min_mhz)
        return self._lock_clock(
            "SM", mhz, lambda v: nvml.nvmlDeviceSetGpuLockedClocks(h, low or v, v)
        )

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
            if wanted:
                nvml_set(nvml, reset, partial(self._reset_setter, what))

    # --- the voltage/frequency curve's offset (issues 36 and 45): nvml_offsets ---------------

    def sm_clock_offset(self) -> ClockOffset:
        """The SM clock offset in force (P0's) and the range the driver accepts, in MHz.

        Never raises: ``supported`` is False when the card says it has no offset or the driver
        has neither offset API; another failed read leaves the value (or the range) None and
        says why in ``message``, which also notes a P2 offset that differs from P0's.
        """
        return self._offsets.read()

    def set_sm_clock_offset(self, mhz: float) -> LockResult:
        """Set the SM clock offset to ``mhz`` rounded to whole MHz, in P0 and P2, then read it
        back (:meth:`.nvml_offsets.NvmlOffsets.set`).

        Raises:
            UsageError: ``mhz`` is not a finite number within ±MAX_CLOCK_MHZ.
            GpuError: No permission (needs root) or an NVML failure.
        """
        return self._offsets.set(mhz)

    def mem_clock_offset(self) -> ClockOffset:
        """The memory clock offset in force (P0's) and its range, in NVML's unit (twice the
        reported memory clock's MHz on GDDR6X: :mod:`.nvml_offsets`); never raises, as
        :meth:`sm_clock_offset`."""
        return self._mem_offsets.read()

    def set_mem_clock_offset(self, mhz: float) -> LockResult:
        """Set the memory clock offset to ``mhz`` (NVML's unit, whole MHz) in P0 and P2, then
        read it back, as :meth:`set_sm_clock_offset`.

        Raises:
            UsageError: ``mhz`` is not a finite number within ±MAX_CLOCK_MHZ.
            GpuError: No permission (needs root) or an NVML failure.
        """
        return self._mem_offsets.set(mhz)

    def _lock_clock(self, what: str, mhz: float, lock: Callable[[int], object]) -> LockResult:
        if not (math.isfinite(mhz) and mhz > 0):
            raise UsageError(f"a clock lock must be a positive number of MHz, got {mhz}")
        refusal = nvml_set(
            self._nvml, lambda: lock(round(mhz)), lambda: self._lock_setter(what, mhz)
        )
        if refusal is not None:
            return LockResult(mhz, False, refusal.message)
        return LockResult(mhz, True)

    def _lock_setter(self, what: str, mhz: float) -> NvmlSetter:
        label = self._label()
        hint = (
            "many GeForce cards and drivers refuse memory clock locks"
            if what == "memory"
            else "the driver is too old or the card does not allow it"
        )
        return NvmlSetter(
            f"locking the {what} clock of {label}",
            f" at {mhz:g} MHz",
            refuses=frozenset({"unsupported", "invalid"}),
            unsupported=lambda exc: (
                f"{label} does not support {what} clock locks{cause(exc)}: {hint}"
            ),
            invalid=f"{label} rejected a {mhz:g} MHz {what} lock as invalid",
        )

    def _reset_setter(self, what: str) -> NvmlSetter:
        # A lock a card does not support was never set: unsupported is no failure on reset.
        return NvmlSetter(
            f"resetting the {what} clock lock of {self._label()}",
            refuses=frozenset({"unsupported"}),
        )


def _range_min(mhz: float, min_mhz: float | None) -> int | None:
    """A lock range's bottom in whole MHz (None: min = max).

    Raises:
        UsageError: Not a positive number, or above the top.
    """
    if min_mhz is None:
        return None
    if not (math.isfinite(min_mhz) and 0 < min_mhz <= mhz):
        raise UsageError(
            f"a clock lock's minimum must be a positive number of MHz at most {mhz:g}, "
            f"got {min_mhz:g}"
        )
    return round(min_mhz)
