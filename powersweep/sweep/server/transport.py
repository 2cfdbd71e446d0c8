"""A lean HTTP/1.1 transport for httpx, on asyncio protocols.

httpx's default transport costs about 60-90 microseconds of CPU per network read, one read per
token: at tens of thousands of tokens per second the sweep would compete with the server it
measures.

The reasoning: docs/architecture.md, "powersweep.sweep.server.transport".
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from powersweep.sweep.server.http11 import Http11Connection, Sink

# Response extension: ``await response.extensions[PUSH_EXTENSION](sink)`` hands the body to
# ``sink`` read by read from the protocol callback (see :meth:`_Body.push`).
PUSH_EXTENSION = "powersweep.push"

Trace = Callable[[str, dict[str, Any]], Awaitable[None]]
# A client's bounds when its caller names none: wall seconds to connect, and of silence while a
# response is read (run seconds on the simulated rig's virtual loop).
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0
# Loop seconds a kept connection rests after its response ended before a request is written on
# it: a server's unrequested second response must arrive (and close the connection) before a
# request could take it for its own answer, as HTTP/1.1 cannot tell it from the answer once the
# request is out. A host's first reuse waits PROBATION_S (once per transport: a server that
# sends such responses shows it then, and gets no kept connection again); later ones wait
# REUSE_REST_S, short beside a request's seconds, so a closed loop of streams loses next to
# nothing to it and opens no extra connection.
PROBATION_S = 0.25
REUSE_REST_S = 0.002
# Opens a connection as ``loop.create_connection(protocol_factory, host, port)`` does: the
# simulated rig's in-memory network on virtual time, real sockets otherwise.
Connector = Callable[
    [Callable[[], asyncio.Protocol], str, int],
    Awaitable[tuple[asyncio.BaseTransport, asyncio.BaseProtocol]],
]
# What may not be in a request header: written raw, CR or LF would start a header (or a request)
# of the value's choosing, and NUL is refused by servers in ways that differ.
_UNSAFE_HEADER_BYTES = re.compile(rb"[\r\n\0]")


class _Hosts:
    """What a transport learnt of each host's kept connections, kept across event loops."""

    def __init__(self, rest_s: float, probation_s: float) -> None:
        self.rest_s = rest_s
        self.probation_s = probation_s
        # Hosts whose connection rested PROBATION_S after a response and stayed clean.
        self.proven: set[tuple[str, int]] = set()
        # Hosts that sent bytes no request asked for: their connections are not kept.
        self.stale: set[tuple[str, int]] = set()
        self.stale_connections = 0


class _Pool:
    """Connections of one event loop: a slot per connection allowed, idle ones by host."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, max_connections: int, hosts: _Hosts
    ) -> None:
        self.loop = loop
        self.slots = asyncio.Semaphore(max_connections)
        self.idle: dict[tuple[str, int], list[Http11Connection]] = {}
        self.draining: set[Http11Connection] = set()
        self.closed = False
        self.hosts = hosts

    def idle_connection(self, key: tuple[str, int]) -> Http11Connection | None:
        conns = self.idle.get(key)
        while conns:
            conn = conns.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def clean_connection(self, key: tuple[str, int]) -> Http11Connection | None:
        """An idle connection to ``key`` known clean, or None (the caller opens one).

        Stale bytes are caught twice: while idle, by the protocol itself (``data_received``
        with no request on the connection closes it), and here, once the connection rested
        since its response ended, by a peek at what the kernel holds and the loop has not
        delivered yet. Either closes the connection; the next one is tried.
        """
        hosts = self.hosts
        while (conn := self.idle_connection(key)) is not None:
            rest_s = hosts.rest_s if key in hosts.proven else hosts.probation_s
            try:
                wait_s = conn.idle_since + rest_s - self.loop.time()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
            except BaseException:
                conn.close()
                raise
            if conn.check_unread():
                if rest_s >= hosts.probation_s:
                    hosts.proven.add(key)  # it rested that long and stayed clean
                return conn
        return None

    def stale(self, conn: Http11Connection) -> None:
        """``conn`` was closed for bytes no request asked for: its host's are kept no more."""
        self.hosts.stale.add(conn.key)
        self.hosts.stale_connections += 1

    def release(self, conn: Http11Connection) -> None:
        """Give a connection's slot back; keep the connection when its response ended whole, or
        when its reader stopped early and the rest arrives within the drain's bounds (the
        connection is then not counted against the slots while it drains)."""
        if conn.reusable and conn.error is None and not conn.closed:
            if conn.body_done:
                self._keep(conn)
            elif conn.sink_stopped and conn.sink_error is None:
                self.draining.add(conn)
                conn.drain(self._keep)
            else:
                conn.close()
        else:
            conn.close()
        self.slots.release()

    def _keep(self, conn: Http11Connection) -> None:
        self.draining.discard(conn)
        if (
            self.closed
            or conn.closed
            or conn.error is not None
            or not conn.body_done
            or conn.key in self.hosts.stale
        ):
            conn.close()
            return
        conn.reset()
        self.idle.setdefault(conn.key, []).append(conn)

    def close(self) -> None:
        self.closed = True
        for conn in [*self.draining, *(c for conns in self.idle.values() for c in conns)]:
            with contextlib.suppress(RuntimeError):  # its loop may be closed already
                conn.close()
        self.draining.clear()
        self.idle.clear()


