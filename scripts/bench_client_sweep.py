"""Benchmark of a real decode-concurrent sweep: its process's CPU and its token count.

For 64 and 256 streams it starts the project's simulated server (vLLM flavour, constant
per-stream rate, real time, 3,000 tokens/s aggregate) in *another process*, then runs the real
CLI as a child process -- ``python -m powersweep --simulate rtx3090-air --url URL --load-mode
decode-concurrent --concurrency N --caps 350,300 ...`` (a simulated GPU, the real server, real
time): a sweep of two caps whose points measure several rounds of windows, with the keep-busy
load between them and requests that restart inside windows. It prints:

- the sweep process's CPU, whole process from start to exit (imports included: the child's
  rusage from ``os.wait4``), per 1,000 tokens the server sent it over its life;
- measured / true aggregate tokens over the measured windows: what the sweep counted in each
  window against what the server generated over the same span (the server samples its token
  counter every 5 ms; the sweep's run seconds are mapped to the server's clock by the
  monotonic offset the child records at each window);
- where the CPU went: before the first window, inside the windows, and the imports alone (the
  modules the sweep loaded, imported apart in a fresh process: a fixed cost no sweep length
  changes, so a short sweep's figure carries more of it);
- per window, where a difference went: tokens of the window's own requests that the server sent
  inside the window but the client did not count (cut at the window's end, restarts), and tokens
  the server sent inside the window for requests that are not the window's (the keep-busy load
  or the previous window's requests, still running);
- the server process's CPU over the sweep and the machine's 1-minute load average next to each
  figure (figures from a busy machine read as such; a measurement is retried once when the load
  is high).

The child is the real CLI run through a small hook (``python -c HOOK ARGS``) that records, for
each measured window, its span, its count and its requests' counts; the hook adds a few
microseconds per request.

Goals: <= 0.033 CPU s per 1,000 tokens and measured / true >= 0.98, at 64 and 256 streams.
Exits 1 when a goal is missed. ``--smoke`` runs a short sweep at 8 streams and only checks that
the figures are finite and positive (exit 0 whatever they are; non-zero only on a crash or a
figure that could not be measured): CI's check of the plumbing, not a timed assertion.

Usage: python scripts/bench_client_sweep.py [--streams 64,256] [--aggregate 3000]
       [--window 10] [--max-load 1.5] [--smoke] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CPU_GOAL_S_PER_1K = 0.033
RATIO_GOAL = 0.98
# A figure taken while the machine's 1-minute load average is above this (per core) is retried.
DEFAULT_MAX_LOAD = 1.5
# Mean run seconds a window's request streams before the server ends it (0: as long as asked).
DEFAULT_RESTART_S = 2.0

# The server process (argv: per-stream tokens/s, the mean seconds a window's request streams
# before the "model" stops: its max_tokens is lowered to 0.5-1.5 times that, so that streams
# restart inside windows as with real answers; 0: as asked). It prints its URL, then answers on
# stdin:
#   "span T0 T1"  tokens it generated between two monotonic times (counter sampled every 5 ms);
#   "cpu"         its CPU seconds so far;
#   "dump PATH"   writes each chat request it served (nonce, arrival, the monotonic time and
#                 token count of each write) to PATH as JSON lines, and answers "ok".
SERVER = textwrap.dedent(
    """
    import bisect, json, random, re, sys, threading, time
    from array import array
    from powersweep.clock import ScaledClock
    from powersweep.sim.engine import ConstantEngine
    from powersweep.sim.server import SimServer

    NONCE = re.compile(rb"\\[request ([^\\]]*)\\]")
    TOKEN = b'"delta":{"content":"'
    served = []

    class Tap:
        def __init__(self, app):
            self.app = app

        async def __call__(self, scope, receive, send):
            if scope.get("path") != "/v1/chat/completions":
                return await self.app(scope, receive, send)
            rec = {"arrived": time.monotonic(), "nonce": None, "t": array("d"), "n": array("l"),
                   "end": None}
            served.append(rec)
            body = bytearray()

            async def rcv():
                if rec["nonce"] is not None:
                    return await receive()
                while True:
                    m = await receive()
                    if m["type"] != "http.request":
                        return m
                    body.extend(m.get("body", b""))
                    if not m.get("more_body"):
                        break
                found = NONCE.search(body)
                rec["nonce"] = nonce = found.group(1).decode() if found else ""
                if restart_s > 0 and nonce[:1].isdigit():
                    # a window's request: the model "stops" after about restart_s seconds
                    data = json.loads(body)
                    stop = max(1, round(rate * restart_s * random.uniform(0.5, 1.5)))
                    for key in ("max_tokens", "max_completion_tokens"):
                        if isinstance(data.get(key), int):
                            data[key] = min(data[key], stop)
                    return {"type": "http.request", "body": json.dumps(data).encode(),
                            "more_body": False}
                return {"type": "http.request", "body": bytes(body), "more_body": False}

            async def snd(m):
                if m["type"] == "http.response.body":
                    k = m.get("body", b"").count(TOKEN)
                    if k:
                        rec["t"].append(time.monotonic())
                        rec["n"].append(k)
                await send(m)

            try:
                await self.app(scope, rcv, snd)
            finally:
                rec["end"] = time.monotonic()

    class Tapped(SimServer):
        def app(self):
            return Tap(super().app())

    rate, restart_s = float(sys.argv[1]), float(sys.argv[2])
    random.seed(0)
    server = Tapped(ConstantEngine(ScaledClock(1.0), decode_tps=rate, prefill_tps=1e6),
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
        word, *args = line.split()
        if word == "cpu":
            print(time.process_time(), flush=True)
        elif word == "span":
            a, b = map(float, args)
            while times[-1] < b + 0.02:
                time.sleep(0.01)
            print(at(b) - at(a), flush=True)
        elif word == "dump":
            with open(args[0], "w") as out:
                for rec in list(served):
                    out.write(json.dumps({**rec, "t": list(rec["t"]), "n": list(rec["n"])}))
                    out.write("\\n")
            print("ok", flush=True)
    stop.set()
    server.stop()
    """
)

# The child: the real CLI (``python -m powersweep``) with a hook that records each measured
# window (span, count, the monotonic offset of the run clock) and each request's nonce.
HOOK = textwrap.dedent(
    """
    import atexit, json, os, runpy, sys, time
    sys.argv[0] = "powersweep"  # before the CLI loads: it sets up as the real command does
    from powersweep.sweep.loads import concurrent
    from powersweep.sweep.server import client

    LOG = open(os.environ["POWERSWEEP_BENCH_LOG"], "w")
    atexit.register(LOG.close)

    def modules():
        with open(os.environ["POWERSWEEP_BENCH_MODULES"], "w") as out:
            json.dump(sorted(sys.modules), out)

    atexit.register(modules)
    nonces = {}
    chat = client.ChatClient.chat

    async def chat_hooked(self, prompt, **kw):
        r = await chat(self, prompt, **kw)
        if kw.get("record_token_times"):
            nonces[id(r)] = prompt[len("[request "):prompt.find("]")]
        return r

    client.ChatClient.chat = chat_hooked
    window = concurrent.DecodeConcurrent.window

    async def window_hooked(self, cap_w, kind, prompt, n, length_s, phase):
        cpu0, mono0 = time.process_time(), time.monotonic()
        w, results = await window(self, cap_w, kind, prompt, n, length_s, phase)
        reqs = []
        for r in results:
            times = r.token_times_s or ()
            reqs.append({
                "nonce": nonces.pop(id(r), None), "stream": r.stream,
                "start": r.t_start_s, "first": r.t_first_token_s, "end": r.t_end_s,
                "chunks": r.chunk_tokens, "tokens": r.completion_tokens,
                "finish": r.finish_reason, "ok": r.ok,
                "per_chunk": concurrent.tokens_per_chunk(r, self.per_chunk),
                "inside": sum(1 for t in times if w.t0_s <= t <= w.t1_s),
                "before": sum(1 for t in times if t < w.t0_s),
                "after": sum(1 for t in times if t > w.t1_s),
            })
        LOG.write(json.dumps({
            "cap": cap_w, "kind": kind, "phase": phase, "n": n, "t0": w.t0_s, "t1": w.t1_s,
            "tokens": w.tokens, "failures": w.failures,
            "mono_offset": time.monotonic() - self.clock.now(), "requests": reqs,
            "cpu0": cpu0, "mono0": mono0, "cpu1": time.process_time(), "mono1": time.monotonic(),
        }) + "\\n")
        LOG.flush()
        return w, results

    concurrent.DecodeConcurrent.window = window_hooked
    sys.argv[0] = "powersweep"
    if os.environ.get("POWERSWEEP_BENCH_PROFILE"):
        import cProfile
        profile = cProfile.Profile()
        atexit.register(lambda: profile.dump_stats(os.environ["POWERSWEEP_BENCH_PROFILE"]))
        profile.enable()
    runpy.run_module("powersweep", run_name="__main__", alter_sys=True)
    """
)


@dataclass
class WindowFigures:
    """One measured window: the client's count against the server's."""

    cap: float
    kind: str
    phase: str
    t0: float
    t1: float
    measured: float
    true: float
    restarts: int
    cut: int
    # tokens the server sent inside the window, by whose request
    sent_own: float = math.nan
    sent_other: float = math.nan
    sent_other_what: dict[str, float] = field(default_factory=dict)
    counted_own: float = math.nan


@dataclass
class SweepFigures:
    """One sweep's figures."""

    streams: int
    wall_s: float
    cpu_s: float
    tokens_sent: float
    server_cpu_s: float
    load_start: float
    load_end: float
    windows: list[WindowFigures]
    status: str
    # the CPU and the tokens sent while the windows ran (the load's own calls), and before the
    # first one opened (imports, warm-up, scheduling check, settling)
    window_cpu_s: float = math.nan
    window_tokens: float = math.nan
    before_cpu_s: float = math.nan
    before_tokens: float = math.nan
    # the CPU of importing the modules the sweep loaded (and the interpreter's start), measured
    # apart in a fresh process: the part of the figure that no sweep length changes
    imports_cpu_s: float = math.nan

    @property
    def window_cpu_s_per_1k(self) -> float:
        return 1000 * self.window_cpu_s / self.window_tokens if self.window_tokens else math.nan

    @property
    def measured(self) -> float:
        return sum(w.measured for w in self.windows if w.phase == "concurrent")

    @property
    def true(self) -> float:
        return sum(w.true for w in self.windows if w.phase == "concurrent")

    @property
    def ratio(self) -> float:
        return self.measured / self.true if self.true > 0 else math.nan

    @property
    def cpu_s_per_1k(self) -> float:
        return 1000 * self.cpu_s / self.tokens_sent if self.tokens_sent > 0 else math.nan

    @property
    def server_cpu_pct(self) -> float:
        return 100 * self.server_cpu_s / self.wall_s if self.wall_s > 0 else math.nan

    @property
    def load(self) -> float:
        return max(self.load_start, self.load_end)


class _Server:
    """The simulated server in its own process."""

    def __init__(self, per_stream_tps: float, restart_s: float) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, repr(per_stream_tps), repr(restart_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self._ask(None)
        if not self.url.startswith("http"):
            raise RuntimeError(f"the server process did not start: {self.url!r}")

    def _ask(self, line: str | None) -> str:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        if line is not None:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        return self._proc.stdout.readline().strip()

    def tokens_between(self, t0_mono: float, t1_mono: float) -> float:
        return float(self._ask(f"span {t0_mono!r} {t1_mono!r}"))

    def cpu_s(self) -> float:
        return float(self._ask("cpu"))

    def served(self, path: Path) -> list[dict[str, Any]]:
        if self._ask(f"dump {path}") != "ok":
            raise RuntimeError("the server process did not dump its requests")
        return [json.loads(line) for line in path.read_text().splitlines()]

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)


def sweep_args(url: str, streams: int, out: Path, window_s: float, smoke: bool) -> list[str]:
    """The CLI's arguments: two caps, fixed settle, no thermal wait or confirm; each point
    measures a first round of ``window_s / 3`` per prompt and more rounds up to ``window_s``."""
    args = [
        "--simulate", "rtx3090-air", "--url", url,
        "--load-mode", "decode-concurrent", "--concurrency", str(streams),
        "--caps", "350,300", "--cooling", "air", "--quiet", "--no-charts", "--out", str(out),
        "--settle", "fixed", "--settle-seconds", "1" if smoke else "2",
        "--thermal-wait-seconds", "0", "--no-confirm",
        "--target-cap-seconds", f"{window_s:g}", "--min-cap-seconds", f"{window_s / 3:g}",
        "--warmup-requests", "1" if smoke else "2",
    ]  # fmt: skip
    return args


def attribute(
    win: dict[str, Any], served: list[dict[str, Any]], offset: float
) -> tuple[float, float, dict[str, float], float]:
    """Tokens the server sent inside a window: to the window's own requests, to others (by the
    kind of their nonce), and what the client counted of its own requests (inside)."""
    own = {r["nonce"] for r in win["requests"] if r["nonce"]}
    a, b = win["t0"] + offset, win["t1"] + offset
    sent_own = sent_other = 0.0
    other: dict[str, float] = {}
    for rec in served:
        k = sum(n for t, n in zip(rec["t"], rec["n"], strict=True) if a <= t <= b)
        if not k:
            continue
        if rec["nonce"] in own:
            sent_own += k
        else:
            sent_other += k
            nonce = rec["nonce"] or "?"
            what = "keep-busy" if nonce.startswith("busy-") else "other window"
            other[what] = other.get(what, 0.0) + k
    counted = sum(r["inside"] * r["per_chunk"] for r in win["requests"])
    return sent_own, sent_other, other, counted


def run_sweep(
    streams: int,
    aggregate: float,
    window_s: float,
    smoke: bool,
    keep: Path | None,
    extra: list[str] | None = None,
    profile: bool = False,
    restart_s: float = DEFAULT_RESTART_S,
) -> SweepFigures:
    """One sweep (the CLI in a child process) against a fresh server process."""
    server = _Server(aggregate / streams, restart_s)
    work = Path(tempfile.mkdtemp(prefix=f"bench-sweep-{streams}-", dir=keep))
    log = work / "windows.jsonl"
    env = {
        **os.environ,
        "POWERSWEEP_BENCH_LOG": str(log),
        "POWERSWEEP_BENCH_MODULES": str(work / "modules.json"),
        "POWERSWEEP_STATE_DIR": str(work),
    }
    env.pop("MPLBACKEND", None)
    if profile:
        env["POWERSWEEP_BENCH_PROFILE"] = str(work / "child.prof")
    try:
        load_start = os.getloadavg()[0]
        server_cpu0 = server.cpu_s()
        cmd = [sys.executable, "-c", HOOK, *sweep_args(server.url, streams, work, window_s, smoke)]
        cmd += extra or []
        mono0 = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        output = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        mono1 = time.monotonic()
        server_cpu = server.cpu_s() - server_cpu0
        load_end = os.getloadavg()[0]
        if proc.returncode != 0:
            sys.stdout.write(output.decode(errors="replace"))
            raise RuntimeError(f"the sweep at {streams} streams exited {proc.returncode}")
        tokens_sent = server.tokens_between(mono0, mono1)
        served = server.served(work / "served.jsonl")
        windows = []
        window_cpu = window_tokens = 0.0
        records = [json.loads(line) for line in log.read_text().splitlines()]
        for win in records:
            window_cpu += win["cpu1"] - win["cpu0"]
            window_tokens += server.tokens_between(win["mono0"], win["mono1"])
        for win in records:
            offset = win["mono_offset"]
            true = server.tokens_between(win["t0"] + offset, win["t1"] + offset)
            starts: dict[int, int] = {}
            for r in win["requests"]:
                starts[r["stream"]] = starts.get(r["stream"], 0) + 1
            f = WindowFigures(
                cap=win["cap"],
                kind=win["kind"],
                phase=win["phase"],
                t0=win["t0"],
                t1=win["t1"],
                measured=win["tokens"],
                true=true,
                restarts=sum(k - 1 for k in starts.values()),
                cut=sum(1 for r in win["requests"] if r["finish"] == "deadline"),
            )
            f.sent_own, f.sent_other, f.sent_other_what, f.counted_own = attribute(
                win, served, offset
            )
            windows.append(f)
        run_dirs = [p for p in work.iterdir() if p.is_dir()]
        meta = json.loads((run_dirs[0] / "run.json").read_text()) if run_dirs else {}
        return SweepFigures(
            streams=streams,
            wall_s=mono1 - mono0,
            cpu_s=usage.ru_utime + usage.ru_stime,
            tokens_sent=tokens_sent,
            server_cpu_s=server_cpu,
            load_start=load_start,
            load_end=load_end,
            windows=windows,
            status=str(meta.get("status", "?")),
            window_cpu_s=window_cpu,
            window_tokens=window_tokens,
            before_cpu_s=records[0]["cpu0"] if records else math.nan,
            before_tokens=server.tokens_between(mono0, records[0]["mono0"]) if records else 0,
            imports_cpu_s=imports_cpu_s(work / "modules.json"),
        )
    finally:
        server.close()


# Imports the modules named in a JSON list (not the entry points, which would run a command)
# and prints the process's CPU seconds, the interpreter's start included.
IMPORTS = textwrap.dedent(
    """
    import importlib, json, sys, time
    for name in json.load(open(sys.argv[1])):
        if name.split(".")[-1] in ("__main__", "__mp_main__") or name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except Exception:
            pass
    print(time.process_time())
    """
)


def imports_cpu_s(modules: Path) -> float:
    """CPU seconds a fresh process spends importing the modules a sweep loaded (the lowest of
    three tries: the figure is the import work, not the machine's noise)."""
    if not modules.exists():
        return math.nan
    tries = []
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", IMPORTS, str(modules)],
            capture_output=True,
            text=True,
            check=True,
            # as the sweep's own process: no backend chosen, one BLAS thread (as the CLI sets)
            env={
                **{k: v for k, v in os.environ.items() if k != "MPLBACKEND"},
                "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1"),
            },
        )
        tries.append(float(out.stdout.strip().splitlines()[-1]))
    return min(tries)


