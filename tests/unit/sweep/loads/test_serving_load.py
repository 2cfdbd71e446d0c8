"""The serving load (``sweep/loads/serving.py``) on a virtual clock with a fake server: arrivals
sent at their times whatever the others do, the in-flight bound refusing (counted, never
queued), the server's refusals, the drain bound, and the same sequence at every point."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Coroutine
from typing import Any

import numpy as np
import pytest

from powersweep.sim.virtual_time import VirtualClock
from powersweep.sweep.loads.arrivals import ArrivalProcess, ScheduleSpec
from powersweep.sweep.loads.serving import (
    LEAD_KIND,
    MIN_WINDOW_ARRIVALS,
    Serving,
    drain_s,
    lead_s,
)
from powersweep.sweep.sampling.serving_figures import (
    percentile_columns,
    served_rps,
    serving_columns,
)
from powersweep.sweep.server.request import RequestResult


class _Labels:
    def __init__(self) -> None:
        self.phases: list[tuple[float, str]] = []

    def label(self, cap_w: float, phase: str) -> None:
        self.phases.append((cap_w, phase))


class _Server:
    """Answers each request after ``ttft_s`` with one token every ``gap_s`` for the tokens
    asked, cut at the request's deadline; answers 429 to the requests numbered in ``busy``."""

    def __init__(
        self, clock: VirtualClock, ttft_s: float, gap_s: float, busy: frozenset[int] = frozenset()
    ) -> None:
        self.clock, self.ttft_s, self.gap_s, self.busy = clock, ttft_s, gap_s, busy
        self.sent: list[tuple[str, int, float, int, str]] = []
        self.in_flight = self.most_in_flight = 0

    async def chat(
        self,
        prompt: str,
        *,
        max_tokens: int,
        prompt_kind: str,
        stream_index: int = 0,
        deadline_s: float | None = None,
        **_: Any,
    ) -> RequestResult:
        t0 = self.clock.now()
        self.sent.append((prompt_kind, stream_index, t0, max_tokens, prompt))
        if len(self.sent) in self.busy:
            return _result(prompt_kind, stream_index, t0, (), t0, "HTTP 429: busy", None)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            times = [t0 + self.ttft_s + k * self.gap_s for k in range(max_tokens)]
            end = deadline_s if deadline_s is not None else math.inf
            kept = tuple(t for t in times if t <= end)
            finish = "length" if len(kept) == len(times) else "deadline"
            await self.clock.asleep(min(times[-1], end) - t0)
            return _result(prompt_kind, stream_index, t0, kept, self.clock.now(), "", finish)
        finally:
            self.in_flight -= 1


def _result(
    kind: str,
    stream: int,
    t0: float,
    times: tuple[float, ...],
    end: float,
    error: str,
    finish: str | None,
) -> RequestResult:
    nan = math.nan
    return RequestResult(
        prompt_kind=kind,
        stream=stream,
        t_start_s=t0,
        t_first_token_s=times[0] if times else nan,
        t_last_token_s=times[-1] if times else nan,
        t_end_s=end,
        prompt_tokens=None,
        completion_tokens=len(times) if not error else None,
        token_source="usage" if finish == "length" else "chunks",
        chunk_tokens=len(times),
        token_times_s=times or None,
        finish_reason=finish,
        ok=not error,
        error=error,
    )


def _run(clock: VirtualClock, coro: Coroutine[Any, Any, Any]) -> Any:
    with asyncio.Runner(loop_factory=clock.loop_factory) as runner:
        return runner.run(coro)


def _load(
    clock: VirtualClock,
    server: _Server,
    spec: ScheduleSpec,
    bound: int = 64,
    **kwargs: Any,
) -> Serving:
    return Serving(server, clock, _Labels(), 20.0, spec, max_in_flight=bound, **kwargs)


def test_each_arrival_is_sent_at_its_time_whatever_the_others_do() -> None:
    clock = VirtualClock()
    # answers far longer than the gaps: a closed loop would send one at a time
    server = _Server(clock, ttft_s=0.5, gap_s=0.05)
    spec = ScheduleSpec(2.0, ArrivalProcess.CONSTANT)
    run = _run(clock, _load(clock, server, spec).measure(300.0, window_s=20.0))
    lead = lead_s(20.0)
    starts = [t for _, _, t, _, _ in server.sent]
    assert starts == pytest.approx([0.5 * (k + 1) for k in range(len(starts))])
    assert len(starts) == (lead + 20.0) * 2 - 1  # arrivals at 0.5 ... 29.5
    kinds = [k for k, _, t, _, _ in server.sent]
    assert kinds.count(LEAD_KIND) == lead * 2 - 1  # 0.5 ... 9.5; the window from 10.0
    (kind, t0, t1) = run.windows[0]
    assert (kind, t0, t1) == ("serve", lead, lead + 20.0)
    assert run.power_windows == [(lead, lead + 20.0)]
    assert server.most_in_flight > 1


def test_an_arrival_over_the_bound_is_counted_refused_never_queued() -> None:
    clock = VirtualClock()
    # each answer takes 10.2 s; one arrival every 0.5 s: the fourth finds three in flight
    server = _Server(clock, ttft_s=0.2, gap_s=0.1)
    spec = ScheduleSpec(2.0, ArrivalProcess.CONSTANT)
    load = _load(clock, server, spec, bound=3)
    run = _run(clock, load.measure(300.0, window_s=20.0))
    assert server.most_in_flight == 3
    refused = [r for r in run.requests if not r.ok]
    assert refused and all("--max-in-flight" in r.error for r in refused)
    # a refused arrival was never sent, and costs no time: the next is sent on time
    assert len(server.sent) + len(refused) == len(run.requests)
    figures = serving_columns(
        run.requests,
        run.windows,
        request_rate_rps=2.0,
        max_in_flight=3,
        max_ttft_ms=None,
        max_itl_ms=None,
    )
    assert figures["n_refused"] == sum(1 for r in refused if r.prompt_kind == "serve")
    assert figures["saturated"] == 1.0
    assert figures["in_flight_max"] == 3.0


