"""The real GPU backend: NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py).

This is the only module of powersweep that touches ``pynvml``. It imports it lazily (so the
package imports on machines without the NVIDIA driver) or takes a module injected, which is how
the tests drive it with a fake (``tests/fakes/fake_pynvml.py``).

NVML reports power in milliwatts, energy in millijoules, clocks in MHz and temperatures in degrees
Celsius; this module converts power to watts and leaves the rest as NVML counts it.
"""

from __future__ import annotations

import contextlib
import importlib
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any, Literal, TypeVar

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu import (
    CLOCK_EVENT_APP_CLOCKS,
    NAN,
    GpuIdentity,
    GpuProcess,
    GpuSample,
    LockedClocks,
    LockResult,
    PowerEnvelope,
    SetLimitResult,
    SupportedClocks,
)

PowerSource = Literal["instant", "average"]

# Every attribute of ``pynvml`` this module uses. A unit test checks each one exists in the
# installed nvidia-ml-py and in the fake, and that this module uses no name missing from here.
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
    # which cards serve the model (issue 14)
    "nvmlDeviceGetComputeRunningProcesses",
)

# A set limit counts as taken when the read-back is this close to the request.
ACCEPT_TOLERANCE_W = 0.5

# NVML's "value not available" sentinels (all bits set in a 32- or 64-bit unsigned field).
_NOT_AVAILABLE = (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)

_T = TypeVar("_T")


