"""Whether a simulated card's SM clock offset holds (issue 36): its silicon's true stable margin,
and the driver recovery when an offset too far past it meets load.

A card whose offset goes past its margin computes wrong results under load (the simulated
server's greedy answers diverge: :mod:`powersweep.sim.server_chunks`).

The reasoning: docs/undervolt.md, "powersweep.sim.vf_stability".
"""

from __future__ import annotations

import math
import random
import zlib

from powersweep.errors import GpuError
from powersweep.sim.profiles import GpuProfile
from powersweep.sweep.gpu import XID_FALLEN_OFF_BUS, GpuSample

# Run seconds a reset card is off the bus (a driver recovery takes seconds on a real rig).
RESET_OFF_BUS_S = 5.0
# How far past its stable margin an offset runs under load before the card resets, MHz.
DEFAULT_RESET_BEYOND_MHZ = 50.0
# The fields a card off the bus fails to read: NVML's nine reads (the instant draw one of them
# only where the driver has it, as a capability it lacks is no failed read).
_READ_FIELDS = 8


def stable_margin_mhz(profile: GpuProfile, seed: int, index: int) -> float:
    """A card's true stable SM clock offset, whole MHz.

    The profile's margin, moved uniformly within +-``stable_offset_spread_mhz`` by the seed, the
    index and the profile (the silicon lottery). Its own generator, so the reading noise is what
    it was without it.

    Args:
        profile: The card's physics.
        seed: The rig's seed.
        index: The card's index.

    Returns:
        The margin, MHz (0 or more).
    """
    rng = random.Random(zlib.crc32(f"{seed}/{index}/{profile.name}/stable-offset".encode()))
    spread = profile.stable_offset_spread_mhz * rng.uniform(-1.0, 1.0)
    return float(max(0, round(profile.stable_offset_mhz + spread)))


class BusState:
    """A card's resets and the time it comes back on the bus after the last one.

    Args:
        index: The card's index (named in its errors).
        reset_beyond_mhz: The card resets under load when its offset goes more than this past
            its stable margin (0: at any instability).
    """

    def __init__(self, index: int, reset_beyond_mhz: float = DEFAULT_RESET_BEYOND_MHZ) -> None:
        self.index = index
        self.reset_beyond_mhz = reset_beyond_mhz
        self.resets = 0
        self.back_at_s = -math.inf
        self._xids: list[int] = []

    def must_reset(self, unstable_by_mhz: float, busy: bool) -> bool:
        """Whether a card working (``busy``) this far past its margin crashes now."""
        return busy and unstable_by_mhz > 0 and unstable_by_mhz > self.reset_beyond_mhz

    def reset(self, now_s: float) -> None:
        """Count a reset at ``now_s``: the card is off the bus for :data:`RESET_OFF_BUS_S`, and
        the driver reports it as Xid 79 (:meth:`take_xids`)."""
        self.resets += 1
        self.back_at_s = now_s + RESET_OFF_BUS_S
        self._xids.append(XID_FALLEN_OFF_BUS)

    def take_xids(self) -> tuple[int, ...]:
        """The Xids reported since the last call (one 79 per reset), oldest first."""
        xids, self._xids = tuple(self._xids), []
        return xids

    def off_bus(self, now_s: float) -> bool:
        """Whether the card is off the bus at ``now_s`` (a reset's recovery not over yet)."""
        return now_s < self.back_at_s

    def refuse_off_bus(self, now_s: float, action: str) -> None:
        """Refuse a setting while the card is off the bus, as the driver does.

        Args:
            now_s: Run time now.
            action: What was asked, for the message (``set its power limit``).

        Raises:
            GpuError: The card is off the bus.
        """
        if self.off_bus(now_s):
            raise GpuError(
                f"GPU {self.index} has fallen off the bus (Xid 79, the driver is recovering it): "
                f"cannot {action} for another {self.back_at_s - now_s:.1f} s"
            )

    def lost_sample(self, instant_field: bool) -> GpuSample:
        """A reading of a card off the bus: every field failed (NaN, None), each counted.

        Args:
            instant_field: Whether the card's driver has the instantaneous draw field (its
                failure counts as one more).
        """
        nan = math.nan
        return GpuSample(
            gpu_index=self.index,
            power_w=nan,
            energy_mj=nan,
            temp_c=nan,
            sm_clock_mhz=nan,
            mem_clock_mhz=nan,
            util_pct=nan,
            pstate=None,
            clock_event_bits=None,
            read_errors=_READ_FIELDS + (1 if instant_field else 0),
            power_instant_w=nan,
        )
