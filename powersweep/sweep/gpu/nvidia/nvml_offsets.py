"""The SM clock's offset on the voltage/frequency curve of one NVIDIA GPU (issues 36 and 45),
and the memory clock's offset (issue 45), through the same calls.

The current calls, ``nvmlDeviceGetClockOffsets`` / ``nvmlDeviceSetClockOffsets``, take a
versioned ``nvmlClockOffset_t`` and name a performance state.

The reasoning: docs/architecture.md, "powersweep.sweep.gpu.nvidia.nvml_offsets".
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

from powersweep.errors import UsageError
from powersweep.sweep.gpu.nvidia.nvml_api import cause
from powersweep.sweep.gpu.nvidia.nvml_errors import NvmlSetter, fault_of, nvml_read, nvml_set
from powersweep.sweep.gpu.protocol import (
    MAX_CLOCK_MHZ,
    OFFSET_GRID_MHZ,
    ClockOffset,
    LockResult,
)

# The C symbols looked up by name (not pynvml attributes, so not in NVML_API_USED).
GET_CLOCK_OFFSETS = "nvmlDeviceGetClockOffsets"
SET_CLOCK_OFFSETS = "nvmlDeviceSetClockOffsets"

# A read-back less than one grid step from the request is the request, as the driver rounded it.
GRID_MHZ = OFFSET_GRID_MHZ

# Which clock an offset moves: the SM (graphics) clock's, or the memory clock's (issue 45).
OffsetClock = Literal["sm", "mem"]

# The performance states an offset is set in: P0, and P2, where GeForce cards run CUDA work
# (some link the two: setting one sets both). P0 decides; P2 refusing is said, not fatal.
P0, P2 = 0, 2


class ClockOffsetV1(ctypes.Structure):
    """``nvmlClockOffset_v1_t`` (nvml.h; ``c_nvmlClockOffset_t`` in nvidia-ml-py), 24 bytes.

    Declared here rather than taken from pynvml, so the call works with nvidia-ml-py releases
    that predate the struct; a test checks it against the installed one.
    """

    _fields_ = [
        ("version", ctypes.c_uint),
        ("type", ctypes.c_uint),  # nvmlClockType_t
        ("pstate", ctypes.c_uint),  # nvmlPstates_t
        ("clockOffsetMHz", ctypes.c_int),
        ("minClockOffsetMHz", ctypes.c_int),
        ("maxClockOffsetMHz", ctypes.c_int),
    ]


# NVML_STRUCT_VERSION(ClockOffset, 1): the struct's size with the version in the top byte.
CLOCK_OFFSET_V1 = ctypes.sizeof(ClockOffsetV1) | (1 << 24)


@dataclass(frozen=True)
class PstateOffset:
    """One performance state's offset as ``nvmlDeviceGetClockOffsets`` reads it, MHz."""

    offset_mhz: int
    min_mhz: int
    max_mhz: int


