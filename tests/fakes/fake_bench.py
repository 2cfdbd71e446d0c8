"""A bench for the measurement protocol: a :class:`PointMeasurer` over fake cards and a fake load.

Everything runs on virtual time (:class:`powersweep.sim.virtual_time.VirtualClock`, its loop as
the driver runs it), the sampler ticks as a task on that loop, and the run directory is a
:class:`FakeWriter` that keeps what it is given::

    bench = Bench(gpus=2, windows=WindowPolicy(min_s=3.0, max_s=10.0))
    (row,) = bench.measure(SweepPoint(250.0))
    assert row["stop_reason"] == "precise"

No HTTP, no server, no disk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from powersweep.sim.virtual_time import VirtualClock
from powersweep.sweep.locks import ClockLocker
from powersweep.sweep.measurement.point import PointMeasurer
from powersweep.sweep.measurement.types import PointProgress, Protocol
from powersweep.sweep.options import MeasureOptions, SafetyOptions, SettleMode
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.sampling.sampler import Sampler
from powersweep.sweep.sampling.windows import WindowPolicy
from powersweep.sweep.verdict import FaultLog
from tests.fakes.fake_gpu import FakeGpu
from tests.fakes.fake_load import FakeLoad

T = TypeVar("T")


class FakeWriter:
    """Keeps what the protocol writes (the calls :class:`RunWriter` has), in order."""

    def __init__(self) -> None:
        self.samples: list[tuple[list[Any], bool]] = []
        self.requests: list[tuple[float, list[Any], Any, bool]] = []
        self.caps: list[dict[str, Any]] = []
        # the SM clock offset each append_requests call named (undervolt steps)
        self.offsets: list[float | None] = []
        self.run_json: list[dict[str, Any]] = []

    def append_samples(self, rows: Sequence[Any], *, confirm: bool = False) -> None:
        self.samples.append((list(rows), confirm))

    def append_requests(
        self,
        cap_w: float,
        requests: Sequence[Any],
        locks: Any = (None, None),
        *,
        confirm: bool = False,
        offset_mhz: float | None = None,
    ) -> None:
        self.requests.append((cap_w, list(requests), locks, confirm))
        self.offsets.append(offset_mhz)

    def append_cap(self, row: Mapping[str, Any]) -> None:
        self.caps.append(dict(row))

    def write_run_json(self, meta: Mapping[str, Any]) -> None:
        self.run_json.append(dict(meta))


class Bench:
    """Fake cards, a fake load, the real sampler and the protocol, on one virtual clock.

    Args:
        gpus: How many fake cards (or the cards, built on :attr:`clock` by the caller).
        load_mode: The protocol's load mode.
        windows: How long each point measures.
        settle_s: The protocol's settle bound (0: no settle).
        settle_mode: ``auto`` or ``fixed``.
        thermal_wait_max_s: The protocol's thermal wait bound (0: no wait).
        sample_interval_s: The sampler's interval.
        max_failed: Points failed in a row that stop the sweep.
        observe_only: Never set anything.
        clock_axis: Clock-lock points are locked (a :class:`ClockLocker` over the cards).
        gpu: Keyword arguments of every :class:`FakeGpu`.
        load: Keyword arguments of the :class:`FakeLoad`.
    """

    def __init__(
        self,
        gpus: int = 1,
        *,
        load_mode: str = "decode-single",
        windows: WindowPolicy | None = None,
        settle_s: float = 0.0,
        settle_mode: str = "auto",
        thermal_wait_max_s: float = 0.0,
        sample_interval_s: float = 0.5,
        max_failed: int = 3,
        observe_only: bool = False,
        clock_axis: bool = False,
        gpu: Mapping[str, Any] | None = None,
        load: Mapping[str, Any] | None = None,
    ) -> None:
        self.clock = VirtualClock()
        self.events: list[tuple[Any, ...]] = []
        self.gpus = [
            FakeGpu(i, clock=self.clock, events=self.events, **dict(gpu or {})) for i in range(gpus)
        ]
        self.sampler = Sampler(self.gpus, self.clock, sample_interval_s)
        self.load = FakeLoad(self.clock, self.sampler, **dict(load or {}))
        self.writer = FakeWriter()
        self.faults = FaultLog()
        self.warnings: list[str] = []
        self.progress: list[PointProgress] = []
        self.points: list[tuple[SweepPoint, dict[str, Any]]] = []
        self.protocol = Protocol(
            load_mode=load_mode,
            measure=MeasureOptions(
                settle_s=settle_s,
                settle_mode=SettleMode(settle_mode),
                sample_interval_s=sample_interval_s,
                thermal_wait_max_s=thermal_wait_max_s,
                windows=windows or WindowPolicy(min_s=3.0, max_s=10.0),
            ),
            safety=SafetyOptions(max_failed_caps=max_failed, observe_only=observe_only),
        )
        self.measurer = PointMeasurer(
            self.protocol,
            self.gpus,
            self.clock,
            self.load,
            self.sampler,
            self.writer,  # type: ignore[arg-type]
            self.faults,
            default_cap_w=min(g.limit_w for g in self.gpus),
            locker=ClockLocker(self.gpus, self.warnings.append) if clock_axis else None,
            warn=self.warnings.append,
            progress=self.progress.append,
            before_change=lambda: self.events.append(("before_change",)),
            on_point=lambda p, r: self.points.append((p, dict(r))),
        )

    def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work()`` on the clock's loop while the sampler ticks, as the driver does
        (the load that keeps the card busy is stopped at the end)."""

        async def main() -> T:
            try:
                async with self.sampler.running():
                    return await work()
            finally:
                await self.measurer.stop_busy()

        with asyncio.Runner(loop_factory=self.clock.loop_factory) as runner:
            return runner.run(main())

    def measure(self, *points: SweepPoint, reason: str = "dense") -> list[dict[str, Any]]:
        """Measure ``points`` in order, in one run; their rows."""

        async def work() -> list[dict[str, Any]]:
            return [
                await self.measurer.measure(p, reason, i, len(points)) for i, p in enumerate(points)
            ]

        return self.run(work)
