"""Virtual run time for the simulated rig: an event loop whose clock jumps to its next timer.

A simulated sweep's figures must be the model's, never the host's.

The reasoning: docs/simulated-rig.md, "powersweep.sim.virtual_time".
"""

from __future__ import annotations

import asyncio
import heapq
import os
import selectors
import threading
import time
import types
from collections.abc import Callable
from typing import Any

from powersweep.errors import PowersweepError

_ASYNCIO_DIR = os.path.dirname(asyncio.__file__)
# The watchdog: this many loop iterations without run time moving, over at least this many wall
# seconds, is a stall. A legitimate burst at one instant (hundreds of streams answering at once)
# takes a few dozen iterations; a spin takes tens of thousands a second.
STALL_ITERATIONS = 20_000
STALL_WALL_S = 2.0
# Run seconds a finished run gives the server's side of its connections to end.
SETTLE_RUN_S = 5.0
# A virtual loop with nothing ready and no timer has nothing that could ever wake it but a signal:
# it waits this long for one (wall seconds), then reports the deadlock.
DEADLOCK_WALL_S = 1.0
# Run time that moved less than this (a timer re-armed one float step later) did not move.
_PROGRESS_S = 1e-6
# A paced loop polls for I/O (signals) at least this often while it holds a jump back.
_PACE_POLL_S = 0.05
# A paced loop this far behind its pace (a lapse of the process) starts its pace afresh.
_PACE_RESYNC_S = 0.25


class VirtualTimeStalled(PowersweepError):
    """A virtual run's time stopped advancing (a spin or a deadlock): a bug, named where."""


