"""prefill-heavy: one large prompt per request, sized so its prefill takes the target time.

Every prompt starts with a nonce and has a freshly varied body, so no prefix cache can serve it
(and llama.cpp is told ``cache_prompt: false``).

The reasoning: docs/reference.md, "powersweep.sweep.loads.prefill".
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from powersweep.clock import Clock
from powersweep.sweep.loads.base import (
    MAX_CONSECUTIVE_FAILURES,
    MIN_MEASURED_SHARE,
    ChatApi,
    History,
    LoadRun,
    PhaseLabel,
    ignore_result,
    judge_cut,
    measured_share,
    window_margin_s,
)
from powersweep.sweep.loads.prefill_sizing import (
    CalibrationStep,
    fit_ttft,
    make_prompt,
    tokens_for_ttft,
)
from powersweep.sweep.sampling.consistency import nearest, nearest_by_rank, ttft_outlier_reason

PREFILL_MAX_TOKENS = 10
CONTEXT_FRACTION = 0.9
TEMPLATE_HEADROOM_TOKENS = 64
MIN_PROMPT_TOKENS = 256
FIRST_PROMPT_TOKENS = 2048
CALIBRATION_TOLERANCE = 0.12
MAX_CALIBRATION_STEPS = 6
MAX_FIRST_PROMPT_BACKOFFS = 3
TRUNCATION_TOLERANCE = 0.97
# Without a tokenize API the expected count is an estimate from the prompt's length, which
# varies a few percent with the random words; a prompt cut to the context loses far more.
ESTIMATE_TRUNCATION_TOLERANCE = 0.9
MAX_CACHED_FRACTION = 0.05
# A prompt starts only when this many times the last one's duration ends inside the margin.
FIT_MARGIN = 1.15
# The prompts that keep the card busy between points are this many times shorter.
BUSY_PROMPT_DIVISOR = 4


class PrefillApi(ChatApi, Protocol):
    """The client calls prefill-heavy uses (``ChatClient``)."""

    async def count_tokens(self, text: str) -> int | None:
        """The server's token count of ``text`` (None without a tokenize API)."""
        ...


