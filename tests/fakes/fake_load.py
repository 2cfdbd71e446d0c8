"""A fake :class:`powersweep.sweep.loads.base.Load` for unit tests of the measurement protocol.

No server and no HTTP: each prompt's window is a sleep on the run clock (the sampler, ticking
on its own, reads the cards meanwhile, labelled with the prompt's kind as a real load labels
it), and the figures are a function of the cap plus seeded noise::

    load = FakeLoad(clock, sampler, tps_of=lambda cap: 0.1 * cap, noise_pct=0.1)
    load.disturb(250.0, times=1)  # check() names a disturbance once at 250 W
    load.fail(200.0)  # every measurement at 200 W fails

What it can do:

* Figures: ``narr_tps`` is ``tps_of(cap)`` and ``code_tps`` ``code_share`` of it, each the
  pooled rate of ``blocks_per_s`` blocks per window second whose rates carry seeded Gaussian
  noise of ``noise_pct`` percent; the narrative blocks go to ``extra["tps_blocks"]``, the
  units the point's precision is computed from. ``noise_pct`` may be a function of the cap.
* Windows: every prompt kind (``narr``, ``code``) for ``window_s``, or the metric's prompt
  only (``metric_only``); ``window_s`` None is ``target_s``.
* Disturbances: :meth:`disturb` makes :meth:`check` name one at a cap, a number of times (the
  check is of the last run measured, which is the protocol's order).
* Failures: :meth:`fail` makes a cap's measurement come back with an error and no figure.
* Records: ``calls`` (every :meth:`measure` with its cap, ``metric_only``, ``window_s`` and the
  run time it started), ``checks`` (the cap of every :meth:`check`), ``busy`` (the cap, start
  and end of every :meth:`keep_busy`), ``prepared``.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from powersweep.clock import Clock
from powersweep.sweep.loads.base import History, LoadRun, PhaseLabel, ignore_result

DISTURBED = "fake disturbance"
FAILED = "fake failure"


@dataclass(frozen=True)
class MeasureCall:
    """One :meth:`FakeLoad.measure` call."""

    cap_w: float
    metric_only: bool
    window_s: float
    started_s: float


@dataclass
class BusySpan:
    """One :meth:`FakeLoad.keep_busy`: its cap, when it started and ended (None: running)."""

    cap_w: float
    start_s: float
    end_s: float | None = None

    def covers(self, t0_s: float, t1_s: float) -> bool:
        """True when it ran from ``t0_s`` to ``t1_s``."""
        return self.start_s <= t0_s and (self.end_s is None or self.end_s >= t1_s)


class FakeLoad:
    """A decode-single-like load of two prompts whose TPS is a function of the cap.

    Args:
        clock: Run clock (each window is a sleep on it).
        sampler: What the windows are labelled on (None: not labelled).
        tps_of: The narrative TPS at a cap (default: proportional to the cap's square root).
        noise_pct: Relative noise of each block's rate, percent (or a function of the cap).
        code_share: The code prompt's TPS as a share of the narrative one.
        blocks_per_s: TPS blocks per run second of a window.
        target_s: The window when none is asked for.
        min_window_s: The load's own shortest window.
        seed: Seeds the noise.
    """

    mode = "decode-single"
    prompts = 2

    def __init__(
        self,
        clock: Clock,
        sampler: PhaseLabel | None = None,
        *,
        tps_of: Callable[[float], float] = lambda cap: 2.0 * math.sqrt(cap),
        noise_pct: float | Callable[[float], float] = 0.1,
        code_share: float = 0.9,
        blocks_per_s: float = 4.0,
        target_s: float = 10.0,
        min_window_s: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.clock = clock
        self.sampler = sampler
        self.tps_of = tps_of
        self.noise_pct = noise_pct
        self.code_share = code_share
        self.blocks_per_s = blocks_per_s
        self.target_s = target_s
        self._min_window_s = min_window_s
        self._rng = random.Random(seed)
        self._disturbed: dict[float, float] = {}
        self._failing: set[float] = set()
        self._last_cap: float | None = None
        self.calls: list[MeasureCall] = []
        self.checks: list[float] = []
        self.busy: list[BusySpan] = []
        self.prepared: list[float] = []

    # --- what a test tells it -----------------------------------------------------------------

    def disturb(self, cap_w: float, times: float = math.inf) -> None:
        """:meth:`check` names a disturbance at ``cap_w``, the next ``times`` times."""
        self._disturbed[cap_w] = times

    def fail(self, cap_w: float) -> None:
        """Every measurement at ``cap_w`` fails."""
        self._failing.add(cap_w)

    def busy_in_flight(self) -> bool:
        """True when a :meth:`keep_busy` of this load is a pending task of the running loop
        (started or not yet: on a virtual loop work in a thread runs before any task does)."""
        for task in asyncio.all_tasks():
            coro = task.get_coro()
            frame = getattr(coro, "cr_frame", None)
            if (
                not task.done()
                and getattr(coro, "__qualname__", "") == "FakeLoad.keep_busy"
                and frame is not None
                and frame.f_locals.get("self") is self
            ):
                return True
        return False

    def calls_at(self, cap_w: float) -> list[MeasureCall]:
        """The :meth:`measure` calls at one cap."""
        return [c for c in self.calls if c.cap_w == cap_w]

    # --- the Load protocol --------------------------------------------------------------------

    @property
    def min_window_s(self) -> float:
        return self._min_window_s

    async def prepare(self, cap_w: float) -> dict[str, Any]:
        self.prepared.append(cap_w)
        return {"fake": True}

    def apply(self, prepared: dict[str, Any]) -> dict[str, Any]:
        return dict(prepared)

    async def measure(
        self, cap_w: float, *, metric_only: bool = False, window_s: float | None = None
    ) -> LoadRun:
        window = self.target_s if window_s is None else window_s
        self.calls.append(MeasureCall(cap_w, metric_only, window, self.clock.now()))
        self._last_cap = cap_w
        kinds = ("narr",) if metric_only else ("narr", "code")
        run = LoadRun()
        failing = cap_w in self._failing
        blocks: list[tuple[float, float]] = []
        for kind in kinds:
            if self.sampler is not None:
                self.sampler.label(cap_w, kind)
            t0 = self.clock.now()
            await self.clock.asleep(window)
            run.windows.append((kind, t0, self.clock.now()))
            rate = self.tps_of(cap_w) * (1.0 if kind == "narr" else self.code_share)
            mine = self._blocks(rate, window, self._noise(cap_w))
            run.tps[f"{kind}_tps"] = (
                math.nan if failing else sum(t for t, _ in mine) / sum(s for _, s in mine)
            )
            if kind == "narr":
                blocks = mine
        if self.sampler is not None:
            self.sampler.label(cap_w, "settle")
        if failing:
            run.errors.append(f"{FAILED} at {cap_w:g} W")
        else:
            run.extra["tps_blocks"] = " ".join(f"{t:.6g}:{s:.6g}" for t, s in blocks)
        return run

    def check(self, run: LoadRun, history: History) -> str:
        cap = self._last_cap
        assert cap is not None, "check() before any measure()"
        self.checks.append(cap)
        left = self._disturbed.get(cap, 0)
        if left <= 0:
            return ""
        self._disturbed[cap] = left - 1
        return f"{DISTURBED} at {cap:g} W"

    async def keep_busy(
        self, cap_w: float, seconds: float, on_result: Callable[[Any], None] = ignore_result
    ) -> None:
        span = BusySpan(cap_w, self.clock.now())
        self.busy.append(span)
        if self.sampler is not None:
            self.sampler.label(cap_w, "settle")
        try:
            await self.clock.asleep(seconds)
        finally:
            span.end_s = self.clock.now()

    # --- internals ----------------------------------------------------------------------------

    def _noise(self, cap_w: float) -> float:
        pct = self.noise_pct(cap_w) if callable(self.noise_pct) else self.noise_pct
        return pct / 100.0

    def _blocks(self, rate: float, window_s: float, noise: float) -> list[tuple[float, float]]:
        n = max(2, round(self.blocks_per_s * window_s))
        seconds = window_s / n
        return [
            (max(0.0, rate * seconds * (1.0 + self._rng.gauss(0.0, noise))), seconds)
            for _ in range(n)
        ]
