"""Signals during a sweep: SIGINT, SIGTERM and SIGHUP end it cleanly, never half way through a
restore.

Outside the event loop a signal raises :class:`SweepInterrupted`, so the cleanup code runs;
inside it (:func:`run_interruptible`) it cancels the coroutine first, so connections close in
order; while limits are put back (:func:`signals_ignored`) signals wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine, Iterator, Mapping
from types import FrameType
from typing import Any, TypeVar

from powersweep.errors import PowersweepError
from powersweep.sweep.eventloop import LoopFactory, event_loop_factory

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_T = TypeVar("_T")


class SweepInterrupted(PowersweepError):
    """A signal asked the sweep to stop (exit code 128 + signal number, as a shell reports)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}", exit_code=128 + signum)
        self.signum = signum


def reinstall_handlers(
    loop: asyncio.AbstractEventLoop, previous: Mapping[signal.Signals, Any]
) -> None:
    """Remove the loop's signal handlers and put the caller's back (``remove_signal_handler``
    alone would reset them to SIG_DFL)."""
    for sig, handler in previous.items():
        loop.remove_signal_handler(sig)
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def run_interruptible(
    coro: Coroutine[Any, Any, _T], *, loop_factory: LoopFactory | None = None
) -> _T:
    """``asyncio.run(coro)``, ended cleanly by SIGINT/SIGTERM/SIGHUP.

    It runs on ``loop_factory``'s loop, by default :func:`event_loop_factory`'s (uvloop where
    installed).

    A signal cancels the coroutine (so its connections close in order) and then raises
    :class:`SweepInterrupted`; raising from a plain signal handler inside the event loop would
    hit a random transport callback instead. While the loop is being made or closed a signal
    waits and is raised once the loop is closed: raised half way through ``loop.close()`` it
    would leave a loop that fails again, with a traceback, when it is collected at exit.
    """
    pending: list[int] = []

    def defer(signum: int, _frame: FrameType | None) -> None:
        pending.append(signum)

    async def main() -> _T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        hit: list[int] = []

        def on_signal(signum: int) -> None:
            hit.append(signum)
            task.cancel()

        previous = {sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS}
        for sig in HANDLED_SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            if pending:  # arrived while the loop was being made: do not start the work
                coro.close()
                raise SweepInterrupted(pending[0])
            return await coro
        except asyncio.CancelledError:
            if hit:
                raise SweepInterrupted(hit[0]) from None
            raise
        finally:
            # A loop that hosts both ends of its connections (the simulated rig's virtual one)
            # lets the server's side finish what the client closed before the loop closes.
            settle = getattr(loop, "settle", None)
            if settle is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await settle()
            reinstall_handlers(loop, previous)

    factory = loop_factory or event_loop_factory()
    previous = {s: signal.signal(s, defer) for s in HANDLED_SIGNALS}
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            result = runner.run(main())
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if pending:
        raise SweepInterrupted(pending[0])
    return result


@contextlib.contextmanager
def raise_on_signals() -> Iterator[None]:
    """Turn SIGINT/SIGTERM/SIGHUP into :class:`SweepInterrupted` (so cleanup code runs).

    The session wraps its set-up in this too, so a signal before the sweep starts also ends
    in a clean exit (nothing is changed before the journal is written).
    """

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise SweepInterrupted(signum)

    previous = {s: signal.signal(s, handler) for s in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM/SIGHUP while limits are put back: a second Ctrl-C must not leave a
    card at a sweep cap, half way through the cards."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
