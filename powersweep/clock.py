"""Clocks: real time for real GPUs, scaled time for the simulated rig.

Every duration in a sweep (settle, measurement window, sampling interval, token pacing of the
simulated server) is expressed in *run seconds* and goes through a :class:`Clock`. On real hardware
run seconds are wall seconds; on the simulated rig a :class:`ScaledClock` makes them pass ``scale``
times faster, so results do not depend on the scale.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Source of run time and of sleeps measured in run seconds."""

    @property
    def scale(self) -> float:
        """How many run seconds pass per wall second."""
        ...

    def now(self) -> float:
        """Run seconds since the clock was created (monotonic)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds`` run seconds."""
        ...

    async def asleep(self, seconds: float) -> None:
        """Sleep ``seconds`` run seconds in an asyncio task."""
        ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait on ``event`` for at most ``seconds`` run seconds; True if it was set."""
        ...


class ScaledClock:
    """Monotonic clock running ``scale`` times faster than the wall (scale 1 is real time).

    Args:
        scale: Run seconds per wall second; must be positive.
    """

    def __init__(self, scale: float = 1.0) -> None:
        if not scale > 0:
            raise ValueError(f"clock scale must be positive, got {scale}")
        self._scale = float(scale)
        self._t0 = time.monotonic()

    @property
    def scale(self) -> float:
        return self._scale

    def now(self) -> float:
        return (time.monotonic() - self._t0) * self._scale

    def to_wall(self, seconds: float) -> float:
        """Convert run seconds to wall seconds."""
        return max(0.0, seconds) / self._scale

    def sleep(self, seconds: float) -> None:
        time.sleep(self.to_wall(seconds))

    async def asleep(self, seconds: float) -> None:
        await asyncio.sleep(self.to_wall(seconds))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(self.to_wall(seconds))


def real_clock() -> ScaledClock:
    """A clock for real hardware: run seconds are wall seconds."""
    return ScaledClock(1.0)


class ManualClock:
    """A clock that moves only when told to: sleeps advance it instantly.

    For tests and offline simulation, where run time must pass exactly and in no wall time.
    """

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = start_s
        self._lock = threading.Lock()

    @property
    def scale(self) -> float:
        return math.inf

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move run time forward."""
        with self._lock:
            self._now += max(0.0, seconds)

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if event.is_set():
            return True
        self.advance(seconds)
        return event.is_set()
