"""Simulated AMD cards behind an ``amdsmi``-shaped module.

:class:`SimAmdsmi` reads :class:`~powersweep.sim.sim_gpu.SimGpu` physics and sets its settings
through the surface of :class:`~powersweep.sim.amdsmi.FakeAmdsmi`, so ``--simulate mi300x`` (or
``rx7900xtx``) runs the real AMD backend (:mod:`powersweep.sweep.gpu.amd`) end to end: its
units, quirks and verified writes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from powersweep.clock import Clock
from powersweep.sim.amdsmi import AmdCard, FakeAmdsmi
from powersweep.sim.amdsmi_types import (
    AMDSMI_STATUS_INVAL,
    AmdSmiDevPerfLevel,
    AmdSmiLibraryException,
)
from powersweep.sim.sim_gpu import SimGpu
from powersweep.sweep.gpu import CLOCK_EVENT_SW_POWER_CAP, CLOCK_EVENT_SW_THERMAL

# amdsmi's energy counter ticks (15.3 uJ on MI200/MI300 and RDNA3)
ENERGY_RESOLUTION_UJ = 15.259
# Readings taken this close in run time are one reading (a sample reads a card many times).
_REFRESH_S = 0.005


@dataclass(eq=False)
class _SimCard(AmdCard):
    gpu: SimGpu | None = None
    read_at_s: float = -1.0


class SimAmdsmi(FakeAmdsmi):
    """amdsmi over simulated cards: readings from their physics, writes to their settings.

    The AMD quirks come from each card's profile: which socket-power fields it fills
    (``amd_power_fields``), whether it reports the violation status, whether memory locks are
    refused. Caps and clock locks go to :class:`SimGpu`, so they persist in ``--sim-state`` as
    the NVIDIA-flavoured cards' do.

    Args:
        gpus: The simulated AMD cards, in order.
        clock: The rig's run clock.
    """

    def __init__(self, gpus: Sequence[SimGpu], clock: Clock) -> None:
        super().__init__([self._card_of(g) for g in gpus])
        self._clock_src = clock

    @staticmethod
    def _card_of(gpu: SimGpu) -> _SimCard:
        p = gpu.profile
        ident = gpu.identity()
        bins = p.sm_bins_mhz()
        mems = sorted({round(m) for m in p.supported_mem_clocks_mhz()})
        return _SimCard(
            market_name=p.gpu_name,
            uuid=ident.uuid,
            vram_mb=p.vram_mib,
            driver_version="sim",
            min_cap_uw=round(p.min_limit_w * 1e6),
            default_cap_uw=round(p.default_limit_w * 1e6),
            max_cap_uw=round(p.max_limit_w * 1e6),
            cap_uw=round(gpu.limit_w * 1e6),
            energy_resolution_uj=ENERGY_RESOLUTION_UJ,
            hotspot_critical_c=round(p.slowdown_temp_c),
            gfx_levels_mhz=sorted(
                {round(bins[0]), round((bins[0] + bins[-1]) / 2), round(bins[-1])}
            ),
            mem_levels_mhz=mems,
            violation={} if p.amd_violation_status else None,
            mem_locks_supported=p.mem_locks_supported,
            gpu=gpu,
        )

    def _refresh(self, card: AmdCard) -> None:
        assert isinstance(card, _SimCard) and card.gpu is not None
        now = self._clock_src.now()
        if 0 <= now - card.read_at_s < _REFRESH_S:
            return
        card.read_at_s = now
        gpu, p = card.gpu, card.gpu.profile
        s = gpu.read_sample()
        # current socket power is the instant reading, the average the driver's own average
        instant = s.power_instant_w if math.isfinite(s.power_instant_w) else s.power_w
        card.current_power_w = round(instant) if "current" in p.amd_power_fields else None
        card.average_power_w = round(s.power_w) if "average" in p.amd_power_fields else None
        card.cap_uw = round(gpu.limit_w * 1e6)
        card.energy_ticks = round(s.energy_mj * 1000.0 / card.energy_resolution_uj)
        card.hotspot_c = round(s.temp_c)
        card.gfx_clk_mhz = round(s.sm_clock_mhz)
        card.mem_clk_mhz = round(s.mem_clock_mhz)
        card.gfx_activity = round(s.util_pct)
        bits = s.clock_event_bits or 0
        if card.violation is not None:
            card.violation = {
                "active_ppt_pwr": bool(bits & CLOCK_EVENT_SW_POWER_CAP),
                "active_socket_thrm": bool(bits & CLOCK_EVENT_SW_THERMAL),
                "active_prochot_thrm": False,
                "active_vr_thrm": False,
                "active_hbm_thrm": False,
            }
        locks = gpu.locks
        card.gfx_range_mhz = None if locks.sm_mhz is None else _pair(locks.sm_mhz, locks.sm_min_mhz)
        card.mem_range_mhz = None if locks.mem_mhz is None else _pair(locks.mem_mhz)
        if card.gfx_range_mhz or card.mem_range_mhz:
            card.perf_level = AmdSmiDevPerfLevel.MANUAL
        # the readings already follow the locks (the physics clocks the card)
        card.clocks_follow_locks = False
        card.processes = [
            {
                "name": "llama-server",
                "pid": proc.pid,
                "mem": int(proc.used_memory_mib * 2**20),
                "memory_usage": {"vram_mem": int(proc.used_memory_mib * 2**20)},
            }
            for proc in gpu.compute_processes() or ()
        ]

    def _cap_set(self, card: AmdCard, cap_uw: int) -> None:
        assert isinstance(card, _SimCard) and card.gpu is not None
        card.gpu.set_power_limit(cap_uw / 1e6)
        card.read_at_s = -1.0

    def _range_set(self, card: AmdCard, clk: str, lo: int, hi: int) -> None:
        assert isinstance(card, _SimCard) and card.gpu is not None
        # the firmware runs at most the range's top (an idle card at its bottom)
        gpu = card.gpu
        if clk == "gfx":
            taken = gpu.lock_sm_clock(float(hi), float(min(lo, hi)))
        else:
            taken = gpu.lock_mem_clock(float(hi))
        if not taken.accepted:
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
        card.read_at_s = -1.0

    def _level_set(self, card: AmdCard, level: AmdSmiDevPerfLevel) -> None:
        assert isinstance(card, _SimCard) and card.gpu is not None
        card.perf_level = level
        if level == AmdSmiDevPerfLevel.AUTO:
            card.gpu.reset_clock_locks()
        card.read_at_s = -1.0


def _pair(mhz: float, min_mhz: float | None = None) -> tuple[int, int]:
    """A lock as the range amdsmi holds (min = max when it has no bottom of its own)."""
    return round(mhz if min_mhz is None else min_mhz), round(mhz)
