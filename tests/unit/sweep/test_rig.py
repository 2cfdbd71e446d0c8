"""powersweep.sweep.rig: what a sweep runs on. A bare rig is real hardware (NVML journal, no
server of its own, the client as it is, no truth, limits that outlive the process), and a rig
with a connector gives discovery a transport that reaches its server through that connector,
never a socket."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from powersweep.clock import ManualClock
from powersweep.sweep.rig import Rig
from tests.fakes.fake_gpu import FakeGpu


class _Backend:
    def __init__(self) -> None:
        self.gpus = [FakeGpu(0)]

    def device_count(self) -> int:
        return len(self.gpus)

    def gpu(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def close(self) -> None:
        pass


def test_a_bare_rig_is_real_hardware_with_nothing_of_its_own() -> None:
    rig = Rig(_Backend(), ManualClock())  # type: ignore[arg-type]
    assert rig.journal_backend == {"kind": "nvml"}
    with rig.serve() as url:
        assert url is None  # the sweep talks to --url or a discovered server
    client = object()
    assert rig.wrap_client(client) is client
    assert rig.simulation is None and rig.truth is None and rig.clock_truth is None
    assert rig.connector is None and rig.transport() is None  # httpx's own transport
    assert rig.limits_outlive_process and rig.load_seed == 0 and rig.recorded_options == {}


def test_each_rig_has_its_own_journal_backend_and_options() -> None:
    first = Rig(_Backend(), ManualClock())  # type: ignore[arg-type]
    second = Rig(_Backend(), ManualClock())  # type: ignore[arg-type]
    assert first.journal_backend is not second.journal_backend
    assert first.recorded_options is not second.recorded_options


def test_the_transport_reaches_the_rigs_server_through_its_connector() -> None:
    asked: list[tuple[str, int]] = []

    async def connector(factory: Any, host: str, port: int) -> Any:
        asked.append((host, port))
        raise ConnectionRefusedError("no simulated server listens there")

    rig = Rig(_Backend(), ManualClock(), connector=connector)  # type: ignore[arg-type]
    transport = rig.transport(max_connections=2)
    assert transport is not None

    async def get() -> None:
        async with httpx.AsyncClient(transport=transport) as client:
            await client.get("http://10.9.8.7:8081/v1/models")

    with pytest.raises(httpx.ConnectError, match="no simulated server listens there"):
        asyncio.run(get())
    assert asked == [("10.9.8.7", 8081)]


def test_a_transport_needs_at_least_one_connection() -> None:
    async def connector(factory: Any, host: str, port: int) -> Any:
        raise AssertionError("never called")

    rig = Rig(_Backend(), ManualClock(), connector=connector)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_connections must be at least 1"):
        rig.transport(max_connections=0)
