"""The sampler: an absolute tick grid, as a thread on a wall clock and as a task on a virtual
clock (whose run time passes only in its own loop)."""

from __future__ import annotations

import asyncio
import math

import pytest

from powersweep.clock import ScaledClock
from powersweep.sim.virtual_time import VirtualClock
from powersweep.sweep.gpu import GpuSample
from powersweep.sweep.sampling.sampler import Sampler


class _Gpu:
    """A GPU whose reading is its read count (and whose reads can be slow, in run time)."""

    def __init__(self, clock: VirtualClock | None = None, slow_every: int = 0) -> None:
        self.reads = 0
        self.clock = clock
        self.slow_every = slow_every

    def read_sample(self) -> GpuSample:
        self.reads += 1
        if self.clock is not None and self.slow_every and self.reads % self.slow_every == 0:
            self.clock.advance_to(self.clock.now() + 1.2)  # a read that took 1.2 run seconds
        return GpuSample(
            gpu_index=0,
            power_w=100.0 + self.reads,
            energy_mj=math.nan,
            temp_c=50.0,
            sm_clock_mhz=1500.0,
            mem_clock_mhz=9000.0,
            util_pct=100.0,
            pstate=0,
            clock_event_bits=0,
        )


def _sample_for(clock: VirtualClock, sampler: Sampler, run_s: float) -> None:
    async def main() -> None:
        async with sampler.running():
            await clock.asleep(run_s)

    with asyncio.Runner(loop_factory=clock.loop_factory) as runner:
        runner.run(main())


def test_on_a_virtual_clock_the_sampler_ticks_as_a_task_on_an_exact_grid() -> None:
    clock = VirtualClock()
    sampler = Sampler([_Gpu()], clock, interval_s=0.5)
    sampler.label(300.0, "narr")
    _sample_for(clock, sampler, 10.0)
    rows = sampler.drain()
    assert [r.t_s for r in rows] == pytest.approx([0.5 * k for k in range(20)])
    assert {(r.cap_w, r.phase) for r in rows} == {(300.0, "narr")}
    assert [r.tick for r in rows] == list(range(20))


def test_a_slow_read_skips_the_ticks_it_missed_and_keeps_the_grid() -> None:
    clock = VirtualClock()
    sampler = Sampler([_Gpu(clock, slow_every=4)], clock, interval_s=0.5)
    _sample_for(clock, sampler, 10.0)
    times = [r.t_s for r in sampler.drain()]
    # every tick starts on the grid (k * 0.5), and the ones a slow read covered are skipped
    assert all(abs(t / 0.5 - round(t / 0.5)) < 1e-9 for t in times)
    assert len(times) < 20 and times == sorted(times)


def test_a_virtual_sampler_is_never_a_thread() -> None:
    with pytest.raises(RuntimeError, match="running"):
        Sampler([_Gpu()], VirtualClock()).start()


def test_on_a_wall_clock_the_sampler_is_a_thread_inside_running() -> None:
    clock = ScaledClock(100.0)
    sampler = Sampler([_Gpu()], clock, interval_s=0.5)

    async def main() -> None:
        async with sampler.running():
            await clock.asleep(5.0)

    asyncio.run(main())
    times = [r.t_s for r in sampler.drain()]
    assert 5 <= len(times) <= 12
    assert sampler._thread is None  # stopped with the block
