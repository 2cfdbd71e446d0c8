"""Server-sent events: the one parser of a chat stream and the token accounting of its events.

The reader frames the event stream's bytes and hands each event to the stream's token
accounting. Both parts are pure (no I/O, no clock): the client feeds them bytes and timestamps.

The reasoning: docs/architecture.md, "powersweep.sweep.server.sse".
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from powersweep.runformat import as_float

# Field names of the event-stream format; any other first line marks a body that is not SSE.
SSE_FIELDS = frozenset({"data", "event", "id", "retry"})
# Delta keys whose non-empty value means the chunk carries generated tokens (content first, then
# the reasoning aliases): one list, so a server's new alias is learnt in one place.
TEXT_KEYS = ("content", "reasoning_content", "reasoning")
# How much of a non-SSE body is kept for the error message.
RAW_KEEP_BYTES = 4096
# Longest event-stream line accepted: a token chunk is well under a kilobyte, so a line this long
# is a server that never ends it (memory would grow until the process is killed).
MAX_LINE_BYTES = 1 << 20

_DATA = b"data:"
_SPACE = 0x20
_COLON = 0x3A
_LF = 0x0A
_DONE = b"[DONE]"
# len(json.dumps([])): what an empty tool_calls list adds to a token-bearing delta's bytes.
_EMPTY_LIST_BYTES = 2

# What the reader hands on: the event's type (``message`` unless the stream named one; ``error``
# for llama.cpp's ``error:`` lines), its data lines joined with ``\n``, and the read's run time.
EventSink = Callable[[str, bytes, float], None]


class SseLineTooLong(ValueError):
    """A line of the event stream grew past :data:`MAX_LINE_BYTES` without ending."""


class SseReader:
    """Incremental event-stream parser: feed each network read with the run time it arrived, and
    every event it completes goes to ``on_event`` with that time (when the client saw it).

    Lines are cut with ``bytes.find`` and a line is decoded to text only when it is not a plain
    ``data:`` line or comment. ``\\r\\n`` and lone ``\\r`` line ends are rewritten to ``\\n`` once
    a ``\\r`` has been seen (a ``\\r`` ending one read and a ``\\n`` starting the next are one line
    end). A last event without its blank line is dispatched by :meth:`close`.

    Args:
        on_event: Called with each event's type, data and run time.
        max_line_bytes: Longest line accepted (:class:`SseLineTooLong` beyond).

    Attributes:
        not_sse: The body's first line is not an event-stream line (an HTML page, a bare JSON
            object): nothing after it is read.
        raw_head: The body's first :data:`RAW_KEEP_BYTES` bytes, to describe such a body.
    """

    def __init__(self, on_event: EventSink, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._on_event = on_event
        self._max_line_bytes = max_line_bytes
        self._buf = b""
        self._data: list[bytes] = []
        self._event = "message"
        self._seen_line = False
        self._cr = False
        self._skip_lf = False
        self.not_sse = False
        self.raw_head = b""

    def feed(self, chunk: bytes, t_s: float) -> None:
        """Dispatch the events that ``chunk`` completes.

        Raises:
            SseLineTooLong: The unfinished line is longer than the limit (nothing of this
                chunk is dispatched then).
        """
        if len(self.raw_head) < RAW_KEEP_BYTES:
            self.raw_head += chunk[: RAW_KEEP_BYTES - len(self.raw_head)]
        if self._cr or b"\r" in chunk:
            chunk = self._lf_ends(chunk)
        buf = self._buf + chunk if self._buf else chunk
        end = buf.rfind(b"\n") + 1
        if len(buf) - end > self._max_line_bytes:
            raise SseLineTooLong(
                f"the server sent an event-stream line of more than {self._max_line_bytes} bytes "
                "without ending it"
            )
        self._buf = buf[end:] if end < len(buf) else b""
        self._lines(buf, end, t_s)

    def close(self, t_s: float) -> None:
        """End of body: an unterminated last line ends, and so does a last event."""
        if self.not_sse:
            return
        if self._buf:
            buf, self._buf = self._buf + b"\n", b""
            self._lines(buf, len(buf), t_s)
        self._dispatch(t_s)

    def _lf_ends(self, chunk: bytes) -> bytes:
        """``chunk`` with ``\\r\\n`` and lone ``\\r`` line ends as ``\\n``."""
        self._cr = True
        if not chunk:
            return chunk
        if self._skip_lf and chunk[0] == _LF:
            chunk = chunk[1:]
        self._skip_lf = chunk.endswith(b"\r")
        return chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")

    def _lines(self, buf: bytes, end: int, t_s: float) -> None:
        """Read the complete lines ``buf[:end]`` (each ends with ``\\n``)."""
        find = buf.find
        data = self._data
        pos = 0
        while pos < end:
            i = find(b"\n", pos)
            if i == pos:
                self._dispatch(t_s)
                data = self._data
            elif buf.startswith(_DATA, pos):
                self._seen_line = True
                data.append(buf[pos + 6 if buf[pos + 5] == _SPACE else pos + 5 : i])
            elif buf[pos] == _COLON:
                self._seen_line = True
            else:
                self._field(buf[pos:i])
                if self.not_sse:
                    return
            pos = i + 1

    def _field(self, raw: bytes) -> None:
        """Any line but a plain ``data:`` line, a comment or a blank: the general rules."""
        line = raw.decode("utf-8", errors="replace")
        if line.startswith("\ufeff") and not self._seen_line:
            line = line[1:]
        first = not self._seen_line
        self._seen_line = True
        if line.startswith(":"):
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value.encode())
        elif name == "event":
            self._event = value or "message"
        elif name == "error":
            # llama.cpp (some versions) writes "error: {json}" instead of a data line.
            self._event = "error"
            self._data.append(value.encode())
        elif name not in SSE_FIELDS and first:
            self.not_sse = True

    def _dispatch(self, t_s: float) -> None:
        data = self._data
        event, self._event = self._event, "message"
        if not data:
            return
        self._data = []
        self._on_event(event, data[0] if len(data) == 1 else b"\n".join(data), t_s)


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[msgspec.Raw] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    """The fields of a ``chat.completion.chunk`` that decide how it is accounted; the rest is
    skipped unparsed. Present ``usage``, ``timings``, ``error`` or ``detail`` (whatever their
    value) send the chunk to the general path, which knows what they mean.

    Measured on one chunk of a vLLM stream (CPython 3.11): ``json.loads`` 2.5 us, msgspec untyped
    0.57 us, typed to these structs 0.43 us, with no ``isinstance`` checks afterwards.
    """

    choices: list[_Choice] | None = None
    usage: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    timings: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    error: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    detail: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    object: str | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


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


def text_bytes(message: Any) -> int:
    """UTF-8 bytes of generated text a ``delta`` (or ``message``) carries.

    Bytes, not characters: a byte-level tokenizer may spend several tokens on one character, but
    never less than a byte on a token, so the bytes bound what a completion count can honestly be.
    """
    if not isinstance(message, dict):
        return 0
    # Servers that send one reasoning text under two aliases count once.
    reasoning = max(
        (len(v.encode()) for k in TEXT_KEYS[1:] if isinstance(v := message.get(k), str)),
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
    for key in TEXT_KEYS:
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

    Feed it every event with the run time it arrived at (:meth:`add_event`, the reader's
    callback) or a whole ``chat.completion`` (:meth:`add_completion`); read :meth:`totals` at the
    end.

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
        self.text_bytes = 0

    @property
    def token_times_s(self) -> list[float] | None:
        """:attr:`token_times` as a list (a copy)."""
        return None if self.token_times is None else self.token_times.tolist()

    def add_event(self, event_type: str, data: bytes, t_s: float) -> None:
        """Account one event of the stream that arrived at run time ``t_s``.

        The common chunk is read by the typed decoder; anything else (usage, timings, errors,
        tool calls, JSON the decoder refuses, an ``error`` event) by :meth:`add_event_text`,
        which accounts it alike.
        """
        self.events += 1
        if event_type == "error":
            self.add_event_text(event_type, data.decode("utf-8", errors="replace"), t_s)
            return
        if data == _DONE:
            self.done = True
            return
        try:
            chunk = _decode_chunk(data)
        except msgspec.MsgspecError:
            chunk = None
        if (
            chunk is None
            or chunk.usage is not msgspec.UNSET
            or chunk.timings is not msgspec.UNSET
            or chunk.error is not msgspec.UNSET
            or chunk.detail is not msgspec.UNSET
            or chunk.object == "error"
        ):
            self.add_event_text(event_type, data.decode("utf-8", errors="replace"), t_s)
            return
        bearing = False
        n_bytes = 0
        finish: str | None = None
        for choice in chunk.choices or ():
            delta = choice.delta
            if delta is not None:
                calls = delta.tool_calls
                if calls:
                    # Their bytes are counted as the general path writes them back out.
                    self.add_event_text(event_type, data.decode("utf-8", errors="replace"), t_s)
                    return
                content, alias, alias2 = delta.content, delta.reasoning_content, delta.reasoning
                if content or alias or alias2:
                    bearing = True
                    # One reasoning text under two aliases counts once (as text_bytes does).
                    n_bytes += max(
                        len(alias.encode()) if alias is not None else 0,
                        len(alias2.encode()) if alias2 is not None else 0,
                    )
                    if content is not None:
                        n_bytes += len(content.encode())
                    if calls is not None:
                        n_bytes += _EMPTY_LIST_BYTES
            if choice.finish_reason:
                finish = choice.finish_reason
        if finish is not None:
            self.finish_reason = finish
        if bearing:
            self.add_token(t_s, n_bytes)

    def add_event_text(self, event_type: str, text: str, t_s: float) -> None:
        """The general path: account the data of one event already counted in :attr:`events`,
        parsed with :mod:`json`."""
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
            server_decode_tps=as_float(timings.get("predicted_per_second"), None),
            server_prompt_tps=as_float(timings.get("prompt_per_second"), None),
            finish_reason=self.finish_reason,
            error=self.error,
        )
