"""One greedy (temperature 0, fixed seed) chat answer, as the undervolt search compares them.

The reasoning: docs/architecture.md, "powersweep.sweep.server.greedy_answer".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import msgspec

from powersweep.sweep.server.sse import TEXT_KEYS, StreamAccumulator, describe_body, one_line

_CONTENT_KEY = TEXT_KEYS[0]
_REASONING_KEYS = TEXT_KEYS[1:]
# Error texts are one line of at most this many characters, as a measured request's are.
_ERROR_CHARS = 300


class _TokenLogprob(msgspec.Struct):
    logprob: float


class _ChoiceLogprobs(msgspec.Struct):
    content: list[_TokenLogprob] | None = None


@dataclass(frozen=True)
class GreedyAnswer:
    """A greedy answer, or why there is none.

    Attributes:
        text: The message's reasoning text followed by its content (the order the model
            generated them in); empty when the request failed.
        completion_tokens: Generated tokens as the server reported them (``usage``, else
            llama.cpp ``timings``); None when it did not say.
        finish_reason: As the server said (``stop``, ``length``...), None if it did not.
        error: One-line reason the answer is missing or unusable; empty when it is ok.
        prompt_tokens: The prompt's tokens as the server reported them (chat template
            included); None when it did not say.
        cached_tokens: Prompt tokens the server took from its cache instead of computing them
            (``usage.prompt_tokens_details.cached_tokens``, else llama.cpp ``timings.cache_n``);
            None when it reports neither.
        logprobs: Each generated token's logprob, where the server returned them.
    """

    text: str
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str = ""
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    logprobs: tuple[float, ...] | None = None

    @property
    def ok(self) -> bool:
        """True when the server gave an answer whose text can be compared."""
        return not self.error

    @classmethod
    def failed(cls, error: str) -> GreedyAnswer:
        """A missing answer: ``error`` (collapsed to one line) says why.

        Args:
            error: The reason; must not be empty (an empty reason would read as ok).

        Returns:
            The failed answer.
        """
        return cls(text="", error=one_line(error, _ERROR_CHARS) or "no answer")


def parse_greedy(raw: bytes, content_type: str = "") -> GreedyAnswer:
    """Read a non-streamed ``chat.completion`` body. Never raises.

    Args:
        raw: The response body (HTTP status 200).
        content_type: The response's ``Content-Type``, to describe a body that is not JSON.

    Returns:
        The answer; failed (with the reason) when the body is not JSON, carries an error object,
        or is not a chat completion with a message.
    """
    try:
        payload = json.loads(raw)
    except ValueError:  # UnicodeDecodeError included
        return GreedyAnswer.failed(
            f"server answered {describe_body(raw, content_type)} instead of JSON"
        )
    acc = StreamAccumulator()
    acc.add_completion(payload)
    totals = acc.totals()
    if totals.error:
        return GreedyAnswer.failed(totals.error)
    # add_completion checked that the choices are a non-empty list.
    first = payload["choices"][0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        return GreedyAnswer.failed("server answered a chat completion without a message")
    text = _message_text(message)
    if text is None:
        return GreedyAnswer.failed(
            "server answered a chat completion whose message has no content or reasoning text"
        )
    # The accumulator falls back on a count of stream chunks, and a whole answer has none.
    counted = totals.token_source != "chunks"
    return GreedyAnswer(
        text=text,
        completion_tokens=totals.completion_tokens if counted else None,
        finish_reason=totals.finish_reason,
        prompt_tokens=totals.prompt_tokens,
        cached_tokens=totals.cached_tokens,
        logprobs=_logprobs(first.get("logprobs")),
    )


def _logprobs(value: Any) -> tuple[float, ...] | None:
    """The tokens' logprobs of a choice's ``logprobs`` object; None where it holds none (not
    asked for, not supported, or not in the OpenAI shape)."""
    if not isinstance(value, dict):
        return None
    try:
        content = msgspec.convert(value, _ChoiceLogprobs).content
    except msgspec.ValidationError:
        return None
    return tuple(t.logprob for t in content) if content else None


def _message_text(message: dict[str, Any]) -> str | None:
    """Reasoning then content; None when the message has text under none of the keys."""
    reasonings = [v for k in _REASONING_KEYS if isinstance(v := message.get(k), str)]
    content = message.get(_CONTENT_KEY)
    if not reasonings and not isinstance(content, str):
        return None
    # A server that sends one reasoning text under two aliases (both at once) means it once;
    # the longest is kept, as the accumulator counts that one's bytes.
    reasoning = max(reasonings, key=len, default="")
    return reasoning + (content if isinstance(content, str) else "")
