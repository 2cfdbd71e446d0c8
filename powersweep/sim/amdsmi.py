"""An ``amdsmi``-shaped module: the simulated AMD cards, and the configurable fake the tests use.

The reasoning: docs/amd.md, "powersweep.sim.amdsmi".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from powersweep.sim.amdsmi_types import (
    AMDSMI_STATUS_INVAL,
    AMDSMI_STATUS_NOT_INIT,
    AMDSMI_STATUS_NOT_SUPPORTED,
    AmdSmiClkType,
    AmdSmiDevPerfLevel,
    AmdSmiException,
    AmdSmiInitFlags,
    AmdSmiLibraryException,
    AmdSmiParameterException,
    AmdSmiTemperatureMetric,
    AmdSmiTemperatureType,
    AmdSmiVirtualizationMode,
)

# --- cards -------------------------------------------------------------------------------------


@dataclass(eq=False)
class AmdCard:
    """State of one fake AMD GPU, in amdsmi's units. Mutate it freely during a test.

    ``None`` in a reading makes amdsmi report it as ``"N/A"`` (or, for the energy counter,
    temperatures and the violation status, NOT_SUPPORTED).

    Attributes:
        power_capped: False makes the power-cap calls NOT_SUPPORTED (some APUs).
        silent_floor_uw: A cap below it is "set" but the card keeps its old one.
        clamp_power: Power readings never exceed the cap.
        gfx_range_mhz / mem_range_mhz: The clock range set (None: the card's own).
        clocks_follow_locks: The clocks read follow a locked range's top.
        fail: Function name -> status code it raises on every call for this card.
    """

    market_name: str = "AMD Instinct MI300X"
    uuid: str = "1fff74a1-0000-1000-8000-000000000000"
    vram_mb: int = 196592
    driver_version: str = "6.10.5"
    virtualization_mode: int = AmdSmiVirtualizationMode.BAREMETAL
    power_capped: bool = True
    min_cap_uw: int = 0
    default_cap_uw: int = 750_000_000
    max_cap_uw: int = 750_000_000
    cap_uw: int = 750_000_000
    silent_floor_uw: int | None = None
    current_power_w: int | None = 560
    average_power_w: int | None = None
    clamp_power: bool = True
    energy_ticks: int | None = 10_000_000
    energy_resolution_uj: float = 15.259
    energy_key: str = "energy_accumulator"
    hotspot_c: int | None = 62
    hotspot_critical_c: int | None = 100
    gfx_clk_mhz: int | None = 2100
    mem_clk_mhz: int | None = 1300
    gfx_levels_mhz: list[int] = field(default_factory=lambda: [500, 1300, 2100])
    mem_levels_mhz: list[int] = field(default_factory=lambda: [900, 1100, 1200, 1300])
    gfx_activity: int | None = 98
    violation: dict[str, Any] | None = field(
        default_factory=lambda: {
            "active_ppt_pwr": False,
            "active_socket_thrm": False,
            "active_prochot_thrm": False,
            "active_vr_thrm": False,
            "active_hbm_thrm": False,
        }
    )
    perf_level: int = AmdSmiDevPerfLevel.AUTO
    sm_locks_supported: bool = True
    mem_locks_supported: bool = False
    gfx_range_mhz: tuple[int, int] | None = None
    mem_range_mhz: tuple[int, int] | None = None
    clocks_follow_locks: bool = True
    processes: list[dict[str, Any]] = field(default_factory=list)
    fail: dict[str, int] = field(default_factory=dict)

    def power_w(self, reading: int | None) -> int | None:
        """A socket-power reading as the card reports it (clamped to the cap)."""
        if reading is None or not self.clamp_power:
            return reading
        return min(reading, self.cap_uw // 1_000_000)

    def tick(self, seconds: float) -> None:
        """Advance the energy counter by the draw over ``seconds``."""
        draw = self.power_w(self.current_power_w if self.current_power_w is not None else None)
        draw = draw if draw is not None else self.power_w(self.average_power_w)
        if self.energy_ticks is not None and draw is not None:
            self.energy_ticks += round(draw * seconds * 1e6 / self.energy_resolution_uj)


# The classes amdsmi exports by name (set on each module object: as class attributes they
# would shadow the types in the methods' annotations).
_SURFACE_TYPES: tuple[type, ...] = (
    AmdSmiException,
    AmdSmiLibraryException,
    AmdSmiParameterException,
    AmdSmiInitFlags,
    AmdSmiClkType,
    AmdSmiTemperatureType,
    AmdSmiTemperatureMetric,
    AmdSmiDevPerfLevel,
    AmdSmiVirtualizationMode,
)


def _na(value: Any) -> Any:
    return "N/A" if value is None else value


class FakeAmdsmi(ModuleType):
    """An ``amdsmi``-like module over :class:`AmdCard` states (the handles are the cards).

    Args:
        cards: The GPUs, in amdsmi's order (one default MI300X when omitted).
        fail: Module-level function name (``amdsmi_init``, ``amdsmi_get_processor_handles``,
            ``amdsmi_shut_down``) -> status code it raises.

    Attributes:
        calls: Every call as ``(function name, card index or None)``.
    """

    def __init__(
        self, cards: Sequence[AmdCard] | None = None, *, fail: dict[str, int] | None = None
    ) -> None:
        super().__init__("fake_amdsmi")
        for surface in _SURFACE_TYPES:
            setattr(self, surface.__name__, surface)
        self.cards: list[AmdCard] = list(cards) if cards is not None else [AmdCard()]
        self.fail: dict[str, int] = dict(fail or {})
        self.init_count = 0
        self.shutdown_calls = 0
        self.calls: list[tuple[str, int | None]] = []

    def calls_to(self, name: str) -> int:
        """How many times the function ``name`` was called (any card)."""
        return sum(1 for called, _ in self.calls if called == name)

    # --- hooks a simulated rig overrides -------------------------------------------------

    def _refresh(self, card: AmdCard) -> None:
        """Bring a card's readings up to date before a call reads them (nothing here)."""

    def _cap_set(self, card: AmdCard, cap_uw: int) -> None:
        card.cap_uw = cap_uw

    def _range_set(self, card: AmdCard, clk: str, lo: int, hi: int) -> None:
        setattr(card, f"{clk}_range_mhz", (lo, hi))

    def _level_set(self, card: AmdCard, level: AmdSmiDevPerfLevel) -> None:
        card.perf_level = level
        if level == AmdSmiDevPerfLevel.AUTO:
            card.gfx_range_mhz = card.mem_range_mhz = None

    # --- bookkeeping -----------------------------------------------------------------------

    def _module_call(self, name: str) -> None:
        self.calls.append((name, None))
        if name in self.fail:
            raise AmdSmiLibraryException(self.fail[name])
        if name != "amdsmi_init" and self.init_count <= 0:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)

    def _card(self, name: str, handle: Any) -> AmdCard:
        if not isinstance(handle, AmdCard) or handle not in self.cards:
            raise AmdSmiParameterException(handle, "amdsmi_processor_handle")
        self.calls.append((name, self.cards.index(handle)))
        if self.init_count <= 0:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)
        if name in handle.fail:
            raise AmdSmiLibraryException(handle.fail[name])
        self._refresh(handle)
        return handle

    @staticmethod
    def _check(value: Any, kind: type) -> None:
        if not isinstance(value, kind):
            raise AmdSmiParameterException(value, kind)

    @staticmethod
    def _settable(card: AmdCard) -> None:
        # "not supported on virtual machine guest" (amdsmi's documentation of every setter)
        if card.virtualization_mode == AmdSmiVirtualizationMode.GUEST:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)

    # --- library and identity ----------------------------------------------------------------

    def amdsmi_init(self, flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        self._check(flag, AmdSmiInitFlags)
        self._module_call("amdsmi_init")
        self.init_count += 1

    def amdsmi_shut_down(self) -> None:
        self._module_call("amdsmi_shut_down")
        self.shutdown_calls += 1
        self.init_count -= 1

    def amdsmi_get_processor_handles(self) -> list[AmdCard]:
        self._module_call("amdsmi_get_processor_handles")
        return list(self.cards)

    def amdsmi_get_gpu_asic_info(self, processor_handle: Any) -> dict[str, Any]:
        card = self._card("amdsmi_get_gpu_asic_info", processor_handle)
        return {
            "market_name": card.market_name or "N/A",
            "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "device_id": "0x74a1",
            "target_graphics_version": "gfx942",
        }

    def amdsmi_get_gpu_device_uuid(self, processor_handle: Any) -> str:
        return self._card("amdsmi_get_gpu_device_uuid", processor_handle).uuid

    def amdsmi_get_gpu_vram_info(self, processor_handle: Any) -> dict[str, Any]:
        card = self._card("amdsmi_get_gpu_vram_info", processor_handle)
        return {"vram_type": 0, "vram_vendor": "N/A", "vram_size": card.vram_mb}

    def amdsmi_get_gpu_driver_info(self, processor_handle: Any) -> dict[str, Any]:
        card = self._card("amdsmi_get_gpu_driver_info", processor_handle)
        return {"driver_name": "amdgpu", "driver_version": card.driver_version}

    def amdsmi_get_gpu_virtualization_mode(self, processor_handle: Any) -> dict[str, Any]:
        card = self._card("amdsmi_get_gpu_virtualization_mode", processor_handle)
        return {"mode": AmdSmiVirtualizationMode(card.virtualization_mode)}

    # --- power ---------------------------------------------------------------------------------

    def amdsmi_get_power_cap_info(self, processor_handle: Any) -> dict[str, Any]:
        card = self._card("amdsmi_get_power_cap_info", processor_handle)
        if not card.power_capped:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return {
            "power_cap": card.cap_uw,
            "default_power_cap": card.default_cap_uw,
            "dpm_cap": card.max_cap_uw,
            "min_power_cap": card.min_cap_uw,
            "max_power_cap": card.max_cap_uw,
        }

    def amdsmi_set_power_cap(self, processor_handle: Any, sensor_ind: int, cap: int) -> None:
        card = self._card("amdsmi_set_power_cap", processor_handle)
        self._check(sensor_ind, int)
        self._check(cap, int)
        self._settable(card)
        if not card.power_capped:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        if sensor_ind != 0 or not card.min_cap_uw <= cap <= card.max_cap_uw:
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
        if card.silent_floor_uw is not None and cap < card.silent_floor_uw:
            return  # the card says yes and keeps what it had
        self._cap_set(card, cap)

    def amdsmi_get_power_info(self, processor_handle: Any) -> dict[str, Any]:
        card = self._card("amdsmi_get_power_info", processor_handle)
        current = card.power_w(card.current_power_w)
        average = card.power_w(card.average_power_w)
        return {
            "socket_power": _na(current if current is not None else average),
            "current_socket_power": _na(current),
            "average_socket_power": _na(average),
            "gfx_voltage": "N/A",
            "soc_voltage": "N/A",
            "mem_voltage": "N/A",
            "power_limit": card.cap_uw // 1_000_000,
        }

    def amdsmi_get_energy_count(self, processor_handle: Any) -> dict[str, Any]:
        card = self._card("amdsmi_get_energy_count", processor_handle)
        if card.energy_ticks is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return {
            card.energy_key: card.energy_ticks,
            "counter_resolution": card.energy_resolution_uj,
            "timestamp": 0,
        }

    # --- readings --------------------------------------------------------------------------------

    def amdsmi_get_temp_metric(
        self,
        processor_handle: Any,
        sensor_type: AmdSmiTemperatureType,
        metric: AmdSmiTemperatureMetric,
    ) -> int:
        card = self._card("amdsmi_get_temp_metric", processor_handle)
        self._check(sensor_type, AmdSmiTemperatureType)
        self._check(metric, AmdSmiTemperatureMetric)
        value = None
        if sensor_type == AmdSmiTemperatureType.HOTSPOT:
            value = {
                AmdSmiTemperatureMetric.CURRENT: card.hotspot_c,
                AmdSmiTemperatureMetric.CRITICAL: card.hotspot_critical_c,
            }.get(metric)
        if value is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return value

    def amdsmi_get_clock_info(
        self, processor_handle: Any, clock_type: AmdSmiClkType
    ) -> dict[str, Any]:
        card = self._card("amdsmi_get_clock_info", processor_handle)
        self._check(clock_type, AmdSmiClkType)
        clk, levels, held = self._clock(card, clock_type)
        if held is not None and card.clocks_follow_locks and clk is not None:
            clk = min(clk, held[1])
        return {
            "clk": _na(clk),
            "min_clk": min(levels) if levels else "N/A",
            "max_clk": max(levels) if levels else "N/A",
            "clk_locked": held is not None,
            "clk_deep_sleep": "N/A",
        }

    def amdsmi_get_gpu_activity(self, processor_handle: Any) -> dict[str, Any]:
        card = self._card("amdsmi_get_gpu_activity", processor_handle)
        return {"gfx_activity": _na(card.gfx_activity), "umc_activity": "N/A", "mm_activity": "N/A"}

    def amdsmi_get_violation_status(self, processor_handle: Any) -> dict[str, Any]:
        card = self._card("amdsmi_get_violation_status", processor_handle)
        if card.violation is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return dict(card.violation)

    def amdsmi_get_gpu_process_list(self, processor_handle: Any) -> list[dict[str, Any]]:
        card = self._card("amdsmi_get_gpu_process_list", processor_handle)
        return [dict(p) for p in card.processes]

    # --- clocks ------------------------------------------------------------------------------

    @staticmethod
    def _clock(
        card: AmdCard, clk_type: AmdSmiClkType
    ) -> tuple[int | None, list[int], tuple[int, int] | None]:
        if clk_type == AmdSmiClkType.GFX:
            return card.gfx_clk_mhz, card.gfx_levels_mhz, card.gfx_range_mhz
        if clk_type == AmdSmiClkType.MEM:
            return card.mem_clk_mhz, card.mem_levels_mhz, card.mem_range_mhz
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)

    def amdsmi_get_clk_freq(self, processor_handle: Any, clk_type: AmdSmiClkType) -> dict[str, Any]:
        card = self._card("amdsmi_get_clk_freq", processor_handle)
        self._check(clk_type, AmdSmiClkType)
        clk, levels, _ = self._clock(card, clk_type)
        current = min(range(len(levels)), key=lambda i: abs(levels[i] - (clk or 0)), default=0)
        return {
            "num_supported": len(levels),
            "current": current,
            "frequency": [mhz * 1_000_000 for mhz in levels],
        }

    def amdsmi_set_gpu_clk_range(
        self,
        processor_handle: Any,
        min_clk_value: int,
        max_clk_value: int,
        clk_type: AmdSmiClkType,
    ) -> None:
        card = self._card("amdsmi_set_gpu_clk_range", processor_handle)
        self._check(min_clk_value, int)
        self._check(max_clk_value, int)
        self._check(clk_type, AmdSmiClkType)
        self._settable(card)
        _, levels, _ = self._clock(card, clk_type)
        supported = (
            card.sm_locks_supported if clk_type == AmdSmiClkType.GFX else card.mem_locks_supported
        )
        if not supported:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        if min_clk_value > max_clk_value or not min(levels) <= min_clk_value <= max(levels):
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
        if max_clk_value > max(levels):
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
        self._range_set(
            card, "gfx" if clk_type == AmdSmiClkType.GFX else "mem", min_clk_value, max_clk_value
        )

    def amdsmi_get_gpu_perf_level(self, processor_handle: Any) -> str:
        card = self._card("amdsmi_get_gpu_perf_level", processor_handle)
        return f"AMDSMI_DEV_PERF_LEVEL_{AmdSmiDevPerfLevel(card.perf_level).name}"

    def amdsmi_set_gpu_perf_level(
        self, processor_handle: Any, perf_level: AmdSmiDevPerfLevel
    ) -> None:
        card = self._card("amdsmi_set_gpu_perf_level", processor_handle)
        self._check(perf_level, AmdSmiDevPerfLevel)
        self._settable(card)
        self._level_set(card, perf_level)
