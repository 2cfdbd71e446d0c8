"""powersweep.sweep.loads.concurrent: decode-concurrent's streams. The scheduling check (tokens
per chunk, ramp, the failures it warns of), preparing and resuming a point's streams, a window
with too many failed requests, and how the probe judges a gain.

decode-concurrent sizes its requests from the server's context only where streams share it.
A vLLM (or SGLang, Ollama) context is each request's own: dividing it among 256 streams capped
every request at 16 tokens, so each stream restarted every second, the restarts fell together at
a window's end, and the client, busy with them, stamped tokens the server had sent inside the
window after its end (about 2% of a window's tokens at 256 streams went uncounted).
"""

from __future__ import annotations

import asyncio
import math
from array import array
from types import SimpleNamespace
from typing import Any

import pytest

from powersweep.clock import ManualClock
from powersweep.sweep.loads.concurrent import (
    PER_REQUEST_CONTEXT,
    DecodeConcurrent,
    ProbeRow,
    _gained,
)
from powersweep.sweep.loads.concurrent_window import Window
from powersweep.sweep.loads.pace import MIN_REQUEST_TOKENS, PROMPT_ROOM_TOKENS, Pace

RATE_TPS = 12.0  # one stream's rate with 256 streams on a 3,000 tokens/s server
CONTEXT = 32768


class _Client:
    """Answers each request with what it asked for at RATE_TPS, on a manual clock: it waits for
    the window's labels to move the clock past its end (``advance``: it moves the clock itself,
    one request after another, as the keep-busy load without labels needs)."""

    def __init__(self, clock: ManualClock, advance: bool) -> None:
        self.clock = clock
        self.advance = advance
        self.asked: list[int] = []

    async def chat(self, prompt: str, **kw: Any) -> Any:
        self.asked.append(kw["max_tokens"])
        t0 = self.clock.now()
        deadline = kw.get("deadline_s") or math.inf
        n = min(kw["max_tokens"], int((deadline - t0) * RATE_TPS))
        times = array("d", (t0 + (k + 1) / RATE_TPS for k in range(n)))
        if self.advance:
            await self.clock.asleep(n / RATE_TPS)
        while self.clock.now() < min(deadline, t0 + n / RATE_TPS):
            await asyncio.sleep(0)
        return SimpleNamespace(
            ok=True,
            stream=kw.get("stream_index", 0),
            prompt_kind=kw["prompt_kind"],
            t_start_s=t0,
            t_first_token_s=times[0] if n else math.nan,
            t_last_token_s=times[-1] if n else math.nan,
            token_times_s=times,
            completion_tokens=n,
            chunk_tokens=n,
            token_source="usage",
            finish_reason="length" if n == kw["max_tokens"] else "deadline",
            error="",
        )

    async def queued_requests(self) -> int | None:
        return None


class _Sampler:
    def label(self, cap_w: float, phase: str) -> None:
        pass


def _concurrent_load(
    engine: str, streams: int, advance: bool = False
) -> tuple[DecodeConcurrent, _Client]:
    clock = ManualClock()
    client = _Client(clock, advance)
    pace = Pace(CONTEXT)
    pace.decode_tps["narr"] = RATE_TPS
    load = DecodeConcurrent(
        client,
        clock,
        _Sampler(),
        10.0,
        concurrency=streams,
        engine=engine,
        context_tokens=CONTEXT,
        pace=pace,
    )
    load.n = streams
    return load, client


@pytest.mark.parametrize("engine", sorted(PER_REQUEST_CONTEXT))
def test_a_per_request_context_is_not_divided_among_the_streams(engine: str) -> None:
    load, client = _concurrent_load(engine, 256)
    w, results = asyncio.run(load.window(300.0, "narr", "Tell a story.", 256, 10.0, "concurrent"))
    # each request is sized to outlast the window: one per stream, none restarted
    assert min(client.asked) > 10.0 * RATE_TPS
    assert len(results) == 256
    assert w.tokens == pytest.approx(256 * RATE_TPS * (w.t1_s - w.t0_s), rel=0.02)


