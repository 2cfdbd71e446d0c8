"""One point measured again and again against a real llama.cpp server on the CPU: does each
run's stated interval hold the point's rate?

A real ``llama-server`` (``scripts/build_real_servers.sh``) serves a generated model on the CPU;
a simulated card stands beside it (``--simulate rtx3090-air --url ...``, as the real-server
tests run). The same one-cap sweep runs ``--repeats`` times, each a run of its own (its own
warm-up, its own reference re-read). For each run the script prints the metric's TPS and its
stated 95% half-width (``tps_u95_pct``), then the scatter of the repeats (SD, range) and how
many stated intervals contain the median of all the repeats (the goal: at least 7 of 8). Every
figure is in the run's own seconds; each sweep is bounded by its windows (``--max-window``).

It also prints the between-run floor this measurement asks for: the variance of the repeats'
log-rates less the mean variance each run stated for its own reading (its blocks' and its
run-to-run term's, the floor it already carried left out), as a standard deviation (0 where the
runs' own terms explain the scatter). :data:`powersweep.analysis.precision.REAL_SERVER_FLOOR_REL`
comes from it (docs/precision.md).

Usage: python scripts/bench_repeat_point.py [--repeats 8] [--model medium] [--max-window 6]
           [--load-mode decode-single] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

READY_TIMEOUT_S = 90.0
# as tests/realservers: one thread, no spin-wait (the machine is shared)
SERVER_FLAGS = ("-c", "4096", "-t", "1", "--poll", "0", "--metrics", "--no-webui")


def server_bin() -> Path:
    env = os.environ.get("POWERSWEEP_REAL_SERVERS")
    base = Path(env).expanduser() if env else Path.home() / ".cache/powersweep/real-servers"
    return base / "bin" / "llama-server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def llama_server(model: Path, log: Path) -> Iterator[str]:
    """A running llama-server on a free loopback port; stopped by its PID."""
    import httpx

    port = free_port()
    argv = [str(server_bin()), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen([*argv, *SERVER_FLAGS], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"llama-server did not start: see {log}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def one_run(url: str, out: Path, load_mode: str, max_window_s: float, cap_w: float) -> Path:
    """A one-cap sweep on the simulated card against the real server; its run directory."""
    from powersweep.cli.rigs import build_rig
    from powersweep.sweep.options import (
        Cooling,
        LoadMode,
        LoadOptions,
        MeasureOptions,
        OutputOptions,
        PointOptions,
        SafetyOptions,
        ServerOptions,
        SettleMode,
        SweepOptions,
    )
    from powersweep.sweep.sampling.windows import WindowPolicy
    from powersweep.sweep.session import run_session

    load: dict[str, Any] = {"concurrency": "4"} if load_mode == "decode-concurrent" else {}
    options = SweepOptions(
        simulate="rtx3090-air",
        load=LoadOptions(mode=LoadMode(load_mode), warmup_requests=2, **load),
        server=ServerOptions(url=url),
        points=PointOptions(caps=(cap_w,)),
        # in real time the wait for a steady temperature costs seconds a point, and the
        # simulated card beside a real server has nothing to wait for
        measure=MeasureOptions(
            settle_s=0.5,
            settle_mode=SettleMode.FIXED,
            thermal_wait_max_s=0.0,
            sample_interval_s=0.1,
            windows=WindowPolicy(max_s=max_window_s),
        ),
        output=OutputOptions(out=out, cooling=Cooling.AIR),
        safety=SafetyOptions(state_dir=out / "state"),
    )
    return run_session(options, build_rig).run_dir


def first_row(run: Path) -> dict[str, str]:
    """The cap's first row in caps.csv (the reading a user would take)."""
    import csv

    with open(run / "caps.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("status") == "ok"]
    if not rows:
        raise SystemExit(f"no usable row in {run}/caps.csv")
    return rows[0]


def own_variance(row: dict[str, str]) -> float:
    """The relative variance a run stated for its reading's TPS from what it measured: its own
    blocks' and its run-to-run term's (not the floor)."""
    from powersweep.analysis.precision import t_quantile

    dof = num(row, "tps_within_dof")
    within = num(row, "tps_within_u95_pct") / 100.0 / t_quantile(dof if dof > 0 else math.inf)
    between = num(row, "run_to_run_tps_sd_pct") / 100.0
    return within**2 + (between**2 if math.isfinite(between) else 0.0)


def num(row: dict[str, str], key: str) -> float:
    try:
        return float(row.get(key) or "nan")
    except ValueError:
        return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--model", choices=("tiny", "medium"), default="medium")
    ap.add_argument("--max-window", type=float, default=6.0, help="--target-cap-seconds")
    ap.add_argument("--load-mode", default="decode-single")
    ap.add_argument("--cap", type=float, default=300.0)
    ap.add_argument("--out", type=Path, default=None, help="keep the run directories here")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = ap.parse_args()
    if not os.access(server_bin(), os.X_OK):
        print(f"no llama-server at {server_bin()}: run scripts/build_real_servers.sh")
        return 2
    from tests.realservers.tinymodel import SPECS, write_model

    metric = "prefill_tps" if args.load_mode == "prefill-heavy" else "narr_tps"
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        out = args.out or tmp / "runs"
        out.mkdir(parents=True, exist_ok=True)
        model = write_model(tmp / f"{args.model}.gguf", SPECS[args.model])
        rows: list[dict[str, Any]] = []
        with llama_server(model, tmp / "server.log") as url:
            for i in range(args.repeats):
                t0 = time.monotonic()
                run = one_run(url, out, args.load_mode, args.max_window, args.cap)
                row = first_row(run)
                meta = json.loads((run / "run.json").read_text())
                rows.append(
                    {
                        "run": run.name,
                        "tps": num(row, metric),
                        "tps_u95_pct": num(row, "tps_u95_pct"),
                        "tps_per_w": num(row, "tps_per_w"),
                        "tps_per_w_u95_pct": num(row, "tps_per_w_u95_pct"),
                        "stop_reason": row.get("stop_reason", ""),
                        "own_var": own_variance(row),
                        "run_to_run": meta.get("run_to_run"),
                        "wall_s": time.monotonic() - t0,
                    }
                )
                r = rows[-1]
                print(
                    f"run {i + 1}: {r['tps']:.2f} TPS +-{r['tps_u95_pct']:.2f}% "
                    f"({r['stop_reason']}, {r['wall_s']:.0f} s)",
                    flush=True,
                )
    tps = [r["tps"] for r in rows]
    med = statistics.median(tps)
    inside = [abs(r["tps"] - med) <= r["tps"] * r["tps_u95_pct"] / 100.0 for r in rows]
    sd = statistics.stdev(tps) / statistics.mean(tps) if len(tps) > 1 else float("nan")
    print(
        f"median {med:.2f} TPS; SD {100 * sd:.2f}%, range {100 * (max(tps) - min(tps)) / med:.2f}%;"
        f" stated +-{min(r['tps_u95_pct'] for r in rows):.2f}..."
        f"{max(r['tps_u95_pct'] for r in rows):.2f}%; {sum(inside)} of {len(rows)} intervals "
        "contain the median"
    )
    logs = [math.log(t) for t in tps]
    own = [r["own_var"] for r in rows if math.isfinite(r["own_var"])]
    excess = statistics.variance(logs) - (statistics.mean(own) if own else 0.0)
    floor = math.sqrt(max(0.0, excess))
    print(
        f"between-run SD {100 * statistics.stdev(logs):.2f}%, the runs' own terms "
        f"{100 * math.sqrt(statistics.mean(own)) if own else math.nan:.2f}%: floor "
        f"{100 * floor:.2f}%"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "median": med, "inside": sum(inside), "floor": floor})
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
