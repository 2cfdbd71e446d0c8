"""The cards' draw at idle under the answer's lock, measured once the search is over (issue 45).

A lock whose minimum is high keeps an idle card at that clock and its voltage: 100 W and more
on a 3090 where the card would idle near 30 W.

The reasoning: docs/reference.md, "powersweep.sweep.measurement.idle_draw".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from powersweep.clock import Clock
from powersweep.sweep.gpu import Gpu

# The power usage reading is a one-second average (Ampere on): 2 s leave the last request out.
SETTLE_S = 2.0
SAMPLE_S = 3.0
INTERVAL_S = 0.25


@dataclass(frozen=True)
class IdleDraw:
    """What the idle cards drew.

    Attributes:
        sm_lock_range_mhz: The SM lock in force, (min, max) MHz; None: no SM lock.
        power_w: Mean draw per card, W (NaN: no reading).
        sm_clock_mhz: Mean SM clock, MHz (NaN: no reading).
        seconds: Run seconds the cards were left idle, settling included.
        samples: Readings averaged (every card's).
    """

    sm_lock_range_mhz: tuple[float, float] | None
    power_w: float
    sm_clock_mhz: float
    seconds: float
    samples: int

    def record(self) -> dict[str, Any]:
        """run.json's ``idle``."""
        lock = self.sm_lock_range_mhz
        return {
            "sm_lock_range_mhz": list(lock) if lock is not None else None,
            "power_w": _json_num(self.power_w),
            "sm_clock_mhz": _json_num(self.sm_clock_mhz),
            "seconds": self.seconds,
            "samples": self.samples,
        }


async def measure_idle(
    gpus: Sequence[Gpu],
    clock: Clock,
    sm_lock_range_mhz: tuple[float, float] | None,
    *,
    settle_s: float = SETTLE_S,
    sample_s: float = SAMPLE_S,
    interval_s: float = INTERVAL_S,
) -> IdleDraw:
    """Wait ``settle_s``, then read every card each ``interval_s`` for ``sample_s`` (run
    seconds on ``clock``); the caller has set the lock and runs no load. Never raises for a
    failed read: it is left out (all failed: NaN)."""
    start = clock.now()
    await clock.asleep(settle_s)
    power: list[float] = []
    sm: list[float] = []
    for _ in range(max(1, round(sample_s / interval_s))):
        for g in gpus:
            s = g.read_sample()
            if math.isfinite(s.power_w):
                power.append(s.power_w)
            if math.isfinite(s.sm_clock_mhz):
                sm.append(s.sm_clock_mhz)
        await clock.asleep(interval_s)
    return IdleDraw(
        sm_lock_range_mhz,
        statistics.fmean(power) if power else math.nan,
        statistics.fmean(sm) if sm else math.nan,
        round(clock.now() - start, 3),
        len(power),
    )


def _json_num(value: float) -> float | None:
    return round(value, 2) if math.isfinite(value) else None