def print_windows(f: SweepFigures) -> None:
    print(
        f"  {'cap':>5} {'kind':>4} {'t0':>7} {'t1':>7} {'measured':>8} {'true':>8} "
        f"{'ratio':>6} {'restarts':>8} {'cut':>4} {'own sent':>8} {'counted':>8} {'others':>7}"
    )
    for w in f.windows:
        ratio = w.measured / w.true if w.true > 0 else math.nan
        what = ", ".join(f"{k} {v:.0f}" for k, v in sorted(w.sent_other_what.items()))
        print(
            f"  {w.cap:>5.0f} {w.kind:>4} {w.t0:>7.2f} {w.t1:>7.2f} {w.measured:>8.0f} "
            f"{w.true:>8.0f} {ratio:>6.3f} {w.restarts:>8} {w.cut:>4} {w.sent_own:>8.0f} "
            f"{w.counted_own:>8.0f} {w.sent_other:>7.0f}" + (f"  ({what})" if what else "")
        )


def verdicts(rows: list[SweepFigures]) -> tuple[list[str], bool]:
    """Each figure against its goal, one line each; and whether all were met."""
    out, met = [], True
    for f in rows:
        ok = f.cpu_s_per_1k <= CPU_GOAL_S_PER_1K
        met &= ok
        out.append(
            f"CPU per 1k tokens at {f.streams:>3} streams: {f.cpu_s_per_1k:.4f} core-s "
            f"(goal <= {CPU_GOAL_S_PER_1K}) {'MET' if ok else 'NOT MET'} "
            f"[load average {f.load:.2f}]"
        )
        ok = f.ratio >= RATIO_GOAL
        met &= ok
        out.append(
            f"measured/true at {f.streams:>3} streams: {f.ratio:.4f} "
            f"(goal >= {RATIO_GOAL}) {'MET' if ok else 'NOT MET'} [load average {f.load:.2f}]"
        )
    return out, met


