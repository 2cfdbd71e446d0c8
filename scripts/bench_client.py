"""Benchmark of what a decode-concurrent sweep costs its own process, end to end.

For N = 1, 8, 64, 256 streams it starts the simulated server (vLLM flavour, constant per-stream
rate, real time) in *another process*, then runs one decode-concurrent measurement window from
this process with the real client, the real load and the real sampler thread (reading a constant
stand-in GPU every 0.5 s), on the event loop a sweep runs on, and prints:

- this process's CPU seconds (user + system, all its threads) per 1,000 tokens it received, over
  the whole window call (ramp, streams, the window's own count);
- measured / true aggregate rate: the window's count against the tokens the server generated over
  the same run-time span (the server process samples its own token counter every 5 ms and
  answers for any span);
- the sampler's tick jitter (how late each tick was against its 0.5 s grid) and missed ticks;
- the server process's CPU over the window and the machine's load, so that figures taken on a
  busy machine read as such.

Goals: <= 0.033 CPU s per 1,000 tokens at 64 and 256 streams; measured / true >= 0.99 where the
machine has a core to spare for the server; tick jitter p99 < 50 ms at 256 streams.

Usage: python scripts/bench_client.py [--window 10] [--aggregate 3000] [--streams 1,8,64,256]
       [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

from powersweep.clock import Clock, ScaledClock
from powersweep.sweep.eventloop import event_loop_factory
from powersweep.sweep.gpu import GpuSample
from powersweep.sweep.loads.concurrent import DecodeConcurrent
from powersweep.sweep.loads.prompts import NARRATIVE_PROMPT
from powersweep.sweep.sampling.sampler import Sampler, SampleRow
from powersweep.sweep.server.client import ChatClient
from powersweep.sweep.server.discovery import discover_server

CPU_GOAL_S_PER_1K = 0.033
CPU_GOAL_STREAMS = (64, 256)
RATIO_GOAL = 0.99
JITTER_GOAL_MS = 50.0
JITTER_GOAL_STREAMS = 256
TICK_S = 0.5

# The server process: prints its URL, then answers "t0 t1" (monotonic seconds) on stdin with the
# tokens it generated in between, from its counter sampled every 5 ms, and "cpu" with its CPU
# seconds so far.
SERVER = textwrap.dedent(
    """
    import bisect, sys, threading, time
    from array import array
    from powersweep.clock import ScaledClock
    from powersweep.sim.engine import ConstantEngine
    from powersweep.sim.server import SimServer
    rate = float(sys.argv[1])
    server = SimServer(ConstantEngine(ScaledClock(1.0), decode_tps=rate, prefill_tps=1e6),
                       flavour="vllm")
    print(server.start(), flush=True)
    times, counts = array("d"), array("d")
    stop = threading.Event()
    def record():
        while not stop.wait(0.005):
            times.append(time.monotonic())
            counts.append(server.tokens_generated)
    threading.Thread(target=record, daemon=True).start()
    def at(t):
        i = bisect.bisect_left(times, t)
        if i == 0 or i == len(times):
            return counts[min(i, len(times) - 1)]
        t0, t1, c0, c1 = times[i - 1], times[i], counts[i - 1], counts[i]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0)
    for line in sys.stdin:
        if line.strip() == "cpu":
            print(time.process_time(), flush=True)
            continue
        a, b = map(float, line.split())
        while times[-1] < b + 0.02:
            time.sleep(0.01)
        print(at(b) - at(a), flush=True)
    stop.set()
    server.stop()
    """
)


class _ConstantGpu:
    """A GPU whose reading costs next to nothing: the sampler's ticks are what is measured."""

    def read_sample(self) -> GpuSample:
        return GpuSample(0, 300.0, math.nan, 60.0, 1800.0, 9000.0, 100.0, 0, 0)


@dataclass(frozen=True)
class Figures:
    """One window's figures."""

    streams: int
    true_tps: float
    measured_tps: float
    errors: int
    cpu_s_per_1k: float
    server_cpu_pct: float
    jitter_p99_ms: float
    jitter_max_ms: float
    missed_ticks: int

    @property
    def ratio(self) -> float:
        return self.measured_tps / self.true_tps if self.true_tps > 0 else math.nan


class _Server:
    """The simulated server in its own process."""

    def __init__(self, per_stream_tps: float) -> None:
        self.per_stream_tps = per_stream_tps
        self._proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(per_stream_tps)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self._ask(None)

    def _ask(self, line: str | None) -> str:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        if line is not None:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        return self._proc.stdout.readline().strip()

    def tokens_between(self, t0_mono: float, t1_mono: float) -> float:
        return float(self._ask(f"{t0_mono!r} {t1_mono!r}"))

    def cpu_s(self) -> float:
        return float(self._ask("cpu"))

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)


def tick_jitter(rows: list[SampleRow], interval_s: float) -> tuple[list[float], int]:
    """How late each tick was against the grid of the first one, and the grid slots missed."""
    times = sorted({r.t_s for r in rows})
    if not times:
        return [], 0
    t0 = times[0]
    late: list[float] = []
    slots = set()
    for t in times:
        slot = math.floor((t - t0) / interval_s + 1e-9)
        slots.add(slot)
        late.append(t - (t0 + slot * interval_s))
    return late, (max(slots) + 1) - len(slots)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