def test_the_keep_busy_load_is_sized_the_same_way() -> None:
    load, client = _concurrent_load("vllm", 256, advance=True)
    asyncio.run(load.keep_busy(300.0, 20.0))
    assert min(client.asked) > MIN_REQUEST_TOKENS


def test_a_shared_context_still_caps_each_stream_at_its_share() -> None:
    # llama.cpp's n_ctx is split among (or shared by) its slots
    load, client = _concurrent_load("llamacpp", 32)
    asyncio.run(load.window(300.0, "narr", "Tell a story.", 32, 10.0, "concurrent"))
    assert max(client.asked) <= CONTEXT // 32 - PROMPT_ROOM_TOKENS
    assert load.sharing(32) == 32
    assert DecodeConcurrent.sharing(load, 1) == 1


# --- the scheduling check, preparing and resuming, a failed window, the probe's gain -----------


class _CheckClient:
    """Answers the scheduling check's requests from a script: ``(ok, completion tokens, chunks,
    seconds to the first token)`` per stream."""

    def __init__(self, script: list[tuple[bool, int, int, float]]) -> None:
        self.script = script
        self.kinds: list[str] = []

    async def chat(self, prompt: str, **kw: Any) -> Any:
        self.kinds.append(kw["prompt_kind"])
        ok, tokens, chunks, ttft = self.script[kw["stream_index"]]
        return SimpleNamespace(
            ok=ok,
            error="" if ok else "HTTP 503: no slot",
            t_start_s=10.0,
            t_first_token_s=10.0 + ttft if ok else math.nan,
            completion_tokens=tokens if ok else None,
            chunk_tokens=chunks,
            token_source="usage",
            finish_reason="length",
        )

    async def queued_requests(self) -> int | None:
        return None


def _checked(script: list[tuple[bool, int, int, float]], **kw: Any) -> DecodeConcurrent:
    return DecodeConcurrent(_CheckClient(script), ManualClock(), _Sampler(), 10.0, **kw)  # type: ignore[arg-type]


def test_the_scheduling_check_learns_tokens_per_chunk_and_the_ramp() -> None:
    load = _checked([(True, 64, 16, 0.4), (True, 64, 32, 0.9), (True, 64, 64, 0.2)])
    check = asyncio.run(load.scheduling_check(3))
    assert check == {"requests": 3, "failed": 0, "tokens_per_chunk": 2.0}  # median of 4, 2, 1
    assert load.per_chunk == 2.0
    assert load.ramp_s == pytest.approx(1.8)  # twice the slowest first token
    assert load.client.kinds == ["check"] * 3  # type: ignore[attr-defined]


@pytest.mark.parametrize(("ttft", "ramp"), [(0.01, 0.5), (30.0, 10.0)])
def test_the_ramp_stays_between_half_a_second_and_ten(ttft: float, ramp: float) -> None:
    load = _checked([(True, 64, 64, ttft)])
    asyncio.run(load.scheduling_check(1))
    assert load.ramp_s == ramp


def test_failed_check_requests_are_counted_and_name_the_servers_limit() -> None:
    warned: list[str] = []
    load = _checked(
        [(True, 64, 64, 0.1), (False, 0, 0, 0.0), (False, 0, 0, 0.0)],
        engine="vllm",
        warn=warned.append,
    )
    check = asyncio.run(load.scheduling_check(3))
    assert check["failed"] == 2 and load.per_chunk == 1.0
    assert warned == [
        "2 of 3 concurrent requests failed (HTTP 503: no slot); raise vLLM --max-num-seqs to at "
        "least 3"
    ]


