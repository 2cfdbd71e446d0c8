"""Whether a simulated card's memory clock offset holds (issue 45): its memory's true stable
margin, and what an offset past it costs.

The reasoning: docs/undervolt.md, "powersweep.sim.mem_stability".
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

from powersweep.sim.profiles import GpuProfile

# The least share of bandwidth replays leave (a card replaying nearly everything still moves
# some data; the corruption threshold comes long before).
MIN_GOODPUT = 0.2


@dataclass(frozen=True)
class MemMargin:
    """One card's memory: its stable offset and what past it costs.

    Attributes:
        stable_mhz: The largest memory offset it runs without replays, MHz (NVML's unit).
        loss_per_mhz: Share of bandwidth replays take per MHz past ``stable_mhz``.
        corrupt_beyond_mhz: Past ``stable_mhz`` by more than this, answers go wrong.
    """

    stable_mhz: float
    loss_per_mhz: float
    corrupt_beyond_mhz: float

    def goodput(self, offset_mhz: float) -> float:
        """Share of the memory clock's transfers that carry data at ``offset_mhz`` (1 within
        the margin)."""
        beyond = max(0.0, offset_mhz - self.stable_mhz)
        return max(MIN_GOODPUT, 1.0 - self.loss_per_mhz * beyond)

    def corrupt_by_mhz(self, offset_mhz: float) -> float:
        """How far ``offset_mhz`` goes past the corruption threshold, MHz (0: answers hold)."""
        return max(0.0, offset_mhz - self.stable_mhz - self.corrupt_beyond_mhz)


def mem_margin(profile: GpuProfile, seed: int, index: int) -> MemMargin:
    """A card's memory margin: the profile's, moved by the seed, the index and the profile (the
    silicon lottery) within +-``stable_mem_offset_spread_mhz``, and its replay slope within
    +-50% of the profile's. Its own generator, so no other draw changes.

    Returns:
        The margin (whole MHz, 0 or more).
    """
    rng = random.Random(zlib.crc32(f"{seed}/{index}/{profile.name}/stable-mem-offset".encode()))
    spread = profile.stable_mem_offset_spread_mhz * rng.uniform(-1.0, 1.0)
    stable = float(max(0, round(profile.stable_mem_offset_mhz + spread)))
    slope = profile.mem_replay_loss_per_mhz * rng.uniform(0.5, 1.5)
    return MemMargin(stable, slope, profile.mem_corrupt_beyond_mhz)