class NvmlOffsets:
    """The SM or memory clock offset of one GPU (:class:`~.nvml_clocks.NvmlClocks` hands it on).

    Args:
        nvml: The ``pynvml`` module (or a fake with the same surface).
        handle: NVML device handle.
        label: Names the GPU in messages.
        clock: ``sm`` (the graphics clock's offset) or ``mem`` (the memory clock's).
    """

    def __init__(
        self,
        nvml: ModuleType,
        handle: object,
        label: Callable[[], str],
        clock: OffsetClock = "sm",
    ) -> None:
        self._nvml = nvml
        self._mem = clock == "mem"
        self._what = "memory clock offset" if self._mem else "SM clock offset"
        self._a = "a memory" if self._mem else "an SM"
        self._handle = handle
        self._label = label
        # Set once a non-zero offset read back 0: this driver does not report applied offsets,
        # so a 0 it reads from then on proves nothing.
        self._unreported = False

    # --- reading ------------------------------------------------------------------------------

    def read(self) -> ClockOffset:
        """P0's offset and range (a note when P2's differs); never raises."""
        nvml = self._nvml
        try:
            p0 = self._get(P0)
        except nvml.NVMLError as exc:
            if self._missing(exc):
                return self._read_old()
            if fault_of(nvml, exc) == "unsupported":
                return ClockOffset(False, message=self._not_supported(exc))
            return ClockOffset(
                True, message=f"cannot read the {self._what} of {self._label()}{cause(exc)}"
            )
        offset, notes = self._in_force(p0.offset_mhz)
        p2 = self._get_quietly(P2)
        if p2 is not None and p2.offset_mhz != p0.offset_mhz:
            notes.append(f"P2 has {p2.offset_mhz:+d} MHz (P0's is shown)")
        bounds, problem = self._range(p0.min_mhz, p0.max_mhz)
        return _offset(offset, bounds, [*notes, problem])

    def _read_old(self) -> ClockOffset:
        nvml = self._nvml
        try:
            value = self._old_get()
        except nvml.NVMLError as exc:
            if fault_of(nvml, exc) == "unsupported":
                return ClockOffset(False, message=self._unsupported(exc))
            offset: float | None = None
            problems = [f"cannot read the {self._what} of {self._label()}{cause(exc)}"]
        else:
            offset, problems = self._in_force(value)
        bounds, problem = self._old_range()
        return _offset(offset, bounds, [*problems, problem])

    def _in_force(self, value: int) -> tuple[float | None, list[str]]:
        if self._unreported and value == 0:
            return None, [
                f"{self._label()} reads {self._a} clock offset of 0 MHz but its driver does not "
                "report applied offsets: the one in force is unknown"
            ]
        return float(value), []

    # --- setting ------------------------------------------------------------------------------

    def set(self, mhz: float) -> LockResult:
        """Set ``mhz`` (whole MHz) in P0 and P2, then read each back.

        Not accepted (no exception): outside P0's range (not sent), unsupported, invalid, or a
        read-back more than a grid step away. Accepted with ``verified`` False: the driver
        reads 0 back (it does not report applied offsets).

        Raises:
            UsageError: ``mhz`` is not a finite number within ±MAX_CLOCK_MHZ.
            GpuError: No permission (needs root) or an NVML failure.
        """
        if not (math.isfinite(mhz) and abs(mhz) <= MAX_CLOCK_MHZ):
            raise UsageError(
                f"a clock offset must be a number of MHz within ±{MAX_CLOCK_MHZ:g}, got {mhz}"
            )
        nvml, wanted = self._nvml, round(mhz)
        try:
            p0: PstateOffset | None = self._get(P0)
        except nvml.NVMLError as exc:
            if self._missing(exc):
                return self._set_old(mhz, wanted)
            p0 = None  # the range is unknown: the driver decides
        bounds = None if p0 is None else self._range(p0.min_mhz, p0.max_mhz)[0]
        if bounds is not None and not bounds[0] <= wanted <= bounds[1]:
            return self._out_of_range(mhz, bounds)
        try:
            self._put(P0, wanted)
        except nvml.NVMLError as exc:
            if self._missing(exc):
                return self._set_old(mhz, wanted)
            return LockResult(mhz, False, self._setter(mhz).refusal(nvml, exc).message)
        notes: list[str] = []
        pstates = [P0, *self._put_p2(mhz, wanted, notes)]
        return self._check_new(mhz, wanted, pstates, notes)

    def _put_p2(self, mhz: float, wanted: int, notes: list[str]) -> list[int]:
        """Set P2 as well (P0 took it): ``[P2]``, or ``[]`` with why when the driver refuses.

        Raises:
            GpuError: No permission or a failure: a write fails loudly, whichever pstate.
        """
        refusal = nvml_set(self._nvml, lambda: self._put(P2, wanted), lambda: self._setter(mhz))
        if refusal is not None:
            notes.append(f"P2 refused it{cause(refusal.exc)}: set in P0 only")
            return []
        return [P2]

    def _check_new(
        self, mhz: float, wanted: int, pstates: list[int], notes: list[str]
    ) -> LockResult:
        """Read back each pstate set; P0's read failing is a refusal, P2's is said (and leaves
        the result unverified)."""
        readbacks: dict[int | None, int] = {}
        for pstate in pstates:
            try:
                readbacks[pstate] = self._get(pstate).offset_mhz
            except self._nvml.NVMLError as exc:
                if pstate == P0:
                    return self._unreadable(mhz, exc)
                notes.append(f"P{pstate}'s could not be read back{cause(exc)}")
        return self._judge(mhz, wanted, readbacks, notes, all_read=len(readbacks) == len(pstates))

    def _set_old(self, mhz: float, wanted: int) -> LockResult:
        nvml = self._nvml
        bounds, _ = self._old_range()
        if bounds is not None and not bounds[0] <= wanted <= bounds[1]:
            return self._out_of_range(mhz, bounds)
        refusal = nvml_set(nvml, lambda: self._old_set(wanted), lambda: self._setter(mhz))
        if refusal is not None:
            return LockResult(mhz, False, refusal.message)
        try:
            readback = self._old_get()
        except nvml.NVMLError as exc:
            return self._unreadable(mhz, exc)
        return self._judge(mhz, wanted, {None: readback}, [])

    def _judge(
        self,
        mhz: float,
        wanted: int,
        readbacks: dict[int | None, int],
        notes: list[str],
        all_read: bool = True,
    ) -> LockResult:
        """Accepted when each pstate read back within a grid step of ``wanted``, or 0 (the
        driver does not report applied offsets: accepted, not verified). The applied value is
        the first read-back (P0's; the older call's only one)."""
        silent: list[int | None] = []
        for pstate, got in readbacks.items():
            if got == 0 and (self._unreported or abs(wanted) >= GRID_MHZ):
                silent.append(pstate)
            elif abs(got - wanted) >= GRID_MHZ:
                return LockResult(
                    mhz,
                    False,
                    f"{self._label()} kept a {got} MHz {self._what}{_where(pstate)} when "
                    f"{wanted} MHz was set",
                )
        first = next(iter(readbacks))
        applied = None if first in silent else readbacks[first]
        if applied is not None and applied != wanted:
            notes.insert(0, f"applied as {applied:+d} MHz (the driver's rounding)")
        if silent:
            self._unreported = self._unreported or wanted != 0
            where = " and".join(_where(p) for p in silent)
            notes.insert(
                0,
                f"{self._label()} took a {wanted:+d} MHz {self._what} but reads back 0 MHz"
                f"{where}: applied, not reported by this driver (unverified)",
            )
        return LockResult(
            mhz,
            True,
            "; ".join(notes),
            applied_mhz=None if applied is None else float(applied),
            verified=all_read and not silent,
        )

    def _setter(self, mhz: float) -> NvmlSetter:
        """How a set's errors read: unsupported and invalid are refusals (not accepted); no
        permission and other failures raise, whichever pstate."""
        label = self._label()
        return NvmlSetter(
            f"setting the {self._what} of {label}",
            f" to {mhz:g} MHz",
            refuses=frozenset({"unsupported", "invalid"}),
            unsupported=self._unsupported,
            invalid=f"{label} rejected a {mhz:g} MHz {self._what} as invalid",
        )

    def _unreadable(self, mhz: float, exc: Exception) -> LockResult:
        return LockResult(
            mhz,
            False,
            f"{self._label()} took a {mhz:g} MHz {self._what} but it could not be read "
            f"back{cause(exc)}",
        )

    def _out_of_range(self, mhz: float, bounds: tuple[int, int]) -> LockResult:
        return LockResult(
            mhz,
            False,
            f"{self._label()} accepts {self._what}s from {bounds[0]} to {bounds[1]} MHz, "
            f"not {mhz:g} MHz",
        )

    # --- the calls ----------------------------------------------------------------------------

    def _get(self, pstate: int) -> PstateOffset:
        info = self._call(GET_CLOCK_OFFSETS, pstate, 0)
        return PstateOffset(info.clockOffsetMHz, info.minClockOffsetMHz, info.maxClockOffsetMHz)

    def _get_quietly(self, pstate: int) -> PstateOffset | None:
        # None: a card without an offset in that pstate
        return nvml_read(self._nvml, lambda: self._get(pstate))

    def _put(self, pstate: int, mhz: int) -> None:
        self._call(SET_CLOCK_OFFSETS, pstate, mhz)

    def _call(self, name: str, pstate: int, mhz: int) -> ClockOffsetV1:
        """One call of the current API, its return code checked.

        Raises:
            NVMLError: the subclass of the driver's code (``NVMLError(code)`` maps it), or
                FunctionNotFound from the lookup when the driver lacks ``name``.
        """
        nvml = self._nvml
        fn = nvml._nvmlGetFunctionPointer(name)
        info = ClockOffsetV1(CLOCK_OFFSET_V1, self._type(), pstate, mhz)
        ret = fn(self._handle, ctypes.pointer(info))
        if ret != nvml.NVML_SUCCESS:
            raise nvml.NVMLError(ret)
        return info

    def _missing(self, exc: Exception) -> bool:
        """The current API is not there (or knows no version 1 of its struct)."""
        nvml = self._nvml
        return isinstance(exc, nvml.NVMLError_FunctionNotFound) or (
            getattr(exc, "value", None) == nvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        )

    def _old_range(self) -> tuple[tuple[int, int] | None, str]:
        """The offsets the older call says the driver accepts, MHz; None when it cannot tell,
        with why (empty when the driver does not support the call)."""
        nvml = self._nvml
        try:
            lo, hi = self._old_minmax()
        except nvml.NVMLError as exc:
            if fault_of(nvml, exc) == "unsupported":
                return None, ""
            return None, f"cannot read the {self._what} range of {self._label()}{cause(exc)}"
        return self._range(lo, hi)

    def _range(self, lo: int, hi: int) -> tuple[tuple[int, int] | None, str]:
        """A range the driver reports; None, with why, when it says min above max."""
        if lo > hi:
            return None, f"{self._label()} reports a {lo} to {hi} MHz {self._what} range"
        return (lo, hi), ""

    # --- the older calls, per clock (named as attributes: the API list is checked on them) ---

    def _type(self) -> int:
        """``nvmlClockType_t`` of this clock for the current calls."""
        nvml = self._nvml
        return int(nvml.NVML_CLOCK_MEM if self._mem else nvml.NVML_CLOCK_GRAPHICS)

    @property
    def _family(self) -> str:
        """The older calls' name part: ``GpcClk`` or ``MemClk``."""
        return "MemClk" if self._mem else "GpcClk"

    def _old_get(self) -> int:
        nvml = self._nvml
        if self._mem:
            return int(nvml.nvmlDeviceGetMemClkVfOffset(self._handle))
        return int(nvml.nvmlDeviceGetGpcClkVfOffset(self._handle))

    def _old_set(self, mhz: int) -> None:
        nvml = self._nvml
        if self._mem:
            nvml.nvmlDeviceSetMemClkVfOffset(self._handle, mhz)
        else:
            nvml.nvmlDeviceSetGpcClkVfOffset(self._handle, mhz)

    def _old_minmax(self) -> tuple[int, int]:
        # Called with the handle only: the binding then returns (min, max). (Its default
        # arguments are ctypes ints shared by every call; read at once, they are harmless.)
        nvml = self._nvml
        if self._mem:
            lo, hi = nvml.nvmlDeviceGetMemClkMinMaxVfOffset(self._handle)
        else:
            lo, hi = nvml.nvmlDeviceGetGpcClkMinMaxVfOffset(self._handle)
        return int(lo), int(hi)

    # --- messages -----------------------------------------------------------------------------

    def _unsupported(self, exc: Exception) -> str:
        """Why an older call failed: the driver has neither API, or the card says no."""
        if isinstance(exc, self._nvml.NVMLError_FunctionNotFound):
            return (
                f"{self._label()} cannot have {self._a} clock offset: its driver is too old "
                f"(it has neither nvmlDevice{{Get,Set}}ClockOffsets nor the older "
                f"nvmlDevice{{Get,Set}}{self._family}VfOffset){cause(exc)}"
            )
        return self._not_supported(exc)

    def _not_supported(self, exc: Exception) -> str:
        return f"{self._label()} does not support {self._a} clock offset{cause(exc)}"


def _offset(offset: float | None, bounds: tuple[int, int] | None, notes: list[str]) -> ClockOffset:
    """A supported offset with its range and the non-empty notes on one line."""
    lo, hi = (None, None) if bounds is None else (float(bounds[0]), float(bounds[1]))
    return ClockOffset(True, offset, lo, hi, "; ".join(n for n in notes if n))


def _where(pstate: int | None) -> str:
    """`` in P2``; empty for the older call, which names no pstate."""
    return "" if pstate is None else f" in P{pstate}"
