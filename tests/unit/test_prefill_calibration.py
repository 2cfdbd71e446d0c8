"""Prefill calibration never sends a prompt past the server's context, even when the server's
tokenizer does not answer (a /tokenize call that timed out under load)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from powersweep.clock import ScaledClock
from powersweep.sweep.loads.prefill import PrefillHeavy
from powersweep.sweep.server.request import RequestResult

CONTEXT = 4096
# a byte-level tokenizer makes ~8 tokens of a random word: the first guess (1.5) is far off
TOKENS_PER_WORD = 8.0


class _Labels:
    def label(self, cap_w: float, phase: str) -> None:
        pass


class _NoTokenizer:
    """Answers every prompt by its size (prefill at 1,000 tokens/s); /tokenize never answers."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    async def count_tokens(self, prompt: str) -> int | None:
        return None

    async def chat(self, prompt: str, **_: Any) -> RequestResult:
        tokens = round(len(prompt.split()) * TOKENS_PER_WORD)
        self.sent.append(tokens)
        ok = tokens <= CONTEXT
        t0 = 0.0
        return RequestResult(
            prompt_kind="prefill",
            stream=0,
            t_start_s=t0,
            t_first_token_s=t0 + tokens / 1000.0,
            t_last_token_s=t0 + tokens / 1000.0,
            t_end_s=t0 + tokens / 1000.0 + 0.01,
            prompt_tokens=tokens if ok else None,
            completion_tokens=1 if ok else None,
            token_source="usage",
            chunk_tokens=1 if ok else 0,
            token_times_s=None,
            finish_reason="length" if ok else None,
            ok=ok,
            error="" if ok else f"HTTP 400: {tokens} tokens exceed the context",
        )


def test_calibration_stays_inside_the_context_without_a_tokenizer() -> None:
    client = _NoTokenizer()
    load = PrefillHeavy(
        client,  # type: ignore[arg-type]
        ScaledClock(1.0),
        _Labels(),
        20.0,
        target_prefill_s=30.0,  # far more than the context allows: calibration clamps
        context_tokens=CONTEXT,
    )
    prepared = asyncio.run(load.prepare(300.0))
    assert prepared["clamped_to_context"]
    # the first guess was refused (over the context); it backs off, learns the server's count,
    # and every later prompt fits, sized from the counts seen (no tokenizer answered)
    first, *later = client.sent
    assert first > CONTEXT and later and max(later) <= CONTEXT, client.sent
    assert prepared["prompt_tokens"] <= CONTEXT


class _TimedServer(_NoTokenizer):
    """Prefill at 1,000 tokens/s on a manual clock; the requests numbered in ``fail`` fail after
    holding ``fail_s`` (a server that stalls, then errors)."""

    def __init__(self, clock: Any, fail: set[int], fail_s: float) -> None:
        super().__init__()
        self.clock, self.fail, self.fail_s = clock, fail, fail_s

    async def chat(self, prompt: str, **kw: Any) -> RequestResult:
        n = len(self.sent) + 1
        t0 = self.clock.now()
        result = await super().chat(prompt, **kw)
        if n in self.fail:
            self.clock.advance(self.fail_s)
            failed = {"ok": False, "error": "HTTP 500: boom", "chunk_tokens": 0}
            return replace(
                result, t_start_s=t0, t_end_s=self.clock.now(), prompt_tokens=None, **failed
            )
        took = result.t_end_s - result.t_start_s
        self.clock.advance(took)
        return replace(
            result,
            t_start_s=t0,
            t_first_token_s=t0 + result.t_first_token_s,
            t_last_token_s=t0 + result.t_last_token_s,
            t_end_s=t0 + took,
        )


def _prefill_window(fail: set[int], fail_s: float) -> Any:
    from powersweep.clock import ManualClock

    clock = ManualClock()
    load = PrefillHeavy(
        _TimedServer(clock, fail, fail_s),  # type: ignore[arg-type]
        clock,
        _Labels(),
        10.0,
        target_prefill_s=1.0,
        context_tokens=CONTEXT,
    )
    load.words, load.tokens_per_word = 150, TOKENS_PER_WORD  # ~1,200 tokens: 1.2 s each
    return asyncio.run(load.measure(300.0))


def test_a_prefill_window_the_server_served_too_little_of_fails_as_a_decode_one_does() -> None:
    quick = _prefill_window({2}, fail_s=0.05)
    assert quick.errors == [] and quick.tps["prefill_tps"] > 0
    held = _prefill_window({2}, fail_s=5.0)  # half the window held by a failing request
    (error,) = held.errors
    assert "prefill requests failed" in error and "of the window was measured" in error
