"""A scripted chat client for unit tests of the loads (``powersweep.sweep.loads``): no server, no
HTTP, run time on a :class:`~powersweep.clock.ManualClock` that each request advances.

Each request streams the tokens it asks for at ``tps`` after ``ttft_s``, until its deadline cuts
it (a cut request has no server count, as the client reports it); the requests numbered in
``fail`` (1 is the first) fail after ``fail_s`` without a token::

    clock = ManualClock()
    chat = FakeChat(clock, tps=30.0, fail={2})
    result = asyncio.run(chat.chat("p", max_tokens=60, prompt_kind="narr"))
    result.completion_tokens  # 60, streamed in 0.1 + 59/30 run seconds

What it can do:

* Rates: ``tps`` (tokens per run second of one stream) and ``tokens_per_chunk`` (a server that
  packs several tokens into one event: the chunks are ``ceil(tokens / tokens_per_chunk)``).
* ``max_stream_s`` ends a request after that many run seconds of tokens, whatever it asked for.
* ``busy``: request numbers answered HTTP 429 (failed at once, nothing streamed).
* ``calls`` records every request as a :class:`ChatCall`.

:func:`request_result` builds a :class:`~powersweep.sweep.server.request.RequestResult` the same
way, for tests that need one without a client.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from powersweep.clock import ManualClock
from powersweep.sweep.server.request import RequestResult

NAN = math.nan


@dataclass(frozen=True)
class ChatCall:
    """One :meth:`FakeChat.chat` call."""

    prompt_kind: str
    max_tokens: int
    deadline_s: float | None
    t_start_s: float
    stream_index: int


def request_result(
    kind: str = "narr",
    *,
    t0: float = 0.0,
    tokens: int = 60,
    tps: float = 30.0,
    ttft_s: float = 0.1,
    ok: bool = True,
    error: str = "",
    finish: str | None = "length",
    source: str = "usage",
    chunks: int | None = None,
    completion: int | str | None = "tokens",
    warnings: tuple[str, ...] = (),
    max_tokens: int | None = None,
    stream: int = 0,
    end_s: float | None = None,
) -> RequestResult:
    """A request that streamed ``tokens`` tokens at ``tps`` after ``ttft_s`` from ``t0``.

    Args:
        chunks: Token-bearing chunks (None: one per token; 0 with ``ok`` False: no token).
        completion: The count reported (``"tokens"``: ``tokens``; None: no count).
        end_s: When the response closed (None: at the last token).
    """
    n_chunks = tokens if chunks is None else chunks
    times = tuple(t0 + ttft_s + k / tps for k in range(n_chunks)) if n_chunks else ()
    last = times[-1] if times else NAN
    return RequestResult(
        prompt_kind=kind,
        stream=stream,
        t_start_s=t0,
        t_first_token_s=times[0] if times else NAN,
        t_last_token_s=last,
        t_end_s=end_s if end_s is not None else (last if times else t0),
        prompt_tokens=40,
        completion_tokens=tokens if completion == "tokens" else completion,  # type: ignore[arg-type]
        token_source=source,
        chunk_tokens=n_chunks,
        token_times_s=times or None,
        finish_reason=finish,
        ok=ok,
        error=error,
        warnings=warnings,
        max_tokens=max_tokens,
    )


class FakeChat:
    """A chat client whose requests stream at a fixed rate on a manual clock.

    Args:
        clock: The run clock; each request advances it by the time it took.
        tps: Tokens per run second of one stream.
        ttft_s: Run seconds to the first token.
        fail: Request numbers (1-based) that fail after ``fail_s`` without a token.
        fail_s: Run seconds a failing request takes.
        busy: Request numbers answered HTTP 429 at once.
        tokens_per_chunk: Tokens the server packs into one event.
        max_stream_s: A request stops streaming after this many run seconds (None: never).
    """

    def __init__(
        self,
        clock: ManualClock,
        *,
        tps: float = 30.0,
        ttft_s: float = 0.1,
        fail: Collection[int] = (),
        fail_s: float = 0.05,
        busy: Collection[int] = (),
        tokens_per_chunk: int = 1,
        max_stream_s: float | None = None,
    ) -> None:
        self.clock = clock
        self.tps = tps
        self.ttft_s = ttft_s
        self.fail = set(fail)
        self.fail_s = fail_s
        self.busy = set(busy)
        self.tokens_per_chunk = tokens_per_chunk
        self.max_stream_s = max_stream_s
        self.calls: list[ChatCall] = []

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
        await asyncio.sleep(0)  # a real client yields to the loop (the sampler, a watcher)
        t0 = self.clock.now()
        self.calls.append(ChatCall(prompt_kind, max_tokens, deadline_s, t0, stream_index))
        n = len(self.calls)
        if n in self.busy:
            return request_result(
                prompt_kind, t0=t0, tokens=0, chunks=0, ok=False, error="HTTP 429: busy",
                finish=None, completion=None, stream=stream_index,
            )  # fmt: skip
        if n in self.fail:
            self.clock.advance(self.fail_s)
            return request_result(
                prompt_kind, t0=t0, tokens=0, chunks=0, ok=False, error="HTTP 500: boom",
                finish=None, completion=None, stream=stream_index, end_s=self.clock.now(),
            )  # fmt: skip
        tokens = max_tokens
        if self.max_stream_s is not None:
            tokens = min(tokens, 1 + int(self.max_stream_s * self.tps))
        chunk_tps = self.tps / self.tokens_per_chunk
        chunks = math.ceil(tokens / self.tokens_per_chunk)
        cut = False
        if deadline_s is not None:
            room = deadline_s - t0 - self.ttft_s
            fit = 0 if room < 0 else 1 + int(room * chunk_tps + 1e-9)
            if fit < chunks:
                chunks, cut = fit, True
        if cut:
            self.clock.advance(max(0.0, deadline_s - t0))  # type: ignore[operator]
            return request_result(
                prompt_kind, t0=t0, tokens=chunks, tps=chunk_tps, ttft_s=self.ttft_s,
                finish="deadline", source="chunks", chunks=chunks, completion=None,
                max_tokens=max_tokens, stream=stream_index, end_s=self.clock.now(),
            )  # fmt: skip
        result = request_result(
            prompt_kind, t0=t0, tokens=tokens, tps=chunk_tps, ttft_s=self.ttft_s,
            chunks=chunks, max_tokens=max_tokens, stream=stream_index,
        )  # fmt: skip
        self.clock.advance(result.t_end_s - t0 + 0.01)
        return result
