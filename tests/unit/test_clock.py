"""powersweep.clock: the scaled clock (run seconds pass ``scale`` times faster than the wall) and
the manual clock (time moves only when told, sleeps advance it at once)."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

from powersweep.clock import ManualClock, ScaledClock, real_clock


@pytest.mark.parametrize("scale", [0.0, -1.0, math.nan])
def test_a_scale_that_is_not_positive_is_refused(scale: float) -> None:
    with pytest.raises(ValueError, match="clock scale must be positive"):
        ScaledClock(scale)


def test_real_and_scaled_clocks_name_their_kind_and_run_on_any_loop() -> None:
    real = real_clock()
    assert (real.scale, real.kind) == (1.0, "real")
    fast = ScaledClock(50)
    assert (fast.scale, fast.kind) == (50.0, "scaled")
    for clock in (real, fast, ManualClock()):
        assert clock.runs_on_loop is False and clock.loop_factory is None


def test_scaled_time_runs_scale_times_faster_than_the_wall() -> None:
    clock = ScaledClock(1000.0)
    w0 = time.monotonic()
    t0 = clock.now()
    clock.sleep(20.0)  # 20 ms of wall time
    run_s = clock.now() - t0
    wall_s = time.monotonic() - w0
    assert wall_s >= 0.02
    assert 20.0 <= run_s <= wall_s * 1000.0


def test_scaled_conversions_never_go_negative() -> None:
    clock = ScaledClock(4.0)
    assert clock.to_wall(10.0) == 2.5
    assert clock.wall_s(10.0) == 2.5
    assert clock.to_wall(-3.0) == 0.0


def test_scaled_wait_returns_at_once_when_the_event_is_set_and_times_out_otherwise() -> None:
    clock = ScaledClock(1000.0)
    event = threading.Event()
    assert clock.wait(event, 5.0) is False  # 5 ms of wall time
    event.set()
    t0 = time.monotonic()
    assert clock.wait(event, 1e6) is True
    assert time.monotonic() - t0 < 0.5


def test_scaled_asleep_takes_the_scaled_wall_time() -> None:
    clock = ScaledClock(1000.0)
    t0 = clock.now()
    asyncio.run(clock.asleep(30.0))
    assert clock.now() - t0 >= 30.0


def test_manual_time_moves_only_when_told_and_never_back() -> None:
    clock = ManualClock(10.0)
    assert (clock.now(), clock.kind, clock.scale, clock.wall_s(100.0)) == (
        10.0,
        "manual",
        math.inf,
        0.0,
    )
    clock.advance(2.5)
    clock.sleep(1.5)
    clock.advance(-5.0)  # ignored
    assert clock.now() == 14.0


def test_manual_asleep_advances_and_yields_to_the_loop() -> None:
    clock = ManualClock()
    order: list[str] = []

    async def sleeper() -> None:
        await clock.asleep(3.0)
        order.append("sleeper")

    async def other() -> None:
        order.append("other")

    async def main() -> None:
        await asyncio.gather(sleeper(), other())

    asyncio.run(main())
    assert clock.now() == 3.0
    assert order == ["other", "sleeper"]  # the sleep gave the loop a turn


def test_manual_wait_advances_only_when_the_event_is_not_set() -> None:
    clock = ManualClock()
    event = threading.Event()
    assert clock.wait(event, 4.0) is False and clock.now() == 4.0
    event.set()
    assert clock.wait(event, 4.0) is True and clock.now() == 4.0


def test_manual_advances_from_many_threads_all_count() -> None:
    clock = ManualClock()

    def work() -> None:
        for _ in range(1000):
            clock.advance(0.001)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clock.now() == pytest.approx(4.0)
