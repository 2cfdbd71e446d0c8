#!/usr/bin/env python3
"""Coverage of the sweep's stated 95% intervals under each of the world's noise models.

For each model of ``--sim-world`` alone (``powersweep.sim.world.MODELS``) and ``none`` (the
simulator's own noise: the control), it runs short simulated sweeps in each load mode
(decode-single, decode-concurrent at 4 streams, prefill-heavy) over ``--seeds`` seeds: by
default nine caps of the RTX 3090 profile on its 10 W grid (``--caps``), run as ``powersweep``
runs them (its CLI's ``main``, in worker processes). Every measured point (a caps.csv row with
status ``ok``) is compared with its truth (``powersweep.sim.world_truth.point_truths``: the
ground truth with the world's noise, docs/world-noise.md): TPS (the metric's, against
``tps_u95_pct``), draw (``power_u95_pct``) and TPS/W (``tps_per_w_u95_pct``). A point is
covered when ``|measured - true| / true`` is at most its stated half-width; a point that states
none is counted apart (``unstated``), as are the rows not ``ok`` (``not ok``: suspect or failed
points, which no answer uses). The goal is 90-99%.

It prints one table (coverage % with covered/points per model, load mode and figure, and each
model over all modes) and, with ``--json PATH``, writes the same figures.

Usage: ``python scripts/bench_coverage.py [--seeds N] [--models a,b] [--modes m,n]
[--caps W,W,...] [--profile P] [--jobs N] [--json PATH] [--keep DIR]``. About a second of CPU
per sweep: the default (8 models x 3 modes x 4 seeds) takes about two minutes of CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from powersweep.cli import main as powersweep_main
from powersweep.cli.sweep import PARTIAL_EXIT
from powersweep.sim.world import MODELS
from powersweep.sim.world_truth import point_truths

MODES = ("decode-single", "decode-concurrent", "prefill-heavy")
# Nine caps on the default 10 W grid from the RTX 3090's sweet spot (290 W) through its boost
# plateau (340 W and up, where the draw is no multiple of a sensor's step). Caps further apart
# leave each point a larger temperature step to settle from, which the control's intervals
# already miss (a first cap still heating, a last one still cooling).
DEFAULT_CAPS = "280,290,300,310,320,330,340,350,360"
FIGURES = (("tps", "tps_u95_pct"), ("power_w", "power_u95_pct"), ("tps_per_w", "tps_per_w_u95_pct"))
FIGURE_NAMES = {"tps": "TPS", "power_w": "draw", "tps_per_w": "TPS/W"}


@dataclass
class Tally:
    """Coverage of one figure over a set of points."""

    model: str
    mode: str
    figure: str
    covered: int = 0
    points: int = 0
    unstated: int = 0
    not_ok: int = 0

    @property
    def coverage(self) -> float:
        return self.covered / self.points if self.points else math.nan


def _sweep(job: tuple[list[str], str]) -> tuple[int, str]:
    """Run one sweep in this worker; its exit code and what it printed to stderr."""
    args, out = job
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = powersweep_main([*args, "--out", out])
    return rc, err.getvalue()


def sweep_args(model: str, mode: str, seed: int, caps: str, profile: str) -> list[str]:
    """The ``powersweep`` arguments of one sweep."""
    args = ["sweep", "--simulate", profile, "--cooling", "air", "--load-mode", mode]
    args += ["--caps", caps, "--seed", str(seed), "--quiet", "--no-charts"]
    if mode == "decode-concurrent":
        args += ["--concurrency", "4"]
    if model != "none":
        args += ["--sim-world", model]
    return args


def measured(row: dict[str, str], figure: str, mode: str) -> float:
    """A caps.csv row's figure: the metric's TPS, the draw or TPS/W."""
    key = {"tps": "prefill_tps" if mode == "prefill-heavy" else "narr_tps"}.get(figure, figure)
    try:
        return float(row[key])
    except (KeyError, ValueError):
        return math.nan


def tally_run(
    run_dir: Path, model: str, mode: str, tallies: dict[tuple[str, str, str], Tally]
) -> None:
    """Add one run's points to the tallies."""
    import csv

    with (run_dir / "caps.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row, truth in zip(rows, point_truths(run_dir), strict=True):
        for figure, stated in FIGURES:
            t = tallies.setdefault((model, mode, figure), Tally(model, mode, figure))
            if row.get("status") != "ok" or truth is None:
                t.not_ok += 1
                continue
            try:
                u = float(row.get(stated) or "nan") / 100.0
            except ValueError:
                u = math.nan
            value, true = measured(row, figure, mode), float(getattr(truth, figure))
            if not (math.isfinite(u) and math.isfinite(value)):
                t.unstated += 1
                continue
            t.points += 1
            t.covered += abs(value / true - 1.0) <= u


def _cell(t: Tally | None) -> str:
    if t is None or not t.points:
        return f"{'-':>14}"
    text = f"{100 * t.coverage:.0f}% {t.covered}/{t.points}"
    return f"{text:>14}"


def print_table(
    tallies: dict[tuple[str, str, str], Tally], models: Sequence[str], modes: Sequence[str]
) -> None:
    figures = [f for f, _ in FIGURES]
    head = f"{'model':<17} {'load mode':<18}" + "".join(f"{FIGURE_NAMES[f]:>14}" for f in figures)
    print(head + f"{'unstated':>10}{'not ok':>8}")
    for model in models:
        for mode in [*modes, "all"]:
            cells = []
            unstated = not_ok = 0
            for figure in figures:
                if mode == "all":
                    parts = [tallies.get((model, m, figure)) for m in modes]
                    t = Tally(model, "all", figure)
                    for p in parts:
                        if p is not None:
                            t.covered += p.covered
                            t.points += p.points
                            t.unstated += p.unstated
                            t.not_ok += p.not_ok
                else:
                    t = tallies.get((model, mode, figure)) or Tally(model, mode, figure)
                cells.append(_cell(t))
                unstated, not_ok = max(unstated, t.unstated), t.not_ok
            print(f"{model:<17} {mode:<18}" + "".join(cells) + f"{unstated:>10}{not_ok:>8}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4, help="seeds per model and load mode")
    parser.add_argument("--models", default=None, help="models, comma-separated (none: control)")
    parser.add_argument("--modes", default=",".join(MODES), help="load modes, comma-separated")
    parser.add_argument("--caps", default=DEFAULT_CAPS, help="caps of each sweep, W")
    parser.add_argument("--profile", default="rtx3090-air", help="simulated profile")
    parser.add_argument("--jobs", type=int, default=2, help="sweeps at once")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs in this folder")
    args = parser.parse_args(argv)
    models = args.models.split(",") if args.models else ["none", *MODELS]
    unknown = [m for m in models if m != "none" and m.split("=")[0] not in MODELS]
    modes = args.modes.split(",")
    if unknown or not set(modes) <= set(MODES) or args.seeds < 1:
        parser.error(f"models are none or {', '.join(MODELS)}; modes {', '.join(MODES)}")
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        root = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        jobs, where = [], []
        for model in models:
            for mode in modes:
                for seed in range(1, args.seeds + 1):
                    out = root / f"{model.replace('=', '_')}-{mode}-{seed}"
                    jobs.append((sweep_args(model, mode, seed, args.caps, args.profile), str(out)))
                    where.append((model, mode, out))
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(max(1, args.jobs)) as pool:
            results = pool.map(_sweep, jobs, chunksize=1)
        tallies: dict[tuple[str, str, str], Tally] = {}
        failed = 0
        for (model, mode, out), (rc, err) in zip(where, results, strict=True):
            runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
            # a partial run (too few points ok to answer) still measured its points
            if rc not in (0, PARTIAL_EXIT) or len(runs) != 1:
                failed += 1
                print(
                    f"{model} {mode} {out.name}: exit {rc}: {err.strip()[-300:]}", file=sys.stderr
                )
                continue
            tally_run(runs[0], model, mode, tallies)
    wall = time.monotonic() - started
    print(
        f"coverage of the stated 95% intervals ({args.profile}, caps {args.caps}, "
        f"{args.seeds} seeds; covered/points)"
    )
    print_table(tallies, models, modes)
    print(f"{len(jobs)} sweeps ({failed} failed) in {wall:.0f} s")
    if args.json is not None:
        report = {
            "profile": args.profile,
            "caps": args.caps,
            "seeds": args.seeds,
            "failed_sweeps": failed,
            "results": [
                {**asdict(t), "coverage": None if math.isnan(t.coverage) else t.coverage}
                for t in tallies.values()
            ],
        }
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
