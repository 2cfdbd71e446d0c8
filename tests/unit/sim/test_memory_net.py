"""In-memory connections on virtual time: the real protocols at both ends, bytes in order, the
client's seeded per-request overhead, closes and back-pressure as over a socket."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

from powersweep.sim.memory_net import ClientOverhead, MemoryNetwork, uvicorn_protocol_factory
from powersweep.sim.virtual_time import VirtualClock
from powersweep.sweep.server.transport import LeanTransport
from tests.helpers.sim import run_on


class _Recorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.data: list[tuple[float, bytes]] = []
        self.eof = False
        self.lost = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.data.append((asyncio.get_running_loop().time(), data))

    def eof_received(self) -> bool | None:
        self.eof = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


def test_bytes_arrive_in_order_after_the_client_overhead_and_answers_at_once() -> None:
    clock = VirtualClock()
    net = MemoryNetwork(seed=3, overhead=ClientOverhead(floor_s=0.001, mean_extra_s=0.002))
    server = _Recorder()
    net.listen("127.0.0.1", 8080, lambda: server)

    async def main() -> _Recorder:
        transport, client = await net.connect(_Recorder, "127.0.0.1", 8080)
        for i in range(20):
            transport.write(b"%d;" % i)
        assert server.transport is not None
        server.transport.write(b"answer")
        await clock.asleep(1.0)
        return client  # type: ignore[return-value]

    client = run_on(clock, main())
    assert b"".join(d for _, d in server.data) == b"".join(b"%d;" % i for i in range(20))
    arrivals = [t for t, _ in server.data]
    assert arrivals == sorted(arrivals) and arrivals[0] >= 0.001
    assert [t for t, _ in client.data] == [0.0]  # type: ignore[attr-defined]


def test_the_client_overhead_is_seeded_and_its_mean_is_as_documented() -> None:
    model = ClientOverhead()
    draws = [model.draw(random.Random(7)) for _ in range(3)]
    assert draws[0] == draws[1] == draws[2]
    rng = random.Random(1)
    many = [model.draw(rng) for _ in range(20_000)]
    assert min(many) >= model.floor_s
    assert sum(many) / len(many) == pytest.approx(model.floor_s + model.mean_extra_s, rel=0.05)


def test_nothing_listening_is_a_refused_connection() -> None:
    clock = VirtualClock()

    async def main() -> None:
        await MemoryNetwork().connect(_Recorder, "127.0.0.1", 9)

    with pytest.raises(ConnectionRefusedError):
        run_on(clock, main())


def test_a_close_reaches_the_other_end_after_its_data_then_both_are_lost() -> None:
    clock = VirtualClock()
    net = MemoryNetwork()
    server = _Recorder()
    net.listen("127.0.0.1", 1, lambda: server)

    async def main() -> tuple[_Recorder, asyncio.Transport]:
        transport, client = await net.connect(_Recorder, "127.0.0.1", 1)
        transport.write(b"last words")
        transport.close()
        transport.write(b"never sent")
        await clock.asleep(1.0)
        return client, transport  # type: ignore[return-value]

    client, transport = run_on(clock, main())  # type: ignore[misc]
    assert b"".join(d for _, d in server.data) == b"last words"
    assert server.eof and server.lost and client.lost
    assert transport.is_closing()


def test_a_paused_reader_gets_nothing_until_it_resumes() -> None:
    clock = VirtualClock()
    net = MemoryNetwork()
    server = _Recorder()
    net.listen("127.0.0.1", 2, lambda: server)

    async def main() -> list[int]:
        transport, client = await net.connect(_Recorder, "127.0.0.1", 2)
        transport.pause_reading()
        assert server.transport is not None
        server.transport.write(b"a")
        server.transport.write(b"b")
        await clock.asleep(1.0)
        before = len(client.data)  # type: ignore[attr-defined]
        transport.resume_reading()
        await clock.asleep(1.0)
        return [before, len(client.data)]  # type: ignore[attr-defined]

    assert run_on(clock, main()) == [0, 2]


def _app() -> Starlette:
    async def hello(_request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    async def stream(_request: Request) -> StreamingResponse:
        async def chunks() -> object:
            for i in range(5):
                await asyncio.sleep(0.25)
                yield f"data: {i}\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")  # type: ignore[arg-type]

    return Starlette(routes=[Route("/hello", hello), Route("/stream", stream)])


def test_uvicorn_serves_the_lean_client_over_memory_with_keep_alive() -> None:
    """uvicorn's own protocol (the internals memory_net uses) against the sweep's transport:
    fails loudly on a uvicorn whose Config or ServerState no longer fit."""
    clock = VirtualClock()
    net = MemoryNetwork(seed=1)
    net.listen("127.0.0.1", 8000, uvicorn_protocol_factory(_app()))

    async def main() -> tuple[str, str, float]:
        transport = LeanTransport(
            max_connections=2, connect_timeout_s=5, read_timeout_s=30, connector=net.connect
        )
        async with httpx.AsyncClient(transport=transport) as http:
            first = (await http.get("http://127.0.0.1:8000/hello")).text
            start = clock.now()
            streamed = (await http.get("http://127.0.0.1:8000/stream")).text
            return first, streamed, clock.now() - start

    first, streamed, took = run_on(clock, main())  # type: ignore[misc]
    assert first == "hello"
    assert streamed == "".join(f"data: {i}\n\n" for i in range(5))
    assert took == pytest.approx(1.25, abs=0.01)  # the stream's own pace, in run seconds
    assert net.connections == 1  # the second request reused the kept-alive connection
