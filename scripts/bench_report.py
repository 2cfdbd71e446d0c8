"""Benchmark: analyse and plot one 38-cap run, against the 2 s target.

Synthesises a 4090-like run directory (the simulated rtx4090-air decode-single ground truth over
its 38 default caps, measured with realistic noise: 40 load ticks and 10 settle ticks per cap at
0.5 s, i.e. ~1,900 samples.csv rows, and 6 requests per cap), then times what
``powersweep analyze`` + ``powersweep plot`` do on it (load, analysis with the 1,000-resample
bootstrap, analysis.json, summary.md and the four PNG charts) in one process.

Run: ``.venv/bin/python scripts/bench_report.py [--repeat N] [--keep DIR]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from powersweep.analysis.synthetic import NoiseModel, synthesize_run
from powersweep.report import build_report
from powersweep.sim.profiles import get_profile
from powersweep.sim.sim_rig import ground_truth
from powersweep.sweep.gpu import PowerEnvelope
from powersweep.sweep.planning.caps import default_caps

TARGET_S = 2.0
PROFILE = "rtx4090-air"


def make_run(out_dir: Path) -> Path:
    """Write the synthetic 38-cap run into ``out_dir``."""
    p = get_profile(PROFILE)
    env = PowerEnvelope(p.min_limit_w, p.default_limit_w, p.max_limit_w, p.user_limit_w)
    caps = default_caps(env)
    truth = ground_truth([p], "decode-single", caps).to_dict()
    gpu = {
        "name": p.gpu_name,
        "min_limit_w": p.min_limit_w,
        "default_limit_w": p.default_limit_w,
        "max_limit_w": p.max_limit_w,
        "slowdown_temp_c": p.slowdown_temp_c,
        "mem_clock_mhz": p.mem_clock_mhz,
    }
    noise = NoiseModel(load_ticks=40, settle_ticks=10, requests_per_cap=3)
    return synthesize_run(truth, gpu, out_dir, seed=0, noise=noise)


def main(argv: list[str] | None = None) -> int:
    """Time analyse + plot; print the wall seconds and the ratio to the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="timed runs (median reported)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the run directory here")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        run = make_run(args.keep or tmp / "run")
        n_caps = sum(1 for _ in (run / "caps.csv").open()) - 1
        n_samples = sum(1 for _ in (run / "samples.csv").open()) - 1
        times = []
        for _ in range(max(1, args.repeat)):
            start = time.perf_counter()
            report = build_report(run, charts=True, formats=("png",))
            times.append(time.perf_counter() - start)
        wall = statistics.median(times)
        charts = sorted(p.name for p in report.paths if p.parent.name == "charts")
        print(
            f"analyse+plot of {n_caps} caps ({n_samples} samples, charts: {', '.join(charts)}): "
            f"{wall:.2f} s wall; {wall / TARGET_S:.2f}x the {TARGET_S:g} s target "
            f"({'within' if wall <= TARGET_S else 'over'})"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
