"""Before the first point: warm up (time-bounded), check the swept GPUs serve the model, and
prepare the load (the concurrency probe, the prefill calibration) at the first point.

Every axis shares it: the first point of a power sweep is its highest cap, of a clock sweep its
highest locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from powersweep.clock import Clock
from powersweep.errors import PowersweepError
from powersweep.sweep.gpu import Gpu
from powersweep.sweep.gpu_choice import confirm_serving, not_swept_busy
from powersweep.sweep.loads.base import ChatApi, Load
from powersweep.sweep.loads.pace import Pace
from powersweep.sweep.loads.prefill import PrefillCalibrationError
from powersweep.sweep.loads.warmup import Warmup, warmup
from powersweep.sweep.measurement.thermal_fit import ThermalFit
from powersweep.sweep.records.writer import RunWriter
from powersweep.sweep.sampling.sampler import Sampler
from powersweep.sweep.verdict import FaultLog


class LoadSetup:
    """Warm-up and load preparation at the first point of a sweep.

    Args:
        client: The server client.
        clock: Run clock.
        load: The load mode.
        pace: The server's pace (the warm-up measures it; the load sizes requests by it).
        sampler: Reads the swept GPUs.
        writer: The run directory.
        faults: Where the faults met are counted.
        gpus: The swept GPUs.
        watch: GPUs outside the set, only read during the warm-up: one that gets busy there
            may serve the model too.
        meta: ``run.json`` content (``gpu_selection``, ``warmup``, ``load`` are added).
        window_s: The sweep's window (``--target-cap-seconds``).
        warmup_requests: At most this many warm-up requests per prompt (0: none).
        warn: Where warnings go.
        thermal: Where the warm-up's readings go to fit the card's thermal time constant.
    """

    def __init__(
        self,
        *,
        client: ChatApi,
        clock: Clock,
        load: Load,
        pace: Pace,
        sampler: Sampler,
        writer: RunWriter,
        faults: FaultLog,
        gpus: Sequence[Gpu],
        watch: Sequence[Gpu],
        meta: dict[str, Any],
        window_s: float,
        warmup_requests: int,
        warn: Callable[[str], None],
        thermal: ThermalFit | None = None,
    ) -> None:
        self.thermal = thermal
        self.client = client
        self.clock = clock
        self.load = load
        self.pace = pace
        self.sampler = sampler
        self.writer = writer
        self.faults = faults
        self.gpus = list(gpus)
        self.watch = list(watch)
        self.meta = meta
        self.window_s = window_s
        self.warmup_requests = warmup_requests
        self.warn = warn

    async def run(
        self,
        cap_w: float,
        locks: tuple[float | None, float | None],
        prepared: Mapping[str, Any] | None,
        on_prepared: Callable[[dict[str, Any]], Mapping[str, Any]] | None,
    ) -> None:
        """Warm up at the first point, then probe or calibrate the load (or re-apply a
        resumed run's set-up).

        Raises:
            PowersweepError: The server failed every warm-up request, or the load could not be
                set up.
        """
        if self.warmup_requests > 0:
            done = await self._watched(cap_w)
            self.writer.append_requests(cap_w, done.results, locks)
            self.faults.requests(done.results)
            self.meta["warmup"] = done.record()
            if not any(r.ok for r in done.results):
                first = next((r.error for r in done.results if r.error), "no request completed")
                raise PowersweepError(f"the server failed every warm-up request: {first}")
        elif isinstance(prepared, Mapping) and "pace" in prepared:
            self.pace.restore(prepared.get("pace"))
        try:
            if prepared is not None:
                prep = self.load.apply(dict(prepared))
            else:
                prep = await self.load.prepare(cap_w)
        except PrefillCalibrationError as exc:
            raise PowersweepError(str(exc)) from exc
        prep = {**prep, "pace": self.pace.snapshot()}
        # warm-up, probe and calibration readings belong to no point, but the timeline keeps them
        rows = self.sampler.drain()
        if self.thermal is not None:
            self.thermal.add(rows)  # a card heating from idle: the fit's best excitation
        self._confirm_serving(rows)
        self.writer.append_samples(rows)
        self.meta["load"] = prep
        if on_prepared is not None:
            self.meta.update(on_prepared(prep))
        self.writer.write_run_json(self.meta)

    async def _watched(self, cap_w: float) -> Warmup:
        """The warm-up, while the GPUs outside the set are read for a utilization rise."""

        async def run() -> Warmup:
            return await warmup(
                self.client,
                self.clock,
                self.sampler,
                cap_w,
                self.pace,
                window_s=self.window_s,
                max_requests=self.warmup_requests,
            )

        if not self.watch:
            return await run()
        before = {g.index: g.read_sample().util_pct for g in self.watch}
        peaks = {i: math.nan for i in before}

        async def watch() -> None:
            while True:
                for g in self.watch:
                    u = g.read_sample().util_pct
                    if math.isfinite(u) and not peaks[g.index] >= u:
                        peaks[g.index] = u
                await self.clock.asleep(self.sampler.interval_s)

        watcher = asyncio.create_task(watch())
        try:
            return await run()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            self.meta.setdefault("gpu_selection", {}).update(
                not_swept_busy(before, peaks, self.warn)
            )

    def _confirm_serving(self, rows: Sequence[Any]) -> None:
        """The swept GPUs must have got busy in the warm-up; record each one's peak utilization."""
        peaks: dict[int, float] = {g.index: math.nan for g in self.gpus}
        seen = False
        for r in rows:
            if r.phase != "warmup":
                continue
            seen = True
            u = r.sample.util_pct
            if math.isfinite(u) and not peaks.get(r.sample.gpu_index, 0.0) >= u:
                peaks[r.sample.gpu_index] = u
        if seen:
            selection = self.meta.setdefault("gpu_selection", {})
            selection.update(confirm_serving(peaks, self.warn))
