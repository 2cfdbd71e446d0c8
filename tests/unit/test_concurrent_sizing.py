"""decode-concurrent sizes its requests from the server's context only where streams share it.

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
from powersweep.sweep.loads.concurrent import PER_REQUEST_CONTEXT, DecodeConcurrent
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


def _load(engine: str, streams: int, advance: bool = False) -> tuple[DecodeConcurrent, _Client]:
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
    load, client = _load(engine, 256)
    w, results = asyncio.run(load.window(300.0, "narr", "Tell a story.", 256, 10.0, "concurrent"))
    # each request is sized to outlast the window: one per stream, none restarted
    assert min(client.asked) > 10.0 * RATE_TPS
    assert len(results) == 256
    assert w.tokens == pytest.approx(256 * RATE_TPS * (w.t1_s - w.t0_s), rel=0.02)


def test_the_keep_busy_load_is_sized_the_same_way() -> None:
    load, client = _load("vllm", 256, advance=True)
    asyncio.run(load.keep_busy(300.0, 20.0))
    assert min(client.asked) > MIN_REQUEST_TOKENS


def test_a_shared_context_still_caps_each_stream_at_its_share() -> None:
    # llama.cpp's n_ctx is split among (or shared by) its slots
    load, client = _load("llamacpp", 32)
    asyncio.run(load.window(300.0, "narr", "Tell a story.", 32, 10.0, "concurrent"))
    assert max(client.asked) <= CONTEXT // 32 - PROMPT_ROOM_TOKENS
    assert load.sharing(32) == 32
    assert DecodeConcurrent.sharing(load, 1) == 1
