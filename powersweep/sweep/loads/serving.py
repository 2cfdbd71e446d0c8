"""serving: requests sent at the arrival schedule's times (open loop), never more than a bound
in flight; the point's figures are the card's cost of serving that sequence.

Each round of a point sends a lead of arrivals (the server fills to its steady state), then
the window's; requests started in the window may finish within a drain bound after it. The
schedule rewinds whenever the load keeps the card busy between points, so every point replays
the same sequence. The reasoning: docs/serving.md.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
from collections.abc import Callable, Iterable
from typing import Any

from powersweep.clock import Clock
from powersweep.runformat import SERVE_KIND
from powersweep.sweep.loads.arrivals import Arrival, ScheduleSpec, arrivals
from powersweep.sweep.loads.base import (
    ChatApi,
    History,
    LoadRun,
    PhaseLabel,
    count_cut,
    ignore_result,
)
from powersweep.sweep.loads.pace import server_tokens_per_chunk
from powersweep.sweep.loads.prefill_sizing import make_prompt
from powersweep.sweep.loads.prompts import with_nonce
from powersweep.sweep.sampling.serving_figures import REFUSED_BOUND
from powersweep.sweep.server.request import RequestResult

# The lead before each window: arrivals sent so the server holds its steady number of requests
# when the window opens (an empty server would read cheap); at most this, at most half a window.
LEAD_MAX_S = 10.0
LEAD_SHARE = 0.5
# Requests started in a window may run this long past it (at least DRAIN_MIN_S, at most
# DRAIN_MAX_S, else one window): then they are cut and counted cut.
DRAIN_MIN_S = 10.0
DRAIN_MAX_S = 60.0
LEAD_KIND = "serve-lead"
# A window holds at least this many arrivals at the offered rate: with fewer, one request's
# length (the trace's spread over 100x) sets its tokens, and a window shorter than a request's
# time to first token sees none (0.3 requests/s in 3 s windows: a 250 W point of the simulated
# RTX 3090 failed so, docs/serving.md).
MIN_WINDOW_ARRIVALS = 10


def lead_s(window_s: float) -> float:
    """Seconds of arrivals sent before a window of ``window_s`` opens."""
    return min(LEAD_MAX_S, LEAD_SHARE * window_s)


def min_window_s(rate_rps: float) -> float:
    """The shortest serving window at ``rate_rps``: :data:`MIN_WINDOW_ARRIVALS` arrivals."""
    return MIN_WINDOW_ARRIVALS / rate_rps


def drain_s(window_s: float) -> float:
    """Seconds a request started in a window of ``window_s`` may run past it."""
    return min(DRAIN_MAX_S, max(DRAIN_MIN_S, window_s))


class Serving:
    """Open-loop arrivals at a rate, bounded in flight.

    Args:
        client: Server client (its pool holds at least ``max_in_flight`` connections).
        clock: Run clock.
        sampler: Phase labels.
        target_s: Run seconds of each point's window.
        spec: The arrival schedule.
        max_in_flight: The most requests in flight; an arrival over it is refused, counted.
        max_ttft_ms: The TTFT target (None: none), recorded with each point.
        max_itl_ms: The mean inter-token latency target (None: none).
        seed: Seed of the generated prompt bodies.
    """

    mode = "serving"
    prompts = 1

    def __init__(
        self,
        client: ChatApi,
        clock: Clock,
        sampler: PhaseLabel,
        target_s: float,
        spec: ScheduleSpec,
        *,
        max_in_flight: int,
        max_ttft_ms: float | None = None,
        max_itl_ms: float | None = None,
        seed: int = 0,
    ) -> None:
        self.client = client
        self.clock = clock
        self.sampler = sampler
        self.target_s = target_s
        self.spec = spec
        self.max_in_flight = max_in_flight
        self.max_ttft_ms = max_ttft_ms
        self.max_itl_ms = max_itl_ms
        self.seed = seed
        # schedule seconds the point's rounds have used (rewound between points)
        self.cursor_s = 0.0
        self._sent = 0

    @property
    def min_window_s(self) -> float:
        """The shortest window: :data:`MIN_WINDOW_ARRIVALS` arrivals at the offered rate."""
        return min_window_s(self.spec.rate_rps)

    async def prepare(self, cap_w: float) -> dict[str, Any]:
        return self._facts()

    def apply(self, prepared: dict[str, Any]) -> dict[str, Any]:
        return self._facts()

    def _facts(self) -> dict[str, Any]:
        return {
            "request_rate_rps": self.spec.rate_rps,
            "arrivals": str(self.spec.process),
            "burstiness": self.spec.burstiness,
            "lengths": str(self.spec.profile),
            "prompts": len(self.spec.prompts),
            "max_in_flight": self.max_in_flight,
            "lead_max_s": LEAD_MAX_S,
            "drain_max_s": DRAIN_MAX_S,
        }

    def prompt_text(self, arrival: Arrival, cap_w: float) -> str:
        """The arrival's prompt: the same body at every point, a nonce that no prefix cache
        serves from another point (or another request)."""
        nonce = f"{cap_w:g}-{arrival.index}-{self._sent}"
        self._sent += 1
        if arrival.prompt is not None:
            return with_nonce(arrival.prompt, nonce)
        rng = random.Random(self.seed * 1_000_003 + arrival.index)
        return make_prompt(arrival.prompt_tokens or 1, nonce, rng)

    async def measure(
        self, cap_w: float, *, metric_only: bool = False, window_s: float | None = None
    ) -> LoadRun:
        """One round: the lead, then the window's arrivals; returns once they ended or were cut
        at the drain bound."""
        length = self.target_s if window_s is None else window_s
        lead = lead_s(length)
        start = self.cursor_s
        self.cursor_s = start + lead + length
        t_base = self.clock.now() - start  # run seconds of the schedule's 0
        t0, t1 = t_base + start + lead, t_base + start + lead + length
        deadline = t1 + drain_s(length)

        async def labels() -> None:
            self.sampler.label(cap_w, "ramp")
            await self.clock.asleep(t0 - self.clock.now())
            self.sampler.label(cap_w, SERVE_KIND)
            await self.clock.asleep(t1 - self.clock.now())
            self.sampler.label(cap_w, "settle")

        label_task = asyncio.ensure_future(labels())
        try:
            results = await self.send(
                self.between(start, self.cursor_s),
                t_base,
                cap_w,
                deadline,
                kind=lambda a: LEAD_KIND if a.t_s < start + lead else SERVE_KIND,
            )
            await label_task
        finally:
            label_task.cancel()
        run = LoadRun(windows=[(SERVE_KIND, t0, t1)], power_windows=[(t0, t1)])
        tpc = server_tokens_per_chunk(results)
        run.requests = [count_cut(r, tpc if math.isfinite(tpc) else None) for r in results]
        run.extra = {
            "request_rate_rps": self.spec.rate_rps,
            "max_in_flight": self.max_in_flight,
            "max_ttft_ms": math.nan if self.max_ttft_ms is None else self.max_ttft_ms,
            "max_itl_ms": math.nan if self.max_itl_ms is None else self.max_itl_ms,
        }
        return run

    async def send(
        self,
        sequence: Iterable[Arrival],
        t_base: float,
        cap_w: float,
        deadline_s: float,
        *,
        kind: Callable[[Arrival], str],
        on_result: Callable[[Any], None] = ignore_result,
    ) -> list[Any]:
        """Each arrival at ``t_base + t_s`` whatever the others do; one over the in-flight
        bound is refused (a failed result, never sent). Returns every result, by arrival."""
        results: dict[int, Any] = {}
        in_flight = 0

        async def one(a: Arrival, prompt_kind: str) -> None:
            nonlocal in_flight
            try:
                r = await self.client.chat(
                    self.prompt_text(a, cap_w),
                    max_tokens=a.output_tokens,
                    prompt_kind=prompt_kind,
                    stream_index=a.index,
                    record_token_times=True,
                    deadline_s=deadline_s,
                )
                # one cut at the drain bound, a token or none, is counted cut (not failed)
                results[a.index] = r
                on_result(r)
            finally:
                in_flight -= 1

        async with asyncio.TaskGroup() as group:
            for a in sequence:
                await self.clock.asleep(t_base + a.t_s - self.clock.now())
                if in_flight >= self.max_in_flight:
                    results[a.index] = _refused(a, kind(a), self.clock.now(), self.max_in_flight)
                    continue
                in_flight += 1
                group.create_task(one(a, kind(a)))
        return [results[i] for i in sorted(results)]

    def between(self, start_s: float, end_s: float) -> Iterable[Arrival]:
        """The schedule's arrivals in ``[start_s, end_s)``, drawn as they are sent."""
        sequence = itertools.takewhile(lambda a: a.t_s < end_s, arrivals(self.spec))
        return (a for a in sequence if a.t_s >= start_s)

    async def keep_busy(
        self, cap_w: float, seconds: float, on_result: Callable[[Any], None] = ignore_result
    ) -> None:
        """The schedule from its start for ``seconds`` (or until cancelled): the card at the
        point's load while it settles. Rewinds the schedule for the next point."""
        self.cursor_s = 0.0
        end = self.clock.now() + seconds
        t_base = self.clock.now()
        await self.send(
            self.between(0.0, seconds),
            t_base,
            cap_w,
            end,
            kind=lambda _a: "settle",
            on_result=on_result,
        )

    def check(self, run: LoadRun, history: History) -> str:
        """No disturbance check yet: a serving point's token gaps follow the batch it shares,
        so decode-single's stall rule does not apply (docs/serving.md)."""
        return ""


def _refused(arrival: Arrival, kind: str, now_s: float, bound: int) -> Any:
    """The record of an arrival the in-flight bound refused (never sent)."""
    return RequestResult(
        prompt_kind=kind,
        stream=arrival.index,
        t_start_s=now_s,
        t_first_token_s=math.nan,
        t_last_token_s=math.nan,
        t_end_s=now_s,
        prompt_tokens=None,
        completion_tokens=None,
        token_source="chunks",
        chunk_tokens=0,
        token_times_s=None,
        finish_reason=None,
        ok=False,
        error=f"{REFUSED_BOUND} {bound} requests were in flight",
        max_tokens=arrival.output_tokens,
    )
