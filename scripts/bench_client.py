"""Benchmark of the streaming client: is the aggregate TPS it measures the true one?

Starts the simulated server (constant per-stream token rate, vLLM flavour, real time) in a
separate process, then runs decode-concurrent measurement windows from this process for
N = 1, 8, 64, 256 streams and prints, in one run:

- measured / true aggregate TPS (goal: >= 0.99 at N = 64),
- client errors (goal: none at N = 256),
- the client's CPU seconds per 1,000 tokens (this process only; the server runs elsewhere).

Usage: python scripts/bench_client.py [--window 10] [--aggregate 1200] [--streams 1,8,64,256]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import textwrap
import time

from powersweep.clock import ScaledClock
from powersweep.sweep.loads.concurrent import DecodeConcurrent
from powersweep.sweep.loads.prompts import NARRATIVE_PROMPT
from powersweep.sweep.server.client import ChatClient
from powersweep.sweep.server.discovery import discover_server

SERVER = textwrap.dedent(
    """
    import sys, time
    from powersweep.clock import ScaledClock
    from powersweep.sim.engine import ConstantEngine
    from powersweep.sim.server import SimServer
    rate = float(sys.argv[1])
    server = SimServer(ConstantEngine(ScaledClock(1.0), decode_tps=rate, prefill_tps=1e6),
                       flavour="vllm")
    print(server.start(), flush=True)
    sys.stdin.read()
    server.stop()
    """
)


class _NoSampler:
    def label(self, cap_w: float, phase: str) -> None:
        pass

    def median_power_w(self, t0_s: float, t1_s: float) -> float:
        return float("nan")


async def _measure(url: str, n: int, window_s: float) -> tuple[float, int, float, float]:
    clock = ScaledClock(1.0)
    info = await discover_server(url, model=None, api_key=None, clock=clock)
    client = ChatClient(info, clock, max_connections=max(8, n))
    load = DecodeConcurrent(client, clock, _NoSampler(), window_s, concurrency=n)
    try:
        await load.scheduling_check(min(n, 8))
        cpu0 = time.process_time()
        w, results = await load.window(
            0.0, "narr", NARRATIVE_PROMPT, 4000, n, window_s, "concurrent"
        )
        cpu = time.process_time() - cpu0
    finally:
        await client.aclose()
    errors = sum(1 for r in results if not r.ok)
    return w.tps, errors, cpu, w.tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=10.0, help="seconds per window")
    parser.add_argument("--aggregate", type=float, default=1200.0, help="true total tokens/s")
    parser.add_argument("--streams", default="1,8,64,256")
    args = parser.parse_args()
    print(
        f"{'streams':>8} {'true TPS':>10} {'measured':>10} {'ratio':>7} {'errors':>7} "
        f"{'client CPU s / 1k tok':>22}"
    )
    for n in (int(x) for x in args.streams.split(",")):
        per_stream = args.aggregate / n
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(per_stream)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            tps, errors, cpu, tokens = asyncio.run(_measure(url, n, args.window))
        finally:
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=30)
        true_tps = per_stream * n
        cpu_per_k = 1000 * cpu / tokens if tokens else float("nan")
        print(
            f"{n:>8} {true_tps:>10.1f} {tps:>10.1f} {tps / true_tps:>7.3f} {errors:>7} "
            f"{cpu_per_k:>22.4f}"
        )
    print("goals: ratio >= 0.99 at 64 streams; no client errors at 256 streams")
    return 0


if __name__ == "__main__":
    sys.exit(main())
