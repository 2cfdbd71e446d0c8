"""Prefill calibration never sends a prompt past the server's context, even when the server's
tokenizer does not answer (a /tokenize call that timed out under load)."""

from __future__ import annotations

import asyncio
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
