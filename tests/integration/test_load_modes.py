"""decode-concurrent and prefill-heavy against the simulated server, checked with ground truth."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from powersweep.sim.engine import ConstantEngine, SimEngine
from powersweep.sim.memory_net import MemoryNetwork
from powersweep.sim.profiles import get_profile
from powersweep.sim.server import SimServer
from powersweep.sim.sim_rig import SimRig, ground_truth
from powersweep.sim.virtual_time import VirtualClock
from powersweep.sweep.loads.concurrent import DecodeConcurrent
from powersweep.sweep.loads.prefill import PrefillCalibrationError, PrefillHeavy
from powersweep.sweep.sampling.measure import cap_row
from powersweep.sweep.sampling.sampler import Sampler
from powersweep.sweep.server.client import ChatClient
from powersweep.sweep.server.discovery import discover_server
from powersweep.sweep.server.transport import LeanTransport
from powersweep.sweep.signals import run_interruptible

# Everything runs on virtual time, as a simulated sweep does: the client, the simulated server
# and the sampler share one event loop whose clock jumps to its next timer, connected in memory.
# The figures are the model's (seeded), never the host's scheduling.
SEED = 5


@dataclass
class Bench:
    """A virtual clock, its in-memory network and a sampler (ticking only while a client runs,
    when ``sampling``)."""

    clock: VirtualClock
    network: MemoryNetwork
    sampler: Sampler
    sampling: bool = True


def bench() -> Bench:
    """For a server on a :class:`ConstantEngine`: no GPU, so nothing to sample."""
    clock = VirtualClock()
    return Bench(clock, MemoryNetwork(seed=SEED), Sampler([], clock, 0.5), sampling=False)


@contextmanager
def rig_and_server(
    profile: str, cap_w: float, **server_kw: Any
) -> Iterator[tuple[SimRig, Sampler, SimServer, Bench]]:
    clock = VirtualClock()
    rig = SimRig([get_profile(profile)], clock, seed=SEED)
    assert rig.gpu(0).set_power_limit(cap_w).accepted
    b = Bench(clock, MemoryNetwork(seed=SEED), Sampler(rig.gpus, clock, 0.5))
    with SimServer(rig, network=b.network, **server_kw) as server:
        yield rig, b.sampler, server, b


def run_with_client(
    engine_url: str,
    b: Bench,
    body: Callable[[ChatClient], Awaitable[Any]],
    conns: int = 32,
) -> Any:
    async def main() -> Any:
        discovery = LeanTransport(
            max_connections=4,
            connect_timeout_s=10.0,
            read_timeout_s=300.0,
            connector=b.network.connect,
        )
        info = await discover_server(
            engine_url, model=None, api_key=None, clock=b.clock, transport=discovery
        )
        client = ChatClient(info, b.clock, max_connections=conns, connector=b.network.connect)
        async with AsyncExitStack() as stack:
            stack.push_async_callback(client.aclose)
            if b.sampling:
                await stack.enter_async_context(b.sampler.running())
            return await body(client)

    # as the sweep runs its coroutines (the server's side of each closed stream ends before the
    # loop closes)
    return run_interruptible(main(), loop_factory=b.clock.loop_factory)


@pytest.mark.slow
def test_auto_concurrency_loads_the_5090_harder_than_one_stream() -> None:
    cap = 600.0
    with rig_and_server("rtx5090-air", cap, total_slots=8) as (rig, sampler, server, b):
        rig.preheat("decode-single")

        async def body(client: ChatClient) -> Any:
            load = DecodeConcurrent(
                client,
                b.clock,
                sampler,
                6.0,
                concurrency=None,
                max_probe=8,
                engine=client.info.engine,
                total_slots=client.info.total_slots,
            )
            return await load.prepare(cap)

        prep = run_with_client(server.url, b, body)
    probe = {p["concurrency"]: p for p in prep["probe"]}
    assert prep["concurrency"] > 1 and prep["concurrency_auto"], prep
    assert probe[prep["concurrency"]]["power_w"] > 1.05 * probe[1]["power_w"], prep
    assert probe[prep["concurrency"]]["tps"] > 2 * probe[1]["tps"], prep


@pytest.mark.slow
@pytest.mark.parametrize(
    ("profile", "cap", "n"), [("rtx5090-air", 450.0, 4), ("h100-sxm", 500.0, 8)]
)
def test_concurrent_tps_and_draw_match_truth(profile: str, cap: float, n: int) -> None:
    with rig_and_server(profile, cap, flavour="vllm") as (rig, sampler, server, b):
        rig.preheat("decode-concurrent", concurrency=n)

        async def body(client: ChatClient) -> Any:
            load = DecodeConcurrent(client, b.clock, sampler, 8.0, concurrency=n, bench_runs=2)
            await load.prepare(cap)
            sampler.drain()
            return await load.measure(cap), sampler.drain()

        run, rows = run_with_client(server.url, b, body)
    row = cap_row(
        cap_w=cap,
        load_mode="decode-concurrent",
        rows=rows,
        requests=run.requests,
        n_gpus=1,
        settle_s=0,
        window_s=run.window_s,
    )
    truth = ground_truth([get_profile(profile)], "decode-concurrent", [cap], concurrency=n).caps[0]
    assert run.tps["narr_tps"] == pytest.approx(truth.tps, rel=0.02)
    assert run.tps["code_tps"] == pytest.approx(truth.tps, rel=0.02)
    assert row["power_w"] == pytest.approx(truth.power_w, rel=0.02)
    assert run.extra["concurrency"] == n
    assert run.extra["narr_tps_spread_pct"] < 5


@pytest.mark.slow
def test_probe_stops_at_the_servers_slots() -> None:
    with rig_and_server("rtx3090-air", 390.0, total_slots=2) as (_, sampler, server, b):

        async def body(client: ChatClient) -> Any:
            load = DecodeConcurrent(
                client,
                b.clock,
                sampler,
                6.0,
                concurrency=None,
                engine=client.info.engine,
                total_slots=client.info.total_slots,
            )
            return await load.prepare(390.0)

        prep = run_with_client(server.url, b, body)
    assert [p["concurrency"] for p in prep["probe"]] == [1, 2]
    assert "2 requests at once" in prep["pick_reason"]


@pytest.mark.slow
def test_packed_chunks_are_not_counted_as_tokens() -> None:
    """The reference script's 2.6x-low bug: several tokens per stream event."""
    b = bench()
    engine = ConstantEngine(b.clock, decode_tps=30.0)
    with SimServer(engine, flavour="vllm", tokens_per_chunk=3, network=b.network) as server:

        async def body(client: ChatClient) -> Any:
            load = DecodeConcurrent(client, b.clock, b.sampler, 6.0, concurrency=4)
            await load.prepare(300.0)
            return await load.measure(300.0)

        run = run_with_client(server.url, b, body)
    assert run.tps["narr_tps"] == pytest.approx(4 * 30.0, rel=0.05)


