"""In-memory connections between the sweep's client and the simulated server on virtual time.

On a virtual clock the client and the server share one event loop, so their bytes need no
socket: a connection is a pair of in-memory transports whose writes reach the other side's
protocol as callbacks on that loop, in order.

The reasoning: docs/simulated-rig.md, "powersweep.sim.memory_net".
"""

from __future__ import annotations

import asyncio
import collections
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.server import ServerState

# The first fake port of a client's end (peername), counted up per connection.
_FIRST_CLIENT_PORT = 40_000


@dataclass(frozen=True)
class ClientOverhead:
    """Run seconds between a client's write and its arrival at the server: ``floor_s`` plus an
    exponential delay of mean ``mean_extra_s`` (a client's work per request: building the body,
    the write, being scheduled; measured at 0.2-2 ms for this client on a 2-core machine).

    Attributes:
        floor_s: The least delay.
        mean_extra_s: Mean of the exponential part (0: a constant delay).
    """

    floor_s: float = 0.0003
    mean_extra_s: float = 0.0007

    def draw(self, rng: random.Random) -> float:
        """One request's delay, run seconds."""
        if self.mean_extra_s <= 0:
            return self.floor_s
        return self.floor_s + rng.expovariate(1.0 / self.mean_extra_s)


class _Pipe:
    """One direction of a connection: writes delivered in order, each after its delay."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay_s: Callable[[], float]) -> None:
        self.loop = loop
        self.delay_s = delay_s
        self.receiver: _End | None = None
        self._queue: collections.deque[tuple[float, bytes | None]] = collections.deque()
        self._last_due = -math.inf
        self._scheduled = False

    def send(self, item: bytes | None) -> None:
        """Queue ``item`` (bytes, or None for the end of the stream)."""
        due = max(self.loop.time() + self.delay_s(), self._last_due)
        self._last_due = due
        self._queue.append((due, item))
        self._schedule()

    def _schedule(self) -> None:
        if self._scheduled or not self._queue:
            return
        self._scheduled = True
        due = self._queue[0][0]
        if due <= self.loop.time():
            self.loop.call_soon(self._flush)
        else:
            self.loop.call_at(due, self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        receiver = self.receiver
        now = self.loop.time()
        while self._queue and self._queue[0][0] <= now:
            if receiver is None or receiver.lost:
                self._queue.clear()
                return
            if receiver.paused:
                return  # resume_reading() flushes again
            _, item = self._queue.popleft()
            if item is None:
                receiver.peer_closed()
            else:
                receiver.protocol.data_received(item)
        self._schedule()

    def resume(self) -> None:
        self._schedule()


class _End(asyncio.Transport):
    """One end of an in-memory connection: writes go out through ``out``; ``inbound`` brings
    the other end's writes to ``protocol``."""

    def __init__(
        self,
        out: _Pipe,
        inbound: _Pipe,
        protocol: asyncio.Protocol,
        extra: dict[str, Any],
    ) -> None:
        super().__init__(extra)
        self.out = out
        self.inbound = inbound
        self.protocol = protocol
        self.closing = False
        self.lost = False
        self.paused = False
        inbound.receiver = self

    # -- what the protocol calls ---------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing or not data:
            return
        peer = self.out.receiver
        if peer is not None and peer.lost:
            # as a socket whose peer is gone: the write fails and the connection is lost, even
            # while this end reads nothing (a server that paused reading learns it so)
            self.closing = True
            self.out.loop.call_soon(self._lost, ConnectionResetError("peer closed"))
            return
        self.out.send(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def write_eof(self) -> None:
        self.close()

    def can_write_eof(self) -> bool:
        return False

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        self.out.send(None)
        self.out.loop.call_soon(self._lost)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        if self.paused:
            self.paused = False
            self.inbound.resume()

    def is_reading(self) -> bool:
        return not self.paused and not self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Writes never queue: nothing to limit."""

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.protocol

    # -- the other end -------------------------------------------------------------------------

    def peer_closed(self) -> None:
        """The other end closed: end of stream, then this end closes too (as a socket does)."""
        if self.lost:
            return
        keep_open = self.protocol.eof_received()
        if not keep_open:
            self.close()

    def _lost(self, exc: Exception | None = None) -> None:
        if not self.lost:
            self.lost = True
            self.protocol.connection_lost(exc)


ProtocolFactory = Callable[[], asyncio.Protocol]


class MemoryNetwork:
    """Where the simulated server listens and the client connects, without sockets.

    Args:
        seed: Seed of the client overhead.
        overhead: The per-request client overhead model.
    """

    def __init__(self, *, seed: int = 0, overhead: ClientOverhead | None = None) -> None:
        self._listeners: dict[tuple[str, int], ProtocolFactory] = {}
        self._rng = random.Random(seed * 48_271 + 11)
        self.overhead = overhead or ClientOverhead()
        self._next_port = _FIRST_CLIENT_PORT
        self.connections = 0

    def listen(self, host: str, port: int, factory: ProtocolFactory) -> None:
        """Accept connections to ``(host, port)`` with a protocol from ``factory``."""
        self._listeners[(host, port)] = factory

    def unlisten(self, host: str, port: int) -> None:
        """Stop accepting connections to ``(host, port)``."""
        self._listeners.pop((host, port), None)

    async def connect(
        self, factory: ProtocolFactory, host: str, port: int
    ) -> tuple[asyncio.Transport, asyncio.Protocol]:
        """Connect a client protocol, as ``loop.create_connection(factory, host, port)`` does.

        Raises:
            ConnectionRefusedError: Nothing listens there.
        """
        server_factory = self._listeners.get((host, port))
        if server_factory is None:
            raise ConnectionRefusedError(111, f"Connect call failed ({host!r}, {port})")
        loop = asyncio.get_running_loop()
        self._next_port += 1
        self.connections += 1
        client_addr = ("127.0.0.1", self._next_port)
        up = _Pipe(loop, lambda: self.overhead.draw(self._rng))
        down = _Pipe(loop, lambda: 0.0)
        client_protocol = factory()
        server_protocol = server_factory()
        server_end = _End(
            down, up, server_protocol, {"sockname": (host, port), "peername": client_addr}
        )
        client_end = _End(
            up, down, client_protocol, {"sockname": client_addr, "peername": (host, port)}
        )
        server_protocol.connection_made(server_end)
        client_protocol.connection_made(client_end)
        return client_end, client_protocol


def uvicorn_protocol_factory(app: Any) -> ProtocolFactory:
    """uvicorn's HTTP server protocol for ``app`` (httptools' where installed, else h11's), one
    per connection, on the running loop, as ``uvicorn.Server`` makes one per accepted socket.

    The server's default headers leave out ``Date``: no wall clock in a simulated run's bytes.
    """
    config = uvicorn.Config(
        app, log_config=None, log_level="warning", access_log=False, lifespan="off"
    )
    config.load()
    state = ServerState()
    state.default_headers = list(config.encoded_headers)
    protocol_class: Any = config.http_protocol_class

    def make() -> asyncio.Protocol:
        protocol: asyncio.Protocol = protocol_class(
            config=config, server_state=state, app_state={}, _loop=asyncio.get_running_loop()
        )
        return protocol

    return make
