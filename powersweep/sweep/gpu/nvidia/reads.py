"""The readings of one NVIDIA GPU through NVML: draw, energy, temperature, clocks, utilization,
P-state and clock events, each tolerant of failure.

A sample field that NVML reports as not supported (or whose function the driver lacks) is NaN (or
None) and is not asked for again; that is a capability, not a failure, so it does not count in
``read_errors``.

The reasoning: docs/architecture.md, "powersweep.sweep.gpu.nvidia.reads".
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Literal, TypeVar

from powersweep.sweep.gpu.nvidia.nvml_api import available, field_number, or_nan
from powersweep.sweep.gpu.nvidia.nvml_errors import nvml_read
from powersweep.sweep.gpu.protocol import NAN, Fault, GpuSample

PowerSource = Literal["instant", "average"]

_T = TypeVar("_T")


class NvmlReads:
    """Reads one GPU's samples (:class:`~.nvml_gpu.NvmlGpu` hands them on).

    Every sample carries both draw readings: ``power_w`` from ``nvmlDeviceGetPowerUsage`` (a
    one-second moving average on Ampere and newer) and ``power_instant_w`` from the
    instantaneous field ``NVML_FI_DEV_POWER_INSTANT``. At construction it probes whether that
    field works (``power_source``); where it does not, the instant reading is NaN and the figures
    use the average.

    Args:
        nvml: The ``pynvml`` module (or a fake with the same surface).
        handle: NVML device handle.
        index: NVML index of the device.

    Attributes:
        power_source: ``"instant"`` or ``"average"``: the reading the figures use for the draw.
        read_error_count: Failed field reads in ``read_sample`` so far.
        instant_fallbacks: Reads where the instant power failed (each also counts as a read
            error) and the draw fell back to the average.
    """

    def __init__(self, nvml: ModuleType, handle: object, index: int) -> None:
        self._nvml = nvml
        self._handle = handle
        self._index = index
        self._unsupported: set[str] = set()
        self._pending_errors = 0
        self.read_error_count = 0
        self.instant_fallbacks = 0
        self.power_source: PowerSource = self._probe_power_source()

    @property
    def unsupported_fields(self) -> frozenset[str]:
        """Sample fields NVML said this GPU does not support (never asked for again)."""
        return frozenset(self._unsupported)

    def read_sample(self) -> GpuSample:
        """Read draw, energy, temperature, clocks, utilization, P-state and clock events.

        Never raises for an NVML error: the field becomes NaN/None and counts in
        ``read_errors`` (and in ``read_error_count``).
        """
        nvml = self._nvml
        h = self._handle
        self._pending_errors = 0
        instant_w = self._read_instant_w()
        average_mw = self._try("power", lambda: float(nvml.nvmlDeviceGetPowerUsage(h)))
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
            power_w=average_mw / 1000.0 if average_mw is not None else NAN,
            power_instant_w=instant_w,
            energy_mj=or_nan(energy),
            temp_c=or_nan(temp),
            sm_clock_mhz=or_nan(sm),
            mem_clock_mhz=or_nan(mem),
            util_pct=or_nan(util),
            # NVML_PSTATE_UNKNOWN (32) means the driver does not know: not a failed read.
            pstate=pstate if pstate is not None and 0 <= pstate <= 15 else None,
            clock_event_bits=events,
            read_errors=errors,
        )

    # --- internals ------------------------------------------------------------------------

    def _try(self, field: str, read: Callable[[], _T]) -> _T | None:
        """Run one field read of ``read_sample``: None on failure, counting real errors."""
        if field in self._unsupported:
            return None
        return nvml_read(self._nvml, read, lambda fault: self._failed(field, fault))

    def _failed(self, field: str, fault: Fault) -> None:
        """A capability the card lacks is not asked for again; any other fault counts."""
        if fault == "unsupported":
            self._unsupported.add(field)
        else:
            self._pending_errors += 1

    def _read_instant_w(self) -> float:
        """The instant field in W; NaN where the driver has none (not counted) or the read
        failed (counted: the sample's draw then falls back to the average)."""
        if self.power_source != "instant":
            return NAN
        instant_mw = self._instant_power_mw()
        if instant_mw is None:
            self.instant_fallbacks += 1
            self._pending_errors += 1
            return NAN
        return instant_mw / 1000.0

    def _instant_power_mw(self) -> float | None:
        """Read ``NVML_FI_DEV_POWER_INSTANT`` in mW, or None if it failed in any way."""
        nvml = self._nvml
        values = nvml_read(
            nvml,
            lambda: nvml.nvmlDeviceGetFieldValues(self._handle, [nvml.NVML_FI_DEV_POWER_INSTANT]),
        )
        if values is None or len(values) < 1:
            return None
        field = values[0]
        # The call as a whole succeeds even when this one field failed: check its own status.
        if field.nvmlReturn != nvml.NVML_SUCCESS:
            return None
        mw = field_number(self._nvml, field)
        return mw if mw is not None and available(mw) else None

    def _probe_power_source(self) -> PowerSource:
        instant_mw = self._instant_power_mw()
        if instant_mw is None:
            return "average"
        if instant_mw == 0:
            # A live GPU never draws 0 W: a zero instant reading next to a non-zero average
            # means the driver fills the field without measuring it.
            nvml = self._nvml
            average_mw = nvml_read(nvml, lambda: float(nvml.nvmlDeviceGetPowerUsage(self._handle)))
            if average_mw is not None and average_mw > 0:
                return "average"
        return "instant"