class PrefillHeavy:
    """Large prompts, ``max_tokens`` 10: prefill TPS = prompt tokens / time to first token.

    Args:
        client: Server client.
        clock: Run clock.
        sampler: Phase labels.
        target_s: Run seconds of load per cap.
        target_prefill_s: Prefill time each prompt is sized for at the highest cap.
        context_tokens: Context the server runs with (None if unknown).
        engine: Server engine (``llamacpp`` gets ``cache_prompt: false``).
        seed: Seed of the prompt bodies.
        warn: Where warnings go.
    """

    mode = "prefill-heavy"
    prompts = 1

    def __init__(
        self,
        client: PrefillApi,
        clock: Clock,
        sampler: PhaseLabel,
        target_s: float,
        *,
        target_prefill_s: float = 10.0,
        context_tokens: int | None = None,
        engine: str = "openai-compatible",
        seed: int = 0,
        warn: Callable[[str], None] = lambda _m: None,
    ) -> None:
        self.client = client
        self.clock = clock
        self.sampler = sampler
        self.target_s = target_s
        self.target_prefill_s = target_prefill_s
        self.context_tokens = context_tokens
        self.engine = engine
        self.rng = random.Random(seed)
        self.warn = warn
        self.words = 0
        self.tokens_per_word = 1.5
        self.tokens_per_char: float | None = None  # learned from the server's counts
        self._last_prompt_chars = 1
        self.clamped = False
        self._n = 0
        # Run seconds the last prefill request took (sizes the window's last request).
        self._request_s = math.nan

    @property
    def min_window_s(self) -> float:
        """The shortest window: room for two prompts (each judged by a peer), as long as the
        last one took (with the margin the window's last prompt is sized by)."""
        last = FIT_MARGIN * self._request_s if math.isfinite(self._request_s) else 0.0
        return 2.0 * max(self.target_prefill_s, last)

    @property
    def max_prompt_tokens(self) -> int | None:
        """Largest prompt the context allows (90% of it, less generation and template room)."""
        if not self.context_tokens:
            return None
        room = CONTEXT_FRACTION * self.context_tokens - PREFILL_MAX_TOKENS
        return max(MIN_PROMPT_TOKENS, int(room - TEMPLATE_HEADROOM_TOKENS))

    def _extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"max_completion_tokens": PREFILL_MAX_TOKENS}
        if self.engine == "llamacpp":
            extra["cache_prompt"] = False
        return extra

    async def _expected_tokens(self, prompt: str, words: int) -> tuple[int, str]:
        """The prompt's tokens by the server's tokenizer (``tokenize``), else estimated from the
        rate measured so far (``estimate``: a tokenizer that timed out must not let an
        over-context prompt through)."""
        counted = await self.client.count_tokens(prompt)
        if counted is not None:
            self.tokens_per_word = counted / words
            return counted, "tokenize"
        if self.tokens_per_char is not None:
            return round(len(prompt) * self.tokens_per_char), "estimate"
        return round(words * self.tokens_per_word), "estimate"

    async def _send(
        self, words: int, cap_w: float, deadline_s: float | None = None, *, judge: bool = True
    ) -> tuple[Any, str, int]:
        """One prefill request; returns (result, error or '', words actually sent).

        With ``judge`` false, a request cut at ``deadline_s`` before its first token is no
        failure (a window's last prompt that did not fit: the window's figure stands on the
        prompts that finished)."""
        self._n += 1
        nonce = f"{cap_w:g}-{self._n}-{self.rng.random():.6f}"
        prompt = make_prompt(words, nonce, self.rng)
        expected, source = await self._expected_tokens(prompt, words)
        limit = self.max_prompt_tokens
        if limit is not None and expected > limit:
            # the word estimate overshot (by the server's tokenizer or, when it did not answer,
            # by the rate measured so far): shrink before sending an over-context prompt
            words = max(16, int(words * limit / expected))
            prompt = make_prompt(words, nonce, self.rng)
            expected, source = await self._expected_tokens(prompt, words)
        self._last_prompt_chars = len(prompt)
        result = await self.client.chat(
            prompt,
            max_tokens=PREFILL_MAX_TOKENS,
            prompt_kind="prefill",
            extra_body=self._extra(),
            deadline_s=deadline_s,
        )
        if deadline_s is not None and judge:
            result = judge_cut(result, deadline_s - result.t_start_s)
        if not result.ok:
            return result, result.error, words
        if result.chunk_tokens == 0 and result.finish_reason == "deadline":
            return result, "", words  # cut before its first token: counts for nothing
        got = result.prompt_tokens
        if got is None and result.finish_reason == "deadline":
            # cut after its first token, before the usage: the count of what was sent
            if source != "tokenize":
                msg = "the request was cut before the server reported its prompt_tokens"
                return result, msg, words
            got = expected
            result = replace(result, prompt_tokens=got)
        if got is None:
            # Strict servers send no usage in streams but do count the prompt in a whole answer;
            # the streamed request keeps its time to first token, the whole one gives the count.
            got = await self._count_whole(prompt)
            if got is None:
                msg = "the server reported no prompt_tokens: prefill TPS cannot be measured"
                return result, msg, words
            result = replace(result, prompt_tokens=got)
        tolerance = TRUNCATION_TOLERANCE if source == "tokenize" else ESTIMATE_TRUNCATION_TOLERANCE
        if got < tolerance * expected:
            return (
                result,
                (
                    f"prompt truncated by the server: sent ~{expected} tokens ({source}), it "
                    f"processed {got}; its real context is smaller than reported "
                    f"({self.context_tokens or 'unknown'}): set the server's context or pass a "
                    "smaller --target-prefill-seconds"
                ),
                words,
            )
        cached = result.cached_tokens or 0
        if cached > MAX_CACHED_FRACTION * got:
            return result, f"{cached} of {got} prompt tokens came from the server's cache", words
        return result, "", words

    async def _count_whole(self, prompt: str) -> int | None:
        """The server's prompt count of ``prompt`` from a non-streamed request (None: none)."""
        self._last_prompt_chars = len(prompt)
        result = await self.client.chat(
            prompt,
            max_tokens=PREFILL_MAX_TOKENS,
            prompt_kind="prefill",
            stream=False,
            extra_body=self._extra(),
        )
        return result.prompt_tokens if result.ok else None

    async def prepare(self, cap_w: float) -> dict[str, Any]:
        """Size the prompt so its prefill takes ``target_prefill_s`` at this (highest) cap."""
        self.sampler.label(cap_w, "calibrate")
        limit = self.max_prompt_tokens
        want_tokens = float(
            FIRST_PROMPT_TOKENS if limit is None else min(FIRST_PROMPT_TOKENS, limit)
        )
        points: list[tuple[int, float]] = []
        steps: list[CalibrationStep] = []
        backoffs = 0
        while len(steps) < MAX_CALIBRATION_STEPS:
            words = max(16, round(want_tokens / self.tokens_per_word))
            result, error, words = await self._send(words, cap_w)
            if error:
                if steps and limit is None and self.context_tokens is None:
                    # No context reported and this longer prompt failed: the largest prompt the
                    # server took is as far as it goes (recorded as clamped).
                    largest = max(steps, key=lambda st: st.prompt_tokens)
                    self.warn(
                        f"prefill calibration: a {words}-word prompt failed ({error}); the "
                        f"server names no context, so prompts stay at {largest.prompt_tokens} "
                        "tokens"
                    )
                    want_tokens = float(largest.prompt_tokens)
                    self.tokens_per_word = largest.prompt_tokens / largest.words
                    self.clamped = True
                    break
                if steps or backoffs >= MAX_FIRST_PROMPT_BACKOFFS:
                    raise PrefillCalibrationError(f"prefill calibration failed: {error}")
                # Without an answer from the server's tokenizer the first guess may simply not
                # fit its context (its tokenizer makes more tokens of a word). Go smaller.
                backoffs += 1
                self.warn(
                    f"prefill calibration: a {words}-word prompt failed ({error}); trying shorter"
                )
                want_tokens = max(MIN_PROMPT_TOKENS / 4, want_tokens / 4)
                continue
            ttft = result.t_first_token_s - result.t_start_s
            tokens = int(result.prompt_tokens)
            self.tokens_per_word = tokens / words
            self.tokens_per_char = tokens / self._last_prompt_chars
            steps.append(CalibrationStep(words, tokens, ttft))
            points.append((tokens, ttft))
            if abs(ttft - self.target_prefill_s) <= CALIBRATION_TOLERANCE * self.target_prefill_s:
                # on target: the prompt just measured is the one sent, never one resized from
                # the fit (a server that names no context took this one, not a longer one)
                want_tokens = float(tokens)
                break
            a, b = fit_ttft(points)
            want_tokens = max(MIN_PROMPT_TOKENS, tokens_for_ttft(a, b, self.target_prefill_s))
            if limit is not None and want_tokens >= limit:
                want_tokens = limit
                if self.clamped:  # measured at the limit already: it cannot get longer
                    break
                self.clamped = True
            else:
                self.clamped = False
        self.words = max(16, round(want_tokens / self.tokens_per_word))
        if self.clamped and limit is not None:
            self.warn(
                f"prefill prompt clamped to {limit} tokens (90% of the {self.context_tokens}-token "
                f"context): prefill takes less than {self.target_prefill_s:g} s"
            )
        return {
            "prompt_words": self.words,
            "prompt_tokens": round(self.words * self.tokens_per_word),
            "target_prefill_s": self.target_prefill_s,
            "context_tokens": self.context_tokens,
            "clamped_to_context": self.clamped,
            "calibration": [s.__dict__ for s in steps],
        }

    def apply(self, prepared: dict[str, Any]) -> dict[str, Any]:
        """Re-use an earlier run's prompt size (``--resume``)."""
        self.words = int(prepared.get("prompt_words") or 0)
        tokens = prepared.get("prompt_tokens")
        if self.words and tokens:
            self.tokens_per_word = float(tokens) / self.words
        self.clamped = bool(prepared.get("clamped_to_context"))
        if not self.words:
            raise PrefillCalibrationError("the resumed run has no prefill prompt size")
        return dict(prepared)

    async def measure(
        self, cap_w: float, *, metric_only: bool = False, window_s: float | None = None
    ) -> LoadRun:
        """Prefill prompts for one window: a prompt starts only while the window is open and
        the last one's duration says it ends within the margin."""
        run = LoadRun()
        length = self.target_s if window_s is None else window_s
        self.sampler.label(cap_w, "prefill")
        t0 = self.clock.now()
        end = t0 + length
        deadline = end + window_margin_s(length, self.prompts)
        failures = 0
        tokens = 0.0
        seconds = 0.0
        wall = 0.0
        while True:
            first = not run.requests
            result, error, _ = await self._send(self.words, cap_w, deadline, judge=first)
            if error and result.ok:
                run.errors.append(error)
                result = _failed(result, error)
            run.requests.append(result)
            if result.ok:
                failures = 0
                ttft = result.t_first_token_s - result.t_start_s
                self._request_s = result.t_end_s - result.t_start_s
                if ttft > 0:
                    tokens += result.prompt_tokens
                    seconds += ttft
                    wall += result.t_end_s - result.t_start_s
            else:
                failures += 1
            now = self.clock.now()
            # a little longer than the last one took: the next point's card is slower
            fits = not now + FIT_MARGIN * self._request_s > deadline  # unknown duration: try
            if failures >= MAX_CONSECUTIVE_FAILURES or now >= end or not fits:
                break
        run.windows.append(("prefill", t0, self.clock.now()))
        self.sampler.label(cap_w, "settle")
        run.tps = {
            "narr_tps": math.nan,
            "code_tps": math.nan,
            "prefill_tps": tokens / seconds if seconds > 0 else math.nan,
        }
        failed = [r for r in run.requests if not r.ok]
        share = measured_share(run.requests, run.windows, "prefill")
        if failed and share < MIN_MEASURED_SHARE:
            # the prompts that finished measured the rate, but the card idled through much of
            # the window: its draw is not the load's (measured once more at the end)
            run.errors.append(
                f"{len(failed)} of {len(run.requests)} prefill requests failed "
                f"({failed[0].error or 'failed'}); {share:.0%} of the window was measured"
            )
        run.extra["prefill_wall_tps"] = tokens / wall if wall > 0 else math.nan
        run.extra["prompt_tokens"] = round(self.words * self.tokens_per_word)
        return run

    def check(self, run: LoadRun, history: History) -> str:
        """Each prompt's time to first token against the point's other prompts (or the nearest
        points measured), let be where the same prompt of the window took as long at the
        nearest points."""
        neighbours = nearest(history.prefill_s_per_token, history.position)
        same_rank = nearest_by_rank(history.prefill_by_rank, history.position)
        return ttft_outlier_reason(run.requests, neighbours, run.windows, same_rank)

    async def keep_busy(
        self, cap_w: float, seconds: float, on_result: Callable[[Any], None] = ignore_result
    ) -> None:
        """Prefill prompts of a quarter of the measured size for ``seconds`` (or until
        cancelled).

        A prefill in flight when this is cancelled runs on to its first token: a server works a
        prompt's prefill to its end whether its client hung up or not, and meanwhile it holds the
        context the next measured prompt needs (llama.cpp refuses that prompt when they share
        it). A quarter-size prompt ends within a quarter of a measured prefill.
        """
        end = self.clock.now() + seconds
        failures = 0
        while self.clock.now() < end and failures < MAX_CONSECUTIVE_FAILURES:
            self._n += 1
            words = max(16, self.words // BUSY_PROMPT_DIVISOR)
            nonce = f"busy-{cap_w:g}-{self._n}-{self.rng.random():.6f}"
            prompt = make_prompt(words, nonce, self.rng)
            request = asyncio.ensure_future(
                self.client.chat(
                    prompt,
                    max_tokens=PREFILL_MAX_TOKENS,
                    prompt_kind="settle",
                    extra_body=self._extra(),
                    deadline_s=end,
                )
            )
            try:
                r = await asyncio.shield(request)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await request
                raise
            on_result(r)
            failures = 0 if r.ok else failures + 1


class PrefillCalibrationError(Exception):
    """Calibration could not size a valid prompt (the server truncates or fails)."""


def _failed(result: Any, error: str) -> Any:
    """A copy of a request result marked failed with ``error``."""
    return replace(result, ok=False, error=error)
