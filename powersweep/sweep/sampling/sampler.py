"""The sampler: reads every GPU of the set at a fixed interval *while* the load runs.

The reasoning: docs/reference.md, "powersweep.sweep.sampling.sampler".
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from powersweep.clock import Clock
from powersweep.sweep.gpu import Gpu, GpuSample


@dataclass(frozen=True)
class SampleRow:
    """One GPU reading with its context.

    Attributes:
        t_s: Run seconds when the tick was taken.
        tick: Tick number (rows of one tick share it).
        cap_w: Cap in force.
        phase: What the sweep was doing (``settle``, ``narr``, ...).
        sample: The reading.
        sm_lock_mhz: SM lock of the clock point measured (None: none).
        mem_lock_mhz: Memory lock of the clock point measured (None: none).
        sm_offset_mhz: SM clock offset of the undervolt point measured (None: none set).
    """

    t_s: float
    tick: int
    cap_w: float
    phase: str
    sample: GpuSample
    sm_lock_mhz: float | None = None
    mem_lock_mhz: float | None = None
    sm_offset_mhz: float | None = None


class Sampler:
    """Background sampling of a GPU set.

    Args:
        gpus: The GPUs to read at each tick.
        clock: Run clock.
        interval_s: Run seconds between ticks.
    """

    def __init__(self, gpus: Sequence[Gpu], clock: Clock, interval_s: float = 0.5) -> None:
        if not interval_s > 0:
            raise ValueError("sample interval must be positive")
        self._gpus = list(gpus)
        self._clock = clock
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._rows: list[SampleRow] = []
        self._cap_w = float("nan")
        self._phase = "idle"
        self._locks: tuple[float | None, float | None, float | None] = (None, None, None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tick = 0
        self.read_errors = 0

    @property
    def interval_s(self) -> float:
        """Run seconds between ticks."""
        return self._interval_s

    def label(self, cap_w: float, phase: str) -> None:
        """Set the cap and phase that the following ticks are labelled with."""
        with self._lock:
            self._cap_w = cap_w
            self._phase = phase

    def set_locks(
        self, sm_mhz: float | None, mem_mhz: float | None, offset_mhz: float | None = None
    ) -> None:
        """Set the clock locks (of a clock sweep's point) and the SM clock offset (of an
        undervolt step) that the following ticks carry."""
        with self._lock:
            self._locks = (sm_mhz, mem_mhz, offset_mhz)

    def start(self) -> None:
        """Start ticking in a thread (idempotent); on a virtual clock use :meth:`running`."""
        if self._thread is not None:
            return
        if self._clock.runs_on_loop:
            raise RuntimeError("a sampler on a virtual clock ticks as a task: use running()")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="powersweep-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop ticking and wait for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Tick while the block runs: a task on this loop on a virtual clock, else the thread."""
        if not self._clock.runs_on_loop:
            self.start()
            try:
                yield
            finally:
                self.stop()
            return
        task = asyncio.get_running_loop().create_task(self._arun(), name="powersweep-sampler")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def peek(self) -> list[SampleRow]:
        """The rows collected since the last drain, left in place (a point's figures so far)."""
        with self._lock:
            return list(self._rows)

    def drain(self) -> list[SampleRow]:
        """Take the rows collected since the last drain."""
        with self._lock:
            rows, self._rows = self._rows, []
        return rows

    def tick_now(self) -> None:
        """Take one tick immediately (used at phase boundaries and by tests)."""
        self._take()

    def _take(self) -> None:
        with self._lock:
            cap, phase, locks = self._cap_w, self._phase, self._locks
            tick = self._tick
            self._tick += 1
        t = self._clock.now()
        samples = [g.read_sample() for g in self._gpus]
        rows = [SampleRow(t, tick, cap, phase, s, *locks) for s in samples]
        with self._lock:
            self._rows.extend(rows)
            self.read_errors += sum(s.read_errors for s in samples)

    def _run(self) -> None:
        start = self._clock.now()
        k = 0
        while not self._stop.is_set():
            self._take()
            k, wait_s = self._next_tick(start, k + 1)
            if self._clock.wait(self._stop, wait_s):
                break

    async def _arun(self) -> None:
        start = self._clock.now()
        k = 0
        while True:
            self._take()
            k, wait_s = self._next_tick(start, k + 1)
            await self._clock.asleep(wait_s)

    def _next_tick(self, start: float, k: int) -> tuple[int, float]:
        """Tick ``k`` of the grid from ``start`` and the run seconds until it; a tick already
        past (a slow read) is skipped, keeping the grid."""
        due = start + k * self._interval_s
        now = self._clock.now()
        if due < now:
            k = int((now - start) / self._interval_s) + 1
            due = start + k * self._interval_s
        return k, due - now

    def temp_slope_c_per_s(self, t0_s: float, t1_s: float) -> float:
        """How fast the hottest card's temperature moved over the ticks in ``[t0_s, t1_s]`` not
        yet drained: the least-squares slope, °C per run second (NaN with fewer than three
        readings). A fit over many ticks resolves a drift far finer than the 1 °C readings."""
        with self._lock:
            rows = [r for r in self._rows if t0_s <= r.t_s <= t1_s]
        ticks: dict[int, tuple[float, float]] = {}
        for r in rows:
            t = r.sample.temp_c
            if math.isfinite(t):
                prev = ticks.get(r.tick)
                ticks[r.tick] = (r.t_s, max(t, prev[1]) if prev else t)
        if len(ticks) < 3:
            return math.nan
        xs = [x for x, _ in ticks.values()]
        ys = [y for _, y in ticks.values()]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        if not sxx > 0:
            return math.nan
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx

    def peak_power_w(self, t0_s: float, t1_s: float) -> float:
        """Highest combined draw of the ticks in ``[t0_s, t1_s]`` not yet drained (NaN if none):
        the loaded draw even when a tick falls in the gap between two requests."""
        with self._lock:
            rows = [r for r in self._rows if t0_s <= r.t_s <= t1_s]
        ticks: dict[int, float] = {}
        for r in rows:
            ticks[r.tick] = ticks.get(r.tick, 0.0) + r.sample.draw_w
        values = [v for v in ticks.values() if math.isfinite(v)]
        return max(values) if values else math.nan

    def median_power_w(self, t0_s: float, t1_s: float) -> float:
        """Median combined draw of the ticks in ``[t0_s, t1_s]`` not yet drained (NaN if none).

        Used by probes that need the draw of a short window before the cap's rows are drained.
        """
        with self._lock:
            rows = [r for r in self._rows if t0_s <= r.t_s <= t1_s]
        ticks: dict[int, float] = {}
        for r in rows:
            ticks[r.tick] = ticks.get(r.tick, 0.0) + r.sample.draw_w
        values = sorted(v for v in ticks.values() if math.isfinite(v))
        if not values:
            return math.nan
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
