"""How the simulated server answers a chat request it accepted: the work, paced on the engine's
run clock, and the answer it streams (SSE) or returns whole.

The reasoning: docs/simulated-rig.md, "powersweep.sim.server_streaming".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any

from powersweep.sim import faults
from powersweep.sim.engine import SimEngine, WorkKind
from powersweep.sim.server_chunks import (
    ChunkFormat,
    FailedAnswer,
    Plan,
    Progress,
    endless_line,
    error_event,
)
from powersweep.sim.server_pacing import Pacing

# When tokens fall due faster than this (wall seconds apart), the server sleeps at least this long
# and then emits every token that has fallen due, each as its own chunk; slower tokens are sent
# at their due time.
_MIN_WALL_SLEEP_S = 0.001
# llama.cpp flavour: a ": ping" comment before every Nth token; plain: an "event:" line.
_PING_EVERY = 7
_EVENT_LINE_EVERY = 5
# What a request on a card that reset (or is off the bus) gets, in vLLM's words after an Xid 79.
GPU_LOST_MESSAGE = "CUDA error: an illegal memory access was encountered"


class ServerStreaming:
    """The pacing and the answers of :class:`~powersweep.sim.server.SimServer` (its base; the
    attributes below are set by its constructor)."""

    engine: SimEngine
    flavour: str
    fail_after_tokens: int | None
    total_slots: int | None
    tokens_per_chunk: int
    requests_processing: int
    requests_deferred: int
    tokens_generated: int
    chunks: ChunkFormat
    _slots: asyncio.Semaphore | None
    _slots_loop: asyncio.AbstractEventLoop | None
    _pause: tuple[float, float] | None
    pacing: Pacing | None

    if TYPE_CHECKING:

        def _jitter(self, request_no: int) -> Callable[[float], float]: ...

    async def _work(self, plan: Plan, progress: Progress) -> AsyncGenerator[list[int], None]:
        """Prefill, then decode: yields the indices of the tokens that fell due, in bursts.

        A serving card that reset since the request arrived ends it early (seen when it wakes),
        with ``progress.lost`` set.
        """
        engine, clock = self.engine, self.engine.clock
        resets = engine.reset_count()
        loop = asyncio.get_running_loop()
        if self.total_slots and (self._slots is None or self._slots_loop is not loop):
            # one semaphore per event loop: a virtual run's discovery and sweep use two loops
            self._slots, self._slots_loop = asyncio.Semaphore(self.total_slots), loop
        slot = self._slots
        t_prefill = plan.arrived_s if math.isfinite(plan.arrived_s) else clock.now()
        if slot is not None:
            if slot.locked():
                self.requests_deferred += 1
                try:
                    await slot.acquire()
                finally:
                    self.requests_deferred -= 1
                t_prefill = clock.now()  # queued: the prefill starts when a slot frees
            else:
                await slot.acquire()
        self.requests_processing += 1
        try:
            if _lost(engine, resets, progress):
                return
            if plan.fault == "slow":
                await clock.asleep(faults.SLOW_FIRST_TOKEN_S)
            engine.work_started("prefill")
            try:
                if plan.prompt_tokens > 0:
                    rate = _positive(engine.prefill_rate_tps(plan.prompt_tokens))
                    if self.pacing is None:
                        end = t_prefill + plan.prompt_tokens / rate
                    else:
                        end = self.pacing.prefill_end(t_prefill, plan.prompt_tokens / rate)
                    await clock.asleep(end - clock.now())
                    await self._paused("prefill", t_prefill)
            finally:
                engine.work_finished("prefill")
            if _lost(engine, resets, progress):
                return
            progress.prefill_s = clock.now() - t_prefill
            progress.decode_start_s = clock.now()
            engine.work_started("decode")
            try:
                if plan.greedy_key is not None:
                    # a greedy answer is decided by the card it starts decoding on
                    progress.unstable = engine.instability_mhz() > 0
                n = plan.completion_tokens
                # Absolute due times keep the long-run rate exact however the sleeps round.
                min_sleep = _MIN_WALL_SLEEP_S * clock.scale
                step = plan.slow_factor / _positive(engine.decode_rate_tps())
                pacing = self.pacing
                if pacing is None:
                    due = clock.now() + step
                else:
                    step = pacing.decode_step(
                        step, clock.now(), plan.request_no, plan.prompt_tokens
                    )
                    due = pacing.finish(clock.now(), step)
                jitter = self._jitter(plan.request_no)
                late = jitter(step)
                i = 0
                while i < n:
                    wait = due + late - clock.now()
                    if wait > 0:
                        await clock.asleep(wait if step >= min_sleep else max(wait, min_sleep))
                    if await self._paused("decode", due - step):
                        due = clock.now() + step  # a paused server does not catch up
                    if _lost(engine, resets, progress):
                        return
                    now = clock.now()
                    burst: list[int] = []
                    while i < n and due <= now:
                        burst.append(i)
                        i += 1
                        if i < n:
                            step = plan.slow_factor / _positive(engine.decode_rate_tps())
                            if pacing is None:
                                due += step
                            else:
                                step = pacing.decode_step(
                                    step, due, plan.request_no, plan.prompt_tokens + i
                                )
                                due = pacing.finish(due, step)
                            late = jitter(step)
                    if burst:
                        progress.last_token_s = now
                        self.tokens_generated += len(burst)
                        yield burst
                    if plan.fault == "stall" and i - len(burst) < faults.STALL_AFTER_TOKENS <= i:
                        # a stalled server: nothing flows and the GPU idles meanwhile
                        engine.work_finished("decode")
                        try:
                            await clock.asleep(faults.STALL_S)
                        finally:
                            engine.work_started("decode")
                        due = clock.now() + step
            finally:
                engine.work_finished("decode")
        finally:
            self.requests_processing -= 1
            if slot is not None:
                slot.release()

    async def _paused(self, kind: WorkKind, since_s: float) -> bool:
        """Wait out a whole-server pause that began after ``since_s`` (the GPU idles meanwhile);
        True when there was one."""
        if self._pause is None:
            return False
        start, end = self._pause
        clock = self.engine.clock
        now = clock.now()
        if not (start < now and since_s < end):
            return False
        # the work that fell in the pause did not happen: it is done after it
        owed = min(now, end) - max(start, since_s)
        self.engine.work_finished(kind)
        try:
            await clock.asleep(end - now)
        finally:
            self.engine.work_started(kind)
        await clock.asleep(max(0.0, owed))
        return True

    async def _sse(self, plan: Plan) -> AsyncGenerator[bytes, None]:
        texts = self.chunks.texts(plan)
        yield self._role_chunk(plan)
        progress = Progress()
        diverged = False
        sent = 0
        pending: list[int] = []  # tokens held back to share one chunk (tokens_per_chunk > 1)

        def flush() -> bytes:
            if not pending:
                return b""
            text = "".join(texts[j % len(texts)] for j in pending)
            delta = self.chunks.delta(plan, pending[0], text)
            pending.clear()
            return self.chunks.chunk(plan, [{"index": 0, "delta": delta, "finish_reason": None}])

        async with contextlib.aclosing(self._work(plan, progress)) as bursts:
            async for burst in bursts:
                if progress.unstable and not diverged:
                    texts, diverged = self.chunks.diverged(plan, texts), True
                # Tokens that fell due together go out in one write, each as its own event
                # (or packed tokens_per_chunk to an event, as some servers do under load).
                out = b""
                for i in burst:
                    if self.fail_after_tokens is not None and sent >= self.fail_after_tokens:
                        yield out + error_event(f"simulated failure after {sent} tokens")
                        return
                    if plan.fault == "reset" and sent >= faults.reset_after(plan.completion_tokens):
                        yield out
                        raise faults.StreamReset(f"connection closed after {sent} tokens")
                    if plan.fault == "long-line" and sent >= faults.LONG_LINE_AFTER_TOKENS:
                        yield out
                        async for part in endless_line():
                            yield part
                        return
                    if self.flavour == "llamacpp" and i % _PING_EVERY == _PING_EVERY - 1:
                        out += b": ping\n\n"
                    elif self.flavour == "plain" and i % _EVENT_LINE_EVERY == 0:
                        out += b"event: chunk\n"
                    reasoning_now = i < plan.reasoning_tokens
                    if pending and (pending[0] < plan.reasoning_tokens) != reasoning_now:
                        out += flush()
                    pending.append(i)
                    # the first token goes out alone, as servers that pack tokens under load
                    # (vLLM's and SGLang's stream intervals) send it: the prefill ended with it
                    if len(pending) >= self.tokens_per_chunk or i == 0:
                        out += flush()
                    sent += 1
                if out:
                    yield out
        if progress.lost:
            # the card reset under the request: what it generated goes out, then the error
            yield flush() + error_event(GPU_LOST_MESSAGE)
            return
        tail = flush()
        if tail:
            yield tail
        extra: dict[str, Any] = {}
        if self.flavour == "llamacpp":
            extra["timings"] = self.chunks.timings(
                plan, sent, progress.prefill_s, progress.decode_s
            )
        final = {"index": 0, "delta": {}, "finish_reason": "length"}
        with_usage = plan.include_usage and self.flavour != "plain"
        # llama-server puts timings on the usage chunk when there is one, else on the final chunk
        yield self.chunks.chunk(plan, [final], **({} if with_usage else extra))
        if with_usage:
            yield self.chunks.chunk(plan, [], usage=self.chunks.usage(plan, sent), **extra)
        if plan.fault == "no-done":
            # holds the socket: the watched response cancels this when the client hangs up
            await asyncio.sleep(3600)
        yield b"data: [DONE]\n\n"

    async def _whole(self, plan: Plan) -> AsyncGenerator[bytes, None]:
        """A whole answer, sent when done (:class:`FailedAnswer` 500 when a card reset)."""
        texts = self.chunks.texts(plan)
        progress = Progress()
        n = 0
        async with contextlib.aclosing(self._work(plan, progress)) as bursts:
            async for burst in bursts:
                n += len(burst)
        if progress.lost:
            raise FailedAnswer(500, _lost_body())
        if progress.unstable:
            texts = self.chunks.diverged(plan, texts)
        payload = self.chunks.whole(plan, texts, n, progress)
        yield json.dumps(payload).encode()

    def _role_chunk(self, plan: Plan) -> bytes:
        return self.chunks.chunk(
            plan,
            [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}],
        )

    async def _off_bus_sse(self, plan: Plan) -> AsyncGenerator[bytes, None]:
        """The stream of a request that arrived while a serving card is off the bus."""
        yield self._role_chunk(plan) + error_event(GPU_LOST_MESSAGE)


def _lost_body() -> bytes:
    # as error_response writes it: a client reads the same error either way
    err = {"code": 500, "message": GPU_LOST_MESSAGE, "type": "server_error"}
    return json.dumps({"error": err}, separators=(",", ":")).encode()


def _lost(engine: SimEngine, resets: int, progress: Progress) -> bool:
    """Whether a serving card reset since a request saw ``resets`` (marked in ``progress``)."""
    if engine.reset_count() == resets:
        return False
    progress.lost = True
    return True


def _positive(rate: float) -> float:
    # A zero or broken rate from an engine must not divide by zero or stall forever.
    return rate if rate > 1e-9 else 1e-9