def _prefill(engine: SimEngine | None, profile: str, cap: float, **kw: Any) -> Any:
    with rig_and_server(profile, cap, **kw) as (rig, sampler, server, b):
        rig.preheat("prefill-heavy")

        async def body(client: ChatClient) -> Any:
            load = PrefillHeavy(
                client,
                b.clock,
                sampler,
                8.0,
                target_prefill_s=5.0,
                context_tokens=client.info.context_tokens,
                engine=client.info.engine,
            )
            prep = await load.prepare(cap)
            sampler.drain()
            run = await load.measure(cap)
            return prep, run, sampler.drain()

        return run_with_client(server.url, b, body)


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["llamacpp", "vllm", "sglang"])
def test_prefill_matches_truth(flavour: str) -> None:
    cap = 300.0
    prep, run, rows = _prefill(None, "rtx3090-air", cap, flavour=flavour)
    assert abs(prep["calibration"][-1]["ttft_s"] - 5.0) < 0.12 * 5.0
    truth = ground_truth(
        [get_profile("rtx3090-air")], "prefill-heavy", [cap], prompt_tokens=prep["prompt_tokens"]
    ).caps[0]
    # Within 2%: on virtual time the card (preheated) waits only the client's per-request
    # overhead (about a millisecond) between prompts, and that overhead is all the time to first
    # token carries beyond the model; it reads within 0.01% of the truth. A prompt cut or
    # miscounted is off by far more.
    assert run.tps["prefill_tps"] == pytest.approx(truth.tps, rel=0.02)
    assert not run.errors
    row = cap_row(
        cap_w=cap,
        load_mode="prefill-heavy",
        rows=rows,
        requests=run.requests,
        n_gpus=1,
        settle_s=0,
        window_s=run.window_s,
    )
    assert row["power_w"] == pytest.approx(cap, rel=0.01)


@pytest.mark.slow
def test_prefill_clamped_to_a_small_context() -> None:
    b = bench()
    engine = ConstantEngine(b.clock, prefill_tps=3000.0, context_tokens=4096)
    warnings: list[str] = []
    with SimServer(engine, flavour="llamacpp", network=b.network) as server:

        async def body(client: ChatClient) -> Any:
            load = PrefillHeavy(
                client,
                b.clock,
                b.sampler,
                3.0,
                target_prefill_s=10.0,
                context_tokens=client.info.context_tokens,
                engine=client.info.engine,
                warn=warnings.append,
            )
            return await load.prepare(300.0), await load.measure(300.0)

        prep, run = run_with_client(server.url, b, body)
    assert prep["clamped_to_context"] and prep["context_tokens"] == 4096
    assert prep["prompt_tokens"] <= 0.9 * 4096
    assert warnings and "clamped" in warnings[0]
    # the point here is the clamp; accuracy against truth is tested on the rig above
    assert not run.errors and run.tps["prefill_tps"] == pytest.approx(3000, rel=0.1)


@pytest.mark.slow
def test_silently_truncated_prefill_is_an_error_not_a_fast_cap() -> None:
    """Ollama without num_ctx in its Modelfile: clients see the training context only."""
    b = bench()
    engine = ConstantEngine(b.clock, prefill_tps=2000.0, context_tokens=4096)
    with SimServer(engine, flavour="ollama", hide_num_ctx=True, network=b.network) as server:

        async def body(client: ChatClient) -> Any:
            assert client.info.context_tokens == 131072  # what the server lets clients see
            load = PrefillHeavy(
                client,
                b.clock,
                b.sampler,
                3.0,
                target_prefill_s=5.0,
                context_tokens=client.info.context_tokens,
                engine=client.info.engine,
            )
            await load.prepare(300.0)

        with pytest.raises(PrefillCalibrationError, match="truncated"):
            run_with_client(server.url, b, body)
