"""One chat request's record (:class:`RequestResult`) and the state that builds it while the
request runs: chunk timestamps, the server's counts and whether to trust them, the warnings.

Private to the client (``client.ChatClient.chat`` drives a :class:`RequestRun`); the rest of the
tool reads only :class:`RequestResult`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from powersweep import runformat as rf
from powersweep.clock import Clock
from powersweep.sweep.sampling.stream_rate import fitted_span_s
from powersweep.sweep.server.sse import StreamAccumulator, one_line

NAN = math.nan
# Relative difference between chunk count and reported tokens that earns a warning.
_CHUNK_MISMATCH = 0.10
# A reported completion count above this many times the streamed text's UTF-8 bytes (plus a
# little slack for unseen special tokens) cannot be true: no token is shorter than a byte.
_USAGE_BYTES_FACTOR = 1.5
_USAGE_SLACK_TOKENS = 32
# A reported count under this share of the token-bearing chunks cannot be true either.
_USAGE_CHUNKS_FLOOR = 0.5

# Warning texts other parts of the tool recognise (the driver counts them for run.json faults).
WARN_USAGE_UNTRUSTED = rf.WARN_USAGE_UNTRUSTED
WARN_BUSY_RETRIED = rf.WARN_SERVER_BUSY
ERR_NO_COUNTABLE_TOKENS = "the server answered, but no stream carried tokens the client could count"


@dataclass(frozen=True)
class RequestResult:
    """One chat request as measured.

    Attributes:
        prompt_kind: Label the caller gave (``narr``, ``code``, ``prefill``, ``warmup``).
        stream: Stream number (0 in single-stream modes).
        t_start_s: Run seconds when the request headers were sent.
        t_first_token_s: Run seconds when the first token-bearing chunk was parsed (NaN if none).
        t_last_token_s: Run seconds when the last token-bearing chunk was parsed (NaN if none).
        t_end_s: Run seconds when the response was closed.
        prompt_tokens: Prompt tokens as the server reported them (None if it did not).
        completion_tokens: Generated tokens per ``token_source``.
        token_source: ``usage``, ``timings`` or ``chunks``.
        chunk_tokens: Token-bearing chunks counted by the client.
        token_times_s: Arrival time of each token-bearing chunk, when asked for (a compact
            ``array('d')`` from the client; chunks that arrived in one network read share
            its time).
        finish_reason: As the server said; ``deadline`` when the client stopped reading.
        ok: False when the request failed.
        error: One-line reason for a failed request, else empty.
        cached_tokens: Prompt tokens served from the server's cache.
        server_decode_tps: llama.cpp's own decode rate (``timings.predicted_per_second``).
        server_prompt_tps: llama.cpp's own prompt rate (``timings.prompt_per_second``).
        warnings: Short codes of what makes the numbers doubtful (``packed_chunks``,
            ``ignored_max_tokens``, ``no_usage``...; see ``runformat.REQUEST_WARNING_CODES``).
        max_tokens: The generation limit the request asked for (None: none sent).
    """

    prompt_kind: str
    stream: int
    t_start_s: float
    t_first_token_s: float
    t_last_token_s: float
    t_end_s: float
    prompt_tokens: int | None
    completion_tokens: int | None
    token_source: str
    chunk_tokens: int
    token_times_s: Sequence[float] | None
    finish_reason: str | None
    ok: bool
    error: str
    cached_tokens: int | None = None
    server_decode_tps: float | None = None
    server_prompt_tps: float | None = None
    warnings: tuple[str, ...] = ()
    max_tokens: int | None = None

    @property
    def decode_tps(self) -> float:
        """``(completion_tokens - 1)`` over the seconds from the first token to the last, on the
        stream's own rhythm (:func:`~powersweep.sweep.sampling.stream_rate.fitted_span_s`: a line
        through every chunk's arrival, so one late stamp hardly moves it); NaN if undefined.

        The first token is excluded because its time includes the prefill.
        """
        n = self.completion_tokens
        dt = fitted_span_s(self.token_times_s, self.t_first_token_s, self.t_last_token_s)
        if n is None or n < 2 or not math.isfinite(dt) or dt <= 0:
            return NAN
        return (n - 1) / dt


class RequestRun:
    """Mutable state of one request while it runs (driven by ``ChatClient.chat``)."""

    def __init__(self, clock: Clock, record_token_times: bool) -> None:
        self.clock = clock
        self.acc = StreamAccumulator(record_token_times=record_token_times)
        self.t_start_s = NAN
        self.t_end_s = NAN
        self.error = ""
        self.deadline_hit = False
        self.non_stream = False
        self.warnings: list[str] = []
        self.first_refusal: tuple[int, bytes] | None = None
        self.pending_drop: list[str] = []
        self.deadline_s: float | None = None
        self.busy_retries = 0
        # the connection was closed or reset while the answer streamed
        self.reset = False

    def wall_left_s(self) -> float | None:
        """Wall seconds until the deadline (None: no deadline)."""
        if self.deadline_s is None:
            return None
        return (self.deadline_s - self.clock.now()) / self.clock.scale

    async def trace(self, name: str, info: Mapping[str, Any]) -> None:
        # httpcore reports when the headers actually leave: later than chat() was called when
        # the request waited for a pooled connection.
        if name.endswith("send_request_headers.started"):
            self.t_start_s = self.clock.now()

    def fail(self, message: str) -> None:
        if not self.error:
            self.error = message

    def result(
        self,
        prompt_kind: str,
        stream_index: int,
        streamed: bool,
        limit: int | None,
        clean: Callable[[str], str],
    ) -> RequestResult:
        acc = self.acc
        totals = acc.totals()
        error = self.error or totals.error
        warnings = list(self.warnings)
        finish = totals.finish_reason
        completion: int | None = totals.completion_tokens
        source = totals.token_source
        if self.non_stream and source == "chunks":
            completion = None
            warnings.append(rf.WARN_NO_USAGE)
        ok = not error
        if self.reset and error == self.error and streamed and acc.chunk_tokens >= 2:
            # A stream reset after tokens flowed measured the rate up to the reset, as a window's
            # end cuts a request: its tokens count, and the window goes on with a new request.
            ok, error = True, ""
            if finish is None:  # else the answer was whole: only its close was cut
                finish, completion, source = rf.CUT_BY_RESET, acc.chunk_tokens, "chunks"
            warnings.append(rf.WARN_CUT_BY_RESET)
        if self.busy_retries:
            warnings.append(WARN_BUSY_RETRIED)
        if self.deadline_hit and not error and acc.chunk_tokens == 0 and acc.events >= 3:
            # Cut with events streaming but none carrying a token the client can count: not a
            # server too slow for the window, a stream it cannot read.
            ok, finish = False, "deadline"
            error = (
                f"{ERR_NO_COUNTABLE_TOKENS} (no content, reasoning or tool_calls in "
                f"{acc.events} events before the window's end)"
            )
        elif self.deadline_hit and not error and finish != rf.CUT_BY_RESET:
            # The caller set the deadline and judges a cut request (a window's end cuts requests
            # by design; a warm-up that got no token is a server too slow for the window). Cut
            # before the server's count arrived, it is cut whatever finish reason came.
            if finish is None or acc.chunk_tokens == 0 or source == "chunks":
                finish = "deadline"
        elif finish == rf.CUT_BY_RESET:
            pass
        elif ok and not self.non_stream and acc.chunk_tokens == 0:
            ok = False
            if not acc.events:
                error = "server closed the stream without sending any event"
            elif completion == 0:
                error = "the server answered, but generated no tokens"
            else:
                error = (
                    f"{ERR_NO_COUNTABLE_TOKENS} (no content, reasoning or tool_calls in "
                    f"{acc.events} events)"
                )
        elif ok and not self.non_stream and finish is None:
            if acc.done:
                # "[DONE]" after tokens but no finish reason: the server stopped the generation
                # (llama-cpp-python aborts a stream when another request arrives). Its rate
                # would be a short request's, not a finished one's.
                ok = False
                error = (
                    f"the server ended the stream after {acc.chunk_tokens} tokens without a "
                    "finish reason (the generation was cut, e.g. by another request)"
                )
            else:
                warnings.append(rf.WARN_NO_FINISH)
        untrusted = False
        if ok and source != "chunks" and completion is not None:
            # More tokens than the streamed text's bytes, or fewer than half the token-bearing
            # chunks (each is at least one token), cannot be true: count chunks instead.
            untrusted = completion > _USAGE_BYTES_FACTOR * acc.text_bytes + _USAGE_SLACK_TOKENS
            if not self.non_stream and completion < _USAGE_CHUNKS_FLOOR * acc.chunk_tokens:
                untrusted = True
            if untrusted:
                warnings.append(WARN_USAGE_UNTRUSTED)
                completion = acc.chunk_tokens if not self.non_stream else None
                source = "chunks"
        if (
            ok
            and not untrusted
            and not self.non_stream
            and not self.deadline_hit
            and finish != rf.CUT_BY_RESET
            and source == "chunks"
        ):
            # Counted chunks undercount a server that packs tokens: the count is a guess.
            warnings.append(rf.WARN_NO_USAGE)
        if acc.bad_events:
            warnings.append(rf.WARN_BAD_EVENTS)
        if (
            source != "chunks"
            and completion is not None
            and not self.non_stream
            # a stream cut before its end has only some of its chunks; one whose finish came
            # (the deadline hit as it ended) has them all
            and (not self.deadline_hit or totals.finish_reason is not None)
            and abs(acc.chunk_tokens - completion) > _CHUNK_MISMATCH * max(completion, 1)
        ):
            packed = acc.chunk_tokens < completion
            warnings.append(rf.WARN_PACKED_CHUNKS if packed else rf.WARN_EXTRA_CHUNKS)
        if limit is not None and completion is not None and completion > limit:
            warnings.append(rf.WARN_IGNORED_MAX_TOKENS)
        return RequestResult(
            prompt_kind=prompt_kind,
            stream=stream_index,
            t_start_s=self.t_start_s,
            t_first_token_s=acc.t_first_token_s if streamed else NAN,
            t_last_token_s=acc.t_last_token_s if streamed else NAN,
            t_end_s=self.t_end_s,
            prompt_tokens=totals.prompt_tokens,
            completion_tokens=completion,
            token_source=source,
            chunk_tokens=acc.chunk_tokens,
            token_times_s=acc.token_times,
            finish_reason=finish,
            ok=ok,
            error=clean(one_line(error, 300)) if error else "",
            cached_tokens=totals.cached_tokens,
            server_decode_tps=totals.server_decode_tps,
            server_prompt_tps=totals.server_prompt_tps,
            warnings=tuple(dict.fromkeys(warnings)),
            max_tokens=limit,
        )


def http_error_text(exc: httpx.HTTPError, tokens: int) -> str:
    """An httpx error in words: its exception name alone (``ReadError:`` with no detail, as a
    connection reset leaves it) says nothing to a user."""
    detail = one_line(str(exc))
    name = type(exc).__name__
    tail = f" ({name}: {detail})" if detail else f" ({name})"
    if isinstance(exc, httpx.ReadError):
        return (
            f"connection reset by the server while reading the answer, after {tokens} tokens{tail}"
        )
    if isinstance(exc, httpx.WriteError):
        return f"connection broken while sending the request{tail}"
    if isinstance(exc, httpx.DecodingError):
        return f"the answer could not be decoded{tail}"
    if isinstance(exc, httpx.NetworkError):
        return f"network error{tail}"
    return f"{name}: {detail}" if detail else f"{name} (no detail from the HTTP library)"