def _text(value: object) -> str:
    """Return an NVML string as ``str`` (older bindings return bytes)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _available(value: float) -> bool:
    return math.isfinite(value) and value >= 0 and value not in _NOT_AVAILABLE


class NvmlGpu:
    """One NVIDIA GPU read and capped through NVML (implements :class:`~powersweep.sweep.gpu.Gpu`).

    Built by :meth:`NvmlBackend.gpu`. At construction it probes whether the instantaneous power
    field (``NVML_FI_DEV_POWER_INSTANT``) works and records the choice in ``power_source``;
    otherwise power comes from ``nvmlDeviceGetPowerUsage`` (a ~1 s average on recent drivers).

    A sample field that NVML reports as not supported (or whose function the driver lacks) is NaN
    (or None) and is not asked for again; that is a capability, not a failure, so it does not
    count in ``read_errors``. Any other NVML error makes the field NaN/None and counts.

    Args:
        nvml: The ``pynvml`` module (or a fake with the same surface).
        handle: NVML device handle.
        index: NVML index of the device.

    Attributes:
        power_source: ``"instant"`` or ``"average"``: the reading ``read_sample`` uses for power.
        read_error_count: Failed field reads in ``read_sample`` so far.
        instant_fallbacks: Reads where the instant power failed and the average was used instead.
    """

    def __init__(self, nvml: ModuleType, handle: object, index: int) -> None:
        self._nvml = nvml
        self._handle = handle
        self._index = index
        self._unsupported: set[str] = set()
        self._pending_errors = 0
        self._name: str | None = None
        self.read_error_count = 0
        self.instant_fallbacks = 0
        self.power_source: PowerSource = self._probe_power_source()

    @property
    def index(self) -> int:
        """NVML index of this GPU."""
        return self._index

    @property
    def unsupported_fields(self) -> frozenset[str]:
        """Sample fields NVML said this GPU does not support (never asked for again)."""
        return frozenset(self._unsupported)

    # --- identity and limits -------------------------------------------------------------

    def identity(self) -> GpuIdentity:
        """Return name, UUID, memory size and driver version.

        Raises:
            GpuError: NVML could not tell (the GPU is unusable for a sweep then).
        """
        nvml = self._nvml
        try:
            name = _text(nvml.nvmlDeviceGetName(self._handle))
            uuid = _text(nvml.nvmlDeviceGetUUID(self._handle))
            vram_mib = int(nvml.nvmlDeviceGetMemoryInfo(self._handle).total) // (1024 * 1024)
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError as exc:
            raise GpuError(f"cannot identify GPU {self._index}: NVML error: {exc}") from exc
        self._name = name
        return GpuIdentity(
            index=self._index, name=name, uuid=uuid, vram_mib=vram_mib, driver_version=driver
        )

    def envelope(self) -> PowerEnvelope:
        """Return the settable range, the default and the limit in force, in watts.

        Raises:
            GpuError: The GPU has no power management (laptops, some VMs) or NVML failed.
        """
        nvml = self._nvml
        try:
            min_mw, max_mw = nvml.nvmlDeviceGetPowerManagementLimitConstraints(self._handle)
            default_mw = nvml.nvmlDeviceGetPowerManagementDefaultLimit(self._handle)
            current_mw = nvml.nvmlDeviceGetPowerManagementLimit(self._handle)
        except nvml.NVMLError_NotSupported as exc:
            raise GpuError(self._no_power_management(str(exc))) from exc
        except nvml.NVMLError as exc:
            raise GpuError(f"cannot read the power limits of {self._label()}: {exc}") from exc
        values = (min_mw, max_mw, default_mw, current_mw)
        # Some VMs answer SUCCESS with zero or all-ones limits: that is "N/A" too.
        if not all(v > 0 and v not in _NOT_AVAILABLE for v in values) or max_mw < min_mw:
            raise GpuError(self._no_power_management(f"limits reported as N/A: {values} mW"))
        return PowerEnvelope(
            min_w=min_mw / 1000.0,
            default_w=default_mw / 1000.0,
            max_w=max_mw / 1000.0,
            current_w=current_mw / 1000.0,
        )

    def enforced_limit_w(self) -> float:
        """Return the limit NVML actually enforces (may be below the set one), NaN on failure."""
        return self._watts(self._nvml.nvmlDeviceGetEnforcedPowerLimit)

    def slowdown_temp_c(self) -> float:
        """Temperature at which the card starts thermal slowdown (NaN if unknown)."""
        nvml = self._nvml
        try:
            temp = float(
                nvml.nvmlDeviceGetTemperatureThreshold(
                    self._handle, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
                )
            )
        except nvml.NVMLError:
            return NAN
        return temp if _available(temp) and temp > 0 else NAN

    def set_power_limit(self, watts: float) -> SetLimitResult:
        """Set the power limit, read it back and report whether the card took it.

        Uses ``nvmlDeviceSetPowerManagementLimit`` (the ``_v2`` binding ignores the return code).
        A limit NVML calls invalid, or one the card silently replaces with another, comes back
        as a result with ``accepted`` False rather than an exception.

        Args:
            watts: The limit to set, in watts.

        Returns:
            The request, the read-back and enforced limits, and whether the card took it.

        Raises:
            UsageError: ``watts`` is not a positive number.
            GpuError: The limit cannot be set at all (needs root, not supported, NVML failure).
        """
        if not (math.isfinite(watts) and watts > 0):
            raise UsageError(f"a power limit must be a positive number of watts, got {watts}")
        nvml = self._nvml
        requested_mw = round(watts * 1000.0)
        try:
            nvml.nvmlDeviceSetPowerManagementLimit(self._handle, requested_mw)
        except nvml.NVMLError_NoPermission as exc:
            raise GpuError(
                f"setting the power limit of {self._label()} needs root: re-run with sudo "
                f"(or as root){self._cause(exc)}"
            ) from exc
        except nvml.NVMLError_NotSupported as exc:
            raise GpuError(
                f"{self._label()} does not let its power limit be set{self._cause(exc)}: laptop "
                "GPUs, some VMs and containers without CAP_SYS_ADMIN cannot change it"
            ) from exc
        except nvml.NVMLError_InvalidArgument as exc:
            readback_w = self._limit_w()
            return SetLimitResult(
                requested_w=watts,
                readback_w=readback_w,
                enforced_w=self.enforced_limit_w(),
                accepted=False,
                message=f"{self._label()} rejected a {watts:g} W limit as invalid"
                f"{self._cause(exc)}{self._range_hint()}",
            )
        except nvml.NVMLError as exc:
            raise GpuError(
                f"setting the power limit of {self._label()} to {watts:g} W failed: {exc}"
            ) from exc
        readback_w = self._limit_w()
        enforced_w = self.enforced_limit_w()
        if math.isnan(readback_w):
            return SetLimitResult(
                requested_w=watts,
                readback_w=readback_w,
                enforced_w=enforced_w,
                accepted=False,
                message=f"{self._label()} took the {watts:g} W request but its limit could not "
                "be read back",
            )
        if abs(readback_w - watts) > ACCEPT_TOLERANCE_W:
            return SetLimitResult(
                requested_w=watts,
                readback_w=readback_w,
                enforced_w=enforced_w,
                accepted=False,
                message=f"{self._label()} kept a {readback_w:g} W limit when {watts:g} W was "
                "set (the card silently refuses this cap)",
            )
        message = ""
        if enforced_w < readback_w - ACCEPT_TOLERANCE_W:
            message = (
                f"{self._label()} enforces {enforced_w:g} W, below the {readback_w:g} W set: "
                "another limit (platform, another tool or a cap set elsewhere) is lower"
            )
        return SetLimitResult(
            requested_w=watts,
            readback_w=readback_w,
            enforced_w=enforced_w,
            accepted=True,
            message=message,
        )

    # --- persistence mode and clock-lock reads (powersweep status / apply) ---------------

    def persistence_mode(self) -> bool | None:
        """Whether persistence mode is on; None when NVML cannot tell (e.g. on Windows)."""
        nvml = self._nvml
        try:
            mode = int(nvml.nvmlDeviceGetPersistenceMode(self._handle))
        except nvml.NVMLError:
            return None
        return mode == nvml.NVML_FEATURE_ENABLED

    def set_persistence_mode(self, enabled: bool) -> bool | None:
        """Turn persistence mode on or off and return the read-back (None if unreadable).

        Raises:
            GpuError: Not root, not supported (Windows, some VMs) or another NVML failure.
        """
        nvml = self._nvml
        mode = nvml.NVML_FEATURE_ENABLED if enabled else nvml.NVML_FEATURE_DISABLED
        what = "on" if enabled else "off"
        try:
            nvml.nvmlDeviceSetPersistenceMode(self._handle, mode)
        except nvml.NVMLError_NoPermission as exc:
            raise GpuError(
                f"turning persistence mode {what} on {self._label()} needs root: re-run with "
                f"sudo{self._cause(exc)}"
            ) from exc
        except nvml.NVMLError_NotSupported as exc:
            raise GpuError(
                f"{self._label()} has no persistence mode to turn {what}{self._cause(exc)}"
            ) from exc
        except nvml.NVMLError as exc:
            raise GpuError(
                f"turning persistence mode {what} on {self._label()} failed: {exc}"
            ) from exc
        return self.persistence_mode()

    def locked_clocks(self) -> LockedClocks:
        """NVML sets clock locks but cannot read them: ``known`` is False.

        What it can tell is whether a user clock setting (application clocks or a lock) holds
        the clocks right now, from the clock-event reasons.
        """
        nvml = self._nvml
        try:
            bits: int | None = int(nvml.nvmlDeviceGetCurrentClocksEventReasons(self._handle))
        except nvml.NVMLError:
            bits = None
        active = None if bits is None else bool(bits & CLOCK_EVENT_APP_CLOCKS)
        return LockedClocks(known=False, user_clock_setting_active=active)

    # --- clock locks (issue 15) -----------------------------------------------------------

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
                f"{self._label()} does not list its supported clocks{self._cause(exc)}: give "
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
                    f"with sudo{self._cause(exc)}"
                ) from exc
            except nvml.NVMLError as exc:
                raise GpuError(
                    f"resetting the {what} clock lock of {self._label()} failed: {exc}"
                ) from exc

    def _lock_clock(self, what: str, mhz: float, lock: Callable[[int], object]) -> LockResult:
        if not (math.isfinite(mhz) and mhz > 0):
            raise UsageError(f"a clock lock must be a positive number of MHz, got {mhz}")
        nvml = self._nvml
        try:
            lock(round(mhz))
        except nvml.NVMLError_NoPermission as exc:
            raise GpuError(
                f"locking the {what} clock of {self._label()} needs root: re-run with sudo"
                f"{self._cause(exc)}"
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
                f"{self._label()} does not support {what} clock locks{self._cause(exc)}: {hint}",
            )
        except nvml.NVMLError_InvalidArgument as exc:
            return LockResult(
                mhz,
                False,
                f"{self._label()} rejected a {mhz:g} MHz {what} lock as invalid{self._cause(exc)}",
            )
        except nvml.NVMLError as exc:
            raise GpuError(
                f"locking the {what} clock of {self._label()} at {mhz:g} MHz failed: {exc}"
            ) from exc
        return LockResult(mhz, True)

    # --- sampling -------------------------------------------------------------------------

    def read_sample(self) -> GpuSample:
        """Read draw, energy, temperature, clocks, utilization, P-state and clock events.

        Never raises for an NVML error: the field becomes NaN/None and counts in
        ``read_errors`` (and in ``read_error_count``).
        """
        nvml = self._nvml
        h = self._handle
        self._pending_errors = 0
        power_w = self._read_power_w()
        energy = self._try("energy", lambda: float(nvml.nvmlDeviceGetTotalEnergyConsumption(h)))
        temp = self._try(
            "temp", lambda: float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))
        )
        sm = self._try(
            "sm_clock", lambda: float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
        )
        mem = self._try(
            "mem_clock", lambda: float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM))
        )
        util = self._try("util", lambda: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu))
        pstate = self._try("pstate", lambda: int(nvml.nvmlDeviceGetPerformanceState(h)))
        events = self._try(
            "clock_events", lambda: int(nvml.nvmlDeviceGetCurrentClocksEventReasons(h))
        )
        errors = self._pending_errors
        self.read_error_count += errors
        return GpuSample(
            gpu_index=self._index,
            power_w=power_w,
            energy_mj=_or_nan(energy),
            temp_c=_or_nan(temp),
            sm_clock_mhz=_or_nan(sm),
            mem_clock_mhz=_or_nan(mem),
            util_pct=_or_nan(util),
            # NVML_PSTATE_UNKNOWN (32) means the driver does not know: not a failed read.
            pstate=pstate if pstate is not None and 0 <= pstate <= 15 else None,
            clock_event_bits=events,
            read_errors=errors,
        )

    # --- which cards serve the model (issue 14) ---------------------------------------------

    def compute_processes(self) -> tuple[GpuProcess, ...] | None:
        """Processes running compute work here (``nvmlDeviceGetComputeRunningProcesses``).

        NVML reports ``usedGpuMemory`` in bytes, or None where it cannot (Windows WDDM, some
        containers). Returns None when the list cannot be read at all.
        """
        nvml = self._nvml
        try:
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except nvml.NVMLError:
            return None
        out = []
        for proc in procs or ():
            pid = getattr(proc, "pid", None)
            if not isinstance(pid, int):
                continue
            used = getattr(proc, "usedGpuMemory", None)
            known = isinstance(used, int) and _available(float(used))
            out.append(GpuProcess(pid, used / 2**20 if known else NAN))  # type: ignore[operator]
        return tuple(out)

    # --- internals ------------------------------------------------------------------------

    def _try(self, field: str, read: Callable[[], _T]) -> _T | None:
        """Run one field read of ``read_sample``: None on failure, counting real errors."""
        if field in self._unsupported:
            return None
        nvml = self._nvml
        try:
            return read()
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
            self._unsupported.add(field)
            return None
        except nvml.NVMLError:
            self._pending_errors += 1
            return None

    def _read_power_w(self) -> float:
        if self.power_source == "instant":
            instant_mw = self._instant_power_mw()
            if instant_mw is not None:
                return instant_mw / 1000.0
            # One bad instant read should not lose the sample: the average still tells.
            self.instant_fallbacks += 1
        nvml = self._nvml
        h = self._handle
        mw = self._try("power", lambda: float(nvml.nvmlDeviceGetPowerUsage(h)))
        return mw / 1000.0 if mw is not None else NAN

    def _instant_power_mw(self) -> float | None:
        """Read ``NVML_FI_DEV_POWER_INSTANT`` in mW, or None if it failed in any way."""
        nvml = self._nvml
        try:
            values = nvml.nvmlDeviceGetFieldValues(self._handle, [nvml.NVML_FI_DEV_POWER_INSTANT])
        except nvml.NVMLError:
            return None
        if len(values) < 1:
            return None
        field = values[0]
        # The call as a whole succeeds even when this one field failed: check its own status.
        if field.nvmlReturn != nvml.NVML_SUCCESS:
            return None
        mw = self._field_number(field)
        return mw if mw is not None and _available(mw) else None

    def _field_number(self, field: Any) -> float | None:
        nvml = self._nvml
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

    def _probe_power_source(self) -> PowerSource:
        instant_mw = self._instant_power_mw()
        if instant_mw is None:
            return "average"
        if instant_mw == 0:
            # A live GPU never draws 0 W: a zero instant reading next to a non-zero average
            # means the driver fills the field without measuring it.
            nvml = self._nvml
            try:
                average_mw = float(nvml.nvmlDeviceGetPowerUsage(self._handle))
            except nvml.NVMLError:
                return "instant"
            if average_mw > 0:
                return "average"
        return "instant"

    def _limit_w(self) -> float:
        return self._watts(self._nvml.nvmlDeviceGetPowerManagementLimit)

    def _watts(self, read_mw: Callable[[Any], Any]) -> float:
        """A milliwatt reading of this GPU in watts; NaN when it fails or is unavailable."""
        try:
            mw = float(read_mw(self._handle))
        except self._nvml.NVMLError:
            return NAN
        return mw / 1000.0 if _available(mw) else NAN

    def _range_hint(self) -> str:
        nvml = self._nvml
        try:
            min_mw, max_mw = nvml.nvmlDeviceGetPowerManagementLimitConstraints(self._handle)
        except nvml.NVMLError:
            return ""
        return f"; it accepts {min_mw / 1000.0:g}-{max_mw / 1000.0:g} W"

    def _label(self) -> str:
        """``GPU 0 (NVIDIA GeForce RTX 3090)``, or ``GPU 0`` if the name cannot be read."""
        if self._name is None:
            nvml = self._nvml
            try:
                self._name = _text(nvml.nvmlDeviceGetName(self._handle))
            except nvml.NVMLError:
                return f"GPU {self._index}"
        return f"GPU {self._index} ({self._name})"

    def _no_power_management(self, cause: str) -> str:
        return (
            f"{self._label()} has no settable power limit ({cause}): laptop GPUs and some VMs "
            "cannot be capped, so powersweep cannot sweep it"
        )

    @staticmethod
    def _cause(exc: Exception) -> str:
        return f" (NVML: {exc})"


def _or_nan(value: float | None) -> float:
    return NAN if value is None else value


class NvmlBackend:
    """NVIDIA GPUs through NVML (implements :class:`~powersweep.sweep.gpu.GpuBackend`).

    Initializes NVML at construction and shuts it down in :meth:`close`. Usable as a context
    manager.

    Args:
        nvml: The ``pynvml`` module to use; None imports the installed nvidia-ml-py. Tests pass
            a fake with the same surface.

    Raises:
        GpuError: nvidia-ml-py is missing, or NVML cannot start (no driver, no library).
    """

    def __init__(self, nvml: ModuleType | None = None) -> None:
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                raise GpuError(
                    "NVML not available: the nvidia-ml-py package is not installed "
                    "(pip install nvidia-ml-py)"
                ) from exc
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise GpuError(f"NVML not available: is the NVIDIA driver installed? ({exc})") from exc
        self._nvml: ModuleType = nvml
        self._closed = False
        self._gpus: dict[int, NvmlGpu] = {}

    def __enter__(self) -> NvmlBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def device_count(self) -> int:
        """Number of GPUs NVML sees.

        Raises:
            GpuError: The backend is closed or NVML failed.
        """
        self._check_open()
        nvml = self._nvml
        try:
            return int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            raise GpuError(f"cannot count GPUs: NVML error: {exc}") from exc

    def gpu(self, index: int) -> NvmlGpu:
        """Return the GPU at NVML ``index`` (the same object on every call).

        Raises:
            UsageError: No GPU has that index.
            GpuError: The backend is closed or NVML failed.
        """
        cached = self._gpus.get(index)
        if cached is not None:
            self._check_open()
            return cached
        count = self.device_count()
        if not 0 <= index < count:
            seen = f"GPUs 0-{count - 1}" if count > 0 else "no GPU"
            raise UsageError(f"there is no GPU {index}: NVML sees {seen}")
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            raise GpuError(f"cannot open GPU {index}: NVML error: {exc}") from exc
        gpu = NvmlGpu(nvml, handle, index)
        self._gpus[index] = gpu
        return gpu

    def close(self) -> None:
        """Shut NVML down; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        self._gpus.clear()
        nvml = self._nvml
        # Shutting down is cleanup at the end of a run: nothing a user could do about a failure.
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()

    def _check_open(self) -> None:
        if self._closed:
            raise GpuError("the NVML backend is closed")
