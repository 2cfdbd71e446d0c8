"""One HTTP/1.1 client connection as an asyncio protocol, for :mod:`.transport`.

The response framing is llhttp's in strict mode, plus bounds of its own: a response is either
framed as a strict parser frames it or refused, never read as a body.

The reasoning: docs/architecture.md, "powersweep.sweep.server.http11".
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import cast

import httptools
import httpx

# Bytes of response heads accepted for one request, the 1xx ones included (their header lines,
# and the reads before the final head ended).
MAX_HEAD_BYTES = 65536
# 1xx heads accepted before the final one.
MAX_INTERIM_HEADS = 8
# Trailer lines accepted after a chunked body.
MAX_TRAILERS = 32
# Body-phase bytes in a row that carry no body byte (chunk sizes, extensions, trailers).
MAX_FRAMING_BYTES = 65536
# Body bytes buffered for a reader that does not keep up before the socket stops being read.
_PAUSE_BYTES = 4 << 20
# A response whose reader stopped early (a chat stream stops at its finish reason and usage) is
# read on to its end so that its connection can be kept, within these bounds (loop seconds: run
# seconds on the simulated rig's virtual loop; body bytes): the rest, "[DONE]" and the last
# chunk, follows within moments, and a connection opened per request costs more CPU than the
# request's tokens. Beyond them the connection is closed.
DRAIN_S = 2.0
DRAIN_MAX_BYTES = 65536

Sink = Callable[[bytes], bool]

# llhttp's reasons (lowercased), reworded for a user (the first match wins); others read "the
# server sent a malformed response (llhttp: <its reason>)".
_REASONS = (
    ("chunk size", "the server sent a malformed chunk size"),
    ("after chunk data", "the server sent a malformed chunk (no CRLF after its data)"),
    ("content-length", "the server sent an invalid Content-Length"),
    ("transfer-encoding", "the server sent an invalid Transfer-Encoding"),
    ("whitespace after header", "the server sent a folded or malformed header line"),
    ("header", "the server sent a malformed header line"),
    ("status", "the server sent an invalid status line"),
    ("http/", "the server did not answer HTTP/1.x"),
)


class MalformedResponse(httpx.RemoteProtocolError):
    """The server's answer breaks HTTP/1.1's framing: it is refused, never read as a body."""


class _Stop(Exception):
    """Raised in a parser callback to stop parsing the read (the reason is kept elsewhere)."""


class Http11Connection(asyncio.Protocol):
    """One keep-alive connection: llhttp parses the response as it arrives.

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
        # Told once when bytes no request asked for closed the connection (the pool counts it).
        self.on_stale: Callable[[Http11Connection], None] | None = None
        self.reset()

    def reset(self) -> None:
        """Forget the last exchange: the connection is ready for the next request."""
        self.request: httpx.Request | None = None
        # A parser per exchange: nothing of the last response can leak into the next.
        self.parser = httptools.HttpResponseParser(self)
        self.head: tuple[int, bytes, list[tuple[bytes, bytes]]] | None = None
        self.no_body = False
        self.until_close = False
        self.first = b""
        self.head_bytes = 0
        self.header_bytes = 0
        self.interim = 0
        self.trailers = 0
        self.framing_run = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.progress = False
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
        self.drained: Callable[[Http11Connection], None] | None = None
        self.drain_bytes = 0
        # When the last exchange ended (loop seconds): the pool lets a connection rest before
        # writing on it again.
        self.idle_since = self.loop.time()

    def drain(self, drained: Callable[[Http11Connection], None]) -> None:
        """Read the rest of a response no one reads any more, discarding its body; then call
        ``drained(self)`` (outside the parser), once: the response ended whole (the connection
        can be kept), or the connection closed (past :data:`DRAIN_S` or
        :data:`DRAIN_MAX_BYTES`, stale bytes, the peer's close)."""
        self.take()  # what was buffered is discarded, and a paused socket read again
        if self.timer is not None:
            self.timer.cancel()
        self.drained = drained
        self.timer = self.loop.call_later(DRAIN_S, self._drain_expired)

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.request is None or self.body_done or self.error is not None:
            if self.error is None:
                self._stale()
            return
        if self.head is None:
            self.head_bytes += len(data)
            if len(self.first) < 8:
                self.first += data[:8]
        self.progress = False
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._parse_failed(exc)
        if self.progress:
            # Only a final head or body bytes restart the read timeout.
            self.last_rx = self.loop.time()
            self.framing_run = 0
        elif self.error is None and not self.body_done:
            if self.head is None:
                if self.head_bytes > MAX_HEAD_BYTES:
                    self._fail(
                        f"the server sent response heads of more than {MAX_HEAD_BYTES} bytes"
                    )
            else:
                self.framing_run += len(data)
                if self.framing_run > MAX_FRAMING_BYTES:
                    self._fail(
                        f"the server sent more than {MAX_FRAMING_BYTES} bytes of chunk framing "
                        "without a body byte"
                    )
        if self.sink is None:
            # A waiter is woken only for what it waits for: a head, body bytes, the end or an
            # error (a wake restarts its wait, so framing alone must not).
            if self.progress or self.body_done or self.error is not None:
                self._wake()
        elif self.body_done or self.error is not None or self.sink_stopped:
            # A pushed body wakes its reader only at the end: that is the point of pushing.
            self._wake()

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
            elif self.until_close and exc is None:
                self.body_done = True
            elif exc is not None:
                self.error = httpx.ReadError(str(exc), request=self.request)
            else:
                self.error = httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body",
                    request=self.request,
                )
        if self.drained is not None:
            self.loop.call_soon(self._drain_done)
        self._wake()

    # -- llhttp's callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.head is not None:
            # a second response in the read that ended this one: stale, never reused
            raise _Stop
        self.reason = b""
        self.headers = []

    def on_status(self, reason: bytes) -> None:
        self.reason += reason  # a reason split across reads comes in pieces

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head is None:
            self.headers.append((name, value))
            # Counted here too: heads that end within one read escape the count per read.
            self.header_bytes += len(name) + len(value) + 4
            if self.header_bytes > MAX_HEAD_BYTES:
                self._fail(f"the server sent response heads of more than {MAX_HEAD_BYTES} bytes")
                raise _Stop
            return
        self.trailers += 1  # after the head: a trailer of a chunked body
        if self.trailers > MAX_TRAILERS:
            self._fail(f"the server sent more than {MAX_TRAILERS} trailer lines")
            raise _Stop

    def on_headers_complete(self) -> None:
        parser = self.parser
        status = parser.get_status_code()
        version = parser.get_http_version()
        if not self.first.startswith(b"HTTP/1.") or version not in ("1.0", "1.1"):
            self._fail(f"the server did not answer HTTP/1.x: {self.first!r}...")
            raise _Stop
        if status == 101:
            self._fail(
                "the server switched protocols (101), though this client asked for no upgrade"
            )
            raise _Stop
        if status < 200:
            self.interim += 1
            if self.interim > MAX_INTERIM_HEADS:
                self._fail(f"the server sent more than {MAX_INTERIM_HEADS} interim (1xx) heads")
                raise _Stop
            return  # informational: the real answer follows
        headers = self.headers
        chunked = False
        length = False
        codings = [v for n, v in headers if n.lower() == b"transfer-encoding"]
        if codings:
            # Only "chunked", once: any other coding was not asked for and would be read raw.
            if len(codings) > 1 or codings[0].strip().lower() != b"chunked":
                shown = b", ".join(codings)[:60]
                self._fail(
                    f"the server sent Transfer-Encoding {shown!r}: this client asked for no "
                    "coding and reads only 'chunked'"
                )
                raise _Stop
            chunked = True
        else:
            length = any(n.lower() == b"content-length" for n, _ in headers)
        no_body = self.no_body or status in (204, 304)
        self.until_close = not (chunked or length or no_body)
        self.reusable = version == "1.1" and parser.should_keep_alive() and not self.until_close
        self.head = (status, self.reason, headers)
        self.progress = True
        if self.no_body:
            # llhttp cannot be told that a HEAD answer has no body: the head ends the exchange,
            # and the connection is not reused (a body after it would be stray bytes).
            self.reusable = False
            self.body_done = True
            raise _Stop

    def on_body(self, body: bytes) -> None:
        self.progress = True
        sink = self.sink
        if sink is not None:
            try:
                stop = sink(body)
            except Exception as exc:  # raised in the reader's task, not in the event loop
                self.sink_error = exc
                stop = True
            if stop:
                self.sink_stopped = True
                self.sink = None
            return
        if self.drained is not None:
            self.drain_bytes += len(body)
            if self.drain_bytes > DRAIN_MAX_BYTES and not self.closed:
                self.close()
                self.loop.call_soon(self._drain_done)
            return
        self.pending.append(body)
        self.pending_bytes += len(body)
        if self.pending_bytes > _PAUSE_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self.head is not None:  # not an interim head's end
            self.body_done = True
            if self.drained is not None and not self.closed:
                # Not from inside the parser: the rest of this read must be parsed (and refused
                # as stale, should there be any) before the connection is reset for reuse.
                self.loop.call_soon(self._drain_done)

    def _drain_expired(self) -> None:
        self.timer = None
        self.close()
        self._drain_done()

    def _drain_done(self) -> None:
        drained, self.drained = self.drained, None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if drained is not None:
            drained(self)

    # -- failures --------------------------------------------------------------------------

    def _parse_failed(self, exc: Exception) -> None:
        if self.error is not None:
            return  # one of our checks stopped the parser: its reason is set
        if self.body_done:
            # bytes after the response ended: the answer is whole, the connection is not reused
            self._stale()
            return
        text = "unexpected upgrade" if isinstance(exc, httptools.HttpParserUpgrade) else str(exc)
        lowered = text.lower()
        ours = next(
            (o for key, o in _REASONS if key in lowered), "the server sent a malformed response"
        )
        self._fail(f"{ours} (llhttp: {text})")

    def _fail(self, message: str) -> None:
        self.error = MalformedResponse(message, request=self.request)
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def _stale(self) -> None:
        """Bytes no request asked for: close the connection, so none answers the next one."""
        if self.closed:
            return
        self.close()
        if self.on_stale is not None:
            self.on_stale(self)

    def check_unread(self) -> bool:
        """Before a request is written on a kept connection: True when it is still clean.

        Bytes the kernel holds that the loop has not handed to :meth:`data_received` yet (they
        came in the same loop turn as the reuse) are seen with a non-blocking peek, and close
        the connection as stale; a peer's close closes it too. An in-memory transport has no
        socket: its bytes reach ``data_received`` as they are sent.
        """
        if self.closed or self.transport is None or self.transport.is_closing():
            return False
        sock = self.transport.get_extra_info("socket")
        if sock is None or sock.fileno() < 0:
            return True
        try:
            # A duplicate of the descriptor: asyncio's (and uvloop's) socket object offers no
            # recv, and the loop keeps the original.
            with socket.fromfd(sock.fileno(), sock.family, sock.type) as dup:
                unread = dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True  # nothing waiting: clean
        except OSError:
            self.close()
            return False
        if unread:
            self._stale()
        else:
            self.close()  # the peer closed it
        return False

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
