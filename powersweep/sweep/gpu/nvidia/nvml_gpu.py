"""One NVIDIA GPU through NVML: identity, power limits (verified), persistence mode, processes;
its readings are :mod:`.reads`', its clock locks and clock offset :mod:`.nvml_clocks`', its Xid
events :mod:`.nvml_events`'.

NVML reports power in milliwatts, energy in millijoules, clocks in MHz and temperatures in degrees
Celsius; the backend converts power to watts and leaves the rest as NVML counts it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.nvidia.nvml_api import NOT_AVAILABLE, available, cause, text
from powersweep.sweep.gpu.nvidia.nvml_clocks import NvmlClocks
from powersweep.sweep.gpu.nvidia.nvml_errors import NvmlSetter, nvml_read, nvml_set
from powersweep.sweep.gpu.nvidia.nvml_events import NvmlXidEvents
from powersweep.sweep.gpu.nvidia.reads import NvmlReads, PowerSource
from powersweep.sweep.gpu.protocol import (
    CLOCK_EVENT_APP_CLOCKS,
    NAN,
    ClockOffset,
    GpuIdentity,
    GpuProcess,
    GpuSample,
    LockedClocks,
    LockResult,
    PowerEnvelope,
    SetLimitResult,
    SupportedClocks,
)

# A set limit counts as taken when the read-back is this close to the request.
ACCEPT_TOLERANCE_W = 0.5


class NvmlGpu:
    """One NVIDIA GPU read and capped through NVML (implements :class:`~powersweep.sweep.gpu.Gpu`).

    Built by :meth:`.nvml_backend.NvmlBackend.gpu`. At construction it probes whether the
    instantaneous power field (``NVML_FI_DEV_POWER_INSTANT``) works and records the choice in
    ``power_source``; otherwise power comes from ``nvmlDeviceGetPowerUsage`` (a ~1 s average on
    recent drivers).

    A sample field that NVML reports as not supported (or whose function the driver lacks) is NaN
    (or None) and is not asked for again; that is a capability, not a failure, so it does not
    count in ``read_errors``. Any other NVML error makes the field NaN/None and counts.

    Args:
        nvml: The ``pynvml`` module (or a fake with the same surface).
        handle: NVML device handle.
        index: NVML index of the device.

    Attributes:
        power_source: ``"instant"`` or ``"average"``: the reading ``read_sample`` uses for power.
        read_error_count: Failed reads so far: fields of ``read_sample`` and Xid polls.
        instant_fallbacks: Reads where the instant power failed and the average was used instead.
    """

    def __init__(self, nvml: ModuleType, handle: object, index: int) -> None:
        self._nvml = nvml
        self._handle = handle
        self._index = index
        self._name: str | None = None
        self._reads = NvmlReads(nvml, handle, index)
        self._clocks = NvmlClocks(nvml, handle, self._label)
        self._xids = NvmlXidEvents(nvml, handle)

    @property
    def index(self) -> int:
        """NVML index of this GPU."""
        return self._index

    @property
    def unsupported_fields(self) -> frozenset[str]:
        """Sample fields NVML said this GPU does not support (never asked for again)."""
        return self._reads.unsupported_fields

    @property
    def power_source(self) -> PowerSource:
        """``"instant"`` or ``"average"``: the reading ``read_sample`` uses for power."""
        return self._reads.power_source

    @property
    def read_error_count(self) -> int:
        """Failed reads so far: fields of ``read_sample`` and Xid polls."""
        return self._reads.read_error_count + self._xids.poll_errors

    @property
    def instant_fallbacks(self) -> int:
        """Reads where the instant power failed and the average was used instead."""
        return self._reads.instant_fallbacks

    # --- identity and limits -------------------------------------------------------------

    def identity(self) -> GpuIdentity:
        """Return name, UUID, memory size and driver version.

        Raises:
            GpuError: NVML could not tell (the GPU is unusable for a sweep then).
        """
        nvml = self._nvml
        try:
            name = text(nvml.nvmlDeviceGetName(self._handle))
            uuid = text(nvml.nvmlDeviceGetUUID(self._handle))
            vram_mib = int(nvml.nvmlDeviceGetMemoryInfo(self._handle).total) // (1024 * 1024)
            driver = text(nvml.nvmlSystemGetDriverVersion())
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
        if not all(v > 0 and v not in NOT_AVAILABLE for v in values) or max_mw < min_mw:
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
        temp = nvml_read(
            nvml,
            lambda: float(
                nvml.nvmlDeviceGetTemperatureThreshold(
                    self._handle, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
                )
            ),
        )
        return temp if temp is not None and available(temp) and temp > 0 else NAN

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
        nvml, h = self._nvml, self._handle
        requested_mw = round(watts * 1000.0)
        refusal = nvml_set(
            nvml,
            lambda: nvml.nvmlDeviceSetPowerManagementLimit(h, requested_mw),
            lambda: self._power_setter(watts),
        )
        if refusal is not None:
            return SetLimitResult(
                requested_w=watts,
                readback_w=self._limit_w(),
                enforced_w=self.enforced_limit_w(),
                accepted=False,
                message=refusal.message + self._range_hint(),
            )
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
        mode = nvml_read(nvml, lambda: int(nvml.nvmlDeviceGetPersistenceMode(self._handle)))
        return None if mode is None else mode == nvml.NVML_FEATURE_ENABLED

    def set_persistence_mode(self, enabled: bool) -> bool | None:
        """Turn persistence mode on or off and return the read-back (None if unreadable).

        Raises:
            GpuError: Not root, not supported (Windows, some VMs) or another NVML failure.
        """
        nvml = self._nvml
        mode = nvml.NVML_FEATURE_ENABLED if enabled else nvml.NVML_FEATURE_DISABLED
        what = "on" if enabled else "off"
        nvml_set(
            nvml,
            lambda: nvml.nvmlDeviceSetPersistenceMode(self._handle, mode),
            lambda: self._persistence_setter(what),
        )
        return self.persistence_mode()

    def locked_clocks(self) -> LockedClocks:
        """NVML sets clock locks but cannot read them: ``known`` is False.

        What it can tell is whether a user clock setting (application clocks or a lock) holds
        the clocks right now, from the clock-event reasons.
        """
        nvml = self._nvml
        bits = nvml_read(
            nvml, lambda: int(nvml.nvmlDeviceGetCurrentClocksEventReasons(self._handle))
        )
        active = None if bits is None else bool(bits & CLOCK_EVENT_APP_CLOCKS)
        return LockedClocks(known=False, user_clock_setting_active=active)

    # --- clock locks (issue 15) -----------------------------------------------------------

    def supported_clocks(self) -> SupportedClocks:
        """The memory clocks and, per memory clock, the SM clocks NVML lists, descending.

        Raises:
            GpuError: NVML cannot list them (not supported on this card or driver, or failed).
        """
        return self._clocks.supported_clocks()

    def lock_sm_clock(self, mhz: float, min_mhz: float | None = None) -> LockResult:
        """Lock the SM clock with ``nvmlDeviceSetGpuLockedClocks(min_mhz, mhz)`` (min = max
        when ``min_mhz`` is None).

        Raises:
            GpuError: No permission (needs root) or an NVML failure.
        """
        return self._clocks.lock_sm_clock(mhz, min_mhz)

    def lock_mem_clock(self, mhz: float) -> LockResult:
        """Lock the memory clock with ``nvmlDeviceSetMemoryLockedClocks(min=max=mhz)``.

        Raises:
            GpuError: No permission (needs root) or an NVML failure.
        """
        return self._clocks.lock_mem_clock(mhz)

    def reset_clock_locks(self, sm: bool = True, mem: bool = True) -> None:
        """Reset the locks (``nvmlDeviceResetGpuLockedClocks`` / ``...MemoryLockedClocks``).

        Raises:
            GpuError: No permission or another NVML failure.
        """
        self._clocks.reset_clock_locks(sm, mem)

    # --- the voltage/frequency curve's offset (issue 36) -----------------------------------

    def sm_clock_offset(self) -> ClockOffset:
        """The SM clock offset in force (P0's) and the range the driver accepts
        (``nvmlDeviceGetClockOffsets``, or the older ``nvmlDeviceGetGpcClkVfOffset`` /
        ``...MinMaxVfOffset``); never raises."""
        return self._clocks.sm_clock_offset()

    def set_sm_clock_offset(self, mhz: float) -> LockResult:
        """Set the SM clock offset (whole MHz, in P0 and P2: ``nvmlDeviceSetClockOffsets``, or
        the older ``nvmlDeviceSetGpcClkVfOffset``) and read it back.

        Not accepted: outside the driver's range (not sent), not supported, invalid, or a
        read-back more than the driver's 15 MHz grid away. A driver that reads 0 back is
        accepted unverified (``LockResult.verified``).

        Raises:
            UsageError: ``mhz`` is not a finite number of MHz.
            GpuError: No permission (needs root) or an NVML failure.
        """
        return self._clocks.set_sm_clock_offset(mhz)

    def mem_clock_offset(self) -> ClockOffset:
        """The memory clock offset in force (P0's) and its range, in NVML's unit (twice the
        reported memory clock's MHz on GDDR6X); the same calls with ``NVML_CLOCK_MEM``, or the
        older ``nvmlDeviceGetMemClkVfOffset`` / ``...MinMaxVfOffset``; never raises."""
        return self._clocks.mem_clock_offset()

    def set_mem_clock_offset(self, mhz: float) -> LockResult:
        """Set the memory clock offset (NVML's unit, whole MHz, in P0 and P2) and read it back,
        judged as :meth:`set_sm_clock_offset` is.

        Raises:
            UsageError: ``mhz`` is not a finite number of MHz.
            GpuError: No permission (needs root) or an NVML failure.
        """
        return self._clocks.set_mem_clock_offset(mhz)

    # --- sampling -------------------------------------------------------------------------

    def read_sample(self) -> GpuSample:
        """Read draw, energy, temperature, clocks, utilization, P-state and clock events.

        Never raises for an NVML error: the field becomes NaN/None and counts in
        ``read_errors`` (and in ``read_error_count``).
        """
        return self._reads.read_sample()

    # --- which cards serve the model (issue 14) ---------------------------------------------

    def compute_processes(self) -> tuple[GpuProcess, ...] | None:
        """Processes running compute work here (``nvmlDeviceGetComputeRunningProcesses``).

        NVML reports ``usedGpuMemory`` in bytes, or None where it cannot (Windows WDDM, some
        containers). Returns None when the list cannot be read at all.
        """
        nvml = self._nvml
        procs = nvml_read(
            nvml, lambda: tuple(nvml.nvmlDeviceGetComputeRunningProcesses(self._handle) or ())
        )
        if procs is None:
            return None
        out = []
        for proc in procs:
            pid = getattr(proc, "pid", None)
            if not isinstance(pid, int):
                continue
            used = getattr(proc, "usedGpuMemory", None)
            known = isinstance(used, int) and available(float(used))
            out.append(GpuProcess(pid, used / 2**20 if known else NAN))  # type: ignore[operator]
        return tuple(out)

    # --- GPU faults (issue 36's stability checks) --------------------------------------------

    def xid_events(self) -> tuple[int, ...] | None:
        """The Xids the driver reported for this card since the last call (empty: none).

        The first call registers for them (``nvmlDeviceRegisterEvents``) and returns ``()``.
        None when they cannot be read: not supported on this card or driver (some GeForce
        drivers, WSL), no permission, a failed poll (counted in ``read_error_count``), or the
        backend closed. Never raises.
        """
        return self._xids.poll()

    def close(self) -> None:
        """Free what this card holds in NVML (its Xid event set);
        :meth:`.nvml_backend.NvmlBackend.close` calls it before NVML shuts down. Idempotent."""
        self._xids.close()

    def _power_setter(self, watts: float) -> NvmlSetter:
        label = self._label()
        return NvmlSetter(
            f"setting the power limit of {label}",
            f" to {watts:g} W",
            refuses=frozenset({"invalid"}),
            unsupported=lambda exc: (
                f"{label} does not let its power limit be set{cause(exc)}: "
                "laptop GPUs, some VMs and containers without CAP_SYS_ADMIN cannot change it"
            ),
            invalid=f"{label} rejected a {watts:g} W limit as invalid",
            root_hint=" (or as root)",
        )

    def _persistence_setter(self, what: str) -> NvmlSetter:
        label = self._label()
        return NvmlSetter(
            f"turning persistence mode {what} on {label}",
            unsupported=lambda exc: f"{label} has no persistence mode to turn {what}{cause(exc)}",
        )

    def _limit_w(self) -> float:
        return self._watts(self._nvml.nvmlDeviceGetPowerManagementLimit)

    def _watts(self, read_mw: Callable[[Any], Any]) -> float:
        """A milliwatt reading of this GPU in watts; NaN when it fails or is unavailable."""
        mw = nvml_read(self._nvml, lambda: float(read_mw(self._handle)))
        return mw / 1000.0 if mw is not None and available(mw) else NAN

    def _range_hint(self) -> str:
        nvml = self._nvml
        limits = nvml_read(
            nvml, lambda: nvml.nvmlDeviceGetPowerManagementLimitConstraints(self._handle)
        )
        if limits is None:
            return ""
        min_mw, max_mw = limits
        return f"; it accepts {min_mw / 1000.0:g}-{max_mw / 1000.0:g} W"

    def _label(self) -> str:
        """``GPU 0 (NVIDIA GeForce RTX 3090)``, or ``GPU 0`` if the name cannot be read."""
        if self._name is None:
            nvml = self._nvml
            self._name = nvml_read(nvml, lambda: text(nvml.nvmlDeviceGetName(self._handle)))
            if self._name is None:
                return f"GPU {self._index}"
        return f"GPU {self._index} ({self._name})"

    def _no_power_management(self, cause: str) -> str:
        return (
            f"{self._label()} has no settable power limit ({cause}): laptop GPUs and some VMs "
            "cannot be capped, so powersweep cannot sweep it"
        )