class VirtualClock:
    """Run time that passes only when the event loop it drives has nothing else to do.

    Implements :class:`powersweep.clock.Clock`. Coroutines that wait on it must run on its own
    loop (:attr:`loop_factory`); blocking waits (:meth:`sleep`, :meth:`wait`) are for code that
    runs while no loop of this clock runs, and advance run time at once.

    Args:
        pace_run_s_per_s: At most this many run seconds per wall second (None: as fast as the
            CPU allows).
        start_s: Run time at creation.
    """

    def __init__(self, pace_run_s_per_s: float | None = None, start_s: float = 0.0) -> None:
        if pace_run_s_per_s is not None and not pace_run_s_per_s > 0:
            raise ValueError(f"pace must be positive, got {pace_run_s_per_s}")
        self._now = float(start_s)
        self.pace_run_s_per_s = pace_run_s_per_s
        self._running: VirtualEventLoop | None = None

    @property
    def kind(self) -> str:
        """``virtual``, or ``paced`` when run time is held to a pace."""
        return "virtual" if self.pace_run_s_per_s is None else "paced"

    @property
    def scale(self) -> float:
        """Run seconds per second of the loop's own time: its timers count run seconds."""
        return 1.0

    @property
    def runs_on_loop(self) -> bool:
        """Waits of a running sweep must be tasks on :attr:`loop_factory`'s loop."""
        return True

    @property
    def loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        """Makes the event loop that drives this clock."""
        return lambda: VirtualEventLoop(self)

    def now(self) -> float:
        """Run seconds since the clock was made."""
        return self._now

    def wall_s(self, run_s: float) -> float | None:
        """``run_s`` over the pace; None unpaced (the run takes the CPU it needs)."""
        if self.pace_run_s_per_s is None:
            return None
        return max(0.0, run_s) / self.pace_run_s_per_s

    def advance_to(self, t_s: float) -> None:
        """Move run time forward to ``t_s`` (never back)."""
        if t_s > self._now:
            self._now = t_s

    def sleep(self, seconds: float) -> None:
        """Advance run time by ``seconds``; only while none of this clock's loops runs.

        Raises:
            RuntimeError: Called inside this clock's running loop (it would block run time).
        """
        self._refuse_inside_loop("sleep")
        self.advance_to(self._now + max(0.0, seconds))

    async def asleep(self, seconds: float) -> None:
        """Sleep ``seconds`` run seconds (a timer on the loop).

        Raises:
            RuntimeError: Awaited on a loop that does not drive this clock (run time would never
                pass there).
        """
        loop = asyncio.get_running_loop()
        if not (isinstance(loop, VirtualEventLoop) and loop.clock is self):
            raise RuntimeError(
                "a virtual clock's sleep must run on its own event loop (clock.loop_factory)"
            )
        await asyncio.sleep(max(0.0, seconds))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Whether ``event`` is set, after advancing run time by ``seconds`` when it is not."""
        if event.is_set():
            return True
        self.sleep(seconds)
        return event.is_set()

    def _refuse_inside_loop(self, what: str) -> None:
        loop = self._running
        if loop is not None and loop.is_running():
            raise RuntimeError(f"a blocking {what} inside a virtual-time loop would stop run time")


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a :class:`VirtualClock`: ``time()`` is run time, and when no callback
    is ready it jumps run time to its next timer instead of sleeping."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self.clock = clock
        real = self._selector  # type: ignore[has-type]
        self._selector = _VirtualSelector(real, self)

    def time(self) -> float:
        return self.clock.now()

    def run_forever(self) -> None:
        previous, self.clock._running = self.clock._running, self
        try:
            super().run_forever()
        finally:
            self.clock._running = previous

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., Any], *args: Any
    ) -> asyncio.Future[Any]:
        """Run ``func`` now, in the loop's thread: no run time passes while it works."""
        self._check_closed()  # type: ignore[attr-defined]
        future = self.create_future()
        try:
            result = func(*args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(result)
        return future

    async def settle(self, run_s: float = SETTLE_RUN_S) -> None:
        """Let the loop's other tasks finish (at most ``run_s`` run seconds, which cost no wall
        time): the simulated server's side of a connection the client just closed ends on this
        same loop, and would otherwise be cancelled mid-answer when the loop closes."""
        current = asyncio.current_task()
        others = [t for t in asyncio.all_tasks(self) if t is not current and not t.done()]
        if others:
            await asyncio.wait(others, timeout=run_s)

    # -- internals (CPython's BaseEventLoop) -----------------------------------------------------

    def next_timer_s(self) -> float | None:
        """Run time of the earliest live timer (None: none)."""
        scheduled = self._scheduled  # type: ignore[attr-defined]
        while scheduled and scheduled[0]._cancelled:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            self._timer_cancelled_count -= 1  # type: ignore[attr-defined]
        return scheduled[0]._when if scheduled else None

    def ready_handles(self) -> list[asyncio.Handle]:
        """The callbacks due on the next iteration."""
        return list(self._ready)  # type: ignore[attr-defined]


class _VirtualSelector:
    """The loop's selector with its ``select`` turned into a jump of run time.

    I/O (the signal wake-up pipe) is polled without blocking on every iteration; where the loop
    would block until its next timer, run time moves to that timer instead.
    """

    def __init__(self, real: selectors.BaseSelector, loop: VirtualEventLoop) -> None:
        self._real = real
        self._loop = loop
        self._mark_s = loop.clock.now()  # run time when it last moved by _PROGRESS_S
        self._still = 0  # iterations since then
        self._still_since = time.monotonic()
        self._pace_anchor: tuple[float, float] | None = None  # (wall, run) the pace counts from
        self._seen: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = self._real.select(0)
        if not events and timeout != 0:
            when = self._loop.next_timer_s()
            if timeout is None or when is None:
                return self._deadlocked()
            if self._loop.clock.pace_run_s_per_s is not None:
                held = self._held_by_pace(when)
                if held is not None:
                    return held
            self._loop.clock.advance_to(when)
        self._watch()
        return events

    def _held_by_pace(self, when: float) -> list[tuple[selectors.SelectorKey, int]] | None:
        """None when the pace lets run time reach ``when`` now; else waits a little and returns
        the I/O events that came meanwhile."""
        pace = self._loop.clock.pace_run_s_per_s
        assert pace is not None
        wall = time.monotonic()
        if self._pace_anchor is None:
            self._pace_anchor = (wall, self._loop.clock.now())
        wall0, run0 = self._pace_anchor
        due_wall = wall0 + (when - run0) / pace
        if wall >= due_wall:
            if wall - due_wall > _PACE_RESYNC_S:  # a lapse: no racing to catch up afterwards
                self._pace_anchor = (wall, when)
            return None
        events = self._real.select(min(due_wall - wall, _PACE_POLL_S))
        self._still_since = time.monotonic()  # held back by the pace: not a stall
        return events

    def _watch(self) -> None:
        """Count the iterations in which run time did not move; raise on a spin."""
        now = self._loop.clock.now()
        if now - self._mark_s >= _PROGRESS_S:
            self._mark_s = now
            self._still = 0
            self._still_since = time.monotonic()
            self._seen.clear()
            return
        self._still += 1
        if self._still % 512:
            return
        for where in _where_ready(self._loop):
            self._seen[where] = self._seen.get(where, 0) + 1
        if self._still >= STALL_ITERATIONS and time.monotonic() - self._still_since > STALL_WALL_S:
            spinning = sorted(self._seen, key=lambda w: -self._seen[w])[:3]
            self._still = 0
            self._still_since = time.monotonic()
            self._seen.clear()
            raise VirtualTimeStalled(
                f"virtual time stopped at {now:.6f} run s while the loop kept running: "
                f"{'; '.join(spinning) or 'no task named'}"
            )

    def _deadlocked(self) -> list[tuple[selectors.SelectorKey, int]]:
        events = self._real.select(DEADLOCK_WALL_S)  # a signal may still come
        if events:
            return events
        waiting = [_task_where(t) for t in asyncio.all_tasks(self._loop) if not t.done()]
        raise VirtualTimeStalled(
            f"virtual time stopped at {self._loop.clock.now():.6f} run s: nothing is scheduled "
            f"and every task waits ({'; '.join(sorted(waiting)[:3]) or 'no task'})"
        )


def _where_ready(loop: VirtualEventLoop) -> list[str]:
    """Where the callbacks due next come from (the ready ones, else the earliest timer's): the
    innermost frame of the task each one wakes, else the callback's name."""
    handles: list[Any] = loop.ready_handles()
    if not handles and loop._scheduled:  # type: ignore[attr-defined]
        handles = [loop._scheduled[0]]  # type: ignore[attr-defined]
    out = []
    for handle in handles:
        callback = getattr(handle, "_callback", None)
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, asyncio.Task):
            out.append(_task_where(owner))
            continue
        # a timer that resolves a future (asyncio.sleep) wakes the tasks awaiting it
        woken = [
            cb.__self__
            for arg in getattr(handle, "_args", None) or ()
            if isinstance(arg, asyncio.Future)
            for cb, _ in getattr(arg, "_callbacks", None) or ()
            if isinstance(getattr(cb, "__self__", None), asyncio.Task)
        ]
        if woken:
            out += [_task_where(t) for t in woken]
        elif callback is not None:
            out.append(getattr(callback, "__qualname__", repr(callback)))
    return out


