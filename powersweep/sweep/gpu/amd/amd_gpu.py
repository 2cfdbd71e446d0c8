"""One AMD GPU through amdsmi: identity, power caps (verified), processes.

Its readings are :mod:`.amd_reads`' (a base of :class:`AmdsmiGpu`); clock locks are
:mod:`.amd_clocks`'; the names and helpers of the amdsmi package are :mod:`.amdsmi_api`'s.
"""

from __future__ import annotations

import math
from types import ModuleType

from powersweep.errors import GpuError, UsageError
from powersweep.runformat import as_float
from powersweep.sweep.gpu.amd.amd_clocks import AmdClocks
from powersweep.sweep.gpu.amd.amd_reads import AmdReads, PowerSource
from powersweep.sweep.gpu.amd.amdsmi_api import (
    AmdSetter,
    amd_read,
    amd_set,
    cause,
    fault_of,
)
from powersweep.sweep.gpu.protocol import (
    NAN,
    ClockOffset,
    GpuIdentity,
    GpuProcess,
    LockedClocks,
    LockResult,
    PowerEnvelope,
    SetLimitResult,
    SupportedClocks,
)

# AMD exposes its voltage/frequency curve through amdsmi's overdrive (the od_volt curve
# points), not as one clock offset: left for later (issue 36).
AMD_OFFSET_UNSUPPORTED = (
    "clock offsets are not supported on AMD cards yet (their equivalent is the overdrive "
    "voltage curve)"
)
# amdsmi has no memory clock offset: it picks allowed memory clock levels
# (amdsmi_set_clk_freq, a bitmask) or sets an overdrive level's frequency
# (amdsmi_set_gpu_od_clk_info with AMDSMI_CLK_TYPE_MEM): a frequency, not an offset. Left for
# later (issue 45).
AMD_MEM_OFFSET_UNSUPPORTED = (
    "memory clock offsets are not supported on AMD cards (amdsmi sets memory clock levels "
    "and overdrive frequencies, not an offset)"
)
# A set cap counts as taken when the read-back is this close to the request.
ACCEPT_TOLERANCE_W = 0.5


