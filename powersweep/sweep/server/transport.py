"""A lean HTTP/1.1 transport for httpx, on asyncio protocols.

Why it exists: httpx's default transport (httpcore over anyio, with h11 parsing the framing, all
pure Python) costs about 60-90 microseconds of CPU per network read; a token stream is one read
per token, so at tens of thousands of tokens per second the sweep process would need cores of
its own and compete with the server it measures. Here a read is one ``data_received`` callback
that cuts the chunked framing with ``bytes.find`` and wakes the reader, and a read timeout is
one timer per wait instead of a cancel scope per read.

It speaks plain ``http://`` only (local inference servers); the client keeps httpx's own
transport for ``https://`` and proxies. Failures raise httpx's exceptions (``ConnectError``,
``ConnectTimeout``, ``ReadTimeout``, ``RemoteProtocolError``, ``ReadError``), as httpcore's
mapping does, so callers see no difference.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import httpx

# Longest response head accepted (status line and headers).
MAX_HEAD_BYTES = 65536
# Body bytes buffered for a reader that does not keep up before the socket stops being read.
_PAUSE_BYTES = 4 << 20
# Body framing of a response.
_NONE, _LENGTH, _CHUNKED, _UNTIL_CLOSE = range(4)
# Chunked decoder states besides "bytes left in this chunk" (a positive count).
_SIZE_LINE, _DATA_END, _TRAILERS = -1, -2, -3

# Response extension: ``await response.extensions[PUSH_EXTENSION](sink)`` hands the body to
# ``sink`` read by read from the protocol callback (see :meth:`_Body.push`).
PUSH_EXTENSION = "powersweep.push"

Trace = Callable[[str, dict[str, Any]], Awaitable[None]]
Sink = Callable[[bytes], bool]


class _Connection(asyncio.Protocol):
    """One keep-alive connection: parses the response head, de-chunks the body as it arrives."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.key: tuple[str, int] = ("", 0)
        self.reusable = False
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
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
                self.data_received_body(buf)
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

    def data_received_body(self, data: bytes) -> None:
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
        self.reusable = False
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.close()


class _Pool:
    """Connections of one event loop: a slot per connection allowed, idle ones by host."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_connections: int) -> None:
        self.loop = loop
        self.slots = asyncio.Semaphore(max_connections)
        self.idle: dict[tuple[str, int], list[_Connection]] = {}

    def idle_connection(self, key: tuple[str, int]) -> _Connection | None:
        conns = self.idle.get(key)
        while conns:
            conn = conns.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    def release(self, conn: _Connection) -> None:
        if conn.reusable and conn.body_done and conn.error is None and not conn.closed:
            conn._reset()
            self.idle.setdefault(conn.key, []).append(conn)
        else:
            conn.close()
        self.slots.release()

    def close(self) -> None:
        for conns in self.idle.values():
            for conn in conns:
                with contextlib.suppress(RuntimeError):  # its loop may be closed already
                    conn.close()
        self.idle.clear()


class _Body(httpx.AsyncByteStream):
    """A response body: yields what arrived since the last step, one await per step."""

    def __init__(self, conn: _Connection, pool: _Pool) -> None:
        self._conn = conn
        self._pool = pool
        self._released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            if conn.pending:
                yield conn.take()
            elif conn.body_done:
                return
            elif conn.error is not None:
                raise conn.error
            else:
                await conn.wait()

    async def push(self, sink: Sink) -> bool:
        """Hand the body to ``sink`` as it arrives, one call per network read, from the
        protocol callback: no task switch, await or generator step per read.

        ``sink`` returns True to stop reading. Errors of the body (and of ``sink``) are raised
        here.

        Returns:
            True when the body ended, False when ``sink`` asked to stop.
        """
        conn = self._conn
        if conn.pending and sink(conn.take()):
            return False
        conn.sink = sink
        try:
            while not conn.sink_stopped and not conn.body_done:
                if conn.error is not None:
                    raise conn.error
                await conn.wait()
        finally:
            conn.sink = None
        if conn.sink_error is not None:
            raise conn.sink_error
        return not conn.sink_stopped

    async def aclose(self) -> None:
        if not self._released:
            self._released = True
            self._pool.release(self._conn)


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over asyncio protocols for plain ``http://`` servers.

    Args:
        max_connections: Connections open at once; requests beyond wait for a slot (no limit
            on the wait, as the client's pool timeout is none).
        connect_timeout_s: Wall seconds to connect when the request names none.
        read_timeout_s: Wall seconds of silence tolerated when the request names none.
    """

    def __init__(
        self, *, max_connections: int, connect_timeout_s: float, read_timeout_s: float
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._max_connections = max_connections
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._pool: _Pool | None = None

    def _current_pool(self) -> _Pool:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool.loop is not loop:
            if self._pool is not None:
                self._pool.close()
            self._pool = _Pool(loop, self._max_connections)
        return self._pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(
                f"the lean transport speaks http only, not {url.scheme!r}", request=request
            )
        timeouts = request.extensions.get("timeout") or {}
        connect_s = timeouts.get("connect", self._connect_timeout_s)
        read_s = timeouts.get("read", self._read_timeout_s)
        key = (url.host, url.port or 80)
        pool = self._current_pool()
        await pool.slots.acquire()
        conn: _Connection | None = None
        try:
            conn = pool.idle_connection(key) or await self._connect(pool, key, connect_s, request)
            conn.request = request
            conn.read_timeout_s = read_s
            conn.no_body = request.method == "HEAD"
            trace: Trace | None = request.extensions.get("trace")
            if trace is not None:
                await trace("http11.send_request_headers.started", {"request": request})
            assert conn.transport is not None
            conn.transport.write(_request_bytes(request, await request.aread()))
            conn.last_rx = pool.loop.time()
            while conn.head is None:
                if conn.error is not None:
                    raise conn.error
                if conn.closed:
                    raise httpx.RemoteProtocolError(
                        "Server disconnected without sending a response.", request=request
                    )
                await conn.wait()
        except BaseException:
            if conn is not None:
                conn.close()
            pool.slots.release()
            raise
        status, reason, headers = conn.head
        body = _Body(conn, pool)
        return httpx.Response(
            status,
            headers=headers,
            stream=body,
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": reason,
                PUSH_EXTENSION: body.push,
            },
        )

    async def _connect(
        self, pool: _Pool, key: tuple[str, int], timeout_s: float | None, request: httpx.Request
    ) -> _Connection:
        conn = _Connection(pool.loop)
        conn.key = key
        try:
            async with asyncio.timeout(timeout_s):
                await pool.loop.create_connection(lambda: conn, key[0], key[1])
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("timed out", request=request) from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        return conn

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def lean_transport_applies(url: str) -> bool:
    """True when ``url`` is plain http that no proxy of the environment covers (httpx would
    send it through the proxy; this transport does not speak to proxies)."""
    parsed = httpx.URL(url)
    if parsed.scheme != "http":
        return False
    proxies = urllib.request.getproxies()
    if not (proxies.get("http") or proxies.get("all")):
        return True
    return bool(urllib.request.proxy_bypass(parsed.host))


def _request_bytes(request: httpx.Request, body: bytes) -> bytes:
    """The request head and body as one write."""
    raw = request.headers.raw
    chunked = any(k.lower() == b"transfer-encoding" for k, _ in raw)
    parts = [request.method.encode("ascii"), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    for name, value in raw:
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"\r\n")
    if chunked:
        if body:
            parts += (f"{len(body):x}\r\n".encode(), body, b"\r\n")
        parts.append(b"0\r\n\r\n")
    else:
        parts.append(body)
    return b"".join(parts)
