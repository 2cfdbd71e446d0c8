"""The fake ``amdsmi`` the tests drive the AMD backend with, and cards with known quirks.

The module surface is :class:`powersweep.sim.amdsmi.FakeAmdsmi` (the simulated AMD rig reads its
cards through the same surface, so both are checked name by name against the installed amdsmi
package by ``tests/unit/sweep/gpu/amd/test_amd.py``). Pass it where the real module would go::

    fake = FakeAmdsmi([mi300x()])
    backend = AmdsmiBackend(amdsmi=fake)

What a card can do (:class:`AmdCard`, amdsmi's units: caps in uW, power in W, energy ticks of
``energy_resolution_uj``, clocks in MHz): ``None`` readings read ``"N/A"`` (or NOT_SUPPORTED for
the energy counter, temperatures and the violation status); ``fail`` maps a function name to a
status code raised on every call; ``silent_floor_uw`` makes lower caps "succeed" unchanged;
``virtualization_mode`` GUEST refuses every setter; ``sm_locks_supported`` /
``mem_locks_supported`` refuse locks; :meth:`AmdCard.tick` advances the energy counter.
"""

from __future__ import annotations

from typing import Any

from powersweep.sim.amdsmi import AmdCard, FakeAmdsmi
from powersweep.sim.amdsmi_types import (
    AMDSMI_STATUS_INVAL,
    AMDSMI_STATUS_NO_PERM,
    AMDSMI_STATUS_NOT_SUPPORTED,
    AMDSMI_STATUS_UNKNOWN_ERROR,
    AmdSmiDevPerfLevel,
    AmdSmiVirtualizationMode,
)

__all__ = [
    "AMDSMI_STATUS_INVAL",
    "AMDSMI_STATUS_NOT_SUPPORTED",
    "AMDSMI_STATUS_NO_PERM",
    "AMDSMI_STATUS_UNKNOWN_ERROR",
    "AmdCard",
    "AmdSmiDevPerfLevel",
    "FakeAmdsmi",
    "mi210",
    "mi250x_dies",
    "mi300x",
    "rx7900xtx",
    "vm_guest",
]


def mi300x(**changes: Any) -> AmdCard:
    """An MI300X: 0-750 W caps, current socket power only (no average), violation status,
    HBM3 at a fixed 1300 MHz (memory locks refused)."""
    return AmdCard(**changes)


def mi210(**changes: Any) -> AmdCard:
    """An MI210: 300 W, average socket power only (no current), no violation status."""
    base: dict[str, Any] = dict(
        market_name="AMD Instinct MI210",
        uuid="8cff740f-0000-1000-8000-000000000210",
        vram_mb=65520,
        min_cap_uw=0,
        default_cap_uw=300_000_000,
        max_cap_uw=300_000_000,
        cap_uw=300_000_000,
        current_power_w=None,
        average_power_w=240,
        gfx_clk_mhz=1700,
        mem_clk_mhz=1600,
        gfx_levels_mhz=[500, 1700],
        mem_levels_mhz=[1600],
        violation=None,
    )
    return AmdCard(**{**base, **changes})


def mi250x_dies(**changes: Any) -> list[AmdCard]:
    """The two dies of one MI250X module: the first reads the module's draw, the second 0 W."""
    common: dict[str, Any] = dict(
        market_name="AMD Instinct MI250X",
        vram_mb=65520,
        min_cap_uw=0,
        default_cap_uw=560_000_000,
        max_cap_uw=560_000_000,
        cap_uw=560_000_000,
        current_power_w=None,
        gfx_levels_mhz=[500, 1700],
        mem_levels_mhz=[1600],
        violation=None,
    )
    first = AmdCard(uuid="11ff7408-0000-1000-8000-000000000250", average_power_w=410, **common)
    second = AmdCard(uuid="22ff7408-0000-1000-8000-000000000251", average_power_w=0, **common)
    for die in (first, second):
        for key, value in changes.items():
            setattr(die, key, value)
    return [first, second]


def rx7900xtx(**changes: Any) -> AmdCard:
    """A Radeon RX 7900 XTX: 320/355/408 W, average socket power only, no violation status,
    memory locks allowed."""
    base: dict[str, Any] = dict(
        market_name="AMD Radeon RX 7900 XTX",
        uuid="74ff744c-0000-1000-8000-000000007900",
        vram_mb=24560,
        min_cap_uw=320_000_000,
        default_cap_uw=355_000_000,
        max_cap_uw=408_000_000,
        cap_uw=355_000_000,
        current_power_w=None,
        average_power_w=300,
        hotspot_critical_c=110,
        gfx_clk_mhz=2500,
        mem_clk_mhz=1249,
        gfx_levels_mhz=[500, 2500],
        mem_levels_mhz=[96, 456, 772, 1249],
        violation=None,
        mem_locks_supported=True,
    )
    return AmdCard(**{**base, **changes})


def vm_guest(**changes: Any) -> AmdCard:
    """An MI300X VF in a VM guest: readable, but every setter is refused."""
    return AmdCard(
        market_name="AMD Instinct MI300X VF",
        virtualization_mode=AmdSmiVirtualizationMode.GUEST,
        **changes,
    )