def plumbing_problems(rows: list[SweepFigures]) -> list[str]:
    """Figures that could not have been measured (NaN, zero, no window): the smoke check."""
    problems = []
    for f in rows:
        for name in (
            "cpu_s",
            "tokens_sent",
            "measured",
            "true",
            "ratio",
            "cpu_s_per_1k",
            "imports_cpu_s",
        ):
            value = getattr(f, name)
            if not (math.isfinite(value) and value > 0):
                problems.append(f"{name} at {f.streams} streams is {value!r}")
        if not any(w.phase == "concurrent" for w in f.windows):
            problems.append(f"no measured window at {f.streams} streams")
        if f.status != "complete":
            problems.append(f"the sweep at {f.streams} streams ended {f.status!r}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default=None, help="stream counts (default 64,256)")
    parser.add_argument("--aggregate", type=float, default=3000.0, help="server tokens/s, total")
    parser.add_argument(
        "--window", type=float, default=None, help="--target-cap-seconds of the sweep (10)"
    )
    parser.add_argument(
        "--max-load",
        type=float,
        default=DEFAULT_MAX_LOAD,
        help="retry a sweep once when the 1-minute load average per core was above this",
    )
    parser.add_argument("--smoke", action="store_true", help="a short sweep at 8 streams")
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs under this dir")
    parser.add_argument("--windows", action="store_true", help="print each window's figures")
    parser.add_argument(
        "--sweep-args", default="", help="more CLI options for the sweep (they override these)"
    )
    parser.add_argument(
        "--restart-s",
        type=float,
        default=DEFAULT_RESTART_S,
        help="mean seconds a window's request streams before the server ends it (0: as asked)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run the sweep under cProfile (child.prof in its --keep directory; slower)",
    )
    args = parser.parse_args()
    streams = args.streams or ("8" if args.smoke else "64,256")
    window_s = args.window or (3.0 if args.smoke else 10.0)
    cores = os.cpu_count() or 1
    print(
        f"{'streams':>7} {'wall s':>7} {'CPU s':>7} {'tokens':>8} {'CPU s/1k':>9} "
        f"{'measured':>9} {'true':>9} {'ratio':>7} {'windows':>7} {'restarts':>8} "
        f"{'server CPU':>10} {'load avg':>8}"
    )
    rows = []
    for n in (int(x) for x in streams.split(",")):
        for attempt in range(1 if args.smoke else 2):
            f = run_sweep(
                n,
                args.aggregate,
                window_s,
                args.smoke,
                args.keep,
                args.sweep_args.split(),
                profile=args.profile,
                restart_s=args.restart_s,
            )
            busy = f.load / cores > args.max_load
            print(
                f"{n:>7} {f.wall_s:>7.1f} {f.cpu_s:>7.2f} {f.tokens_sent:>8.0f} "
                f"{f.cpu_s_per_1k:>9.4f} {f.measured:>9.0f} {f.true:>9.0f} {f.ratio:>7.4f} "
                f"{len(f.windows):>7} {sum(w.restarts for w in f.windows):>8} "
                f"{f.server_cpu_pct:>9.0f}% {f.load:>8.2f}"
                + ("  (busy machine: measured again)" if busy and attempt == 0 else ""),
                flush=True,
            )
            print(
                f"  where: {f.before_cpu_s:.2f} CPU s for {f.before_tokens:.0f} tokens before "
                f"the first window (imports, warm-up, checks); {f.window_cpu_s:.2f} CPU s for "
                f"{f.window_tokens:.0f} tokens inside the load's window calls "
                f"({f.window_cpu_s_per_1k:.4f} s/1k); imports alone {f.imports_cpu_s:.2f} CPU s "
                f"({1000 * f.imports_cpu_s / f.tokens_sent:.4f} s/1k of this sweep's figure)"
            )
            if args.windows or args.smoke:
                print_windows(f)
            if not busy:
                break
        rows.append(f)
    print(
        f"machine: {cores} cores, load average {os.getloadavg()[0]:.2f} at the end "
        f"(each sweep's figure is the higher of its start's and its end's)"
    )
    lines, met = verdicts(rows)
    for line in lines:
        print(line)
    if args.smoke:
        problems = plumbing_problems(rows)
        for p in problems:
            print(f"smoke: {p}")
        print("smoke: figures " + ("NOT measured" if problems else "finite and positive"))
        return 1 if problems else 0
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
