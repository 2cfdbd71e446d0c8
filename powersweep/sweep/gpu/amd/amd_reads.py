"""The readings of one AMD GPU through amdsmi: draw, energy, temperature, clocks, utilization
and throttle (violation) status, each field NaN/None where the card does not report it.

:class:`AmdReads` is a base of :class:`~powersweep.sweep.gpu.amd.amd_gpu.AmdsmiGpu`: its
``read_sample`` and the per-field bookkeeping (a field unsupported from the first read is not
asked for again; any other failure counts in ``read_errors``).

The reasoning: docs/amd.md, "powersweep.sweep.gpu.amd.amd_reads".
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from powersweep.runformat import as_float
from powersweep.sweep.gpu.amd.amdsmi_api import amd_read
from powersweep.sweep.gpu.protocol import (
    CLOCK_EVENT_HW_SLOWDOWN,
    CLOCK_EVENT_HW_THERMAL,
    CLOCK_EVENT_SW_POWER_CAP,
    CLOCK_EVENT_SW_THERMAL,
    NAN,
    Fault,
    GpuSample,
)

# ``unknown``: the probe's calls failed (an error, not N/A), so it is probed again at the next
# reading rather than taken for a card without a power reading.
PowerSource = Literal["current", "average", "none", "unknown"]

# The socket-power readings of ``amdsmi_get_power_info``, by power source.
_POWER_KEYS = {"current": "current_socket_power", "average": "average_socket_power"}


class AmdReads:
    """The readings of :class:`~powersweep.sweep.gpu.amd.amd_gpu.AmdsmiGpu` (its base; the
    attributes below are set by its constructor)."""

    power_source: PowerSource
    power_reported_by: int | None
    energy_fallback: str
    read_error_count: int
    _smi: ModuleType
    _handle: object
    _index: int
    _unsupported: set[str]
    _read_ok: set[str]
    _pending_errors: int
    _last_energy_mj: float | None

    if TYPE_CHECKING:

        def _label(self) -> str: ...

    def read_sample(self) -> GpuSample:
        """Read draw, energy, temperature, clocks, utilization and throttle (violation) status.

        Never raises for an amdsmi error: the field becomes NaN/None and counts in
        ``read_errors``. amdsmi has no P-states: ``pstate`` is None.
        """
        smi, h = self._smi, self._handle
        self._pending_errors = 0
        power, instant = self._read_power_w()
        energy = self._read_energy_mj()
        temp = self._field(
            "temp",
            lambda: smi.amdsmi_get_temp_metric(
                h, smi.AmdSmiTemperatureType.HOTSPOT, smi.AmdSmiTemperatureMetric.CURRENT
            ),
        )
        sm = self._field(
            "sm_clock", lambda: smi.amdsmi_get_clock_info(h, smi.AmdSmiClkType.GFX)["clk"]
        )
        mem = self._field(
            "mem_clock", lambda: smi.amdsmi_get_clock_info(h, smi.AmdSmiClkType.MEM)["clk"]
        )
        util = self._field("util", lambda: smi.amdsmi_get_gpu_activity(h)["gfx_activity"])
        events = self._events()
        errors = self._pending_errors
        self.read_error_count += errors
        return GpuSample(
            gpu_index=self._index,
            power_w=power,
            power_instant_w=instant,
            energy_mj=energy,
            temp_c=_or_nan(temp),
            sm_clock_mhz=_or_nan(sm),
            mem_clock_mhz=_or_nan(mem),
            util_pct=_or_nan(util),
            pstate=None,
            clock_event_bits=events,
            read_errors=errors,
        )

    def _field(self, name: str, read: Callable[[], Any]) -> float | None:
        """One field of ``read_sample``: None when unsupported (not counted) or failed (counted)."""
        if name in self._unsupported:
            return None
        failed: list[Fault] = []
        try:
            value = as_float(amd_read(self._smi, read, failed.append), None)
        except (KeyError, TypeError):  # a malformed answer
            failed.append("failed")
        if failed:
            self._failed(name, failed[0])
            return None
        if value is None:
            if name in self._read_ok:
                self._pending_errors += 1
            else:
                self._unsupported.add(name)  # N/A from the start: the card does not report it
            return None
        self._read_ok.add(name)
        return value

    def _failed(self, name: str, fault: Fault) -> None:
        """A field the card does not support is not asked for again; another fault counts."""
        if fault == "unsupported":
            self._unsupported.add(name)
        else:
            self._pending_errors += 1

    def _socket_power(self, source: str) -> float | None:
        info = self._smi.amdsmi_get_power_info(self._handle)
        return as_float(info.get(_POWER_KEYS[source]), None)

    def _probe_power_source(self) -> PowerSource:
        smi = self._smi
        failed = False
        for source in ("current", "average"):
            try:
                if self._socket_power(source) is not None:
                    self._read_ok.add(f"power_{source}")
                    return "current" if source == "current" else "average"
            except smi.AmdSmiException:
                failed = True
        return "unknown" if failed else "none"

    def _read_power_w(self) -> tuple[float, float]:
        """The power usage and the instant draw, W, from one ``amdsmi_get_power_info``.

        ``current_socket_power`` is the instant reading; the usage is ``average_socket_power``
        where the card fills it (a firmware average: its window is not documented), else the
        current one, the card's only reading. A reading ``N/A`` from the start is a capability
        (NaN, not counted); a failed call counts once.
        """
        if self.power_source == "unknown":
            self.power_source = self._probe_power_source()
            if self.power_source == "unknown":
                self._pending_errors += 1  # the probe failed again: a failed read, counted
                return NAN, NAN
        if self.power_source == "none":
            return NAN, NAN
        smi = self._smi
        info = amd_read(smi, lambda: smi.amdsmi_get_power_info(self._handle))
        if info is None:
            self._pending_errors += 1
            return NAN, NAN
        current = self._field("power_current", lambda: info.get(_POWER_KEYS["current"]))
        average = self._field("power_average", lambda: info.get(_POWER_KEYS["average"]))
        usage = average if average is not None else current
        return _or_nan(usage), _or_nan(current)

    def _read_energy_mj(self) -> float:
        if self.power_reported_by is not None or self.energy_fallback:
            return NAN

        def read() -> float | None:
            counter = self._smi.amdsmi_get_energy_count(self._handle)
            # amdsmi < 6.2.1 named the accumulator "power"
            ticks = as_float(counter.get("energy_accumulator", counter.get("power")), None)
            resolution = as_float(counter.get("counter_resolution"), None)
            if ticks is None or resolution is None:
                return None
            return ticks * resolution / 1000.0  # microjoules to millijoules

        energy = self._field("energy", read)
        if energy is None:
            return NAN
        last, self._last_energy_mj = self._last_energy_mj, energy
        if last is not None and energy < last:
            self.energy_fallback = (
                f"the energy counter of {self._label()} ran backwards ({last:.0f} -> "
                f"{energy:.0f} mJ): energy comes from the sampled draw"
            )
            return NAN
        return energy

    def _events(self) -> int | None:
        """Clock-event bits from the violation status (MI300 and newer); None where unknown."""
        if "clock_events" in self._unsupported:
            return None
        smi = self._smi
        status = amd_read(
            smi,
            lambda: smi.amdsmi_get_violation_status(self._handle),
            lambda fault: self._failed("clock_events", fault),
        )
        if status is None:
            return None
        power, socket, prochot = (
            status.get(k) for k in ("active_ppt_pwr", "active_socket_thrm", "active_prochot_thrm")
        )
        if not any(isinstance(v, bool) for v in (power, socket, prochot)):
            self._unsupported.add("clock_events")  # every flag N/A: the card does not say
            return None
        hw = status.get("active_vr_thrm") is True or status.get("active_hbm_thrm") is True
        flags = {
            CLOCK_EVENT_SW_POWER_CAP: power is True,
            CLOCK_EVENT_SW_THERMAL: socket is True,
            CLOCK_EVENT_HW_THERMAL: prochot is True,
            CLOCK_EVENT_HW_SLOWDOWN: hw,
        }
        return sum(bit for bit, on in flags.items() if on)


def _or_nan(value: float | None) -> float:
    return NAN if value is None else value
