"""Server-sent events: an incremental parser and the token accounting of one chat stream.

Both parts are pure (no I/O, no clock): the client feeds them bytes and timestamps.

The reasoning: docs/architecture.md, "powersweep.sweep.server.sse".
"""

from __future__ import annotations

import json
import math
from array import array
from dataclasses import dataclass
from typing import Any

# Field names of the event-stream format; any other first line marks a body that is not SSE.
SSE_FIELDS = frozenset({"data", "event", "id", "retry"})
# Delta keys whose non-empty value means the chunk carries generated tokens.
_TEXT_KEYS = ("content", "reasoning_content", "reasoning")
# How much of a non-SSE body is kept for the error message.
RAW_KEEP_BYTES = 4096
# Longest event-stream line accepted: a token chunk is well under a kilobyte, so a line this long
# is a server that never ends it (memory would grow until the process is killed).
MAX_LINE_BYTES = 1 << 20


class SseLineTooLong(ValueError):
    """A line of the event stream grew past :data:`MAX_LINE_BYTES` without ending."""


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event.

    Attributes:
        event: Event type (``message`` unless the stream named one; ``error`` for llama.cpp's
            ``error:`` lines).
        data: The data lines joined with ``\\n``.
        id: Last event id seen, or None.
    """

    event: str
    data: str
    id: str | None = None


class SseParser:
    """Incremental event-stream parser: feed bytes as they arrive, get whole events back.

    Events split across reads are buffered; a trailing ``\\r`` waits for the next read in case a
    ``\\n`` follows.
    """

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._max_line_bytes = max_line_bytes
        self._buf = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._seen_line = False
        self._events = 0
        self.not_sse = False
        self.raw_head = b""

    @property
    def events_dispatched(self) -> int:
        """Events returned so far."""
        return self._events

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Parse ``chunk`` and return the events it completed (possibly none).

        Raises:
            SseLineTooLong: The unfinished line is longer than the limit.
        """
        if len(self.raw_head) < RAW_KEEP_BYTES:
            self.raw_head += chunk[: RAW_KEEP_BYTES - len(self.raw_head)]
        self._buf += chunk
        out: list[SseEvent] = []
        while True:
            line, rest = split_line(self._buf, final=False)
            if line is None:
                break
            self._buf = rest
            ev = self._line(line)
            if ev is not None:
                out.append(ev)
        if len(self._buf) > self._max_line_bytes:
            raise SseLineTooLong(
                f"the server sent an event-stream line of more than {self._max_line_bytes} bytes "
                "without ending it"
            )
        return out

    def close(self) -> list[SseEvent]:
        """End of body: parse what is left and dispatch a final unterminated event."""
        out: list[SseEvent] = []
        while self._buf:
            line, rest = split_line(self._buf, final=True)
            assert line is not None
            self._buf = rest
            ev = self._line(line)
            if ev is not None:
                out.append(ev)
        ev = self._dispatch()
        if ev is not None:
            out.append(ev)
        return out

    def _line(self, raw: bytes) -> SseEvent | None:
        line = raw.decode("utf-8", errors="replace")
        if line == "":
            return self._dispatch()
        if line.startswith("\ufeff") and not self._seen_line:
            line = line[1:]
        first = not self._seen_line
        self._seen_line = True
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            self._id = value if "\0" not in value else self._id
        elif name == "error":
            # llama.cpp (some versions) writes "error: {json}" instead of a data line.
            self._event = "error"
            self._data.append(value)
        elif name not in SSE_FIELDS and first and self._events == 0:
            self.not_sse = True
        return None

    def _dispatch(self) -> SseEvent | None:
        if not self._data:
            self._event = ""
            return None
        ev = SseEvent(event=self._event or "message", data="\n".join(self._data), id=self._id)
        self._data = []
        self._event = ""
        self._events += 1
        return ev


def split_line(buf: bytes, *, final: bool) -> tuple[bytes | None, bytes]:
    """Cut the first line off ``buf``; (None, buf) when no complete line is there yet."""
    i_n = buf.find(b"\n")
    i_r = buf.find(b"\r")
    if i_r == -1 and i_n == -1:
        return (buf, b"") if final else (None, buf)
    if i_r == -1 or (i_n != -1 and i_n < i_r):
        return buf[:i_n], buf[i_n + 1 :]
    # A lone \r ends a line, but \r\n split across reads must not count twice.
    if i_r + 1 < len(buf):
        skip = 2 if buf[i_r + 1 : i_r + 2] == b"\n" else 1
        return buf[:i_r], buf[i_r + skip :]
    if final:
        return buf[:i_r], b""
    return None, buf


