"""The fast way from a stream's bytes to its token accounting.

The common chunk is framed in bytes and decoded by a typed msgspec decoder; anything out of the
ordinary goes through :mod:`powersweep.sweep.server.sse`, so the accounting is always the same.

The reasoning: docs/architecture.md, "powersweep.sweep.server.sse_fast".
"""

from __future__ import annotations

import msgspec

from powersweep.sweep.server.sse import (
    MAX_LINE_BYTES,
    RAW_KEEP_BYTES,
    SSE_FIELDS,
    SseLineTooLong,
    StreamAccumulator,
    split_line,
)

_DATA = b"data:"
_SPACE = 0x20
_COLON = 0x3A
_DONE = b"[DONE]"
# len(json.dumps([])): what an empty tool_calls list adds to a token-bearing delta's bytes.
_EMPTY_LIST_BYTES = 2


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[msgspec.Raw] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    """The fields of a chunk that decide how it is accounted; the rest is skipped.

    Present ``usage``, ``timings``, ``error`` or ``detail`` (whatever their value) send the
    chunk to the general path, which knows what they mean.
    """

    choices: list[_Choice] | None = None
    usage: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    timings: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    error: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    detail: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    object: str | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


def account_data(acc: StreamAccumulator, data: bytes, t_s: float) -> None:
    """Account the data of one (non-error) event that arrived at run time ``t_s``.

    The caller has counted the event in ``acc.events``.
    """
    if data == _DONE:
        acc.done = True
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
        acc.add_event_text("message", data.decode("utf-8", errors="replace"), t_s)
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
                acc.add_event_text("message", data.decode("utf-8", errors="replace"), t_s)
                return
            content, alias, alias2 = delta.content, delta.reasoning_content, delta.reasoning
            if content or alias or alias2:
                bearing = True
                # One reasoning text under two aliases counts once (as sse.text_bytes does).
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
        acc.finish_reason = finish
    if bearing:
        acc.add_token(t_s, n_bytes)


class SseReader:
    """Incremental event-stream framing straight into a :class:`StreamAccumulator`.

    Feed it each network read with the run time it arrived: every token in one read shares that
    time (when the client saw it). It follows the same rules as
    :class:`~powersweep.sweep.server.sse.SseParser`.

    Args:
        acc: Where the events are accounted.
        max_line_bytes: Longest line accepted (:class:`SseLineTooLong` beyond).
    """

    def __init__(self, acc: StreamAccumulator, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._acc = acc
        self._max_line_bytes = max_line_bytes
        self._buf = b""
        self._data: list[bytes] = []
        self._event = ""
        self._seen_line = False
        self._events = 0
        # Once a \r is seen, lines are cut by the general rules (\r\n, lone \r).
        self._cr = False
        self.not_sse = False
        self.raw_head = b""

    def feed(self, chunk: bytes, t_s: float) -> None:
        """Account the events that ``chunk`` completes.

        Stops at a first line that shows the body is not an event stream (:attr:`not_sse`).

        Raises:
            SseLineTooLong: The unfinished line is longer than the limit (nothing of this
                chunk is accounted then).
        """
        if len(self.raw_head) < RAW_KEEP_BYTES:
            self.raw_head += chunk[: RAW_KEEP_BYTES - len(self.raw_head)]
        buf = self._buf + chunk if self._buf else chunk
        if self._cr or b"\r" in chunk:
            self._cr = True
            self._lines_cr(buf, final=False, t_s=t_s)
            return
        end = buf.rfind(b"\n") + 1
        if len(buf) - end > self._max_line_bytes:
            raise _too_long(self._max_line_bytes)
        self._buf = buf[end:] if end < len(buf) else b""
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
                start = pos + 6 if buf[pos + 5] == _SPACE else pos + 5
                data.append(buf[start:i])
            elif buf[pos] == _COLON:
                self._seen_line = True
            else:
                self._field(buf[pos:i], t_s)
                data = self._data
                if self.not_sse:
                    return
            pos = i + 1

    def close(self, t_s: float) -> None:
        """End of body: account what is left, and a last event without its blank line."""
        buf, self._buf = self._buf, b""
        self._lines_cr(buf, final=True, t_s=t_s)
        self._dispatch(t_s)

    def _lines_cr(self, buf: bytes, *, final: bool, t_s: float) -> None:
        lines = []
        while buf:
            line, rest = split_line(buf, final=final)
            if line is None:
                break
            lines.append(line)
            buf = rest
        if len(buf) > self._max_line_bytes:
            raise _too_long(self._max_line_bytes)
        self._buf = buf
        for line in lines:
            if not line:
                self._dispatch(t_s)
            elif line.startswith(_DATA):
                self._seen_line = True
                self._data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line[0] == _COLON:
                self._seen_line = True
            else:
                self._field(line, t_s)
                if self.not_sse:
                    return

    def _field(self, raw: bytes, t_s: float) -> None:
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
            self._event = value
        elif name == "error":
            # llama.cpp (some versions) writes "error: {json}" instead of a data line.
            self._event = "error"
            self._data.append(value.encode())
        elif name not in SSE_FIELDS and first and self._events == 0:
            self.not_sse = True

    def _dispatch(self, t_s: float) -> None:
        data = self._data
        event, self._event = self._event, ""
        if not data:
            return
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        self._data = []
        self._events += 1
        acc = self._acc
        acc.events += 1
        if event == "error":
            acc.add_event_text("error", payload.decode("utf-8", errors="replace"), t_s)
        else:
            account_data(acc, payload, t_s)


def _too_long(limit: int) -> SseLineTooLong:
    return SseLineTooLong(
        f"the server sent an event-stream line of more than {limit} bytes without ending it"
    )
