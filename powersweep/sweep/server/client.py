"""The OpenAI-compatible chat client every measured request goes through.

Token counts come from the server when it reports them (``usage``, else llama.cpp ``timings``) and
from the client's own count of token-bearing chunks otherwise; timestamps are run seconds taken
from the sweep's clock as each chunk is parsed.

The reasoning: docs/architecture.md, "powersweep.sweep.server.client".
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

import httpx
import msgspec

from powersweep import runformat as rf
from powersweep.clock import Clock
from powersweep.sweep.server.busy_answers import (
    BUSY_RETRIES,
    BUSY_STATUSES,
    read_limited,
    retry_after_s,
)
from powersweep.sweep.server.discovery import ServerInfo, discover_server, strip_credentials
from powersweep.sweep.server.greedy_answer import GreedyAnswer, parse_greedy
from powersweep.sweep.server.http11 import MalformedResponse
from powersweep.sweep.server.request import (
    ERR_NO_COUNTABLE_TOKENS,
    WARN_BUSY_RETRIED,
    WARN_USAGE_UNTRUSTED,
    RequestResult,
    RequestRun,
)
from powersweep.sweep.server.request_errors import failure_text
from powersweep.sweep.server.server_queries import ServerQueries
from powersweep.sweep.server.sse import SseLineTooLong, SseReader, describe_body, one_line
from powersweep.sweep.server.transport import (
    CONNECT_TIMEOUT_S,
    PUSH_EXTENSION,
    READ_TIMEOUT_S,
    Connector,
    LeanTransport,
    lean_transport_applies,
)

__all__ = [
    "ERR_NO_COUNTABLE_TOKENS",
    "WARN_BUSY_RETRIED",
    "WARN_USAGE_UNTRUSTED",
    "ChatClient",
    "GreedyAnswer",
    "RequestResult",
    "ServerInfo",
    "discover_server",
    "strip_credentials",
]

NAN = math.nan
_encode_json = msgspec.json.Encoder().encode
# Body keys a strict server may refuse (400/422); dropped once and remembered. The greedy
# probes' cache and logprob keys are among them: a vLLM on its V0 engine refuses cache_salt.
_OPTIONAL_KEYS = (
    "chat_template_kwargs",
    "max_completion_tokens",
    "cache_prompt",
    "cache_salt",
    "logprobs",
    "top_logprobs",
)


class _Refused(Exception):
    """Internal: the server refused optional body keys; carries the HTTP error for reporting."""


class ChatClient(ServerQueries):
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
        connector: Opens the lean transport's connections (the simulated rig's in-memory
            network on virtual time; None: sockets). The timeouts are then in run seconds, as
            the virtual loop's own time is.
    """

    def __init__(
        self,
        info: ServerInfo,
        clock: Clock,
        *,
        api_key: str | None = None,
        max_connections: int = 8,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        read_timeout_s: float = READ_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
        request_budget_s: float | None = None,
        connector: Connector | None = None,
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
        if transport is None and (connector is not None or lean_transport_applies(self._url)):
            transport = LeanTransport(
                max_connections=max_connections,
                connect_timeout_s=connect_timeout_s,
                read_timeout_s=read_timeout_s,
                connector=connector,
            )
        self._http = httpx.AsyncClient(
            headers=headers, timeout=timeout, limits=limits, transport=transport
        )
        # Parsed once: httpx would parse the URL string again for every request.
        self._chat_url = httpx.URL(self._url)
        # The lean transport is called directly: AsyncClient.send's auth, redirect and cookie
        # handling (no auth flow, no redirect followed, no cookie kept here) cost as much per
        # request as the transport itself, and a sweep at 256 streams sends hundreds a second.
        self._lean = transport if isinstance(transport, LeanTransport) else None
        # What build_request would give every chat request (its headers and timeouts), worked
        # out once: building it per request cost twice the rest of the request's setup.
        proto = self._http.build_request("POST", self._chat_url, content=b"")
        self._chat_headers = [
            (name, value) for name, value in proto.headers.raw if name.lower() != b"content-length"
        ]
        self._chat_headers.append((b"Content-Type", b"application/json"))
        self._chat_timeouts = proto.extensions["timeout"]
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

    @property
    def stale_connections(self) -> int:
        """Kept connections closed because bytes no request asked for arrived on them (0: none,
        or not the lean transport)."""
        return self._lean.stale_connections if self._lean is not None else 0

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

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
        if key == "logprobs":
            body.pop("top_logprobs", None)  # llama.cpp refuses top_logprobs without logprobs
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
        run = RequestRun(self._clock, record_token_times)
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
        except Exception as exc:  # chat() must never raise: one bad answer must not end a sweep
            message, run.reset = self._failure(exc, run.acc.chunk_tokens)
            run.fail(message)
        run.t_end_s = self._clock.now()
        limit = _limit(body)
        return run.result(prompt_kind, stream_index, stream, limit, self._clean)

    async def greedy(
        self,
        prompt: str,
        *,
        max_tokens: int,
        seed: int,
        deadline_s: float | None = None,
        cache_salt: str | None = None,
        logprobs: bool = False,
    ) -> GreedyAnswer:
        """Ask for one greedy answer (temperature 0, fixed seed), not streamed. Never raises for
        server or network failures.

        The body is built as :meth:`chat` builds it (keys the server refused are left out, the
        thinking switch is sent while the server takes it), so the answers of one prompt at
        different clock offsets differ only where the card computed differently. It asks the
        server to compute the whole prompt: ``cache_prompt: false`` (llama.cpp) and, given a
        ``cache_salt``, that salt (vLLM, SGLang: blocks cached under another salt are not
        reused). Every engine takes or ignores both; a strict server that refuses them has them
        dropped, as any optional key. The prompt itself is never changed: the answers are
        compared token for token.

        Args:
            prompt: User message.
            max_tokens: Generation limit sent as ``max_tokens``.
            seed: Sampling seed sent as ``seed`` (a server that samples despite temperature 0
                then still samples the same way each time).
            deadline_s: Run-clock time by which the answer must have come; None: within the
                client's read timeout (or its request budget, if shorter).
            cache_salt: Sent as ``cache_salt`` (a new one per request: no reuse of any other's
                cached blocks); None: not sent.
            logprobs: Ask for each token's logprob (``logprobs: true, top_logprobs: 1``; 1, not
                0: llama.cpp computes none for 0).

        Returns:
            The answer, or a failed one whose ``error`` says why in one line.
        """
        run = RequestRun(self._clock, False)
        run.t_start_s = self._clock.now()
        if deadline_s is None:
            # One bound for the whole exchange, busy retries included: the read timeout alone
            # bounds only each silence.
            wall_s, bound = self._read_timeout_s, "the client's read timeout"
            if self._budget_s is not None and self._budget_s / self._clock.scale < wall_s:
                wall_s, bound = self._budget_s / self._clock.scale, "the client's request budget"
        else:
            wall_s, bound = (deadline_s - run.t_start_s) / self._clock.scale, "the deadline"
        run.deadline_s = run.t_start_s + wall_s * self._clock.scale
        extra: dict[str, Any] = {"temperature": 0, "top_p": 1, "seed": seed, "cache_prompt": False}
        if cache_salt:
            extra["cache_salt"] = cache_salt
        if logprobs:
            extra.update(logprobs=True, top_logprobs=1)
        body = self._body(prompt, max_tokens, False, extra)
        answers: list[GreedyAnswer] = []

        async def read(response: httpx.Response) -> None:
            raw = await response.aread()
            answers.append(parse_greedy(raw, response.headers.get("content-type", "")))

        scope: asyncio.Timeout | None = None
        try:
            if wall_s <= 0:
                raise TimeoutError
            async with asyncio.timeout(wall_s) as scope:
                await self._exchange(body, False, run, read)
        except Exception as exc:  # as chat(): one bad answer must not end a search
            # Builtin TimeoutError is also a socket's: only the expired scope is the bound.
            if isinstance(exc, TimeoutError) and scope is None:
                run.fail("no answer: the deadline had passed before the request was sent")
            elif isinstance(exc, TimeoutError) and scope is not None and scope.expired():
                # three digits: the deadline's wall seconds are a difference of clock reads
                shown = f"{wall_s:.3g}" if wall_s < 1000 else f"{wall_s:.0f}"
                run.fail(f"no answer within {shown} s ({bound})")
            else:
                run.fail(self._failure(exc, 0)[0])
        if run.error:
            return GreedyAnswer.failed(self._clean(run.error))
        if not answers:  # _exchange returns either after a failure or after reading
            return GreedyAnswer.failed("client error: no answer was read")
        answer = answers[0]
        return replace(answer, error=self._clean(answer.error)) if answer.error else answer

    def _failure(self, exc: Exception, tokens: int) -> tuple[str, bool]:
        """A request's exception in one line, and whether the connection was reset."""
        return failure_text(
            exc,
            tokens,
            base_url=self._info.base_url,
            connect_timeout_s=self._connect_timeout_s,
            read_timeout_s=self._read_timeout_s,
        )

    async def _exchange(
        self,
        body: dict[str, Any],
        stream: bool,
        run: RequestRun,
        read: Callable[[httpx.Response], Awaitable[None]] | None = None,
    ) -> None:
        """Send ``body`` (refused keys dropped, busy answers retried) and read the 200 answer:
        by ``read`` when given, else into ``run``'s accounting. Any other answer fails ``run``.
        """
        retried = False
        resent = False
        while True:
            request = self._chat_request(body, run)
            try:
                response = await self._send(request)
            except MalformedResponse:
                raise  # an answer came, malformed: sending it again would not mend it
            except httpx.RemoteProtocolError:
                # The server closed a kept-alive connection as the request went out (llama-server
                # does so now and then, without "Connection: close"): no answer came, so nothing
                # was generated for it. Send it once more; the pool opens a fresh connection.
                if resent:
                    raise
                resent = True
                continue
            try:
                retries = 0 if self._busy_gave_up else BUSY_RETRIES
                if response.status_code in BUSY_STATUSES and run.busy_retries < retries:
                    wait_s = retry_after_s(response, run.busy_retries)
                    left_s = run.wall_left_s()
                    if left_s is None or wait_s < left_s:
                        await read_limited(response)
                        run.busy_retries += 1
                        await asyncio.sleep(wait_s)
                        continue
                if response.status_code in (400, 422) and not retried:
                    tried = [k for k in _OPTIONAL_KEYS if k in body]
                    if tried:
                        raw = await read_limited(response)
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
                    raw = await read_limited(response)
                    status, raw = (
                        run.first_refusal
                        if run.first_refusal and response.status_code in (400, 422)
                        else (response.status_code, raw)
                    )
                    msg = describe_body(raw, response.headers.get("content-type", ""))
                    if status in BUSY_STATUSES and run.busy_retries:
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
                if read is None:
                    await self._read(response, stream, run)
                else:
                    await read(response)
            finally:
                await response.aclose()
            return

    def _chat_request(self, body: dict[str, Any], run: RequestRun) -> httpx.Request:
        """``body`` as a chat request: what ``build_request(json=body)`` builds (same headers,
        timeouts and compact JSON), for the lean transport without its per-request merging."""
        if self._lean is None:
            return self._http.build_request(
                "POST", self._chat_url, json=body, extensions={"trace": run.trace}
            )
        return httpx.Request(
            "POST",
            self._chat_url,
            headers=self._chat_headers,
            content=_encode_json(body),
            extensions={"trace": run.trace, "timeout": self._chat_timeouts},
        )

    async def _send(self, request: httpx.Request) -> httpx.Response:
        """Send a request and return its streamed response (its body not read yet)."""
        if self._lean is None:
            return await self._http.send(request, stream=True)
        response = await self._lean.handle_async_request(request)
        response.request = request
        return response

    async def _read(self, response: httpx.Response, stream: bool, run: RequestRun) -> None:
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
        acc = run.acc
        reader = SseReader(acc.add_event)
        now = self._clock.now

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


def _limit(body: Mapping[str, Any]) -> int | None:
    limits = [
        v
        for k in ("max_tokens", "max_completion_tokens")
        if isinstance(v := body.get(k), int) and not isinstance(v, bool)
    ]
    return min(limits) if limits else None
