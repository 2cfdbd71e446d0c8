"""A sweep runs on uvloop where it is installed, and still on asyncio's loop when asked."""

from __future__ import annotations

import asyncio

import pytest

from powersweep.sweep.eventloop import event_loop_factory
from powersweep.sweep.signals import run_interruptible


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_the_sweep_loop_is_uvloop_where_installed() -> None:
    pytest.importorskip("uvloop")
    factory = event_loop_factory()
    assert factory is not None
    assert run_interruptible(_loop_module()).startswith("uvloop")


def test_a_given_loop_factory_is_used() -> None:
    assert run_interruptible(_loop_module(), loop_factory=asyncio.new_event_loop).startswith(
        "asyncio"
    )
