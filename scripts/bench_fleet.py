"""Benchmark: ``powersweep fleet report`` over 1,000 run directories, against the 10 s target.

Writes a synthetic fleet once (1,000 simulated rtx4090-air cards with a 3% spread and a few
planted outliers, each a run directory following the run contract, written from the
simulator's ground truth with measurement noise, plus the analysis.json a sweep leaves: a minute
or two), then times what ``powersweep fleet report DIR`` does in one process: discover, load,
group, write fleet.json and fleet.md, draw the two charts. Timed twice: as sweeps leave runs
(each fresh analysis.json reused: the target) and with ``--reanalyze`` (every caps.csv analysed).

Run: ``.venv/bin/python scripts/bench_fleet.py [--runs N] [--repeat N] [--keep DIR]``
(with ``--keep``, an existing fleet in DIR is reused).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from powersweep.analysis import analyze, load_curve
from powersweep.analysis.fleet_answer import FleetOptions, fleet_report
from powersweep.analysis.fleet_result_types import FleetReport
from powersweep.analysis.fleet_summary import write_fleet_outputs
from powersweep.plots.fleet_charts import render_fleet_charts
from powersweep.sim.synthetic_fleet import synthetic_fleet

TARGET_S = 10.0


def make_fleet(root: Path, n: int) -> None:
    """Write ``n`` synthetic runs under ``root`` (skipped when they are already there)."""
    if len(list(root.glob("*/*/analysis.json"))) == n:
        return
    outliers = {f"node{k:03d}": "hot" for k in range(7, n, 97)}
    outliers.update({f"node{k:03d}": "low-envelope" for k in range(42, n, 211)})
    for card in synthetic_fleet(root, "rtx4090-air~0.03", n, outliers=outliers, seed=0):
        # what a sweep leaves beside its CSVs (its bootstrap does not change these fields)
        result = analyze(load_curve(card.run_dir), bootstrap=0).to_json()
        (card.run_dir / "analysis.json").write_text(json.dumps(result, indent=2) + "\n")


def time_report(root: Path, out: Path, repeat: int, reanalyze: bool) -> tuple[float, FleetReport]:
    """Median wall seconds of the whole fleet report, and the last report."""
    times = []
    fleet = FleetReport()
    for _ in range(repeat):
        t0 = time.perf_counter()
        fleet = fleet_report([root], FleetOptions(tariff_per_kwh=0.3, reanalyze=reanalyze))
        write_fleet_outputs(fleet, out)
        render_fleet_charts(fleet, out / "charts")
        times.append(time.perf_counter() - t0)
    return statistics.median(times), fleet


def main(argv: list[str] | None = None) -> int:
    """Time the fleet report; print the wall seconds and the ratio to the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="run directories in the fleet")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs (median reported)")
    parser.add_argument("--keep", type=Path, default=None, help="keep (or reuse) the fleet here")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    root = args.keep or tmp / "fleet"
    try:
        started = time.perf_counter()
        make_fleet(root, args.runs)
        print(f"fleet of {args.runs} runs ready in {time.perf_counter() - started:.1f} s")
        wall, fleet = time_report(root, tmp / "report", args.repeat, reanalyze=False)
        cold, _ = time_report(root, tmp / "cold", args.repeat, reanalyze=True)
        groups = fleet.groups
        print(
            f"fleet report over {fleet.n_runs} runs: {wall:.2f} s "
            f"(target {TARGET_S:.0f} s, ratio {wall / TARGET_S:.2f}); "
            f"{len(groups)} group(s), {sum(len(g.outliers) for g in groups)} outlier(s)"
        )
        print(
            f"with --reanalyze (every caps.csv analysed): {cold:.2f} s "
            f"(ratio {cold / TARGET_S:.2f})"
        )
        return 0 if wall <= TARGET_S else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