class AmdsmiGpu(AmdReads):
    """One AMD GPU read and capped through amdsmi (implements :class:`~powersweep.sweep.gpu.Gpu`).

    Built by :meth:`AmdsmiBackend.gpu`. A sample field amdsmi does not support (the call says
    NOT_SUPPORTED, or the value reads ``N/A`` from the first read on) is NaN/None and not asked
    for again; that is a capability, not a failure. Any other error, or an ``N/A`` where the
    card did read before, makes the field NaN/None and counts in ``read_errors``.

    Args:
        amdsmi: The ``amdsmi`` module (or a fake with the same surface).
        handle: amdsmi processor handle.
        index: powersweep's index of the card.

    Attributes:
        power_source: ``current``, ``average`` or ``none``: the socket power the figures use
            for the draw (``current``, the instant reading, where the card fills it);
            ``unknown`` while the probe's calls fail (probed again at the next reading).
        power_reported_by: The index of the die whose draw includes this one's (the first die
            of an MI250X module), None for a card that reports its own.
        energy_fallback: Why the energy counter is no longer used (empty while it is).
        read_error_count: Failed field reads in ``read_sample`` so far.
    """

    def __init__(self, amdsmi: ModuleType, handle: object, index: int) -> None:
        self._smi = amdsmi
        self._handle = handle
        self._index = index
        self._unsupported: set[str] = set()
        self._read_ok: set[str] = set()
        self._pending_errors = 0
        self._name: str | None = None
        self._last_energy_mj: float | None = None
        self._clocks = AmdClocks(amdsmi, handle, self._label, self._refusal, self._is_guest)
        self.power_reported_by: int | None = None
        self.energy_fallback = ""
        self.read_error_count = 0
        self.power_source: PowerSource = self._probe_power_source()

    @property
    def index(self) -> int:
        """powersweep's index of this GPU."""
        return self._index

    @property
    def unsupported_fields(self) -> frozenset[str]:
        """Sample fields this card does not report (never asked for again)."""
        return frozenset(self._unsupported)

    # --- identity and limits -------------------------------------------------------------

    def identity(self) -> GpuIdentity:
        """Return name, UUID, memory size and driver version.

        Raises:
            GpuError: amdsmi could not tell (the GPU is unusable for a sweep then).
        """
        smi, h = self._smi, self._handle
        try:
            name = str(smi.amdsmi_get_gpu_asic_info(h)["market_name"])
            uuid = str(smi.amdsmi_get_gpu_device_uuid(h))
            vram = as_float(smi.amdsmi_get_gpu_vram_info(h).get("vram_size"), None)
            driver = str(smi.amdsmi_get_gpu_driver_info(h).get("driver_version", "N/A"))
        except (smi.AmdSmiException, KeyError) as exc:
            raise GpuError(f"cannot identify GPU {self._index}{cause(exc)}") from exc
        self._name = name
        return GpuIdentity(
            index=self._index,
            name=name,
            uuid=uuid,
            vram_mib=int(vram) if vram is not None else 0,
            driver_version=driver,
            vendor="amd",
        )

    def envelope(self) -> PowerEnvelope:
        """Return the settable range, the default and the cap in force, in watts.

        MI300-class cards report 0 W as their lowest cap; it is kept (the sweep's floor is half
        the default anyway).

        Raises:
            GpuError: The card has no power cap (some APUs and VM guests) or amdsmi failed.
        """
        smi = self._smi
        try:
            info = smi.amdsmi_get_power_cap_info(self._handle)
            uw = [as_float(info.get(k), None) for k in ("min_power_cap", "default_power_cap")]
            uw += [as_float(info.get(k), None) for k in ("max_power_cap", "power_cap")]
        except smi.AmdSmiException as exc:
            if fault_of(exc) == "unsupported":
                raise GpuError(self._no_power_cap(cause(exc).strip(" ()"))) from exc
            raise GpuError(f"cannot read the power cap of {self._label()}{cause(exc)}") from exc
        min_uw, default_uw, max_uw, current_uw = uw
        if (
            min_uw is None
            or default_uw is None
            or max_uw is None
            or current_uw is None
            or min(default_uw, max_uw, current_uw) <= 0
            or min_uw < 0
            or max_uw < min_uw
        ):
            raise GpuError(self._no_power_cap(f"caps reported as N/A: {uw} uW"))
        return PowerEnvelope(
            min_w=min_uw / 1e6,
            default_w=default_uw / 1e6,
            max_w=max_uw / 1e6,
            current_w=current_uw / 1e6,
        )

    def slowdown_temp_c(self) -> float:
        """The hotspot (junction) temperature where the firmware throttles; NaN if unknown."""
        smi = self._smi
        value = amd_read(
            smi,
            lambda: smi.amdsmi_get_temp_metric(
                self._handle,
                smi.AmdSmiTemperatureType.HOTSPOT,
                smi.AmdSmiTemperatureMetric.CRITICAL,
            ),
        )
        temp = as_float(value, None)
        return temp if temp is not None and temp > 0 else NAN

    def set_power_limit(self, watts: float) -> SetLimitResult:
        """Set the power cap (``amdsmi_set_power_cap``, microwatts), read it back, report.

        A cap amdsmi calls invalid, or one the card silently keeps its old value for, comes back
        as a result with ``accepted`` False rather than an exception. AMD has no separate
        enforced limit: ``enforced_w`` is NaN.

        Raises:
            UsageError: ``watts`` is not a positive number.
            GpuError: The cap cannot be set at all (needs root, a VM guest, not supported).
        """
        if not (math.isfinite(watts) and watts > 0):
            raise UsageError(f"a power limit must be a positive number of watts, got {watts}")
        smi = self._smi
        setter = AmdSetter(
            lambda exc: self._refusal("setting the power cap", f"{watts:g} W", exc),
            self._is_guest,
            refuses=frozenset({"invalid"}),
            invalid=lambda exc: (
                f"{self._label()} rejected a {watts:g} W cap as invalid{cause(exc)}"
            ),
        )
        refusal = amd_set(
            smi, lambda: smi.amdsmi_set_power_cap(self._handle, 0, round(watts * 1e6)), setter
        )
        if refusal is not None:
            return SetLimitResult(
                watts, self._cap_w(), NAN, False, refusal.message + self._range_hint()
            )
        readback_w = self._cap_w()
        if math.isnan(readback_w):
            message = (
                f"{self._label()} took the {watts:g} W request but its cap could not be read back"
            )
        elif abs(readback_w - watts) > ACCEPT_TOLERANCE_W:
            message = (
                f"{self._label()} kept a {readback_w:g} W cap when {watts:g} W was set (the card "
                "silently refuses this cap)"
            )
        else:
            return SetLimitResult(watts, readback_w, NAN, True)
        return SetLimitResult(watts, readback_w, NAN, False, message)

    # --- persistence mode and clock-lock reads ---------------------------------------------

    def persistence_mode(self) -> bool | None:
        """Always on: amdgpu keeps a card's settings for as long as the driver is loaded."""
        return True

    def set_persistence_mode(self, enabled: bool) -> bool | None:
        """Nothing to turn on (see :meth:`persistence_mode`).

        Raises:
            GpuError: Asked to turn it off, which AMD cards cannot.
        """
        if not enabled:
            raise GpuError(
                f"{self._label()} has no persistence mode to turn off: amdgpu keeps its settings "
                "while the driver is loaded"
            )
        return True

    def locked_clocks(self) -> LockedClocks:
        """``AUTO`` is unlocked; under another level the locks are held but unknown."""
        return self._clocks.locked()

    # --- clock locks ------------------------------------------------------------------------

    def supported_clocks(self) -> SupportedClocks:
        """Memory clock levels, and SM clocks from the lowest to the highest level.

        Raises:
            GpuError: amdsmi cannot list them.
        """
        return self._clocks.supported()

    def lock_sm_clock(self, mhz: float, min_mhz: float | None = None) -> LockResult:
        """Lock the SM (gfx) clock: level ``MANUAL``, then the range ``min_mhz``-``mhz``
        (None: min = max).

        Raises:
            GpuError: No permission (needs root), a VM guest, or amdsmi failed.
        """
        return self._clocks.lock("sm", mhz, min_mhz)

    def lock_mem_clock(self, mhz: float) -> LockResult:
        """Lock the memory clock (not accepted where the card refuses: MI300X, most HBM cards).

        Raises:
            GpuError: No permission (needs root), a VM guest, or amdsmi failed.
        """
        return self._clocks.lock("mem", mhz)

    def reset_clock_locks(self, sm: bool = True, mem: bool = True) -> None:
        """Unlock through the level ``AUTO`` (a lock that should stay is set again).

        Raises:
            GpuError: No permission, a VM guest, or amdsmi failed.
        """
        self._clocks.reset(sm, mem)

    # --- the voltage/frequency curve ---------------------------------------------------------

    def sm_clock_offset(self) -> ClockOffset:
        """Not read: AMD's equivalent is the overdrive voltage curve, not yet supported."""
        return ClockOffset(supported=False, message=AMD_OFFSET_UNSUPPORTED)

    def set_sm_clock_offset(self, mhz: float) -> LockResult:
        """Never set on AMD cards (not accepted, with the reason)."""
        return LockResult(mhz, False, AMD_OFFSET_UNSUPPORTED)

    def mem_clock_offset(self) -> ClockOffset:
        """Not read: amdsmi sets the memory clock as overdrive levels, not as an offset."""
        return ClockOffset(supported=False, message=AMD_MEM_OFFSET_UNSUPPORTED)

    def set_mem_clock_offset(self, mhz: float) -> LockResult:
        """Never set on AMD cards (not accepted, with the reason)."""
        return LockResult(mhz, False, AMD_MEM_OFFSET_UNSUPPORTED)

    # --- GPU faults ---------------------------------------------------------------------------

    def xid_events(self) -> tuple[int, ...] | None:
        """None: Xids are the NVIDIA driver's fault reports; amdsmi has no such events."""
        return None

    # --- sampling ---------------------------------------------------------------------------

    def compute_processes(self) -> tuple[GpuProcess, ...] | None:
        """Processes using this GPU (``amdsmi_get_gpu_process_list``); None when unreadable."""
        smi = self._smi
        procs = amd_read(smi, lambda: tuple(smi.amdsmi_get_gpu_process_list(self._handle) or ()))
        if procs is None:
            return None
        out = []
        for proc in procs:
            pid = proc.get("pid") if isinstance(proc, dict) else None
            if not isinstance(pid, int):
                continue
            usage = proc.get("memory_usage")
            vram = usage.get("vram_mem") if isinstance(usage, dict) else proc.get("mem")
            used = as_float(vram, None)
            out.append(GpuProcess(pid, used / 2**20 if used is not None else NAN))
        return tuple(out)

    # --- internals --------------------------------------------------------------------------

    def _cap_w(self) -> float:
        smi = self._smi
        uw = amd_read(
            smi,
            lambda: as_float(smi.amdsmi_get_power_cap_info(self._handle).get("power_cap"), None),
        )
        return uw / 1e6 if uw is not None and uw > 0 else NAN

    def _range_hint(self) -> str:
        try:
            env = self.envelope()
        except GpuError:
            return ""
        return f"; it accepts {env.min_w:g}-{env.max_w:g} W"

    def _is_guest(self) -> bool:
        smi = self._smi
        try:
            mode = smi.amdsmi_get_gpu_virtualization_mode(self._handle)["mode"]
        except (smi.AmdSmiException, KeyError, TypeError):
            return False
        return bool(mode == smi.AmdSmiVirtualizationMode.GUEST)

    def _refusal(self, doing: str, value: str, exc: BaseException) -> str:
        """The one-line error for a write the driver refused."""
        fault = fault_of(exc)
        if self._is_guest():
            return (
                f"{doing} of {self._label()} is not possible in a VM guest{cause(exc)}: the "
                "host owns the card's power cap and clocks; run powersweep on the host"
            )
        if fault == "no_permission":
            return (
                f"{doing} of {self._label()} needs root: re-run with sudo (or as root){cause(exc)}"
            )
        if fault == "unsupported":
            return f"{self._label()} does not allow {doing}{cause(exc)}"
        return f"{doing} of {self._label()} to {value} failed{cause(exc)}"

    def _label(self) -> str:
        """``GPU 0 (AMD Instinct MI300X)``, or ``GPU 0`` if the name cannot be read."""
        if self._name is None:
            smi = self._smi
            try:
                self._name = str(smi.amdsmi_get_gpu_asic_info(self._handle)["market_name"])
            except (smi.AmdSmiException, KeyError):
                return f"GPU {self._index}"
        return f"GPU {self._index} ({self._name})"

    def _no_power_cap(self, cause: str) -> str:
        where = " (a VM guest: the host owns the cap)" if self._is_guest() else ""
        return (
            f"{self._label()} has no settable power cap{where} ({cause}): powersweep cannot "
            "sweep it"
        )
