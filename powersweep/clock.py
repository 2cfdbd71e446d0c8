"""Clocks: real time for real GPUs, virtual or scaled time for the simulated rig.

Every duration in a sweep (settle, measurement window, sampling interval, token pacing of the
simulated server, timeouts, back-offs) is expressed in *run seconds* and goes through a
:class:`Clock`.

The reasoning: docs/architecture.md, "powersweep.clock".
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from typing import Protocol

# Makes the event loop a sweep's coroutines run on.
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


class Clock(Protocol):
    """Source of run time and of sleeps measured in run seconds."""

    @property
    def scale(self) -> float:
        """How many run seconds pass per second of the event loop's own time (wall seconds on a
        real loop; 1 on a virtual loop, whose time is run time)."""
        ...

    @property
    def kind(self) -> str:
        """``real``, ``scaled``, ``virtual``, ``paced`` or ``manual`` (``run.json`` records it)."""
        ...

    @property
    def runs_on_loop(self) -> bool:
        """True when run time passes only inside the clock's own event loop: waits of a running
        sweep (the sampler's ticks) must then be tasks on it, never threads."""
        ...

    @property
    def loop_factory(self) -> LoopFactory | None:
        """The event loop this clock's coroutines must run on (None: any, uvloop preferred)."""
        ...

    def now(self) -> float:
        """Run seconds since the clock was created (monotonic)."""
        ...

    def wall_s(self, run_s: float) -> float | None:
        """Wall seconds that ``run_s`` run seconds take (None: as long as the CPU needs)."""
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


class _AnyLoop:
    """A clock whose time passes outside any event loop: its coroutines run on any loop, and a
    sampler may tick in a thread."""

    @property
    def runs_on_loop(self) -> bool:
        return False

    @property
    def loop_factory(self) -> LoopFactory | None:
        return None


class ScaledClock(_AnyLoop):
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

    @property
    def kind(self) -> str:
        return "real" if self._scale == 1.0 else "scaled"

    def now(self) -> float:
        return (time.monotonic() - self._t0) * self._scale

    def wall_s(self, run_s: float) -> float | None:
        return self.to_wall(run_s)

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


class ManualClock(_AnyLoop):
    """A clock that moves only when told to: sleeps advance it instantly.

    For tests and offline simulation, where run time must pass exactly and in no wall time.
    """

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = start_s
        self._lock = threading.Lock()

    @property
    def scale(self) -> float:
        return math.inf

    @property
    def kind(self) -> str:
        return "manual"

    def now(self) -> float:
        return self._now

    def wall_s(self, run_s: float) -> float | None:
        return 0.0

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