def test_preparing_more_streams_than_the_server_runs_warns_and_records_the_effective_ones() -> None:
    warned: list[str] = []
    load = _checked(
        [(True, 64, 64, 0.1)] * 8,
        concurrency=8,
        engine="llamacpp",
        total_slots=4,
        warn=warned.append,
    )
    prepared = asyncio.run(load.prepare(300.0))
    assert load.n == 8
    assert (prepared["concurrency"], prepared["effective_concurrency"]) == (8, 4)
    assert prepared["concurrency_auto"] is False and prepared["pick_reason"] == "given"
    assert prepared["probe"] == [] and prepared["concurrency_stretch"] == 0
    assert prepared["scheduling_check"]["requests"] == 8
    assert warned == [
        "8 streams but the server runs 4 at once: the rest queue; raise llama-server --parallel "
        "(-np)"
    ]


def test_a_resumed_run_reuses_its_streams_ramp_and_tokens_per_chunk() -> None:
    load = _checked([], concurrency=2)
    prepared = {"concurrency": 12, "ramp_s": 2.5, "tokens_per_chunk": 3.0, "probe": []}
    kept = load.apply(prepared)
    assert (load.n, load.ramp_s, load.per_chunk) == (12, 2.5, 3.0)
    assert kept == prepared and kept is not prepared
    load.apply({})  # nothing recorded: what it had stays
    assert (load.n, load.ramp_s, load.per_chunk) == (12, 2.5, 3.0)


class _FailingWindows(DecodeConcurrent):
    """Windows of ``tokens`` tokens in 10 s, ``failed`` of 10 requests failed."""

    def __init__(self, failed: int, tokens: float = 500.0) -> None:
        super().__init__(None, ManualClock(), _Sampler(), 10.0, concurrency=4)  # type: ignore[arg-type]
        self.failed, self.tokens = failed, tokens

    async def window(self, cap_w, kind, prompt, n, length_s, phase):  # type: ignore[no-untyped-def,override]
        results = [
            SimpleNamespace(ok=i >= self.failed, error="HTTP 500: boom", token_times_s=())
            for i in range(10)
        ]
        tps = self.tokens / length_s
        return Window(n, 0.0, length_s, self.tokens, tps, self.failed, None), results


def test_a_window_with_more_than_a_tenth_failed_is_no_figure() -> None:
    run = asyncio.run(_FailingWindows(failed=1).measure(300.0))
    assert run.errors == [] and run.tps["narr_tps"] == 50.0 and run.tps["code_tps"] == 50.0
    assert math.isnan(run.tps["prefill_tps"]) and run.extra["concurrency"] == 4
    run = asyncio.run(_FailingWindows(failed=2).measure(300.0))
    assert math.isnan(run.tps["narr_tps"]) and math.isnan(run.tps["code_tps"])
    assert run.errors[0] == (
        "2 of 10 narr requests failed (HTTP 500: boom): the server did not serve 4 streams"
    )
    assert len(run.errors) == 2 and len(run.windows) == 2


def test_a_window_without_tokens_is_no_figure_and_metric_only_measures_one_prompt() -> None:
    run = asyncio.run(_FailingWindows(failed=0, tokens=0.0).measure(300.0, metric_only=True))
    assert [k for k, _, _ in run.windows] == ["narr"]
    assert math.isnan(run.tps["narr_tps"]) and "code_tps" not in run.tps
    assert run.extra["tps_blocks"] == ""


@pytest.mark.parametrize(
    ("row", "gained"),
    [
        ((103.1, 300.0), True),  # TPS rose by more than 3%
        ((103.0, 300.0), False),  # by exactly 3%: not enough
        ((100.0, 309.1), True),  # the draw rose by more than 3%
        ((100.0, math.nan), False),  # an unread draw is no evidence
        ((104.0, math.nan), True),  # and TPS alone decides then
    ],
)
def test_more_streams_pay_when_tps_or_draw_rise_by_over_three_percent(
    row: tuple[float, float], gained: bool
) -> None:
    best = ProbeRow(2, 100.0, 300.0, 0, None)
    assert _gained(ProbeRow(4, row[0], row[1], 0, None), best) is gained
