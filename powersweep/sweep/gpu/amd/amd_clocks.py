"""Clock locks of one AMD GPU through amdsmi: list, lock, unlock, and what is in force.

amdsmi locks a clock as a range (``amdsmi_set_gpu_clk_range``, MHz) under the performance level
``MANUAL``, and frees the clocks with the level ``AUTO`` (both at once: it has no per-clock
reset).

The reasoning: docs/amd.md, "powersweep.sweep.gpu.amd.amd_clocks".
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

from powersweep.errors import GpuError, UsageError
from powersweep.runformat import as_float
from powersweep.sweep.gpu.amd.amdsmi_api import (
    AmdSetter,
    amd_read,
    amd_set,
    cause,
    fault_of,
    perf_level_name,
)
from powersweep.sweep.gpu.protocol import LockedClocks, LockResult, SupportedClocks

# The SM clocks listed between a card's lowest and highest level are this far apart.
SM_CLOCK_STEP_MHZ = 25.0


class AmdClocks:
    """The clock locks of one card.

    Args:
        amdsmi: The ``amdsmi`` module (or a fake).
        handle: The card's processor handle.
        label: ``GPU 0 (AMD Instinct MI300X)``, for messages.
        refusal: The one-line error for a write the driver refused ``(doing, value, exc)``.
        is_guest: Whether the card runs in a VM guest (which cannot lock clocks).
    """

    def __init__(
        self,
        amdsmi: ModuleType,
        handle: object,
        label: Callable[[], str],
        refusal: Callable[[str, str, BaseException], str],
        is_guest: Callable[[], bool],
    ) -> None:
        self._smi = amdsmi
        self._handle = handle
        self._label = label
        self._refusal = refusal
        self._is_guest = is_guest
        # the locks this process set: an SM-only unlock goes through AUTO, which frees both
        self._held: dict[str, tuple[int, int]] = {}

    def locked(self) -> LockedClocks:
        """``AUTO`` is unlocked; under any other level the locks are unknown but held.

        amdsmi has no call that reads a clock range back, so (as on NVML) the locks themselves
        cannot be read, only that a user setting holds the clocks.
        """
        smi = self._smi
        level = amd_read(smi, lambda: perf_level_name(smi.amdsmi_get_gpu_perf_level(self._handle)))
        if level == "AUTO":
            return LockedClocks(known=True, user_clock_setting_active=False)
        return LockedClocks(known=False, user_clock_setting_active=None if level is None else True)

    def supported(self) -> SupportedClocks:
        """Memory clocks (the card's levels) and SM clocks from its lowest to highest level in
        :data:`SM_CLOCK_STEP_MHZ` steps, with the levels themselves.

        Raises:
            GpuError: amdsmi cannot list them.
        """
        smi = self._smi
        try:
            gfx = _levels_mhz(smi.amdsmi_get_clk_freq(self._handle, smi.AmdSmiClkType.GFX))
            mem = _levels_mhz(smi.amdsmi_get_clk_freq(self._handle, smi.AmdSmiClkType.MEM))
        except smi.AmdSmiException as exc:
            hint = ": give --sm-clocks (and --mem-clocks)" if fault_of(exc) == "unsupported" else ""
            raise GpuError(f"cannot list the clocks of {self._label()}{cause(exc)}{hint}") from exc
        if not gfx or not mem:
            raise GpuError(
                f"{self._label()} lists no clock levels: give --sm-clocks (and --mem-clocks)"
            )
        lo, hi = min(gfx), max(gfx)
        steps = int((hi - lo) // SM_CLOCK_STEP_MHZ)
        sm = sorted({*gfx, *(lo + i * SM_CLOCK_STEP_MHZ for i in range(steps + 1))}, reverse=True)
        mems = tuple(sorted(set(mem), reverse=True))
        return SupportedClocks(mems, dict.fromkeys(mems, tuple(sm)))

    def lock(self, kind: str, mhz: float, min_mhz: float | None = None) -> LockResult:
        """Lock the ``sm`` (gfx) or ``mem`` clock to ``min_mhz``-``mhz`` (None: min = max):
        level ``MANUAL``, then the range.

        Raises:
            UsageError: ``mhz`` is not a positive number, or ``min_mhz`` not one at most it.
            GpuError: No permission (needs root), a VM guest, or amdsmi failed.
        """
        if not (math.isfinite(mhz) and mhz > 0):
            raise UsageError(f"a clock lock must be a positive number of MHz, got {mhz}")
        if min_mhz is not None and not (math.isfinite(min_mhz) and 0 < min_mhz <= mhz):
            raise UsageError(
                f"a clock lock's minimum must be a positive number of MHz at most {mhz:g}, "
                f"got {min_mhz:g}"
            )
        smi = self._smi
        what = "SM" if kind == "sm" else "memory"
        clk = smi.AmdSmiClkType.GFX if kind == "sm" else smi.AmdSmiClkType.MEM
        value = round(mhz)
        low = value if min_mhz is None else round(min_mhz)
        try:
            smi.amdsmi_set_gpu_perf_level(self._handle, smi.AmdSmiDevPerfLevel.MANUAL)
            smi.amdsmi_set_gpu_clk_range(self._handle, low, value, clk)
        except smi.AmdSmiException as exc:
            self._unmanual()
            return LockResult(mhz, False, self._lock_setter(what, mhz).refusal(exc).message)
        self._held[kind] = (low, value)
        return LockResult(mhz, True)

    def reset(self, sm: bool = True, mem: bool = True) -> None:
        """Unlock through the level ``AUTO``; a lock of this process that should stay (``sm``
        or ``mem`` False) is set again, since ``AUTO`` frees both clocks.

        Raises:
            GpuError: No permission, a VM guest, or amdsmi failed.
        """
        if not (sm or mem):
            return
        keep = {k: v for k, v in self._held.items() if not (sm if k == "sm" else mem)}
        smi = self._smi
        setter = AmdSetter(
            lambda exc: self._refusal("unlocking the clocks", "level AUTO", exc),
            self._is_guest,
            refuses=frozenset({"unsupported"}),
        )
        auto = smi.AmdSmiDevPerfLevel.AUTO
        refusal = amd_set(smi, lambda: smi.amdsmi_set_gpu_perf_level(self._handle, auto), setter)
        if refusal is not None:
            return  # a card without performance levels was never locked
        self._held.clear()
        for kind, (low, value) in keep.items():
            self.lock(kind, float(value), float(low))

    def _unmanual(self) -> None:
        """Back to ``AUTO`` after a refused lock, unless another lock of this process holds:
        the card is not left in ``MANUAL`` for a lock it refused."""
        smi = self._smi
        if not self._held:
            with contextlib.suppress(smi.AmdSmiException):
                smi.amdsmi_set_gpu_perf_level(self._handle, smi.AmdSmiDevPerfLevel.AUTO)

    def _lock_setter(self, what: str, mhz: float) -> AmdSetter:
        """A lock the card cannot take (not in a VM guest) or an invalid one is not accepted;
        anything else is an error."""
        hint = (
            "HBM cards (MI300X) keep a fixed memory clock"
            if what == "memory"
            else "the card or driver does not allow it"
        )
        label = self._label
        return AmdSetter(
            lambda exc: self._refusal(f"locking the {what} clock", f"{mhz:g} MHz", exc),
            self._is_guest,
            refuses=frozenset({"unsupported", "invalid"}),
            unsupported=lambda exc: (
                f"{label()} does not support {what} clock locks{cause(exc)}: {hint}"
            ),
            invalid=lambda exc: (
                f"{label()} rejected a {mhz:g} MHz {what} lock as invalid{cause(exc)}"
            ),
        )


def _levels_mhz(freq: Any) -> list[float]:
    """``amdsmi_get_clk_freq``'s levels (Hz) in MHz."""
    count = freq.get("num_supported")
    levels = list(freq.get("frequency") or ())[: count if isinstance(count, int) else None]
    return [hz / 1e6 for hz in (as_float(v, None) for v in levels) if hz is not None and hz > 0]
