"""One HTTP/1.1 client connection as an asyncio protocol, for :mod:`.transport`.

A read is one ``data_received`` callback: the response head is cut at its blank line, a chunked
body with ``bytes.find``, and the body either waits for a reader (:meth:`Http11Connection.take`
after :meth:`Http11Connection.wait`) or goes straight to a sink, read by read, from the callback
itself. Failures are httpx's exceptions, as httpcore raises them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

import httpx

# Longest response head accepted (status line and headers).
MAX_HEAD_BYTES = 65536
# Body bytes buffered for a reader that does not keep up before the socket stops being read.
_PAUSE_BYTES = 4 << 20
# Body framing of a response.
_NONE, _LENGTH, _CHUNKED, _UNTIL_CLOSE = range(4)
# Chunked decoder states besides "bytes left in this chunk" (a positive count).
_SIZE_LINE, _DATA_END, _TRAILERS = -1, -2, -3

Sink = Callable[[bytes], bool]


class Http11Connection(asyncio.Protocol):
    """One keep-alive connection: parses the response head, de-chunks the body as it arrives.

    The transport sets ``request``, ``read_timeout_s``, ``no_body`` and (to push) ``sink`` for
    each exchange and reads ``head``, ``body_done``, ``error`` and ``reusable``.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.key: tuple[str, int] = ("", 0)
        self.reusable = False
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None
        self.reset()

    def reset(self) -> None:
        """Forget the last exchange: the connection is ready for the next request."""
        self.request: httpx.Request | None = None
        self.head_buf = b""
        self.head: tuple[int, bytes, list[tuple[bytes, bytes]]] | None = None
        self.no_body = False
        self.mode = _NONE
        self.left = 0
        self.tail = b""
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.paused = False
        self.body_done = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None
        if self.timer is not None:
            self.timer.cancel()
        self.timer = None
        self.read_timeout_s: float | None = None
        self.last_rx = 0.0
        self.wait_since = 0.0
        self.sink: Sink | None = None
        self.sink_stopped = False
        self.sink_error: Exception | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.last_rx = self.loop.time()
        if self.head is None:
            self._head(data)
        elif self.mode == _CHUNKED:
            self._chunked(data)
        elif self.mode == _LENGTH:
            self._length(data)
        elif self.mode == _UNTIL_CLOSE:
            self._push(data)
        # Bytes past a complete response (or before any request) are a server's mistake:
        # the connection is not reused.
        elif data:
            self.reusable = False
        if self.sink is None:
            self._wake()
            return
        if self.pending:
            self._deliver()
        # A pushed body wakes its reader only at the end: that is the point of pushing.
        if self.body_done or self.error is not None or self.sink_stopped:
            self._wake()

    def _deliver(self) -> None:
        assert self.sink is not None
        try:
            stop = self.sink(self.take())
        except Exception as exc:  # raised in the reader's task, not in the event loop
            self.sink_error = exc
            stop = True
        if stop:
            self.sink_stopped = True
            self.sink = None

    def eof_received(self) -> bool:
        self._lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)

    def _lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if self.request is not None and not self.body_done and self.error is None:
            if self.head is None:
                self.error = (
                    httpx.ReadError(str(exc), request=self.request)
                    if exc is not None
                    else httpx.RemoteProtocolError(
                        "Server disconnected without sending a response.", request=self.request
                    )
                )
            elif self.mode == _UNTIL_CLOSE and exc is None:
                self.body_done = True
            elif exc is not None:
                self.error = httpx.ReadError(str(exc), request=self.request)
            else:
                self.error = httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body",
                    request=self.request,
                )
        self._wake()

    # -- parsing ---------------------------------------------------------------------------

    def _fail(self, message: str) -> None:
        self.error = httpx.RemoteProtocolError(message, request=self.request)
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def _head(self, data: bytes) -> None:
        buf = self.head_buf + data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    self._fail("the server sent a response head of more than 64 KiB")
                self.head_buf = buf
                return
            if end > MAX_HEAD_BYTES:
                self._fail("the server sent a response head of more than 64 KiB")
                return
            lines = buf[:end].split(b"\r\n")
            buf = buf[end + 4 :]
            version, _, rest = lines[0].partition(b" ")
            code, _, reason = rest.partition(b" ")
            if not version.startswith(b"HTTP/1.") or not code.isdigit() or len(code) != 3:
                self._fail(f"the server did not answer HTTP/1.x: {lines[0][:80]!r}")
                return
            status = int(code)
            if 100 <= status < 200 and status != 101:
                continue  # informational: the real answer follows
            headers = []
            for line in lines[1:]:
                name, sep, value = line.partition(b":")
                if sep:
                    headers.append((name.strip(), value.strip()))
            self.head_buf = b""
            self._framing(version, status, reason, headers)
            if buf and self.error is None:
                self._body(buf)
            return

    def _framing(
        self, version: bytes, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]
    ) -> None:
        self.head = (status, reason, headers)
        lowered = {name.lower(): value for name, value in headers}
        connection = lowered.get(b"connection", b"").lower()
        self.reusable = version == b"HTTP/1.1" and b"close" not in connection
        if self.no_body or status in (204, 304):
            self.mode = _NONE
            self.body_done = True
        elif b"chunked" in lowered.get(b"transfer-encoding", b"").lower():
            self.mode = _CHUNKED
            self.left = _SIZE_LINE
        elif b"content-length" in lowered:
            raw = lowered[b"content-length"]
            if not raw.isdigit():
                self._fail(f"the server sent an invalid Content-Length: {raw[:40]!r}")
                return
            self.mode = _LENGTH
            self.left = int(raw)
            self.body_done = self.left == 0
        else:
            self.mode = _UNTIL_CLOSE
            self.reusable = False

    def _body(self, data: bytes) -> None:
        if self.mode == _CHUNKED:
            self._chunked(data)
        elif self.mode == _LENGTH:
            self._length(data)
        elif self.mode == _UNTIL_CLOSE:
            self._push(data)

    def _push(self, data: bytes) -> None:
        self.pending.append(data)
        self.pending_bytes += len(data)
        if self.pending_bytes > _PAUSE_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def _length(self, data: bytes) -> None:
        if len(data) >= self.left:
            data = data[: self.left]
            self.body_done = True
        self.left -= len(data)
        if data:
            self._push(data)

    def _chunked(self, data: bytes) -> None:
        if self.tail:
            data = self.tail + data
            self.tail = b""
        pos, n = 0, len(data)
        while pos < n:
            left = self.left
            if left > 0:
                end = pos + left
                if end <= n:
                    self._push(data[pos:end] if pos or end < n else data)
                    self.left = _DATA_END
                    pos = end
                else:
                    self._push(data[pos:] if pos else data)
                    self.left = left - (n - pos)
                    return
            elif left == _DATA_END:
                if n - pos < 2:
                    self.tail = data[pos:]
                    return
                if data[pos : pos + 2] != b"\r\n":
                    self._fail("the server sent a malformed chunk (no CRLF after its data)")
                    return
                pos += 2
                self.left = _SIZE_LINE
            else:
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    self.tail = data[pos:]
                    if len(self.tail) > MAX_HEAD_BYTES:
                        self._fail("the server sent a chunk header of more than 64 KiB")
                    return
                line = data[pos:eol]
                pos = eol + 2
                if left == _TRAILERS:
                    if not line:
                        self.body_done = True
                        if pos < n:
                            self.reusable = False
                        return
                    continue
                size_text = line.split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    size = -1
                if size < 0 or not size_text:
                    self._fail(f"the server sent a malformed chunk size: {line[:40]!r}")
                    return
                self.left = size if size else _TRAILERS

    # -- waiting ---------------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Wait for more bytes (or the end, or an error), at most the read timeout.

        One timer per connection, re-armed only when it fires early: a timer per read would
        cost more than the read.
        """
        waiter = self.loop.create_future()
        self.waiter = waiter
        self.wait_since = self.loop.time()
        if self.timer is None and self.read_timeout_s is not None:
            self.timer = self.loop.call_at(self.wait_since + self.read_timeout_s, self._timeout)
        try:
            await waiter
        finally:
            self.waiter = None

    def _timeout(self) -> None:
        self.timer = None
        waiter = self.waiter
        if waiter is None or waiter.done() or self.read_timeout_s is None:
            return
        due = max(self.wait_since, self.last_rx) + self.read_timeout_s
        if self.loop.time() < due:
            self.timer = self.loop.call_at(due, self._timeout)
            return
        waiter.set_exception(httpx.ReadTimeout("timed out", request=self.request))

    def take(self) -> bytes:
        """The body bytes that arrived since the last call (empty if none)."""
        pending = self.pending
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        self.pending_bytes = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def close(self) -> None:
        """Close the socket; the connection is not reused."""
        self.reusable = False
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.close()