def _task_where(task: asyncio.Task[Any]) -> str:
    """``file:line in function`` of the innermost coroutine a task is in, outside asyncio."""
    coro: Any = task.get_coro()
    frame = None
    while coro is not None:
        here = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if here is not None and not here.f_code.co_filename.startswith(_ASYNCIO_DIR):
            frame = here
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if not isinstance(coro, types.CoroutineType | types.GeneratorType):
            break
    if frame is None:
        return task.get_name()
    code = frame.f_code
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} in {code.co_name}"


def check_loop_internals() -> None:
    """Fail loudly where this Python's event loop lacks what :class:`VirtualEventLoop` uses.

    Raises:
        RuntimeError: A private attribute or the select call it relies on is gone.
    """
    clock = VirtualClock()
    loop = VirtualEventLoop(clock)
    try:
        for name in ("_scheduled", "_ready", "_timer_cancelled_count", "_check_closed"):
            if not hasattr(loop, name):
                raise RuntimeError(f"asyncio's event loop has no {name}: virtual time cannot run")

        async def nap() -> float:
            await asyncio.sleep(3600.0)
            return loop.time()

        started = time.monotonic()
        ended_s = loop.run_until_complete(nap())
        if ended_s < 3600.0 or time.monotonic() - started > 5.0:
            raise RuntimeError("the event loop no longer polls through its selector's select()")
    finally:
        loop.close()
