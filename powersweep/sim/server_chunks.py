"""What the simulated server streams: each request's plan and progress, its text, the chunk,
usage and timings bodies as each flavour writes them, and the response that streams them.

The reasoning: docs/simulated-rig.md, "powersweep.sim.server_chunks".
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import random
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from powersweep.sim import faults
from powersweep.sim.server_meta import TOKEN_RE

# Generated text repeats past this many tokens (building more would cost wall time).
_MAX_TEXT_TOKENS = 8192

_PROSE = (
    "the power limit sets how much energy the card may draw while tokens flow and the clocks "
    "follow it down until memory bandwidth rather than compute decides the pace of decoding so "
    "a lower cap often costs little speed yet saves many watts each answer is a stream of small "
    "pieces and every piece arrives when the model finished one more step of its work"
)
_REASONING = (
    "let me think about this first the user wants a short answer so I should check the numbers "
    "again and consider whether the question asks for detail or a summary then decide"
)
_WORDS = tuple(_PROSE.split())
_REASON_WORDS = tuple(_REASONING.split())
# The words of a diverged answer: each word once, so the word where it diverges can always be
# another.
_DIVERGED_WORDS = tuple(dict.fromkeys(_WORDS))
_DIVERGED_REASON_WORDS = tuple(dict.fromkeys(_REASON_WORDS))
# Mixed into a greedy answer's key: the stream its diverged words come from.
_DIVERGED_SALT = 0x5EED_D1CE


def count_prompt_tokens(text: str) -> int:
    """The simulator's deterministic tokenizer: how many prompt tokens ``text`` is.

    One token per run of up to four word characters (letters, digits, underscore) and one per
    other non-space character; whitespace is free. English prose comes out near four characters
    per token, like real BPE tokenizers.
    """
    return len(TOKEN_RE.findall(text))


def greedy_key(messages: list[Any], seed: Any) -> int:
    """What a greedy request's answer follows from: its messages (role and text) and its seed.

    One hash of the prompt per request (not per token), so a long prompt costs little.

    Args:
        messages: The request's ``messages``.
        seed: The request's ``seed`` (None when absent: 0).

    Returns:
        A 64-bit key.
    """
    h = hashlib.blake2b(json.dumps(0 if seed is None else seed).encode(), digest_size=8)
    for m in messages:
        role = m.get("role") if isinstance(m, dict) else None
        h.update(b"\x1e" + str(role).encode("utf-8", "surrogatepass") + b"\x1f")
        h.update(message_text(m).encode("utf-8", "surrogatepass"))
    return int.from_bytes(h.digest(), "big")


def is_greedy(body: dict[str, Any]) -> bool:
    """Whether a request asks for greedy decoding: ``temperature`` 0 (an int or a float)."""
    t = body.get("temperature")
    return isinstance(t, int | float) and not isinstance(t, bool) and t == 0


class Progress:
    """Run times of one request's phases, filled in by ``SimServer._work``; whether its decode
    started on a card past its stable offset margin (a greedy request's answer then diverges)
    and whether a serving card reset under it (its work was lost)."""

    def __init__(self) -> None:
        self.prefill_s = 0.0
        self.decode_start_s = float("nan")
        self.last_token_s = float("nan")
        self.unstable = False
        self.lost = False

    @property
    def decode_s(self) -> float:
        dt = self.last_token_s - self.decode_start_s
        return dt if dt > 0 else 0.0


@dataclass(frozen=True)
class Plan:
    """One chat request, decided before any work starts."""

    request_no: int
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    stream: bool
    include_usage: bool
    # Run time the request arrived: the prefill clock starts then, so the simulator's own
    # parsing and tokenizing (wall time, scaled up by the time scale) does not slow it down.
    arrived_s: float = math.nan
    # The injected fault this request meets (a :data:`faults.FAULT_KINDS` member), if any.
    fault: str | None = None
    # Decode this many times slower than the engine says (a fault on one prompt).
    slow_factor: float = 1.0
    # A greedy request's key (:func:`greedy_key`): its text follows from its prompt and seed.
    # None: sampled, from the server's seed and the request's number.
    greedy_key: int | None = None
    # The request asked for its tokens' logprobs (``logprobs: true``).
    logprobs: bool = False


class ChunkFormat:
    """The bodies one server writes (its flavour, model name and creation time in each).

    Args:
        flavour: The server flavour (``llamacpp``, ``vllm``...).
        model: The model name it serves.
        created: Its creation time (Unix seconds), as chunks carry it.
        seed: Seed of the generated text (per request: the request number mixed in).
    """

    def __init__(self, flavour: str, model: str, created: int, seed: int) -> None:
        self.flavour = flavour
        self.model = model
        self.created = created
        self.seed = seed

    def texts(self, plan: Plan) -> list[str]:
        """The answer's tokens: a greedy request's from its key, any other's from the server's
        seed and the request's number."""
        key = plan.greedy_key
        rng = random.Random(self.seed * 1_000_003 + plan.request_no if key is None else key)
        out: list[str] = []
        # An endless stream repeats its text: building 100k words would cost wall time that the
        # time scale turns into minutes of prefill.
        n = min(plan.completion_tokens, _MAX_TEXT_TOKENS)
        for i in range(n):
            words = _REASON_WORDS if i < plan.reasoning_tokens else _WORDS
            first = i == 0 or i == plan.reasoning_tokens
            word = rng.choice(words)
            out.append(word if first else " " + word)
        return out

    def diverged(self, plan: Plan, texts: list[str]) -> list[str]:
        """A greedy answer decoded on an unstable card: the same up to a token drawn from its
        key (in the first half of the answer, never the first token), another word there and
        words of another stream after it. Every answer of two tokens or more differs.

        Args:
            plan: The request (a greedy one; any other's text is returned as it is).
            texts: Its stable answer (:meth:`texts`).
        """
        key, n = plan.greedy_key, len(texts)
        if key is None or n < 2:
            return texts
        at = 1 + (key >> 16) % max(1, (n - 1) // 2)
        rng = random.Random(key ^ _DIVERGED_SALT)
        out = texts[:at]
        for i in range(at, n):
            words = _DIVERGED_REASON_WORDS if i < plan.reasoning_tokens else _DIVERGED_WORDS
            word = rng.choice(words)
            if i == at and word == texts[i].lstrip(" "):
                word = words[(words.index(word) + 1) % len(words)]
            out.append(word if i == plan.reasoning_tokens else " " + word)
        return out

    def delta(self, plan: Plan, i: int, text: str) -> dict[str, Any]:
        if plan.fault == "no-tokens":
            return {"text": text}
        if i >= plan.reasoning_tokens:
            return {"content": text}
        if self.flavour == "ollama":
            return {"reasoning": text}
        if self.flavour == "plain":
            return {"reasoning": text, "reasoning_content": text}
        return {"reasoning_content": text}

    def chunk(self, plan: Plan, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        payload: dict[str, Any] = {
            "id": f"chatcmpl-sim-{plan.request_no}",
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        payload.update(extra)
        return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"

    def usage(self, plan: Plan, n: int) -> dict[str, Any]:
        if plan.fault == "inflated-usage":
            n *= faults.INFLATE_FACTOR
        return {
            "prompt_tokens": plan.prompt_tokens,
            "completion_tokens": n,
            "total_tokens": plan.prompt_tokens + n,
            "prompt_tokens_details": {"cached_tokens": 0},
        }

    def timings(self, plan: Plan, n: int, prefill_s: float, decode_s: float) -> dict[str, Any]:
        return {
            "cache_n": 0,
            "prompt_n": plan.prompt_tokens,
            "prompt_ms": prefill_s * 1000,
            "prompt_per_second": plan.prompt_tokens / prefill_s if prefill_s > 0 else 0.0,
            "predicted_n": n,
            "predicted_ms": decode_s * 1000,
            "predicted_per_second": n / decode_s if decode_s > 0 else 0.0,
        }

    def whole(self, plan: Plan, texts: list[str], n: int, progress: Progress) -> dict[str, Any]:
        """The body of a non-streamed answer of ``n`` tokens."""
        reasoning = "".join(texts[: plan.reasoning_tokens])
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(texts[plan.reasoning_tokens :]),
        }
        if reasoning:
            message.update(self.delta(plan, 0, reasoning))
        payload: dict[str, Any] = {
            "id": f"chatcmpl-sim-{plan.request_no}",
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
            "usage": self.usage(plan, n),
        }
        if plan.logprobs and plan.greedy_key is not None:
            payload["choices"][0]["logprobs"] = {"content": _logprobs(plan.greedy_key, texts)}
        if self.flavour == "llamacpp":
            payload["timings"] = self.timings(plan, n, progress.prefill_s, progress.decode_s)
        return payload


def _logprobs(key: int, texts: list[str]) -> list[dict[str, Any]]:
    """A greedy answer's token logprobs, as a deterministic server returns them: each follows
    from the answer's key, the token's place and the token itself, so an answer decoded again
    the same way has the same logprobs, and a diverged one differs where its tokens do."""
    out = []
    for i, token in enumerate(texts):
        draw = random.Random(f"{key}:{i}:{token}").random()
        out.append({"token": token, "logprob": round(-2.0 * draw, 6), "top_logprobs": []})
    return out


class FailedAnswer(Exception):
    """A whole (non-streamed) answer that failed before its headers went out: answered with
    this status and body instead.

    Args:
        status: The HTTP status.
        body: The body (JSON).
    """

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


def error_event(message: str) -> bytes:
    """A server error as an event of the stream (as vLLM sends one mid-stream)."""
    err = {"code": 500, "message": message, "type": "server_error"}
    return b"data: " + json.dumps({"error": err}).encode() + b"\n\n"


class WatchedResponse(Response):
    """Streams an async byte iterator and cancels it as soon as the client disconnects.

    Starlette's own streaming response may not notice a disconnect until the next write and
    leaves closing the generator to garbage collection; the engine must hear ``work_finished``
    promptly, so the producer is cancelled the moment ``http.disconnect`` arrives.

    Args:
        body: The bytes to send.
        media_type: Their content type.
        hold_headers: Send the headers only with the first bytes (a whole answer, as servers
            send one when it is done), so a :class:`FailedAnswer` raised before them becomes
            its status and body.
    """

    def __init__(
        self, body: AsyncIterator[bytes], media_type: str, *, hold_headers: bool = False
    ) -> None:
        # Not Response.__init__: it would declare Content-Length 0 for the empty initial body.
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", media_type.encode("latin-1")),
            (b"cache-control", b"no-cache"),
        ]
        self._iter = body
        self._hold_headers = hold_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def produce() -> None:
            status, head = 200, b""
            if self._hold_headers:
                try:
                    head = await anext(self._iter, b"")
                except FailedAnswer as failed:
                    status, head = failed.status, failed.body
            start = {"type": "http.response.start", "status": status, "headers": self.raw_headers}
            await send(start)
            if head:
                await send({"type": "http.response.body", "body": head, "more_body": True})
            async for chunk in self._iter:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                # A write to a socket the client closed only fails; the loss is noticed once
                # the loop runs its callback. Yield, so a client that hung up (a cut or
                # cancelled request) stops the stream at once instead of after more writes
                # (which asyncio logs as "socket.send() raised exception.").
                await asyncio.sleep(0)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        producer = asyncio.ensure_future(produce())
        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait({producer, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (producer, watcher):
                task.cancel()
            await asyncio.gather(producer, watcher, return_exceptions=True)
            failure = None
            if producer.done() and not producer.cancelled():
                failure = producer.exception()
            aclose = getattr(self._iter, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
        # A client that went away is normal; a bug in the generator is not.
        if failure is not None and not isinstance(failure, OSError):
            raise failure


async def endless_line() -> AsyncGenerator[bytes, None]:
    """A stream line that never ends (fault ``long-line``)."""
    yield b'data: {"choices": [{"delta": {"content": "'
    while True:
        await asyncio.sleep(0.001)
        yield b"x" * 65536


def message_text(message: Any) -> str:
    """The text of a chat message (a string, or the text parts of a list)."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""