class _Body(httpx.AsyncByteStream):
    """A response body: yields what arrived since the last step, one await per step."""

    def __init__(self, conn: Http11Connection, pool: _Pool) -> None:
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
            conn.sink_stopped = True
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
        connector: Opens connections (None: the running loop's ``create_connection``).
        reuse_rest_s: Loop seconds a kept connection rests before its next request (None:
            :data:`REUSE_REST_S` over sockets, 0 over a ``connector``'s in-memory network,
            whose bytes arrive as they are sent).
        probation_s: The rest of a host's first reuse (None: :data:`PROBATION_S` over
            sockets, 0 over a ``connector``).
    """

    def __init__(
        self,
        *,
        max_connections: int,
        connect_timeout_s: float,
        read_timeout_s: float,
        connector: Connector | None = None,
        reuse_rest_s: float | None = None,
        probation_s: float | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._max_connections = max_connections
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._connector = connector
        if reuse_rest_s is None:
            reuse_rest_s = REUSE_REST_S if connector is None else 0.0
        if probation_s is None:
            probation_s = PROBATION_S if connector is None else 0.0
        self._hosts = _Hosts(reuse_rest_s, probation_s)
        self._pool: _Pool | None = None

    @property
    def stale_connections(self) -> int:
        """Connections closed for bytes no request asked for (a response after the one asked
        for, bytes while idle); none of those bytes answered a request."""
        return self._hosts.stale_connections

    def _current_pool(self) -> _Pool:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool.loop is not loop:
            if self._pool is not None:
                self._pool.close()
            self._pool = _Pool(loop, self._max_connections, self._hosts)
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
        head = _request_head(request)
        key = (url.host, url.port or 80)
        pool = self._current_pool()
        await pool.slots.acquire()
        conn: Http11Connection | None = None
        try:
            payload = _request_bytes(head, request, await request.aread())
            # Before the trace: a kept connection's rest is no part of the request's time.
            conn = reused = await pool.clean_connection(key)
            trace: Trace | None = request.extensions.get("trace")
            if trace is not None:
                await trace("http11.send_request_headers.started", {"request": request})
            conn = reused or await self._connect(pool, key, connect_s, request)
            try:
                await _exchange_head(conn, request, payload, read_s)
            except (httpx.RemoteProtocolError, httpx.ReadError):
                if conn is not reused or conn.head_bytes:
                    raise
                # A kept-alive connection the server closed as the request went out (no byte of
                # an answer: it never took the request). Its other idle connections may have
                # gone with it, so the request goes once more on a new one (RFC 9112, 9.3.1).
                conn.close()
                conn = await self._connect(pool, key, connect_s, request)
                await _exchange_head(conn, request, payload, read_s)
        except BaseException:
            if conn is not None:
                conn.close()
            pool.slots.release()
            raise
        assert conn.head is not None  # _exchange_head returns once it came
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
    ) -> Http11Connection:
        conn = Http11Connection(pool.loop)
        conn.key = key
        conn.on_stale = pool.stale
        try:
            async with asyncio.timeout(timeout_s):
                connect = self._connector or pool.loop.create_connection
                await connect(lambda: conn, key[0], key[1])
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("timed out", request=request) from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        return conn

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


async def _exchange_head(
    conn: Http11Connection, request: httpx.Request, payload: bytes, read_s: float | None
) -> None:
    """Write the request on ``conn`` and wait for the answer's head."""
    conn.request = request
    conn.read_timeout_s = read_s
    conn.no_body = request.method == "HEAD"
    assert conn.transport is not None
    conn.transport.write(payload)
    conn.last_rx = conn.loop.time()
    while conn.head is None:
        if conn.error is not None:
            raise conn.error
        if conn.closed:
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            )
        await conn.wait()


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


def _request_head(request: httpx.Request) -> list[bytes]:
    """The request line and headers, refused (``LocalProtocolError``) before anything is sent
    when a header name or value holds CR, LF or NUL."""
    parts = [request.method.encode("ascii"), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    for name, value in request.headers.raw:
        if _UNSAFE_HEADER_BYTES.search(name) or _UNSAFE_HEADER_BYTES.search(value):
            shown = name.decode("ascii", "replace")
            raise httpx.LocalProtocolError(
                f"request header {shown!r} holds CR, LF or NUL: refused before sending (written "
                "raw, CR or LF would start headers of the value's choosing)",
                request=request,
            )
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"\r\n")
    return parts


def _request_bytes(head: list[bytes], request: httpx.Request, body: bytes) -> bytes:
    """The request head and body as one write."""
    parts = list(head)
    if any(k.lower() == b"transfer-encoding" for k, _ in request.headers.raw):
        if body:
            parts += (f"{len(body):x}\r\n".encode(), body, b"\r\n")
        parts.append(b"0\r\n\r\n")
    else:
        parts.append(body)
    return b"".join(parts)
