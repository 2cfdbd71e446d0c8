"""Simulated cards and their ground truth as the tests take them."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any, TypeVar

from powersweep.sim.profiles import GpuProfile, get_profile
from powersweep.sim.virtual_time import VirtualClock

T = TypeVar("T")


def quiet_profile(name: str) -> GpuProfile:
    """The profile ``name`` with no noise on its power readings."""
    return replace(get_profile(name), power_noise_pct=0.0)


def run_on(clock: VirtualClock, coro: Coroutine[Any, Any, T]) -> T:
    """``coro`` run to its end on ``clock``'s own event loop (virtual time)."""
    with asyncio.Runner(loop_factory=clock.loop_factory) as runner:
        return runner.run(coro)