def error_message(payload: Any) -> str | None:
    """The message of an OpenAI/llama.cpp/FastAPI style error object, or None if not an error.

    Accepts ``{"error": {"message": ...}}``, ``{"error": "text"}``, ``{"detail": ...}`` and
    ``{"message": ..., "object": "error"}`` (vLLM).
    """
    if not isinstance(payload, dict):
        return None
    err = payload.get("error")
    if isinstance(err, dict):
        msg = err.get("message") or err.get("msg") or json.dumps(err)[:300]
        typ = err.get("type")
        return (
            f"{msg} ({typ})" if isinstance(typ, str) and typ and typ not in str(msg) else str(msg)
        )
    if isinstance(err, str) and err:
        return err
    if payload.get("object") == "error" and "message" in payload:
        return str(payload["message"])
    detail = payload.get("detail")
    if detail is not None:
        if isinstance(detail, list):
            parts = []
            for d in detail[:3]:
                if isinstance(d, dict):
                    loc = ".".join(str(x) for x in d.get("loc", []) if x != "body")
                    parts.append(f"{loc}: {d.get('msg', '')}".strip(": "))
                else:
                    parts.append(str(d))
            return "; ".join(parts)
        return str(detail)
    return None


def one_line(text: str, limit: int = 200) -> str:
    """Collapse whitespace and cut ``text`` to ``limit`` characters for an error message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def describe_body(body: bytes, content_type: str = "") -> str:
    """A one-line description of a body that is not what was expected (HTML, JSON, text)."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if payload is not None:
        msg = error_message(payload)
        if msg is not None:
            return one_line(msg)
        return "JSON " + one_line(text, 120)
    low = text[:2000].lower()
    if "html" in content_type.lower() or low.startswith("<!doctype") or "<html" in low:
        start = low.find("<title>")
        end = low.find("</title>")
        title = text[start + 7 : end] if 0 <= start < end else ""
        return "an HTML page" + (f" ({one_line(title, 80)})" if title.strip() else "")
    if not text:
        return "an empty body"
    return "text " + repr(one_line(text, 80))


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value == int(value):
        return int(value)
    return None


