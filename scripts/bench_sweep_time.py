#!/usr/bin/env python3
"""Benchmark what a sweep costs in run seconds, and whether its windows hold their bound (issue 21).

Runs real simulated sweeps through the CLI, as a user does, and prints each figure against its
goal:

- the README's RTX 3090 sweep (``--simulate rtx3090-air --cooling air --load-mode
  decode-single``: 21 caps, 10 s windows) dense and adaptive, in run seconds (what a real card
  would take), beside club-3090's ``power-cap-sweep.sh`` (8 min 12 s = 492 s for the same 21
  caps). Goals: dense <= 470 s, adaptive <= 250 s, each with the sweet spot and the boost plateau
  the dense sweep finds;
- the per-point overhead beyond the windows (settle, hand-over, margins);
- each point's measured window against the target, for a fast card (RTX 5090), a slow one (RTX
  3090, 31 TPS) and a server that ignores ``max_tokens``: every window <= 2 x target + 1.5 s.

The sweeps run on the simulated rig's virtual time (the default): their run seconds are the
model's, whatever the machine does meanwhile, and one seed gives the same figures every time.
``--time-scale X`` runs them on scaled real time instead, where the simulation's own wall-time
costs count ``X`` times over (an upper bound).

Usage: ``python scripts/bench_sweep_time.py [--time-scale X] [--seed 1]``. Exit code 0.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ANCHOR_S = 492.0  # club-3090's power-cap-sweep.sh: 21 caps of an RTX 3090 in 8 min 12 s
GOALS_S = {"dense": 470.0, "adaptive": 250.0}
WINDOW_S = 10.0
MARGIN_PER_POINT_S = 1.5


def sweep(out: Path, scale: float | None, seed: int, *args: str) -> Path:
    """Run one simulated sweep through the CLI (virtual time unless ``scale``); its run
    directory."""
    clock = ("--time-scale", f"{scale:g}") if scale is not None else ()
    cmd = [
        sys.executable, "-m", "powersweep", "--cooling", "air", "--quiet", "--no-charts",
        *clock, "--seed", str(seed), "--out", str(out), *args,
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({' '.join(args)}): {done.stderr.strip()[-400:]}")
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def facts(run: Path) -> dict[str, Any]:
    """Run seconds, points, windows and the answer of one run directory."""
    meta = json.loads((run / "run.json").read_text())
    analysis = json.loads((run / "analysis.json").read_text())
    with (run / "caps.csv").open() as f:
        caps = list(csv.DictReader(f))
    timing = meta["timing"]
    total = timing["ended_s"] - timing["started_s"]
    windows = [float(c["window_s"]) for c in caps if c["window_s"]]
    settles = [float(c["settle_s"]) for c in caps if c["settle_s"]]
    prompts = [1 if c["reason"] == "confirm" else 2 for c in caps]
    warm = (meta.get("warmup") or {}).get("duration_s") or 0.0
    overhead = (total - sum(windows) - warm) / max(1, len(caps))
    plateaus = [(p["start_w"], p["end_w"]) for p in analysis["plateaus"]]
    over = [w - (n * WINDOW_S + MARGIN_PER_POINT_S) for w, n in zip(windows, prompts, strict=True)]
    return {
        "total_s": total,
        "points": len(caps),
        "distinct": len({c["cap_w"] for c in caps}),
        "warmup_s": warm,
        "settle_s": sum(settles) / max(1, len(settles)),
        "overhead_s": overhead,
        "max_over_s": max(over, default=0.0),
        "sweet_w": analysis["sweet_spot"]["cap_w"],
        "plateaus": plateaus,
        "truth_w": meta["simulation"]["ground_truth"]["sweet_spot"]["cap_w"],
    }


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def _clock(scale: float | None) -> str:
    if scale is None:
        return "virtual time: the model's run seconds"
    return f"scale {scale:g}: wall costs count {scale:g}x"


def readme_sweeps(tmp: Path, scale: float | None, seed: int) -> None:
    print(f"README sweep: rtx3090-air decode-single, 21 caps, 10 s windows ({_clock(scale)})")
    print(f"  club-3090 power-cap-sweep.sh: {ANCHOR_S:.0f} s")
    base = ("--simulate", "rtx3090-air", "--load-mode", "decode-single")
    got: dict[str, dict[str, Any]] = {}
    for strategy in ("dense", "adaptive"):
        got[strategy] = facts(sweep(tmp / strategy, scale, seed, *base, "--strategy", strategy))
    dense = got["dense"]
    for strategy, f in got.items():
        same = f["sweet_w"] == dense["sweet_w"] and f["plateaus"] == dense["plateaus"]
        print(
            f"  {strategy:8s} {f['total_s']:6.0f} s (goal <= {GOALS_S[strategy]:.0f}: "
            f"{verdict(f['total_s'] <= GOALS_S[strategy])}), {f['distinct']} caps "
            f"({f['points']} points with re-measured ones), warm-up {f['warmup_s']:.1f} s, "
            f"settle {f['settle_s']:.2f} s/point"
        )
        print(
            f"           sweet spot {f['sweet_w']:g} W (truth {f['truth_w']:g} W), plateaus "
            f"{f['plateaus']}: {'same as dense' if same else 'NOT the dense answer'} "
            f"({verdict(same)})"
        )
        print(
            f"           overhead beyond the windows {f['overhead_s']:.2f} s/point "
            f"(settle, hand-over, margins; {_clock(scale)})"
        )


def windows(tmp: Path, scale: float | None, seed: int) -> None:
    print(f"windows against the target ({WINDOW_S:g} s per prompt, <= 2 x target + 1.5 s a point)")
    cases = {
        "fast card (rtx5090-air)": ("--simulate", "rtx5090-air", "--caps", "575,500,425,350"),
        "slow card (rtx3090-air)": ("--simulate", "rtx3090-air", "--caps", "390,330,270,210"),
        "server ignoring max_tokens": (
            "--simulate", "rtx3090-air", "--caps", "390,330,270,210", "--sim-ignore-max-tokens",
        ),
    }  # fmt: skip
    for i, (name, args) in enumerate(cases.items()):
        f = facts(sweep(tmp / f"w{i}", scale, seed, *args))
        print(
            f"  {name:28s} worst point {f['max_over_s']:+.2f} s over its bound "
            f"({verdict(f['max_over_s'] <= 0.0)})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=None)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        readme_sweeps(Path(tmp), args.time_scale, args.seed)
        windows(Path(tmp), args.time_scale, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
