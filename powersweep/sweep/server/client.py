"""The OpenAI-compatible chat client every measured request goes through.

Token counts come from the server when it reports them (``usage``, else llama.cpp ``timings``) and
from the client's own count of token-bearing chunks otherwise; timestamps are run seconds taken
from the sweep's clock as each chunk is parsed. ``chat`` never raises for a server problem: a
failed request is a :class:`RequestResult` with ``ok=False`` and a one-line ``error``.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from powersweep import runformat as rf
from powersweep.clock import Clock
from powersweep.sweep.server.discovery import ServerInfo, discover_server, strip_credentials
from powersweep.sweep.server.sse import (
    SseLineTooLong,
    StreamAccumulator,
    describe_body,
    one_line,
)
from powersweep.sweep.server.sse_fast import SseReader
from powersweep.sweep.server.transport import (
    PUSH_EXTENSION,
    LeanTransport,
    lean_transport_applies,
)

__all__ = ["ChatClient", "RequestResult", "ServerInfo", "discover_server", "strip_credentials"]

NAN = math.nan
# Body keys a strict server may refuse (400/422); dropped once and remembered.
_OPTIONAL_KEYS = ("chat_template_kwargs", "max_completion_tokens")
# How much of an unexpected body is read to explain it.
_MAX_ERROR_BODY_BYTES = 65536
# Relative difference between chunk count and reported tokens that earns a warning.
_CHUNK_MISMATCH = 0.10
# Statuses a busy or loading server answers; retried with back-off within the deadline.
_BUSY_STATUSES = (429, 503)
_BUSY_RETRIES = 6
_BUSY_BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 8.0)
_RETRY_AFTER_MAX_S = 60.0
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
        """``(completion_tokens - 1) / (t_last_token_s - t_first_token_s)``; NaN if undefined.

        The first token is excluded because its time includes the prefill.
        """
        n = self.completion_tokens
        dt = self.t_last_token_s - self.t_first_token_s
        if n is None or n < 2 or not math.isfinite(dt) or dt <= 0:
            return NAN
        return (n - 1) / dt


class _Refused(Exception):
    """Internal: the server refused optional body keys; carries the HTTP error for reporting."""


class ChatClient:
    """Streams chat completions from one server, one ``httpx.AsyncClient`` per sweep.

    Args:
        info: The server (from :func:`discover_server`).
        clock: Run clock for every timestamp.
        api_key: Sent as ``Authorization: Bearer``; never logged or reported.
        max_connections: Connection pool size; concurrent requests beyond it wait for a slot
            (their ``t_start_s`` is when they were actually sent).
        connect_timeout_s: Wall seconds to establish a connection.
        read_timeout_s: Wall seconds of silence tolerated while reading a response.
        transport: Optional httpx transport (tests inject ``httpx.MockTransport``); by default
            a plain ``http://`` server is read through :class:`LeanTransport` (a fraction of
            httpcore's CPU per read), anything else through httpx's own.
        request_budget_s: Run seconds any request may take when its caller sets no deadline
            (warm-up, probes, calibration): no request can hold a cap for longer.
    """

    def __init__(
        self,
        info: ServerInfo,
        clock: Clock,
        *,
        api_key: str | None = None,
        max_connections: int = 8,
        connect_timeout_s: float = 10,
        read_timeout_s: float = 300,
        transport: httpx.AsyncBaseTransport | None = None,
        request_budget_s: float | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._info = info
        self._clock = clock
        self._api_key = api_key or None
        self._read_timeout_s = read_timeout_s
        self._budget_s = request_budget_s
        self._busy_gave_up = False
        self._connect_timeout_s = connect_timeout_s
        self._url = info.base_url.rstrip("/") + "/v1/chat/completions"
        headers = {"Accept": "text/event-stream, application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        # Pool waits are unbounded on purpose: a request queued behind busy streams is bounded
        # by those streams' own read timeouts (and by the caller's deadline).
        timeout = httpx.Timeout(
            connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=None
        )
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        if transport is None and lean_transport_applies(self._url):
            transport = LeanTransport(
                max_connections=max_connections,
                connect_timeout_s=connect_timeout_s,
                read_timeout_s=read_timeout_s,
            )
        self._http = httpx.AsyncClient(
            headers=headers, timeout=timeout, limits=limits, transport=transport
        )
        self._refused: set[str] = set()
        self._switch_accepted: bool | None = info.accepts_thinking_switch

    @property
    def info(self) -> ServerInfo:
        """The server this client talks to."""
        return self._info

    @property
    def refused_keys(self) -> frozenset[str]:
        """Optional body keys the server refused; they are no longer sent."""
        return frozenset(self._refused)

    @property
    def accepts_thinking_switch(self) -> bool | None:
        """Whether the thinking switch works: False once the server refused
        ``chat_template_kwargs`` (or discovery knows the engine ignores it), True when discovery
        knows it is honoured or a request carrying it was accepted, None before that."""
        return self._switch_accepted

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def queued_requests(self) -> int | None:
        """Requests the server holds waiting for a slot now (None when it does not say).

        Reads llama.cpp's ``llamacpp:requests_deferred`` or vLLM's ``vllm:num_requests_waiting``
        from ``/metrics`` (llama-server needs ``--metrics``).
        """
        base = self._info.base_url.rstrip("/")
        try:
            response = await self._http.get(f"{base}/metrics", timeout=5.0)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        total: float | None = None
        for line in response.text.splitlines():
            if line.startswith("#"):
                continue
            name, _, value = line.partition(" ")
            metric = name.split("{", 1)[0]
            if metric in ("llamacpp:requests_deferred", "vllm:num_requests_waiting"):
                try:
                    total = (total or 0.0) + float(value.split()[0])
                except (ValueError, IndexError):
                    continue
        return None if total is None else int(total)

    async def count_tokens(self, text: str) -> int | None:
        """Tokens the server's tokenizer makes of ``text`` (None when it has no tokenize API).

        llama.cpp answers ``POST /tokenize {"content"}`` with ``{"tokens": [...]}``; vLLM answers
        ``POST /tokenize {"model", "prompt"}`` with ``{"count"}``.
        """
        base = self._info.base_url.rstrip("/")
        if self._info.engine == "llamacpp":
            body: dict[str, Any] = {"content": text, "add_special": False}
        elif self._info.engine == "vllm":
            body = {"model": self._info.model, "prompt": text, "add_special_tokens": False}
        else:
            return None
        try:
            response = await self._http.post(f"{base}/tokenize", json=body, timeout=60.0)
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        if isinstance(data.get("count"), int):
            return int(data["count"])
        tokens = data.get("tokens")
        return len(tokens) if isinstance(tokens, list) else None

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _body(
        self, prompt: str, max_tokens: int, stream: bool, extra_body: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._info.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "stream": stream,
            "temperature": 0.7,
            "chat_template_kwargs": {"enable_thinking": False},
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        for key, value in (extra_body or {}).items():
            # None removes a default key, e.g. {"max_tokens": None} to send only
            # max_completion_tokens.
            if value is None:
                body.pop(key, None)
            else:
                body[key] = value
        for key in self._refused:
            self._drop(body, key)
        return body

    @staticmethod
    def _drop(body: dict[str, Any], key: str) -> None:
        value = body.pop(key, None)
        # Without max_completion_tokens the request must still be bounded.
        if key == "max_completion_tokens" and value is not None and "max_tokens" not in body:
            body["max_tokens"] = value

    def _clean(self, text: str) -> str:
        if self._api_key and self._api_key in text:
            text = text.replace(self._api_key, "***")
        return text

    async def chat(
        self,
        prompt: str,
        *,
        max_tokens: int,
        prompt_kind: str,
        stream_index: int = 0,
        stream: bool = True,
        record_token_times: bool = False,
        extra_body: Mapping[str, Any] | None = None,
        deadline_s: float | None = None,
    ) -> RequestResult:
        """Send one chat request and measure it. Never raises for server or network failures.

        Args:
            prompt: User message.
            max_tokens: Generation limit sent as ``max_tokens``.
            prompt_kind: Label copied into the result.
            stream_index: Stream number copied into the result.
            stream: Stream the answer (SSE); False parses one JSON body (no token times).
            record_token_times: Keep the arrival time of every token-bearing chunk.
            extra_body: Keys merged into the request body; a None value removes a key.
            deadline_s: Run-clock time to stop reading: the stream is closed, the result is ok
                with ``finish_reason="deadline"`` and counts what arrived.

        Returns:
            The measured request.
        """
        run = _Run(self._clock, record_token_times)
        run.t_start_s = self._clock.now()
        if deadline_s is None and self._budget_s is not None:
            deadline_s = run.t_start_s + self._budget_s
        run.deadline_s = deadline_s
        body = self._body(prompt, max_tokens, stream, extra_body)
        try:
            if deadline_s is None:
                await self._exchange(body, stream, run)
            else:
                remaining_wall = (deadline_s - self._clock.now()) / self._clock.scale
                if remaining_wall <= 0:
                    raise TimeoutError
                async with asyncio.timeout(remaining_wall):
                    await self._exchange(body, stream, run)
        except TimeoutError as exc:
            # Builtin TimeoutError is also OSError's socket timeout: only ours is a deadline.
            if deadline_s is not None:
                run.deadline_hit = True
            else:
                run.fail(f"timeout: {one_line(str(exc)) or type(exc).__name__}")
        except httpx.TimeoutException as exc:
            run.fail(self._timeout_message(exc))
        except httpx.ConnectError as exc:
            run.fail(f"cannot connect to {self._info.base_url}: {one_line(str(exc)) or 'refused'}")
        except httpx.RemoteProtocolError as exc:
            got = run.acc.chunk_tokens
            run.fail(f"server closed the connection mid-response after {got} tokens: {exc}")
        except httpx.HTTPError as exc:
            run.fail(_http_error_text(exc, run.acc.chunk_tokens))
        except OSError as exc:
            run.fail(f"network error: {one_line(str(exc)) or type(exc).__name__}")
        except Exception as exc:  # chat() must never raise: one bad answer must not end a sweep
            run.fail(f"client error while reading the answer: {type(exc).__name__}: {exc}")
        run.t_end_s = self._clock.now()
        limit = _limit(body)
        return run.result(prompt_kind, stream_index, stream, limit, self._clean)

    def _timeout_message(self, exc: httpx.TimeoutException) -> str:
        if isinstance(exc, httpx.ConnectTimeout):
            return (
                f"connect timeout: {self._info.base_url} did not answer "
                f"in {self._connect_timeout_s:g} s"
            )
        if isinstance(exc, httpx.ReadTimeout):
            return f"read timeout: server sent nothing for {self._read_timeout_s:g} s"
        return f"timeout: {type(exc).__name__}"

    async def _exchange(self, body: dict[str, Any], stream: bool, run: _Run) -> None:
        retried = False
        resent = False
        while True:
            request = self._http.build_request(
                "POST", self._url, json=body, extensions={"trace": run.trace}
            )
            try:
                response = await self._http.send(request, stream=True)
            except httpx.RemoteProtocolError:
                # The server closed a kept-alive connection as the request went out (llama-server
                # does so now and then, without "Connection: close"): no answer came, so nothing
                # was generated for it. Send it once more; the pool opens a fresh connection.
                if resent:
                    raise
                resent = True
                continue
            try:
                retries = 0 if self._busy_gave_up else _BUSY_RETRIES
                if response.status_code in _BUSY_STATUSES and run.busy_retries < retries:
                    wait_s = _retry_after_s(response, run.busy_retries)
                    left_s = run.wall_left_s()
                    if left_s is None or wait_s < left_s:
                        await _read_limited(response)
                        run.busy_retries += 1
                        await asyncio.sleep(wait_s)
                        continue
                if response.status_code in (400, 422) and not retried:
                    tried = [k for k in _OPTIONAL_KEYS if k in body]
                    if tried:
                        raw = await _read_limited(response)
                        text = raw.decode("utf-8", errors="replace")
                        named = [k for k in tried if k in text]
                        drop = named or tried
                        retry_body = dict(body)
                        for key in drop:
                            self._drop(retry_body, key)
                        run.first_refusal = (response.status_code, raw)
                        run.pending_drop = drop
                        body.clear()
                        body.update(retry_body)
                        retried = True
                        continue
                if response.status_code != 200:
                    raw = await _read_limited(response)
                    status, raw = (
                        run.first_refusal
                        if run.first_refusal and response.status_code in (400, 422)
                        else (response.status_code, raw)
                    )
                    msg = describe_body(raw, response.headers.get("content-type", ""))
                    if status in _BUSY_STATUSES and run.busy_retries:
                        msg += f" (still busy after {run.busy_retries} retries)"
                        # A server that stays busy through one request's retries is not
                        # retried again until it answers: no minutes of waiting per request.
                        self._busy_gave_up = True
                    run.fail(f"HTTP {status}: {msg}")
                    return
                self._busy_gave_up = False
                if run.pending_drop:
                    # The retry without those keys was accepted: they were the problem.
                    self._refused.update(run.pending_drop)
                    if "chat_template_kwargs" in run.pending_drop:
                        self._switch_accepted = False
                elif "chat_template_kwargs" in body and self._switch_accepted is None:
                    self._switch_accepted = True
                await self._read(response, stream, run)
            finally:
                await response.aclose()
            return

    async def _read(self, response: httpx.Response, stream: bool, run: _Run) -> None:
        ctype = response.headers.get("content-type", "").lower()
        if not stream or "application/json" in ctype:
            raw = await response.aread()
            try:
                payload = json.loads(raw)
            except ValueError:
                run.fail(f"server answered {describe_body(raw, ctype)} instead of JSON")
                return
            run.acc.add_completion(payload)
            if stream and not run.acc.error:
                run.warnings.append(rf.WARN_NOT_STREAMED)
            run.non_stream = True
            return
        reader = SseReader(run.acc)
        now = self._clock.now
        acc = run.acc

        def take(data: bytes) -> bool:
            # One clock read per network read: its tokens arrived together.
            reader.feed(data, now())
            # Finish reason and usage in: a server that holds the socket without "[DONE]"
            # must not keep the request (and the card's cap) waiting.
            return reader.not_sse or bool(acc.error) or acc.finished

        encoded = response.headers.get("content-encoding", "identity").lower() != "identity"
        # A compressed body needs httpx's decoder, and a body read already (a test
        # transport's) is only there as bytes; else raw reads, pushed where the transport can.
        plain = not encoded and not response.is_stream_consumed
        push = response.extensions.get(PUSH_EXTENSION) if plain else None
        try:
            if push is not None:
                ended = await push(take)
            else:
                ended = True
                async for data in response.aiter_raw() if plain else response.aiter_bytes():
                    if take(data):
                        ended = False
                        break
        except SseLineTooLong as exc:
            run.fail(str(exc))
            return
        if ended:
            reader.close(now())
        if reader.not_sse:
            what = describe_body(reader.raw_head, ctype)
            run.fail(f"server answered {what} instead of an event stream")


def _retry_after_s(response: httpx.Response, attempt: int) -> float:
    """Wall seconds to wait before retrying a busy answer: ``Retry-After`` when it is a number of
    seconds, else an exponential back-off."""
    header = response.headers.get("retry-after", "").strip()
    try:
        value = float(header)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and value >= 0:
        return min(value, _RETRY_AFTER_MAX_S)
    return _BUSY_BACKOFF_S[min(attempt, len(_BUSY_BACKOFF_S) - 1)]


def _limit(body: Mapping[str, Any]) -> int | None:
    limits = [
        v
        for k in ("max_tokens", "max_completion_tokens")
        if isinstance(v := body.get(k), int) and not isinstance(v, bool)
    ]
    return min(limits) if limits else None


async def _read_limited(response: httpx.Response) -> bytes:
    out = b""
    async for data in response.aiter_bytes():
        out += data
        if len(out) >= _MAX_ERROR_BODY_BYTES:
            break
    return out


class _Run:
    """Mutable state of one request while it runs (private to :meth:`ChatClient.chat`)."""

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
        elif self.deadline_hit and not error:
            # The caller set the deadline and judges a cut request (a window's end cuts requests
            # by design; a warm-up that got no token is a server too slow for the window). Cut
            # before the server's count arrived, it is cut whatever finish reason came.
            if finish is None or acc.chunk_tokens == 0 or source == "chunks":
                finish = "deadline"
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


def _http_error_text(exc: httpx.HTTPError, tokens: int) -> str:
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