def _finite(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def text_bytes(message: Any) -> int:
    """UTF-8 bytes of generated text a ``delta`` (or ``message``) carries.

    Bytes, not characters: a byte-level tokenizer may spend several tokens on one character, but
    never less than a byte on a token, so the bytes bound what a completion count can honestly be.
    """
    if not isinstance(message, dict):
        return 0
    # Servers that send one reasoning text under two aliases count once.
    reasoning = max(
        (len(v.encode()) for k in _TEXT_KEYS[1:] if isinstance(v := message.get(k), str)),
        default=0,
    )
    content = message.get("content")
    n = reasoning + (len(content.encode()) if isinstance(content, str) else 0)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        n += len(json.dumps(calls).encode())
    return n


def is_token_bearing(message: Any) -> bool:
    """True when a ``delta`` (or ``message``) carries generated tokens.

    Content, ``reasoning_content``, ``reasoning`` and ``tool_calls`` all count; a chunk that
    carries two reasoning aliases at once is still one chunk.
    """
    if not isinstance(message, dict):
        return False
    for key in _TEXT_KEYS:
        value = message.get(key)
        if isinstance(value, str) and value:
            return True
    calls = message.get("tool_calls")
    return isinstance(calls, list) and len(calls) > 0


@dataclass(frozen=True)
class StreamTotals:
    """What one chat response said, after accounting.

    Attributes:
        prompt_tokens: From usage, else llama.cpp timings (``prompt_n + cache_n``).
        completion_tokens: From usage, else timings ``predicted_n``, else the chunk count.
        token_source: ``usage``, ``timings`` or ``chunks``.
        chunk_tokens: Token-bearing chunks seen.
        cached_tokens: ``usage.prompt_tokens_details.cached_tokens`` or ``timings.cache_n``.
        server_decode_tps: llama.cpp ``timings.predicted_per_second``.
        server_prompt_tps: llama.cpp ``timings.prompt_per_second``.
        finish_reason: The last finish reason the server sent.
        error: Error message found in the body, empty if none.
    """

    prompt_tokens: int | None
    completion_tokens: int | None
    token_source: str
    chunk_tokens: int
    cached_tokens: int | None
    server_decode_tps: float | None
    server_prompt_tps: float | None
    finish_reason: str | None
    error: str


class StreamAccumulator:
    """Token accounting over the JSON payloads of one response (streamed or not).

    Feed it every event with the run time it was parsed at; read :meth:`totals` at the end.
    :func:`powersweep.sweep.server.sse_fast.account_data` is the fast way in for a stream's
    data; it gives the same accounting as :meth:`add_event`.

    Attributes:
        token_times: Arrival time of each token-bearing chunk (run seconds, 8 bytes each), when
            asked for.
    """

    def __init__(self, *, record_token_times: bool = False) -> None:
        self.chunk_tokens = 0
        self.t_first_token_s = math.nan
        self.t_last_token_s = math.nan
        self.token_times: array[float] | None = array("d") if record_token_times else None
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.error = ""
        self.done = False
        self.bad_events = 0
        self.events = 0
        self.stream_ignored = False
        self.text_bytes = 0

    @property
    def token_times_s(self) -> list[float] | None:
        """:attr:`token_times` as a list (a copy)."""
        return None if self.token_times is None else self.token_times.tolist()

    def add_event(self, event: SseEvent, t_s: float) -> None:
        """Account one SSE event parsed at run time ``t_s``."""
        self.events += 1
        self.add_event_text(event.event, event.data, t_s)

    def add_event_text(self, event_type: str, text: str, t_s: float) -> None:
        """Account the data of one event already counted in :attr:`events`."""
        data = text.strip()
        if data == "[DONE]":
            self.done = True
            return
        try:
            payload = json.loads(data)
        except ValueError:
            if event_type == "error":
                self.error = self.error or one_line(data) or "server sent an error event"
            else:
                self.bad_events += 1
            return
        if event_type == "error":
            self.error = self.error or error_message(payload) or one_line(data)
            return
        self.add_chunk(payload, t_s)

    def add_chunk(self, payload: Any, t_s: float) -> None:
        """Account one ``chat.completion.chunk`` object (or an error object)."""
        if not isinstance(payload, dict):
            self.bad_events += 1
            return
        msg = error_message(payload)
        if msg is not None and "choices" not in payload:
            self.error = self.error or one_line(msg)
            return
        self._meta(payload)
        choices = payload.get("choices")
        bearing = False
        n_bytes = 0
        if isinstance(choices, list):
            for choice in choices:
                if not isinstance(choice, dict):
                    continue
                if is_token_bearing(choice.get("delta")):
                    bearing = True
                    n_bytes += text_bytes(choice.get("delta"))
                reason = choice.get("finish_reason")
                if isinstance(reason, str) and reason:
                    self.finish_reason = reason
        if bearing:
            self.add_token(t_s, n_bytes)

    def add_token(self, t_s: float, n_bytes: int) -> None:
        """Account one token-bearing chunk of ``n_bytes`` text bytes that arrived at ``t_s``."""
        self.text_bytes += n_bytes
        self.chunk_tokens += 1
        if math.isnan(self.t_first_token_s):
            self.t_first_token_s = t_s
        self.t_last_token_s = t_s
        if self.token_times is not None:
            self.token_times.append(t_s)

    @property
    def finished(self) -> bool:
        """True once the finish reason and the usage have both arrived: nothing more is needed,
        whether or not ``[DONE]`` follows."""
        return self.done or (self.finish_reason is not None and self.usage is not None)

    def add_completion(self, payload: Any) -> None:
        """Account a non-streamed ``chat.completion`` body."""
        if not isinstance(payload, dict):
            self.error = "server answered JSON that is not a chat completion"
            return
        msg = error_message(payload)
        if msg is not None and "choices" not in payload:
            self.error = one_line(msg)
            return
        self._meta(payload)
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices:
            self.error = "server answered a chat completion without choices"
            return
        first = choices[0]
        if isinstance(first, dict):
            self.text_bytes += text_bytes(first.get("message"))
            reason = first.get("finish_reason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason

    def _meta(self, payload: dict[str, Any]) -> None:
        usage = payload.get("usage")
        if isinstance(usage, dict) and usage:
            self.usage = usage
        timings = payload.get("timings")
        if isinstance(timings, dict) and timings:
            self.timings = timings

    def totals(self) -> StreamTotals:
        """The accounting so far."""
        usage = self.usage or {}
        timings = self.timings or {}
        completion = _positive_int(usage.get("completion_tokens"))
        prompt = _positive_int(usage.get("prompt_tokens"))
        if completion is not None:
            source = "usage"
        else:
            completion = _positive_int(timings.get("predicted_n"))
            source = "timings" if completion is not None else "chunks"
            if completion is None:
                completion = self.chunk_tokens
        if prompt is None:
            prompt_n = _positive_int(timings.get("prompt_n"))
            if prompt_n is not None:
                prompt = prompt_n + (_positive_int(timings.get("cache_n")) or 0)
        details = usage.get("prompt_tokens_details")
        cached = _positive_int(details.get("cached_tokens")) if isinstance(details, dict) else None
        if cached is None:
            cached = _positive_int(timings.get("cache_n"))
        return StreamTotals(
            prompt_tokens=prompt,
            completion_tokens=completion,
            token_source=source,
            chunk_tokens=self.chunk_tokens,
            cached_tokens=cached,
            server_decode_tps=_finite(timings.get("predicted_per_second")),
            server_prompt_tps=_finite(timings.get("prompt_per_second")),
            finish_reason=self.finish_reason,
            error=self.error,
        )
