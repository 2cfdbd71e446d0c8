"""The virtual-time event loop: run time jumps to the next timer, executors run inline, a pace
holds run time to the wall, a stall or a deadlock fails fast and names where."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest

from powersweep.sim import virtual_time
from powersweep.sim.virtual_time import (
    DEADLOCK_WALL_S,
    STALL_WALL_S,
    VirtualClock,
    VirtualEventLoop,
    VirtualTimeStalled,
    check_loop_internals,
)
from tests.helpers.sim import run_on


def test_this_python_has_the_loop_internals_virtual_time_needs() -> None:
    check_loop_internals()


def test_an_hour_of_timers_passes_in_no_wall_time_and_exactly() -> None:
    clock = VirtualClock()
    seen: list[tuple[str, float]] = []

    async def ticker(name: str, every_s: float, n: int) -> None:
        for _ in range(n):
            await clock.asleep(every_s)
            seen.append((name, clock.now()))

    async def main() -> None:
        await asyncio.gather(ticker("a", 0.5, 7200), ticker("b", 1.5, 2400))

    wall = time.monotonic()
    run_on(clock, main())
    assert time.monotonic() - wall < 2.0
    assert clock.now() == pytest.approx(3600.0)
    # the timers fire in run-time order, each at its own time
    times = [t for _, t in seen]
    assert times == sorted(times)
    assert [t for n, t in seen if n == "b"][:3] == pytest.approx([1.5, 3.0, 4.5])


def test_the_loop_time_is_run_time_so_asyncio_timeouts_count_run_seconds() -> None:
    clock = VirtualClock(start_s=100.0)

    async def main() -> float:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(30.0):
                await asyncio.sleep(1000.0)
        return asyncio.get_running_loop().time()

    assert run_on(clock, main()) == pytest.approx(130.0)
    assert clock.scale == 1.0 and clock.kind == "virtual" and clock.runs_on_loop


def test_executor_work_runs_inline_without_letting_run_time_pass() -> None:
    clock = VirtualClock()
    threads: list[str] = []

    def work() -> float:
        threads.append(threading.current_thread().name)
        time.sleep(0.05)  # wall time spent here is not run time
        return clock.now()

    async def main() -> tuple[float, float]:
        await clock.asleep(2.0)
        inside = await asyncio.to_thread(work)
        return inside, clock.now()

    inside, after = run_on(clock, main())  # type: ignore[misc]
    assert inside == after == 2.0
    assert threads == [threading.current_thread().name]


def test_an_executor_error_reaches_the_awaiting_task() -> None:
    clock = VirtualClock()

    def broken() -> None:
        raise ValueError("bad row")

    async def main() -> None:
        await asyncio.to_thread(broken)

    with pytest.raises(ValueError, match="bad row"):
        run_on(clock, main())


def test_a_spinning_loop_fails_within_seconds_naming_where() -> None:
    clock = VirtualClock()

    async def deadline_one_step_early() -> None:
        end = clock.now() + 1.0
        while clock.now() < end:  # a deadline that never comes: time never moves
            await asyncio.sleep(0)

    wall = time.monotonic()
    with pytest.raises(VirtualTimeStalled, match="deadline_one_step_early") as err:
        run_on(clock, deadline_one_step_early())
    assert time.monotonic() - wall < STALL_WALL_S + 3.0
    assert "test_virtual_time.py" in str(err.value)


def test_re_arming_a_timer_by_one_float_step_is_a_stall_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(virtual_time, "STALL_WALL_S", 0.3)  # the bound itself: the test above
    clock = VirtualClock(start_s=1000.0)

    async def creeping() -> None:
        while True:
            await asyncio.sleep(1e-13)  # run time moves, by nothing that counts

    with pytest.raises(VirtualTimeStalled, match="creeping"):
        run_on(clock, creeping())


def test_a_task_that_waits_for_nothing_is_a_deadlock_named_at_once() -> None:
    clock = VirtualClock()

    async def waits_forever() -> None:
        await asyncio.get_running_loop().create_future()

    wall = time.monotonic()
    with pytest.raises(VirtualTimeStalled, match=r"nothing is scheduled.*waits_forever"):
        run_on(clock, waits_forever())
    assert time.monotonic() - wall < DEADLOCK_WALL_S + 2.0


def test_a_pace_holds_run_time_to_the_wall_and_keeps_the_figures() -> None:
    def trace(clock: VirtualClock) -> list[float]:
        out: list[float] = []

        async def main() -> None:
            for i in range(40):
                await clock.asleep(0.1 + 0.01 * (i % 3))
                out.append(clock.now())

        run_on(clock, main())
        return out

    wall = time.monotonic()
    paced = trace(VirtualClock(pace_run_s_per_s=10.0))
    took = time.monotonic() - wall
    free = trace(VirtualClock())
    assert paced == free  # the pace only delays the jumps
    assert paced[-1] / 10.0 * 0.9 <= took < paced[-1] / 10.0 + 1.0
    assert VirtualClock(pace_run_s_per_s=10.0).kind == "paced"
    assert VirtualClock(pace_run_s_per_s=4.0).wall_s(8.0) == 2.0
    assert VirtualClock().wall_s(8.0) is None


def test_a_lapse_of_the_process_never_becomes_run_time_nor_a_race_afterwards() -> None:
    clock = VirtualClock(pace_run_s_per_s=20.0)
    stamps: list[tuple[float, float]] = []

    async def main() -> None:
        for i in range(30):
            await clock.asleep(0.5)
            if i == 5:
                time.sleep(0.6)  # the process is not scheduled for a while
            stamps.append((time.monotonic(), clock.now()))

    run_on(clock, main())
    assert [run for _, run in stamps] == pytest.approx([0.5 * (i + 1) for i in range(30)])
    # after the lapse the pace goes on from where it was: no burst to catch up
    after = [wall for wall, _ in stamps[6:]]
    gaps = [b - a for a, b in itertools.pairwise(after)]
    assert min(gaps) > 0.5 / 20.0 * 0.5


def test_a_virtual_clock_refuses_waits_that_would_block_or_never_end() -> None:
    clock = VirtualClock()

    async def blocking_sleep_inside() -> None:
        clock.sleep(1.0)

    with pytest.raises(RuntimeError, match="blocking sleep"):
        run_on(clock, blocking_sleep_inside())

    async def on_a_plain_loop() -> None:
        await clock.asleep(1.0)

    with pytest.raises(RuntimeError, match="its own event loop"):
        asyncio.run(on_a_plain_loop())
    # outside any loop a blocking wait just moves run time
    clock.sleep(2.5)
    assert clock.now() == 2.5
    assert clock.wait(threading.Event(), 1.0) is False and clock.now() == 3.5


def test_each_loop_of_one_clock_continues_its_run_time() -> None:
    clock = VirtualClock()
    for _ in range(3):
        run_on(clock, clock.asleep(10.0))
    assert clock.now() == 30.0
    assert isinstance(clock.loop_factory(), VirtualEventLoop)


def test_a_stall_inside_a_sweep_is_a_one_line_error_and_the_loop_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the driver runs its coroutines: a stall ends them with a PowersweepError (the driver
    records it, restores, and the CLI prints one ``error:`` line)."""
    monkeypatch.setattr(virtual_time, "STALL_WALL_S", 0.3)
    from powersweep.errors import PowersweepError
    from powersweep.sweep.signals import run_interruptible

    clock = VirtualClock()
    cancelled: list[bool] = []

    async def resends_a_cut_request_at_once() -> None:
        try:
            while True:
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def sweep() -> None:
        helper = asyncio.create_task(resends_a_cut_request_at_once())
        await clock.asleep(5.0)
        await helper

    with pytest.raises(PowersweepError, match="resends_a_cut_request_at_once") as err:
        run_interruptible(sweep(), loop_factory=clock.loop_factory)
    assert err.value.exit_code == 1 and "\n" not in str(err.value)
    assert cancelled == [True]  # the loop's tasks were cancelled as it closed
