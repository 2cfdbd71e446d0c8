"""The GPU interface every backend (NVML, amdsmi, simulated) implements, and its data types.

Units are in field names. Power is in watts, energy in millijoules (as NVML counts it), clocks in
MHz, temperatures in degrees Celsius. A reading that failed is ``NaN`` (floats) or ``None``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

NAN = math.nan
# The highest power limit (W per card) and clock (MHz) a setting may name: no card comes near
# them, so anything above is a typo or a unit mix-up, refused rather than clamped.
MAX_CARD_W = 5000.0
MAX_CLOCK_MHZ = 50_000.0
# Drivers snap a clock offset to the voltage/frequency curve's 15 MHz grid (some to whole MHz):
# an offset read back less than one grid step from the one set is that offset, as rounded.
OFFSET_GRID_MHZ = 15.0

# Clock-event (throttle) reason bits, as NVML defines them (nvmlClocksEventReason*).
CLOCK_EVENT_GPU_IDLE = 0x1
CLOCK_EVENT_APP_CLOCKS = 0x2
CLOCK_EVENT_SW_POWER_CAP = 0x4
CLOCK_EVENT_HW_SLOWDOWN = 0x8
CLOCK_EVENT_SYNC_BOOST = 0x10
CLOCK_EVENT_SW_THERMAL = 0x20
CLOCK_EVENT_HW_THERMAL = 0x40
CLOCK_EVENT_HW_POWER_BRAKE = 0x80
CLOCK_EVENT_DISPLAY_CLOCKS = 0x100

POWER_EVENT_MASK = CLOCK_EVENT_SW_POWER_CAP | CLOCK_EVENT_HW_POWER_BRAKE
THERMAL_EVENT_MASK = CLOCK_EVENT_SW_THERMAL | CLOCK_EVENT_HW_THERMAL | CLOCK_EVENT_HW_SLOWDOWN

# What a vendor library's error means to a caller (each backend maps its errors to one, in one
# place): no permission (needs root), unsupported (the card or driver cannot), invalid (the
# value is refused), or a failure (anything else: a lost GPU, an unknown error, ...).
Fault = Literal["no_permission", "unsupported", "invalid", "failed"]


class Refusal(NamedTuple):
    """A set the card or driver refused, which the setter reports as not accepted."""

    fault: Fault
    message: str
    exc: BaseException


# The Xid the NVIDIA driver reports when a card falls off the bus (stops answering on PCIe).
XID_FALLEN_OFF_BUS = 79


@dataclass(frozen=True)
class GpuIdentity:
    """Who a GPU is.

    Attributes:
        index: The backend's index (NVML's, as ``nvidia-smi -i`` uses; on a machine with both
            vendors the AMD cards follow the NVIDIA ones).
        name: Marketing name, e.g. ``NVIDIA GeForce RTX 3090``.
        uuid: Stable identifier (``GPU-...`` on NVIDIA, amdsmi's UUID on AMD).
        vram_mib: Total memory in MiB.
        driver_version: Driver version string.
        vendor: ``nvidia`` or ``amd``: which vendor tool sets this card (the boot unit).
    """

    index: int
    name: str
    uuid: str
    vram_mib: int
    driver_version: str
    vendor: str = "nvidia"


@dataclass(frozen=True)
class PowerEnvelope:
    """The power limits of one GPU, in watts.

    Attributes:
        min_w: Lowest settable limit.
        default_w: Factory default limit (the card's TDP).
        max_w: Highest settable limit.
        current_w: Limit in force when read (the user's own setting before a sweep).
    """

    min_w: float
    default_w: float
    max_w: float
    current_w: float


@dataclass(frozen=True)
class SetLimitResult:
    """What happened when a power limit was set.

    Attributes:
        requested_w: The limit asked for.
        readback_w: The limit the card reports afterwards.
        enforced_w: The limit actually enforced (may be lower through out-of-band limits); NaN if
            unknown.
        accepted: True when the read-back matches the request within 0.5 W.
        message: Why the cap was not taken, empty when accepted.
    """

    requested_w: float
    readback_w: float
    enforced_w: float
    accepted: bool
    message: str = ""


@dataclass(frozen=True)
class GpuSample:
    """One reading of a GPU's state. Failed fields are NaN (or None for ``pstate``).

    Two draw readings, because drivers differ in what they average (issue 24):

    Attributes:
        gpu_index: Index of the GPU read.
        power_w: The driver's power usage (``nvmlDeviceGetPowerUsage``: a one-second moving
            average on Ampere and newer, a short average before; amdsmi's average socket power),
            NaN where the card has none.
        energy_mj: Total-energy counter since driver load (NaN where unsupported); it advances
            at the driver's own update period, not continuously.
        temp_c: GPU core temperature.
        sm_clock_mhz: Current SM clock.
        mem_clock_mhz: Current memory clock.
        util_pct: GPU utilization.
        pstate: Performance state, 0 (P0) to 15; None when unknown.
        clock_event_bits: Clock-event reason bitmask (NVML), None when unknown.
        read_errors: How many fields of this reading failed.
        power_instant_w: The instantaneous draw (``NVML_FI_DEV_POWER_INSTANT``; amdsmi's current
            socket power), NaN where the driver has none or the read failed.
    """

    gpu_index: int
    power_w: float
    energy_mj: float
    temp_c: float
    sm_clock_mhz: float
    mem_clock_mhz: float
    util_pct: float
    pstate: int | None
    clock_event_bits: int | None
    read_errors: int = 0
    power_instant_w: float = NAN

    @property
    def draw_w(self) -> float:
        """The draw every figure uses: the instant reading where there is one, else the
        driver's power usage. A one-second average lags a cap change by a second and smears
        it over the next readings, so it is only the fallback."""
        if math.isfinite(self.power_instant_w):
            return self.power_instant_w
        return self.power_w

    @property
    def throttle_power(self) -> bool:
        """True when the power cap (software or brake) limited clocks."""
        return bool(self.clock_event_bits is not None and self.clock_event_bits & POWER_EVENT_MASK)

    @property
    def throttle_thermal(self) -> bool:
        """True when a thermal reason limited clocks."""
        return bool(
            self.clock_event_bits is not None and self.clock_event_bits & THERMAL_EVENT_MASK
        )


@dataclass(frozen=True)
class LockedClocks:
    """The SM and memory clock locks of a GPU, as far as the backend can tell.

    NVML can set clock locks but has no call that reads them back, so on real hardware
    ``known`` is False and the values are None; ``user_clock_setting_active`` then tells whether
    the card reports its clocks held by a user setting right now (the clock-event reason
    "applications clocks setting", which locks also raise).

    Attributes:
        known: Whether the backend can read the locks at all.
        sm_mhz: Locked SM clock (the range's top), MHz; None when not locked or unknown.
        mem_mhz: Locked memory clock, MHz; None when not locked or unknown.
        user_clock_setting_active: The card says a user clock setting limits its clocks now;
            None when that cannot be read.
        sm_min_mhz: The SM lock's bottom, MHz (an idle card clocks down to it); None when not
            locked, unknown, or a single-value lock (min = max).
    """

    known: bool
    sm_mhz: float | None = None
    mem_mhz: float | None = None
    user_clock_setting_active: bool | None = None
    sm_min_mhz: float | None = None


# --- clock locks (issue 15) -------------------------------------------------------------------


@dataclass(frozen=True)
class SupportedClocks:
    """Clocks a GPU can be locked to, MHz, descending (as NVML lists them).

    Attributes:
        mem_mhz: Memory clocks (``nvmlDeviceGetSupportedMemoryClocks``).
        sm_mhz_by_mem: SM clocks per memory clock (``nvmlDeviceGetSupportedGraphicsClocks``).
    """

    mem_mhz: tuple[float, ...]
    sm_mhz_by_mem: dict[float, tuple[float, ...]]


@dataclass(frozen=True)
class LockResult:
    """What happened when a clock was locked or its offset set (whether the card follows a lock
    shows under load).

    Attributes:
        requested_mhz: The lock or offset asked for.
        accepted: True when the driver took the call.
        message: Why it was not taken (one line); when taken, empty or notes on how (an offset
            the driver rounded, a performance state that refused it, a read-back it does not
            report).
        applied_mhz: The value the card reads back as applied (a driver rounds an offset to its
            grid); None where the backend does not read it back or the driver does not report it.
        verified: False when the driver took the call but its read-back cannot confirm it (a
            driver that reads an offset back as 0 after a non-zero set); True otherwise, refusals
            included.
    """

    requested_mhz: float
    accepted: bool
    message: str = ""
    applied_mhz: float | None = None
    verified: bool = True


@dataclass(frozen=True)
class ClockOffset:
    """A clock's offset: the SM clock's on the voltage/frequency curve (what Linux users call an
    undervolt, with a locked maximum clock: a positive offset runs each clock at the voltage of
    a lower one), or the memory clock's (issue 45: a positive one raises the memory clock, in
    the driver's unit, on NVIDIA twice the reported memory clock's MHz on GDDR6X).

    Attributes:
        supported: Whether the card reports an offset it can set at all.
        offset_mhz: The offset in force (None: unsupported or unreadable); ``sm_offset_mhz``
            names it too, for the SM offset's many readers.
        min_mhz: Lowest offset the driver accepts (None: unknown).
        max_mhz: Highest offset the driver accepts (None: unknown).
        message: Why it is unsupported or unreadable (one line), empty otherwise.
    """

    supported: bool
    offset_mhz: float | None = None
    min_mhz: float | None = None
    max_mhz: float | None = None
    message: str = ""

    @property
    def sm_offset_mhz(self) -> float | None:
        """The offset in force (the name the SM offset's readers use)."""
        return self.offset_mhz


@dataclass(frozen=True)
class GpuProcess:
    """A process running compute work on a GPU (what finds the cards that serve the model).

    Attributes:
        pid: Process id as the driver reports it (the host's PID namespace).
        used_memory_mib: GPU memory it holds; NaN when the driver does not say.
    """

    pid: int
    used_memory_mib: float


class Gpu(Protocol):
    """One GPU a sweep can read and cap.

    Implementations: :class:`powersweep.sweep.gpu.nvml.NvmlGpu` and
    :class:`powersweep.sim.sim_gpu.SimGpu`.
    """

    @property
    def index(self) -> int:
        """NVML index of this GPU."""
        ...

    def identity(self) -> GpuIdentity:
        """Return who this GPU is."""
        ...

    def envelope(self) -> PowerEnvelope:
        """Return the power limits now (``current_w`` is the limit in force)."""
        ...

    def set_power_limit(self, watts: float) -> SetLimitResult:
        """Set the power limit, read it back and report whether the card took it.

        Raises:
            GpuError: The limit cannot be set at all (no permission, not supported).
        """
        ...

    def read_sample(self) -> GpuSample:
        """Read draw, energy, temperature, clocks, utilization, P-state and clock events.

        Never raises for a failed field: it becomes NaN/None and counts in ``read_errors``.
        """
        ...

    def slowdown_temp_c(self) -> float:
        """Temperature at which the card starts thermal slowdown (NaN if unknown)."""
        ...

    # --- persistence mode and clock-lock reads (powersweep status / apply) ---------------

    def persistence_mode(self) -> bool | None:
        """Whether persistence mode is on; None when it cannot be read (never raises)."""
        ...

    def set_persistence_mode(self, enabled: bool) -> bool | None:
        """Turn persistence mode on or off and return the read-back (None if unreadable).

        Raises:
            GpuError: It cannot be set (needs root, not supported on this platform).
        """
        ...

    def locked_clocks(self) -> LockedClocks:
        """The SM and memory clock locks, as far as the backend can read them (never raises)."""
        ...

    # --- clock locks (issue 15) -------------------------------------------------------------

    def supported_clocks(self) -> SupportedClocks:
        """The memory clocks and, per memory clock, the SM clocks the card can be locked to.

        Raises:
            GpuError: The driver cannot list them (one line, why).
        """
        ...

    def lock_sm_clock(self, mhz: float, min_mhz: float | None = None) -> LockResult:
        """Lock the SM clock to the range ``min_mhz``-``mhz`` (None: min = max, a single-value
        lock that keeps an idle card at ``mhz``); not accepted when the driver refuses.

        Raises:
            GpuError: No permission (needs root), or NVML failed.
        """
        ...

    def lock_mem_clock(self, mhz: float) -> LockResult:
        """Lock the memory clock at ``mhz``; not accepted when the driver refuses (GeForce).

        Raises:
            GpuError: No permission (needs root), or NVML failed.
        """
        ...

    def reset_clock_locks(self, sm: bool = True, mem: bool = True) -> None:
        """Remove the SM and/or memory lock (the card picks its clocks again).

        Raises:
            GpuError: The driver refused or failed.
        """
        ...

    # --- the voltage/frequency curve's offset (issue 36) ---------------------------------------

    def sm_clock_offset(self) -> ClockOffset:
        """The SM clock offset in force and the range the driver accepts (never raises: an
        unsupported or failed read says so in the result)."""
        ...

    def set_sm_clock_offset(self, mhz: float) -> LockResult:
        """Set the SM clock offset to ``mhz`` (0 puts the curve back); not accepted when the
        driver refuses or the value is outside its range. The caller journals the offset in
        force before the first change.

        Raises:
            GpuError: No permission (needs root), or the driver failed.
        """
        ...

    def mem_clock_offset(self) -> ClockOffset:
        """The memory clock offset in force and the range the driver accepts, in the driver's
        unit (NVML's: twice the reported memory clock's MHz on GDDR6X); never raises, as
        :meth:`sm_clock_offset`."""
        ...

    def set_mem_clock_offset(self, mhz: float) -> LockResult:
        """Set the memory clock offset to ``mhz`` (the driver's unit; 0 puts it back), as
        :meth:`set_sm_clock_offset` sets the SM one. The caller journals the offset in force
        before the first change.

        Raises:
            GpuError: No permission (needs root), or the driver failed.
        """
        ...

    # --- which cards serve the model (issue 14) -------------------------------------------------

    def compute_processes(self) -> tuple[GpuProcess, ...] | None:
        """Processes running compute work on this GPU now; None when it cannot be read.

        Never raises: an unsupported or failed read is None.
        """
        ...

    # --- GPU faults (issue 36's stability checks) ----------------------------------------------

    def xid_events(self) -> tuple[int, ...] | None:
        """The Xid codes the driver reported for this card since the last call.

        Xids are the NVIDIA driver's GPU fault reports (13 graphics engine exception, 31 MMU
        fault, 43 GPU stopped processing, 48 double-bit ECC error, 79 fallen off the bus, ...).
        A backend that must register for them first does so on the first call, which then
        returns ``()``: call it once before the work to watch.

        Never raises: a failed poll is None (and counts where the backend counts read errors).

        Returns:
            The codes in the order reported, ``()`` when there were none; None when the backend
            cannot read them (not supported, not permitted, not an NVIDIA card).
        """
        ...


class GpuBackend(Protocol):
    """Enumerates GPUs and owns backend-wide state (NVML init/shutdown)."""

    def device_count(self) -> int:
        """Number of GPUs visible."""
        ...

    def gpu(self, index: int) -> Gpu:
        """Return the GPU at ``index``."""
        ...

    def close(self) -> None:
        """Release backend resources (idempotent)."""
        ...
