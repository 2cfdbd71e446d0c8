"""The range an SM clock lock sets (issue 45): the locked clock is its top, and its bottom is the
card's idle floor (or ``--sm-clock-min``), so an idle card still clocks down.

The reasoning: docs/architecture.md, "powersweep.sweep.gpu.lock_range".
"""

from __future__ import annotations

import math

from powersweep.errors import GpuError
from powersweep.sweep.gpu.protocol import Gpu, SupportedClocks

# The idle floor of a card that does not list its clocks: the lowest SM clock NVIDIA cards from
# Ampere on idle at (an RTX 3090 lists 210 MHz at its top memory clock; peers use 180 or 210).
DEFAULT_IDLE_FLOOR_MHZ = 210.0


def idle_floor_mhz(supported: SupportedClocks | None) -> float:
    """The lowest SM clock the card lists at its highest memory clock (the clock it idles at
    under load's memory tier), or :data:`DEFAULT_IDLE_FLOOR_MHZ` when it lists none."""
    if supported is None or not supported.mem_mhz:
        return DEFAULT_IDLE_FLOOR_MHZ
    sm = supported.sm_mhz_by_mem.get(max(supported.mem_mhz), ())
    listed = [f for f in sm if math.isfinite(f) and f > 0]
    return min(listed) if listed else DEFAULT_IDLE_FLOOR_MHZ


def card_idle_floor_mhz(gpu: Gpu) -> float:
    """:func:`idle_floor_mhz` of a card, read from it (never raises: a card that cannot list
    its clocks gets the default floor)."""
    try:
        return idle_floor_mhz(gpu.supported_clocks())
    except GpuError:
        return DEFAULT_IDLE_FLOOR_MHZ


def range_min_mhz(top_mhz: float, min_mhz: float | None, floor_mhz: float) -> float:
    """The bottom of a lock topped at ``top_mhz``: ``min_mhz`` (``--sm-clock-min``) or the
    card's floor, never above the top."""
    return min(top_mhz, floor_mhz if min_mhz is None else min_mhz)
