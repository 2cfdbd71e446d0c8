"""Signals around the event loop: a signal while the loop is made or closed is never lost and
never lands half way through closing it."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import pytest

from powersweep.sweep.signals import SweepInterrupted, raise_on_signals, run_interruptible


def test_a_signal_while_the_loop_closes_is_raised_after_it_closed() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def ticker() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            # runs in asyncio.run's teardown (shutdown_asyncgens), after the coroutine returned
            os.kill(os.getpid(), signal.SIGHUP)

    async def work() -> str:
        loops.append(asyncio.get_running_loop())
        gen = ticker()
        await gen.__anext__()  # left open: the loop's teardown finalizes it
        return "done"

    with raise_on_signals(), pytest.raises(SweepInterrupted) as caught:
        run_interruptible(work())
    assert caught.value.signum == signal.SIGHUP
    assert loops[0].is_closed()


def test_a_signal_inside_the_loop_cancels_the_work() -> None:
    async def work() -> str:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(5)
        return "not reached"

    with raise_on_signals(), pytest.raises(SweepInterrupted) as caught:
        run_interruptible(work())
    assert caught.value.signum == signal.SIGTERM
    assert caught.value.exit_code == 128 + signal.SIGTERM