def test_the_servers_refusals_and_the_drain_bound_are_counted() -> None:
    clock = VirtualClock()
    server = _Server(clock, ttft_s=0.1, gap_s=0.1, busy=frozenset({12, 13}))
    # the answers outlast the drain bound: the window's last ones are cut
    spec = ScheduleSpec(1.0, ArrivalProcess.CONSTANT)
    run = _run(clock, _load(clock, server, spec).measure(300.0, window_s=10.0))
    ends = [r.t_end_s for r in run.requests if r.ok]
    assert max(ends) <= lead_s(10.0) + 10.0 + drain_s(10.0) + 1e-9
    figures = serving_columns(
        run.requests,
        run.windows,
        request_rate_rps=1.0,
        max_in_flight=64,
        max_ttft_ms=50.0,
        max_itl_ms=200.0,
    )
    served = [r for r in run.requests if r.prompt_kind == "serve"]
    assert figures["n_offered"] == len(served)
    assert figures["n_refused"] == sum(1 for r in served if r.error.startswith("HTTP 429"))
    assert figures["n_refused"] >= 1
    assert figures["n_cut"] == sum(1 for r in served if r.finish_reason == "deadline")
    # TTFT 100 ms misses a 50 ms target for every request
    assert figures["over_ttft_pct"] == 100.0 and figures["goodput_rps"] == 0.0
    assert figures["over_itl_pct"] == pytest.approx(
        100.0 * figures["n_refused"] / figures["n_offered"]
    )


def test_every_point_replays_the_same_sequence() -> None:
    clock = VirtualClock()
    server = _Server(clock, ttft_s=0.3, gap_s=0.02)
    spec = ScheduleSpec(3.0, ArrivalProcess.POISSON, seed=4)
    load = _load(clock, server, spec)

    async def two_points() -> list[list[tuple[int, float, int]]]:
        seen = []
        for cap in (250.0, 300.0):
            server.sent.clear()
            t_start = clock.now()
            await load.measure(cap, window_s=10.0)
            # a second round of the same point continues the sequence
            await load.measure(cap, metric_only=True, window_s=5.0)
            seen.append([(i, round(t - t_start, 9), n) for _, i, t, n, _ in server.sent])
            await load.keep_busy(cap, 1.0)  # between points: rewinds
        return seen

    first, second = _run(clock, two_points())
    assert first == second
    indices = [i for i, _, _ in first]
    assert indices == sorted(set(indices))  # the rounds did not repeat an arrival


def test_the_prompts_differ_by_point_only_in_their_nonce() -> None:
    clock = VirtualClock()
    server = _Server(clock, ttft_s=0.1, gap_s=0.01)
    load = _load(clock, server, ScheduleSpec(2.0, seed=9))

    async def two() -> None:
        await load.measure(250.0, window_s=4.0)
        await load.keep_busy(250.0, 0.1)
        await load.measure(300.0, window_s=4.0)

    _run(clock, two())
    by_index: dict[int, list[str]] = {}
    for kind, i, _, _, prompt in server.sent:
        if kind != "settle":
            by_index.setdefault(i, []).append(prompt)
    assert by_index
    for a, b in by_index.values():
        assert a != b  # no prefix cache serves one point from another
        assert a.split("] ", 1)[1] == b.split("] ", 1)[1]


def test_a_windows_floor_is_ten_arrivals_at_the_offered_rate() -> None:
    clock = VirtualClock()
    server = _Server(clock, ttft_s=0.5, gap_s=0.05)
    for rate in (0.3, 2.0):
        load = _load(clock, server, ScheduleSpec(rate, ArrivalProcess.POISSON))
        assert load.min_window_s == pytest.approx(MIN_WINDOW_ARRIVALS / rate)


def test_each_latency_percentile_states_its_interval_where_the_values_bound_it() -> None:
    # issue 49: TTFT, ITL and end-to-end p50/p95/p99 each with its stated precision
    values = list(np.random.default_rng(7).lognormal(5.0, 0.6, size=120))
    cols = percentile_columns("e2e", values)
    for q in (50, 95):
        assert cols[f"e2e_p{q}_lo_ms"] <= cols[f"e2e_p{q}_ms"] <= cols[f"e2e_p{q}_hi_ms"]
    # 120 values bound a p99 from below only: its upper end is unknown, not made up
    assert cols["e2e_p99_lo_ms"] <= cols["e2e_p99_ms"] and math.isnan(cols["e2e_p99_hi_ms"])
    assert all(math.isnan(v) for k, v in percentile_columns("ttft", []).items())


def test_energy_per_request_divides_by_what_arrives_unless_the_server_saturated() -> None:
    # a slower setting completes fewer requests inside a window (its edges cut more): over the
    # completions, 8 of them, each request cut moved its J/request by 12%; the arrivals are the
    # same sequence at every point
    kept_up = {"offered_rps": 0.24, "achieved_rps": 0.21, "saturated": 0.0}
    assert served_rps(kept_up) == 0.24
    assert served_rps({**kept_up, "saturated": 1.0}) == 0.21
