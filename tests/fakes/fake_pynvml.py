"""A configurable fake of the part of ``pynvml`` (nvidia-ml-py) powersweep uses.

:class:`FakeNvml` is a module object (a :class:`types.ModuleType`) with the same function,
constant and exception names as ``pynvml``, holding the state of one or more
:class:`FakeDevice` s. Pass it where the real module would go::

    fake = FakeNvml(devices=[FakeDevice(min_mw=100_000, default_mw=370_000, max_mw=390_000,
                                        limit_mw=350_000)])
    backend = NvmlBackend(nvml=fake)

What it can do:

* Units as NVML: power and limits in mW, energy in mJ, clocks in MHz, temperatures in °C.
* Failures: ``FakeDevice.fail`` / ``FakeNvml.fail`` map a function name to an NVML error code
  (``NVML_ERROR_*``) that the function raises on every call until the entry is removed;
  ``FakeDevice.fail_fields`` maps a field id to the ``nvmlReturn`` its field value carries.
* Capabilities: ``instant_power_mw=None`` (instant power field unsupported),
  ``energy_mj=None`` (energy counter unsupported), ``power_managed=False`` (no power limits).
* Limits: a request outside ``[min_mw, max_mw]`` raises ``NVMLError_InvalidArgument`` as the
  driver does; ``silent_floor_mw`` makes the card succeed but silently keep its old limit for
  requests below it (an RTX 5090 refusing caps under 400 W); ``enforced_cap_mw`` is an
  out-of-band limit the enforced limit never exceeds.
* Persistence mode: ``persistence_mode`` (``NVML_FEATURE_DISABLED``/``ENABLED``);
  ``persistence_supported=False`` makes both calls NOT_SUPPORTED (Windows, some VMs).
* Power follows the cap: with ``clamp_power`` (default) both power readings are clamped to the
  enforced limit, and :meth:`FakeDevice.tick` advances the energy counter by the draw.
* Clock locks: ``supported_mem_mhz`` (descending, as NVML lists them) and ``supported_sm_mhz``
  (per memory clock; default: 2100 down to 210 MHz in 15 MHz steps, ≤ 1005 MHz at the idle
  tiers); ``sm_locks_supported`` / ``mem_locks_supported`` False make the lock and reset calls
  NOT_SUPPORTED (GeForce cards refuse memory locks); a lock outside the listed range, or with
  min > max, is INVALID_ARGUMENT. ``locked_sm`` / ``locked_mem`` hold the ``(min, max)`` set;
  the clocks read follow them unless ``clocks_follow_locks`` is False (a lock silently ignored).
* SM clock offset (the voltage/frequency curve, issues 36 and 45), per performance state:
  ``sm_offset_mhz`` is P0's (0 by default), ``sm_offset_p2_mhz`` P2's (None: P2 takes no offset,
  and the current calls answer ``sm_offset_p2_refusal`` for it, INVALID_ARGUMENT by default; any
  other pstate is INVALID_ARGUMENT), both in ``sm_offset_range_mhz`` (``(min, max)``, default
  -200..+1000 MHz). Two APIs, as drivers have them: the current ``nvmlDevice{Get,Set}
  ClockOffsets``, reached only through ``_nvmlGetFunctionPointer`` (as C functions: they take a
  ``pointer`` to an ``nvmlClockOffset_t`` of version 1, type NVML_CLOCK_GRAPHICS, and return the
  NVML code; ``FakeNvml(clock_offsets_api=False)``: an older driver, the lookup raises
  FUNCTION_NOT_FOUND), and the older ``nvmlDevice*GpcClk*VfOffset`` bindings, which raise (they
  read P0 and set P0 and P2, the offset of every pstate; ``FakeNvml(gpc_offset_api=False)``: a
  driver that dropped them, FUNCTION_NOT_FOUND). A set outside the range, or not a whole number,
  is INVALID_ARGUMENT; a struct of another version is ARGUMENT_VERSION_MISMATCH;
  ``sm_offset_supported=False`` makes every offset call NOT_SUPPORTED; ``sm_offset_applies=False``
  makes a set succeed but leave the offset unchanged; ``sm_offset_linked`` links P0 and P2
  (setting one sets both); ``sm_offset_grid_mhz=15`` rounds a set offset toward 0 to the 15 MHz
  grid; ``sm_offset_reported=False`` makes every read of an offset 0 (a driver that does not
  report applied offsets). ``fail`` works for the current calls too, as the code they return:
  ``fail={"nvmlDeviceSetClockOffsets": NVML_ERROR_NO_PERMISSION}``. ``FakeNvml.offset_structs``
  records each current call's struct as ``(name, device index, version, type, pstate, MHz)``.
* Memory clock offset (issue 45): the same, with ``mem_offset_mhz`` / ``mem_offset_p2_mhz`` /
  ``mem_offset_range_mhz`` (default -2000..+6000, NVML's unit) / ``mem_offset_supported``, the
  current calls with type NVML_CLOCK_MEM and the older ``nvmlDevice*MemClk*VfOffset``; the SM
  offset's ``applies``, ``linked``, ``grid`` and ``reported`` flags hold for it too.
* Xid events: ``FakeNvml.inject_xid(index, xid)`` delivers an Xid to every live event set the
  device is registered in (none registered: lost, as with NVML); ``FakeNvml.event_sets`` holds
  every set created (``queue`` of :class:`FakeEventData`, ``freed``), so a test can also queue
  events of its own. ``xid_events_supported=False`` leaves ``nvmlEventTypeXidCriticalError``
  out of ``nvmlDeviceGetSupportedEventTypes`` and makes registering for it NOT_SUPPORTED; an
  empty set's ``nvmlEventSetWait_v2`` raises ``NVMLError_Timeout`` at once (it never waits).
* ``FakeNvml.calls`` records every call as ``(function name, device index or None)``.

Only the standard library is imported, so tests can load this file by path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar

# --- constants (values as in nvidia-ml-py) -------------------------------------------------

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186

NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6

NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1

NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2

NVML_PSTATE_0 = 0
NVML_PSTATE_2 = 2
NVML_PSTATE_UNKNOWN = 32

# NVML_STRUCT_VERSION(ClockOffset, 1): the 24-byte nvmlClockOffset_t, version 1 in the top byte.
nvmlClockOffset_v1 = 24 | (1 << 24)

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1

nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypePState = 0x4
nvmlEventTypeXidCriticalError = 0x8
nvmlEventTypeClock = 0x10

_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "Argument Version Mismatch",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


# --- errors (same names and hierarchy as nvidia-ml-py) -------------------------------------


class NVMLError(Exception):
    """Base NVML error; ``value`` is the NVML return code."""

    code: ClassVar[int] = NVML_ERROR_UNKNOWN

    def __new__(cls, value: int | None = None) -> NVMLError:
        # As pynvml's: NVMLError(code) is the subclass of that code where there is one.
        if cls is NVMLError and value is not None:
            cls = _ERROR_CLASSES.get(value, NVMLError)
        return super().__new__(cls)

    def __init__(self, value: int | None = None) -> None:
        self.value = type(self).code if value is None else value
        super().__init__(self.value)

    def __str__(self) -> str:
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")


class NVMLError_Uninitialized(NVMLError):
    code = NVML_ERROR_UNINITIALIZED


class NVMLError_InvalidArgument(NVMLError):
    code = NVML_ERROR_INVALID_ARGUMENT


class NVMLError_NotSupported(NVMLError):
    code = NVML_ERROR_NOT_SUPPORTED


class NVMLError_NoPermission(NVMLError):
    code = NVML_ERROR_NO_PERMISSION


class NVMLError_NotFound(NVMLError):
    code = NVML_ERROR_NOT_FOUND


class NVMLError_DriverNotLoaded(NVMLError):
    code = NVML_ERROR_DRIVER_NOT_LOADED


class NVMLError_Timeout(NVMLError):
    code = NVML_ERROR_TIMEOUT


class NVMLError_LibraryNotFound(NVMLError):
    code = NVML_ERROR_LIBRARY_NOT_FOUND


class NVMLError_FunctionNotFound(NVMLError):
    code = NVML_ERROR_FUNCTION_NOT_FOUND


class NVMLError_GpuIsLost(NVMLError):
    code = NVML_ERROR_GPU_IS_LOST


class NVMLError_ArgumentVersionMismatch(NVMLError):
    code = NVML_ERROR_ARGUMENT_VERSION_MISMATCH


class NVMLError_Unknown(NVMLError):
    code = NVML_ERROR_UNKNOWN


_ERROR_CLASSES: dict[int, type[NVMLError]] = {
    cls.code: cls
    for cls in (
        NVMLError_Uninitialized,
        NVMLError_InvalidArgument,
        NVMLError_NotSupported,
        NVMLError_NoPermission,
        NVMLError_NotFound,
        NVMLError_DriverNotLoaded,
        NVMLError_Timeout,
        NVMLError_LibraryNotFound,
        NVMLError_FunctionNotFound,
        NVMLError_GpuIsLost,
        NVMLError_ArgumentVersionMismatch,
        NVMLError_Unknown,
    )
}


def make_error(code: int) -> NVMLError:
    """Return the error pynvml raises for ``code`` (its subclass when one exists)."""
    return _ERROR_CLASSES.get(code, NVMLError)(code)


_CLOCK_OFFSET_CALLS = ("nvmlDeviceGetClockOffsets", "nvmlDeviceSetClockOffsets")


# --- result structures ---------------------------------------------------------------------


@dataclass
class FakeMemory:
    """Like ``c_nvmlMemory_t`` (bytes)."""

    total: int
    free: int
    used: int


@dataclass
class FakeUtilization:
    """Like ``c_nvmlUtilization_t`` (percent)."""

    gpu: int
    memory: int


@dataclass
class FakeValue:
    """Like the ``c_nvmlValue_t`` union: every member holds the same number."""

    dVal: float = 0.0
    uiVal: int = 0
    ulVal: int = 0
    ullVal: int = 0
    sllVal: int = 0
    siVal: int = 0
    usVal: int = 0

    @classmethod
    def of(cls, number: int) -> FakeValue:
        return cls(float(number), number, number, number, number, number, number & 0xFFFF)


@dataclass
class FakeFieldValue:
    """Like ``c_nvmlFieldValue_t``."""

    fieldId: int
    scopeId: int = 0
    timestamp: int = 0
    latencyUsec: int = 0
    valueType: int = NVML_VALUE_TYPE_UNSIGNED_INT
    nvmlReturn: int = NVML_SUCCESS
    value: FakeValue = field(default_factory=FakeValue)


@dataclass
class FakeProcessInfo:
    """Like the friendly object ``nvmlDeviceGetComputeRunningProcesses`` returns for each
    ``c_nvmlProcessInfo_t``: ``usedGpuMemory`` in bytes, None where NVML cannot say."""

    pid: int
    usedGpuMemory: int | None = 8 * 2**30
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class FakeEventData:
    """Like ``c_nvmlEventData_t``: ``eventData`` is the Xid of an Xid event."""

    device: Any
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass(eq=False)
class FakeEventSet:
    """Like ``c_nvmlEventSet_t``: the devices registered (with their event mask), the events
    not yet waited for (oldest first), and whether it was freed."""

    registered: list[tuple[Any, int]] = field(default_factory=list)
    queue: list[FakeEventData] = field(default_factory=list)
    freed: bool = False


# --- devices -------------------------------------------------------------------------------


@dataclass
class FakeDevice:
    """State of one fake GPU (NVML units: mW, mJ, MHz, °C). Mutate it freely during a test.

    Attributes:
        processes: What ``nvmlDeviceGetComputeRunningProcesses`` lists.
        fail: Function name -> NVML error code raised on every call of it for this device.
        fail_fields: Field id -> ``nvmlReturn`` code of that field in ``nvmlDeviceGetFieldValues``.
        instant_power_mw: Instant power field; None makes the field NOT_SUPPORTED.
        energy_mj: Energy counter; None makes ``nvmlDeviceGetTotalEnergyConsumption``
            NOT_SUPPORTED.
        power_managed: False makes every power-limit call NOT_SUPPORTED (laptop, some VMs).
        silent_floor_mw: A set below it succeeds but leaves the limit unchanged.
        enforced_cap_mw: Out-of-band limit: the enforced limit never exceeds it.
        clamp_power: Clamp both power readings to the enforced limit.
        persistence_mode: ``NVML_FEATURE_ENABLED`` or ``NVML_FEATURE_DISABLED``.
        persistence_supported: False makes the persistence-mode calls NOT_SUPPORTED.
        sm_offset_mhz: The SM (GPC) clock offset in force in P0, MHz.
        sm_offset_p2_mhz: P2's; None: P2 takes no offset.
        sm_offset_p2_refusal: The code the current calls answer for P2 when it takes none.
        sm_offset_range_mhz: ``(min, max)`` offsets the driver accepts, MHz (every pstate).
        sm_offset_supported: False makes the offset calls NOT_SUPPORTED.
        sm_offset_applies: False makes a set succeed but keep the offset it had.
        sm_offset_linked: P0 and P2 share one offset: setting one sets both.
        sm_offset_grid_mhz: A set offset is rounded toward 0 to a multiple of it.
        sm_offset_reported: False: every read of an offset says 0.
        mem_offset_mhz: The memory clock offset in force in P0, MHz (NVML's unit); the SM
            offset's grid, linking, applying and reporting flags hold for it too.
        mem_offset_p2_mhz: P2's; None: P2 takes no memory offset.
        mem_offset_range_mhz: ``(min, max)`` memory offsets the driver accepts, MHz.
        mem_offset_supported: False makes the memory offset calls NOT_SUPPORTED.
        xid_events_supported: False: no Xid events (not listed as supported, refused).
    """

    name: str = "NVIDIA GeForce RTX 3090"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    vram_mib: int = 24576
    min_mw: int = 100_000
    default_mw: int = 350_000
    max_mw: int = 390_000
    limit_mw: int = 350_000
    enforced_cap_mw: int | None = None
    silent_floor_mw: int | None = None
    power_managed: bool = True
    power_mw: int = 250_000
    instant_power_mw: int | None = 260_000
    clamp_power: bool = True
    energy_mj: int | None = 1_000_000
    temp_c: int = 60
    slowdown_temp_c: int = 90
    sm_clock_mhz: int = 1800
    mem_clock_mhz: int = 9751
    util_pct: int = 97
    memory_util_pct: int = 40
    pstate: int = 2
    clock_event_bits: int = 0
    persistence_mode: int = NVML_FEATURE_DISABLED
    persistence_supported: bool = True
    fail: dict[str, int] = field(default_factory=dict)
    fail_fields: dict[int, int] = field(default_factory=dict)
    supported_mem_mhz: list[int] = field(default_factory=lambda: [9751, 9501, 5001, 810, 405])
    supported_sm_mhz: dict[int, list[int]] | None = None
    sm_locks_supported: bool = True
    mem_locks_supported: bool = True
    locked_sm: tuple[int, int] | None = None
    locked_mem: tuple[int, int] | None = None
    clocks_follow_locks: bool = True
    sm_offset_mhz: int = 0
    sm_offset_range_mhz: tuple[int, int] = (-200, 1000)
    sm_offset_supported: bool = True
    sm_offset_applies: bool = True
    sm_offset_p2_mhz: int | None = 0
    sm_offset_p2_refusal: int = NVML_ERROR_INVALID_ARGUMENT
    sm_offset_linked: bool = False
    sm_offset_grid_mhz: int = 1
    sm_offset_reported: bool = True
    mem_offset_mhz: int = 0
    mem_offset_p2_mhz: int | None = 0
    mem_offset_range_mhz: tuple[int, int] = (-2000, 6000)
    mem_offset_supported: bool = True
    processes: list[FakeProcessInfo] = field(default_factory=list)
    xid_events_supported: bool = True

    @property
    def supported_event_types(self) -> int:
        """What ``nvmlDeviceGetSupportedEventTypes`` returns (a bit mask)."""
        xid = nvmlEventTypeXidCriticalError if self.xid_events_supported else 0
        return nvmlEventTypePState | nvmlEventTypeClock | xid

    def offset_supported(self, clock: int) -> bool:
        """Whether the card has an offset of ``clock`` (NVML_CLOCK_GRAPHICS or _MEM)."""
        return self.mem_offset_supported if clock == NVML_CLOCK_MEM else self.sm_offset_supported

    def offset_range(self, clock: int) -> tuple[int, int]:
        """The offsets of ``clock`` the driver accepts, MHz."""
        return self.mem_offset_range_mhz if clock == NVML_CLOCK_MEM else self.sm_offset_range_mhz

    def offset_of(self, pstate: int, clock: int = NVML_CLOCK_GRAPHICS) -> int:
        """A pstate's offset of ``clock`` as the driver reads it (NVML error when it has none)."""
        mem = clock == NVML_CLOCK_MEM
        p2 = self.mem_offset_p2_mhz if mem else self.sm_offset_p2_mhz
        if pstate == 0:
            value = self.mem_offset_mhz if mem else self.sm_offset_mhz
        elif pstate == 2 and p2 is not None:
            value = p2
        else:
            raise make_error(
                self.sm_offset_p2_refusal if pstate == 2 else NVML_ERROR_INVALID_ARGUMENT
            )
        return value if self.sm_offset_reported else 0

    def put_offset(
        self, pstates: Sequence[int], offset: int, clock: int = NVML_CLOCK_GRAPHICS
    ) -> None:
        """Set the offset of ``clock`` in ``pstates`` (after the range check) as the driver
        would."""
        for pstate in pstates:
            self.offset_of(pstate, clock)  # a pstate without an offset refuses
        if not self.sm_offset_applies:
            return
        grid = self.sm_offset_grid_mhz
        applied = int(offset / grid) * grid
        linked = {0, 2} if self.sm_offset_linked and set(pstates) & {0, 2} else set()
        mem = clock == NVML_CLOCK_MEM
        for pstate in set(pstates) | linked:
            if pstate == 0 and mem:
                self.mem_offset_mhz = applied
            elif pstate == 0:
                self.sm_offset_mhz = applied
            elif mem and self.mem_offset_p2_mhz is not None:
                self.mem_offset_p2_mhz = applied
            elif not mem and self.sm_offset_p2_mhz is not None:
                self.sm_offset_p2_mhz = applied

    def graphics_clocks(self, mem_mhz: int) -> list[int]:
        """SM clocks listed for a memory clock, descending."""
        if self.supported_sm_mhz is not None:
            return list(self.supported_sm_mhz.get(mem_mhz, []))
        top = 1005 if mem_mhz < 1000 else 2100
        return list(range(top, 209, -15))

    @property
    def enforced_mw(self) -> int:
        """The limit in force: the set one, lowered by any out-of-band cap."""
        if self.enforced_cap_mw is None:
            return self.limit_mw
        return min(self.limit_mw, self.enforced_cap_mw)

    def reported_power_mw(self, instant: bool) -> int:
        """What a power reading returns now."""
        raw = self.instant_power_mw if instant and self.instant_power_mw is not None else None
        mw = self.power_mw if raw is None else raw
        return min(mw, self.enforced_mw) if self.clamp_power else mw

    def tick(self, seconds: float) -> None:
        """Advance the energy counter by the average draw over ``seconds``."""
        if self.energy_mj is not None:
            self.energy_mj += round(self.reported_power_mw(instant=False) * seconds)


# --- the module ----------------------------------------------------------------------------


class FakeNvml(ModuleType):
    """A ``pynvml``-like module over a list of :class:`FakeDevice` (handles are the devices).

    Args:
        devices: The GPUs, in NVML index order (one default device when omitted).
        driver_version: What ``nvmlSystemGetDriverVersion`` returns.
        fail: Module-level function name (``nvmlInit``, ``nvmlShutdown``,
            ``nvmlDeviceGetCount``, ``nvmlSystemGetDriverVersion``, ``nvmlDeviceGetHandleByIndex``)
            -> NVML error code it raises.
        strings_as_bytes: Return names, UUIDs and versions as bytes, like old bindings.
        clock_offsets_api: The driver exports ``nvmlDevice{Get,Set}ClockOffsets``; False: the
            function-pointer lookup raises FUNCTION_NOT_FOUND for them.
        gpc_offset_api: The driver has the older ``nvmlDevice*GpcClk*VfOffset`` calls; False:
            they raise FUNCTION_NOT_FOUND.
    """

    NVML_SUCCESS = NVML_SUCCESS
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED
    NVML_ERROR_INVALID_ARGUMENT = NVML_ERROR_INVALID_ARGUMENT
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = NVML_ERROR_NO_PERMISSION
    NVML_ERROR_NOT_FOUND = NVML_ERROR_NOT_FOUND
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_TIMEOUT = NVML_ERROR_TIMEOUT
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_FUNCTION_NOT_FOUND = NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    NVML_ERROR_UNKNOWN = NVML_ERROR_UNKNOWN
    NVML_FI_DEV_POWER_AVERAGE = NVML_FI_DEV_POWER_AVERAGE
    NVML_FI_DEV_POWER_INSTANT = NVML_FI_DEV_POWER_INSTANT
    NVML_VALUE_TYPE_DOUBLE = NVML_VALUE_TYPE_DOUBLE
    NVML_VALUE_TYPE_UNSIGNED_INT = NVML_VALUE_TYPE_UNSIGNED_INT
    NVML_VALUE_TYPE_UNSIGNED_LONG = NVML_VALUE_TYPE_UNSIGNED_LONG
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = NVML_VALUE_TYPE_SIGNED_LONG_LONG
    NVML_VALUE_TYPE_SIGNED_INT = NVML_VALUE_TYPE_SIGNED_INT
    NVML_VALUE_TYPE_UNSIGNED_SHORT = NVML_VALUE_TYPE_UNSIGNED_SHORT
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    NVML_CLOCK_GRAPHICS = NVML_CLOCK_GRAPHICS
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_PSTATE_0 = NVML_PSTATE_0
    NVML_PSTATE_2 = NVML_PSTATE_2
    NVML_PSTATE_UNKNOWN = NVML_PSTATE_UNKNOWN
    nvmlClockOffset_v1 = nvmlClockOffset_v1
    NVML_FEATURE_DISABLED = NVML_FEATURE_DISABLED
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    nvmlEventTypeSingleBitEccError = nvmlEventTypeSingleBitEccError
    nvmlEventTypeDoubleBitEccError = nvmlEventTypeDoubleBitEccError
    nvmlEventTypePState = nvmlEventTypePState
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError
    nvmlEventTypeClock = nvmlEventTypeClock

    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_Timeout = NVMLError_Timeout
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_ArgumentVersionMismatch = NVMLError_ArgumentVersionMismatch
    NVMLError_Unknown = NVMLError_Unknown

    def __init__(
        self,
        devices: Sequence[FakeDevice] | None = None,
        *,
        driver_version: str = "570.133.07",
        fail: dict[str, int] | None = None,
        strings_as_bytes: bool = False,
        clock_offsets_api: bool = True,
        gpc_offset_api: bool = True,
    ) -> None:
        super().__init__("fake_pynvml")
        self.devices: list[FakeDevice] = list(devices) if devices is not None else [FakeDevice()]
        self.driver_version = driver_version
        self.fail: dict[str, int] = dict(fail or {})
        self.strings_as_bytes = strings_as_bytes
        self.init_count = 0
        self.shutdown_calls = 0
        self.calls: list[tuple[str, int | None]] = []
        self.event_sets: list[FakeEventSet] = []
        self.clock_offsets_api = clock_offsets_api
        self.gpc_offset_api = gpc_offset_api
        self.offset_structs: list[tuple[str, int, int, int, int, int]] = []

    # --- bookkeeping -----------------------------------------------------------------------

    def calls_to(self, name: str) -> int:
        """How many times the function ``name`` was called (any device)."""
        return sum(1 for called, _ in self.calls if called == name)

    def _module_call(self, name: str) -> None:
        self.calls.append((name, None))
        if name in self.fail:
            raise make_error(self.fail[name])
        if name != "nvmlInit" and self.init_count <= 0:
            raise NVMLError_Uninitialized()

    def _device_call(self, name: str, handle: Any) -> FakeDevice:
        if not isinstance(handle, FakeDevice) or handle not in self.devices:
            raise NVMLError_InvalidArgument()
        self.calls.append((name, self.devices.index(handle)))
        if self.init_count <= 0:
            raise NVMLError_Uninitialized()
        if name in handle.fail:
            raise make_error(handle.fail[name])
        return handle

    def _text(self, value: str) -> Any:
        return value.encode() if self.strings_as_bytes else value

    @staticmethod
    def _managed(device: FakeDevice) -> None:
        if not device.power_managed:
            raise NVMLError_NotSupported()

    # --- library ---------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._module_call("nvmlInit")
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._module_call("nvmlShutdown")
        self.shutdown_calls += 1
        self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> Any:
        self._module_call("nvmlSystemGetDriverVersion")
        return self._text(self.driver_version)

    def nvmlDeviceGetCount(self) -> int:
        self._module_call("nvmlDeviceGetCount")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        self._module_call("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.devices):
            raise NVMLError_InvalidArgument()
        return self.devices[index]

    # --- identity --------------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: Any) -> Any:
        return self._text(self._device_call("nvmlDeviceGetName", handle).name)

    def nvmlDeviceGetUUID(self, handle: Any) -> Any:
        return self._text(self._device_call("nvmlDeviceGetUUID", handle).uuid)

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> FakeMemory:
        device = self._device_call("nvmlDeviceGetMemoryInfo", handle)
        total = device.vram_mib * 1024 * 1024
        return FakeMemory(total=total, free=total // 2, used=total - total // 2)

    # --- readings --------------------------------------------------------------------------

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._device_call("nvmlDeviceGetPowerUsage", handle).reported_power_mw(False)

    def nvmlDeviceGetFieldValues(
        self, handle: Any, fieldIds: Sequence[int | tuple[int, int]]
    ) -> list[FakeFieldValue]:
        device = self._device_call("nvmlDeviceGetFieldValues", handle)
        values = []
        for requested in fieldIds:
            field_id, scope_id = requested if isinstance(requested, tuple) else (requested, 0)
            fv = FakeFieldValue(fieldId=field_id, scopeId=scope_id)
            if field_id in device.fail_fields:
                fv.nvmlReturn = device.fail_fields[field_id]
            elif field_id == NVML_FI_DEV_POWER_INSTANT and device.instant_power_mw is not None:
                fv.value = FakeValue.of(device.reported_power_mw(True))
            elif field_id == NVML_FI_DEV_POWER_AVERAGE:
                fv.value = FakeValue.of(device.reported_power_mw(False))
            else:
                fv.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
            values.append(fv)
        return values

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        device = self._device_call("nvmlDeviceGetTotalEnergyConsumption", handle)
        if device.energy_mj is None:
            raise NVMLError_NotSupported()
        return device.energy_mj

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        device = self._device_call("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError_InvalidArgument()
        return device.temp_c

    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int:
        device = self._device_call("nvmlDeviceGetTemperatureThreshold", handle)
        if threshold != NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            raise NVMLError_NotSupported()
        return device.slowdown_temp_c

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        device = self._device_call("nvmlDeviceGetClockInfo", handle)
        follow = device.clocks_follow_locks
        if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            return device.locked_sm[1] if follow and device.locked_sm else device.sm_clock_mhz
        if type == NVML_CLOCK_MEM:
            return device.locked_mem[1] if follow and device.locked_mem else device.mem_clock_mhz
        raise NVMLError_InvalidArgument()

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> FakeUtilization:
        device = self._device_call("nvmlDeviceGetUtilizationRates", handle)
        return FakeUtilization(gpu=device.util_pct, memory=device.memory_util_pct)

    def nvmlDeviceGetPerformanceState(self, handle: Any) -> int:
        return self._device_call("nvmlDeviceGetPerformanceState", handle).pstate

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._device_call("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_event_bits

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[FakeProcessInfo]:
        device = self._device_call("nvmlDeviceGetComputeRunningProcesses", handle)
        return list(device.processes)

    # --- power limits ----------------------------------------------------------------------

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any) -> list[int]:
        device = self._device_call("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        self._managed(device)
        return [device.min_mw, device.max_mw]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any) -> int:
        device = self._device_call("nvmlDeviceGetPowerManagementDefaultLimit", handle)
        self._managed(device)
        return device.default_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        device = self._device_call("nvmlDeviceGetPowerManagementLimit", handle)
        self._managed(device)
        return device.limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        device = self._device_call("nvmlDeviceGetEnforcedPowerLimit", handle)
        self._managed(device)
        return device.enforced_mw

    def nvmlDeviceSetPowerManagementLimit(self, handle: Any, limit: int) -> None:
        device = self._device_call("nvmlDeviceSetPowerManagementLimit", handle)
        self._managed(device)
        if not isinstance(limit, int) or not device.min_mw <= limit <= device.max_mw:
            raise NVMLError_InvalidArgument()
        if device.silent_floor_mw is not None and limit < device.silent_floor_mw:
            return  # the card says yes and keeps what it had
        device.limit_mw = limit

    # --- persistence mode ------------------------------------------------------------------

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        device = self._device_call("nvmlDeviceGetPersistenceMode", handle)
        if not device.persistence_supported:
            raise NVMLError_NotSupported()
        return device.persistence_mode

    def nvmlDeviceSetPersistenceMode(self, handle: Any, mode: int) -> None:
        device = self._device_call("nvmlDeviceSetPersistenceMode", handle)
        if not device.persistence_supported:
            raise NVMLError_NotSupported()
        if mode not in (NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED):
            raise NVMLError_InvalidArgument()
        device.persistence_mode = mode

    # --- clock locks -------------------------------------------------------------------------

    def nvmlDeviceGetSupportedMemoryClocks(self, handle: Any) -> list[int]:
        device = self._device_call("nvmlDeviceGetSupportedMemoryClocks", handle)
        return list(device.supported_mem_mhz)

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: Any, memoryClockMHz: int) -> list[int]:
        device = self._device_call("nvmlDeviceGetSupportedGraphicsClocks", handle)
        if memoryClockMHz not in device.supported_mem_mhz:
            raise NVMLError_InvalidArgument()
        return device.graphics_clocks(memoryClockMHz)

    def nvmlDeviceSetGpuLockedClocks(
        self, handle: Any, minGpuClockMHz: int, maxGpuClockMHz: int
    ) -> None:
        device = self._device_call("nvmlDeviceSetGpuLockedClocks", handle)
        if not device.sm_locks_supported:
            raise NVMLError_NotSupported()
        listed = {f for m in device.supported_mem_mhz for f in device.graphics_clocks(m)}
        lo, hi = min(listed), max(listed)
        if not (isinstance(minGpuClockMHz, int) and isinstance(maxGpuClockMHz, int)):
            raise NVMLError_InvalidArgument()
        if minGpuClockMHz > maxGpuClockMHz or not lo <= minGpuClockMHz <= hi:
            raise NVMLError_InvalidArgument()
        device.locked_sm = (minGpuClockMHz, maxGpuClockMHz)

    def nvmlDeviceResetGpuLockedClocks(self, handle: Any) -> None:
        device = self._device_call("nvmlDeviceResetGpuLockedClocks", handle)
        if not device.sm_locks_supported:
            raise NVMLError_NotSupported()
        device.locked_sm = None

    def nvmlDeviceSetMemoryLockedClocks(
        self, handle: Any, minMemClockMHz: int, maxMemClockMHz: int
    ) -> None:
        device = self._device_call("nvmlDeviceSetMemoryLockedClocks", handle)
        if not device.mem_locks_supported:
            raise NVMLError_NotSupported()
        if not (isinstance(minMemClockMHz, int) and isinstance(maxMemClockMHz, int)):
            raise NVMLError_InvalidArgument()
        listed = device.supported_mem_mhz
        if minMemClockMHz > maxMemClockMHz or not min(listed) <= minMemClockMHz <= max(listed):
            raise NVMLError_InvalidArgument()
        device.locked_mem = (minMemClockMHz, maxMemClockMHz)

    def nvmlDeviceResetMemoryLockedClocks(self, handle: Any) -> None:
        device = self._device_call("nvmlDeviceResetMemoryLockedClocks", handle)
        if not device.mem_locks_supported:
            raise NVMLError_NotSupported()
        device.locked_mem = None

    # --- SM clock offset ---------------------------------------------------------------------

    def _offset_device(
        self, name: str, handle: Any, clock: int = NVML_CLOCK_GRAPHICS
    ) -> FakeDevice:
        device = self._device_call(name, handle)
        if not self.gpc_offset_api:
            raise NVMLError_FunctionNotFound()
        if not device.offset_supported(clock):
            raise NVMLError_NotSupported()
        return device

    def nvmlDeviceGetGpcClkVfOffset(self, handle: Any) -> int:
        return self._offset_device("nvmlDeviceGetGpcClkVfOffset", handle).offset_of(0)

    def nvmlDeviceGetGpcClkMinMaxVfOffset(self, handle: Any) -> tuple[int, int]:
        device = self._offset_device("nvmlDeviceGetGpcClkMinMaxVfOffset", handle)
        return device.sm_offset_range_mhz

    def nvmlDeviceSetGpcClkVfOffset(self, handle: Any, offset: int) -> None:
        device = self._offset_device("nvmlDeviceSetGpcClkVfOffset", handle)
        lo, hi = device.sm_offset_range_mhz
        if not isinstance(offset, int) or not lo <= offset <= hi:
            raise NVMLError_InvalidArgument()
        device.put_offset([0] if device.sm_offset_p2_mhz is None else [0, 2], offset)

    # the memory clock's older calls (``gpc_offset_api`` covers them too: the same drivers)

    def nvmlDeviceGetMemClkVfOffset(self, handle: Any) -> int:
        name = "nvmlDeviceGetMemClkVfOffset"
        return self._offset_device(name, handle, NVML_CLOCK_MEM).offset_of(0, NVML_CLOCK_MEM)

    def nvmlDeviceGetMemClkMinMaxVfOffset(self, handle: Any) -> tuple[int, int]:
        device = self._offset_device("nvmlDeviceGetMemClkMinMaxVfOffset", handle, NVML_CLOCK_MEM)
        return device.mem_offset_range_mhz

    def nvmlDeviceSetMemClkVfOffset(self, handle: Any, offset: int) -> None:
        device = self._offset_device("nvmlDeviceSetMemClkVfOffset", handle, NVML_CLOCK_MEM)
        lo, hi = device.mem_offset_range_mhz
        if not isinstance(offset, int) or not lo <= offset <= hi:
            raise NVMLError_InvalidArgument()
        pstates = [0] if device.mem_offset_p2_mhz is None else [0, 2]
        device.put_offset(pstates, offset, NVML_CLOCK_MEM)

    # --- the current offset API, as C functions behind the function-pointer lookup ----------

    def _nvmlGetFunctionPointer(self, name: str) -> Any:
        self._module_call("_nvmlGetFunctionPointer")
        if not self.clock_offsets_api or name not in _CLOCK_OFFSET_CALLS:
            raise NVMLError_FunctionNotFound()  # (only the offset calls are modelled)

        def call(handle: Any, info: Any) -> int:
            try:
                self._clock_offsets(name, handle, info.contents)
            except NVMLError as exc:
                return exc.value
            return NVML_SUCCESS

        return call

    def _clock_offsets(self, name: str, handle: Any, info: Any) -> None:
        """``nvmlDeviceGetClockOffsets`` / ``nvmlDeviceSetClockOffsets`` on ``info``."""
        device = self._device_call(name, handle)
        index = self.devices.index(device)
        self.offset_structs.append(
            (name, index, info.version, info.type, info.pstate, info.clockOffsetMHz)
        )
        if info.version != nvmlClockOffset_v1:
            raise NVMLError_ArgumentVersionMismatch()
        clock = info.type
        if clock not in (NVML_CLOCK_GRAPHICS, NVML_CLOCK_MEM):
            raise NVMLError_InvalidArgument()  # only the graphics and memory domains are modelled
        if not device.offset_supported(clock):
            raise NVMLError_NotSupported()
        lo, hi = device.offset_range(clock)
        if name == "nvmlDeviceGetClockOffsets":
            info.clockOffsetMHz = device.offset_of(info.pstate, clock)
            info.minClockOffsetMHz, info.maxClockOffsetMHz = lo, hi
            return
        device.offset_of(info.pstate, clock)  # a pstate without an offset refuses first
        if not lo <= info.clockOffsetMHz <= hi:
            raise NVMLError_InvalidArgument()
        device.put_offset([info.pstate], info.clockOffsetMHz, clock)

    # --- events (Xids) -------------------------------------------------------------------------

    def inject_xid(self, index: int, xid: int) -> int:
        """The driver reports Xid ``xid`` on device ``index``: queued in every live set the
        device is registered in for Xid events. Returns how many sets got it."""
        device = self.devices[index]
        reached = 0
        for event_set in self.event_sets:
            mask = sum(m for d, m in event_set.registered if d is device)
            if not event_set.freed and mask & nvmlEventTypeXidCriticalError:
                event_set.queue.append(FakeEventData(device, nvmlEventTypeXidCriticalError, xid))
                reached += 1
        return reached

    def _live_set(self, event_set: Any) -> FakeEventSet:
        if not isinstance(event_set, FakeEventSet) or event_set.freed:
            raise NVMLError_InvalidArgument()
        return event_set

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        return self._device_call("nvmlDeviceGetSupportedEventTypes", handle).supported_event_types

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._module_call("nvmlEventSetCreate")
        self.event_sets.append(FakeEventSet())
        return self.event_sets[-1]

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        device = self._device_call("nvmlDeviceRegisterEvents", handle)
        event_set = self._live_set(eventSet)
        if eventTypes & ~device.supported_event_types:
            raise NVMLError_NotSupported()
        event_set.registered.append((device, eventTypes))

    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> FakeEventData:
        self._module_call("nvmlEventSetWait_v2")
        event_set = self._live_set(eventSet)
        if not event_set.queue:
            raise NVMLError_Timeout()
        return event_set.queue.pop(0)

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._module_call("nvmlEventSetFree")
        self._live_set(eventSet).freed = True