async def _window(server: _Server, n: int, window_s: float, clock: Clock) -> Figures:
    mono_offset = time.monotonic() - clock.now()
    info = await discover_server(server.url, model=None, api_key=None, clock=clock)
    client = ChatClient(info, clock, max_connections=max(8, n))
    sampler = Sampler([_ConstantGpu()], clock, TICK_S)
    load = DecodeConcurrent(client, clock, sampler, window_s, concurrency=n)
    try:
        await load.scheduling_check(min(n, 8))
        sampler.drain()
        sampler.start()
        server_cpu0, cpu0, wall0 = server.cpu_s(), time.process_time(), time.monotonic()
        # the pace a sweep's warm-up would have measured: each stream's request outlasts
        # the window (no restarts inside it), as in a sweep
        load.pace.decode_tps["narr"] = server.per_stream_tps
        w, results = await load.window(0.0, "narr", NARRATIVE_PROMPT, n, window_s, "concurrent")
        cpu = time.process_time() - cpu0
        server_cpu_pct = 100 * (server.cpu_s() - server_cpu0) / (time.monotonic() - wall0)
    finally:
        sampler.stop()
        await client.aclose()
    received = sum(r.chunk_tokens for r in results)
    true_tokens = server.tokens_between(w.t0_s + mono_offset, w.t1_s + mono_offset)
    late, missed = tick_jitter(sampler.drain(), TICK_S)
    return Figures(
        streams=n,
        true_tps=true_tokens / (w.t1_s - w.t0_s),
        measured_tps=w.tps,
        errors=sum(1 for r in results if not r.ok),
        cpu_s_per_1k=1000 * cpu / received if received else math.nan,
        server_cpu_pct=server_cpu_pct,
        jitter_p99_ms=1000 * percentile(late, 0.99),
        jitter_max_ms=1000 * max(late, default=math.nan),
        missed_ticks=missed,
    )


def measure(n: int, window_s: float, aggregate_tps: float) -> Figures:
    """One window at ``n`` streams against a fresh server process."""
    server = _Server(aggregate_tps / n)
    try:
        # the loop a sweep runs on (powersweep.sweep.signals.run_interruptible)
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            return runner.run(_window(server, n, window_s, ScaledClock(1.0)))
    finally:
        server.close()


def verdicts(rows: list[Figures]) -> list[str]:
    """Each figure against its goal, one line each."""
    out = []
    for f in rows:
        if f.streams in CPU_GOAL_STREAMS:
            ok = f.cpu_s_per_1k <= CPU_GOAL_S_PER_1K
            out.append(
                f"CPU per 1k tokens at {f.streams:>3} streams: {f.cpu_s_per_1k:.4f} s "
                f"(goal <= {CPU_GOAL_S_PER_1K}) {'MET' if ok else 'NOT MET'}"
            )
        spare = f.server_cpu_pct < 100 * ((os.cpu_count() or 1) - 1)
        ok = f.ratio >= RATIO_GOAL
        note = "" if spare else " (no core to spare for the server: goal not applicable)"
        out.append(
            f"measured/true at {f.streams:>3} streams: {f.ratio:.4f} "
            f"(goal >= {RATIO_GOAL}) {'MET' if ok else 'NOT MET'}{note}"
        )
        if f.streams == JITTER_GOAL_STREAMS:
            ok = f.jitter_p99_ms < JITTER_GOAL_MS
            out.append(
                f"sampler tick jitter p99 at {f.streams} streams: {f.jitter_p99_ms:.1f} ms "
                f"(goal < {JITTER_GOAL_MS:g}) {'MET' if ok else 'NOT MET'}"
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=10.0, help="seconds per window")
    parser.add_argument("--aggregate", type=float, default=3000.0, help="server tokens/s, total")
    parser.add_argument("--streams", default="1,8,64,256")
    parser.add_argument("--repeat", type=int, default=1, help="windows per stream count")
    args = parser.parse_args()
    load0 = os.getloadavg()[0]
    print(
        f"{'streams':>7} {'true TPS':>9} {'measured':>9} {'ratio':>7} {'errors':>6} "
        f"{'CPU s/1k tok':>12} {'server CPU':>10} {'jitter p99':>10} {'max':>7} {'missed':>6}"
    )
    rows = []
    for n in (int(x) for x in args.streams.split(",")):
        for _ in range(args.repeat):
            f = measure(n, args.window, args.aggregate)
            rows.append(f)
            print(
                f"{n:>7} {f.true_tps:>9.1f} {f.measured_tps:>9.1f} {f.ratio:>7.4f} "
                f"{f.errors:>6} {f.cpu_s_per_1k:>12.4f} {f.server_cpu_pct:>9.0f}% "
                f"{f.jitter_p99_ms:>8.1f}ms {f.jitter_max_ms:>5.1f}ms {f.missed_ticks:>6}",
                flush=True,
            )
    factory = event_loop_factory()
    loop = "asyncio's" if factory is None else factory.__module__.split(".")[0]
    print(
        f"machine: {os.cpu_count()} cores, load average {load0:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end; event loop: {loop}"
    )
    for line in verdicts(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
