#!/usr/bin/env python3
"""Benchmark dense against adaptive sweeps on the simulated rig (issues 8 and 13).

By default it runs real simulated sweeps (``scripts/bench_real_sweeps.py``): every built-in
profile in all three load modes (decode-single; decode-concurrent at 4 streams; prefill-heavy with
2 s prefills) and the replayed curves, each swept dense and adaptive through
``powersweep.sweep.session`` exactly as ``powersweep`` runs, at ``--time-scale`` (default 100) and
``--target-cap-seconds`` (default 4). It prints the distinct caps measured, the measured run-time
ratio, whether the sweet spot, the near-peak cap and the regions agree within 10 W, and the
adaptive sweep's per-cap overhead beyond the measured window converted to scale 1 (an upper
bound). Then it measures the per-cap overhead in real time (scale 1) on a short 3-cap sweep per
``--overhead-modes`` (default decode-single; ``none`` skips) and gives the verdict against 1 s.
``--baseline`` adds a second dense sweep per row (another seed): where two dense sweeps disagree,
the figure is set by noise, not by the strategy. A figure agrees when the adaptive answer is
within 10 W of the dense one or inside the dense sweep's own noise interval for it.
``--profiles`` and ``--modes`` narrow it (all of it takes several minutes).

``--model`` runs the offline model instead (a model, not a measurement; it says so): for every
built-in profile and load mode (decode-concurrent at batch 8, prefill-heavy at 8000 prompt
tokens) and the replayed curves, a dense and an adaptive sweep of modelled caps. With
``--seeds N`` it repeats every row over N sets of noise and counts, per figure, how often the
adaptive answer is off the dense one (``NO``) or off but inside dense's noise (``tied``): both
read the same values at the same caps, so these are the planner's own misses, not noise between
two sweeps (seconds for all rows).

The offline model "measures" a cap by the rig's steady state (``physics.steady_state`` for
built-in profiles, the interpolated curve with its measured-size per-cap noise for replays) plus
the noise of a measured window's median, seeded per cap so both strategies see the same value at
the same cap. Time per cap is settle + measured window: dense waits a fixed ``--settle`` seconds;
adaptive runs the real :func:`~powersweep.sweep.sampling.settle.wait_settled` on a live simulated
(or replayed) GPU on a manual clock, with the load already running (the proposed driver order), so
its settle time is what the detector would take on the simulated card. Both are then analysed by
the real analysis (``powersweep.analysis.analyze``) from a caps.csv, as ``powersweep analyze``
would.

Usage: ``python scripts/bench_strategies.py [--model [--seeds N]] [--profiles a,b] [--modes m,n]
[--replay PATH.csv ...] [--verbose]``; the replayed curves default to the published ones of ten
caps or more (tests/data/published). Exit code 0.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import math
import random
import sys
import tempfile
import tomllib
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from bench_real_sweeps import AGREE_W, agreement, verdict_text

from powersweep.analysis import analyze, load_curve, write_caps_csv
from powersweep.analysis.run_record import RunRecord
from powersweep.clock import ManualClock
from powersweep.sim.physics import Workload
from powersweep.sim.profiles import get_profile, profile_names
from powersweep.sim.replay import ReplayCurve, ReplayGpu, replay_profile
from powersweep.sim.sim_gpu import SimGpu
from powersweep.sim.sim_rig import ground_truth, workload_for
from powersweep.sweep.gpu import Gpu
from powersweep.sweep.planning.caps import default_caps
from powersweep.sweep.planning.strategy import AdaptivePlanner, CapMeasurement, plan_order
from powersweep.sweep.sampling.settle import wait_settled

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO / "tests" / "data" / "published"
# A grid this coarse is swept nearly whole by the adaptive planner (MIN_ADAPTIVE_CAPS): nothing
# to compare.
MIN_REPLAY_CAPS = 10


def published_replays() -> list[Path]:
    """The published power curves with a draw (tests/data/published) of ten caps or more: the
    outside truth the planner is replayed on."""
    manifest = tomllib.loads((PUBLISHED / "corpus.toml").read_text())["curve"]
    out = []
    for c in manifest:
        path = PUBLISHED / c["file"]
        if c["axis"] != "power" or c["draw"] not in ("measured", "derived"):
            continue
        if len(path.read_text().splitlines()) - 1 >= MIN_REPLAY_CAPS:
            out.append(path)
    return out


MODES: tuple[tuple[str, dict[str, int]], ...] = (
    ("decode-single", {}),
    ("decode-concurrent", {"concurrency": 8}),
    ("prefill-heavy", {"prompt_tokens": 8000}),
)
# Noise of one cap's result: the median of a window of 0.3 %-noisy readings, and token timing.
POWER_MEDIAN_NOISE_REL = 0.003 / math.sqrt(40.0) * 1.25
TPS_NOISE_REL = 0.002


@dataclass(frozen=True)
class Truth:
    """One cap's steady state as the offline model measures it."""

    power_w: float
    tps: float
    sm_clock_mhz: float
    temp_max_c: float = math.nan
    thermal_throttle_pct: float = math.nan

    def measurement(self) -> CapMeasurement:
        """What the planner gets from the driver's caps.csv row."""
        return CapMeasurement(
            self.power_w,
            self.tps,
            self.sm_clock_mhz,
            temp_max_c=self.temp_max_c,
            thermal_throttle_pct=self.thermal_throttle_pct,
        )


@dataclass(frozen=True)
class SweepResult:
    """One offline sweep."""

    caps: dict[float, Truth]
    reasons: list[tuple[float, str]]
    sim_time_s: float
    settle_s: list[float]
    analysis: dict[str, Any]


@dataclass(frozen=True)
class Case:
    """One benchmark case: a curve to sweep and a live GPU for settle traces."""

    name: str
    mode: str
    grid: list[float]
    measure: Callable[[float], Truth]
    make_gpu: Callable[[ManualClock], tuple[Gpu, Callable[[bool], None]]]
    default_w: float
    metric: str
    slowdown_temp_c: float = math.nan


def builtin_cases(seed: int = 0) -> list[Case]:
    """Every built-in profile under every load mode (``seed`` draws another set of noise)."""
    cases: list[Case] = []
    for name in profile_names():
        prof = get_profile(name)
        env_caps = default_caps(_envelope(prof.min_limit_w, prof.default_limit_w, prof.max_limit_w))
        for mode, kw in MODES:
            truth = ground_truth([prof], mode, env_caps, **kw)
            # A thermally held cap runs at slowdown with the thermal clock-event bit set: the
            # sweep's rows carry both, and the analysis uses them.
            by_cap = {
                c.cap_w: Truth(
                    c.power_w,
                    c.tps,
                    c.sm_clock_mhz,
                    temp_max_c=c.temp_c,
                    thermal_throttle_pct=100.0 if c.regime == "thermal_limited" else 0.0,
                )
                for c in truth.caps
            }
            work = workload_for(mode, kw.get("concurrency", 1), kw.get("prompt_tokens", 8000))
            cases.append(
                Case(
                    name=name,
                    mode=mode,
                    grid=env_caps,
                    measure=_noisy(by_cap, f"{name}:{mode}" + (f":{seed}" if seed else "")),
                    make_gpu=_sim_gpu_factory(prof, work),
                    default_w=prof.default_limit_w,
                    metric="prefill_tps" if mode == "prefill-heavy" else "narr_tps",
                    slowdown_temp_c=prof.slowdown_temp_c,
                )
            )
    return cases


def replay_case(path: Path, seed: int = 0) -> Case:
    """A replayed curve swept over its own measured caps (``seed``: its per-cap noise)."""
    curve = replay_profile(path)
    grid = list(curve.caps_w)
    probe = ReplayGpu(curve, ManualClock(), seed=seed)

    def measure(cap: float) -> Truth:
        power, tps, sm = curve.at(cap)
        d_power, d_tps = probe.offsets(cap)
        return Truth(power + d_power, tps * (1.0 + d_tps), sm)

    return Case(
        name=f"replay:{path.name}",
        mode=curve.load_mode,
        grid=grid,
        measure=measure,
        make_gpu=_replay_gpu_factory(curve),
        default_w=grid[-1],
        metric=curve.metric,
    )


def sweep(case: Case, strategy: str, *, settle_s: float, window_s: float) -> SweepResult:
    """Run one offline sweep of a case."""
    clock = ManualClock()
    gpu, set_busy = case.make_gpu(clock)
    measured: dict[float, Truth] = {}
    reasons: list[tuple[float, str]] = []
    settles: list[float] = []

    def measure_batch(batch: list[tuple[float, str]]) -> None:
        for cap in plan_order(c for c, _ in batch):
            gpu.set_power_limit(cap)
            if strategy == "dense":
                set_busy(False)
                clock.advance(settle_s)
                settles.append(settle_s)
            else:
                # Proposed driver order: the load runs, the first stable window ends the settle.
                set_busy(True)
                settles.append(asyncio.run(wait_settled([gpu], clock, interval_s=0.1)))
            set_busy(True)
            clock.advance(window_s)
            set_busy(False)
            measured[cap] = case.measure(cap)
        reasons.extend(batch)

    if strategy == "dense":
        measure_batch([(c, "dense") for c in case.grid])
    else:
        planner = AdaptivePlanner(case.grid, _step(case.grid), slowdown_temp_c=case.slowdown_temp_c)
        measure_batch([(c, "coarse pass") for c in planner.initial_caps()])
        while True:
            plan = planner.next_caps({c: t.measurement() for c, t in measured.items()})
            if not plan:
                break
            measure_batch(plan)
    return SweepResult(measured, reasons, clock.now(), settles, _analyse(case, measured))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table; always exits 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replay", type=Path, action="append", default=None)
    parser.add_argument("--settle", type=float, default=3.0, help="dense fixed settle, s")
    parser.add_argument("--window", type=float, default=20.0, help="measured window per cap, s")
    parser.add_argument(
        "--model",
        action="store_true",
        help="the offline model instead of real simulated sweeps (a model, not a measurement)",
    )
    parser.add_argument("--profiles", help="comma-separated built-in profiles (default: all)")
    parser.add_argument("--modes", help="comma-separated load modes (default: all three)")
    parser.add_argument("--time-scale", type=float, default=100.0, help="real sweeps only")
    parser.add_argument("--target-cap-seconds", type=float, default=4.0, help="real sweeps only")
    parser.add_argument(
        "--overhead-modes",
        default="decode-single",
        help="load modes whose per-cap overhead is measured in real time (scale 1; about two "
        "minutes each; 'none' skips it)",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="real sweeps: a second dense sweep (another seed) per row, to show how well dense "
        "agrees with itself",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="offline model only: repeat every row with this many noise seeds and count, per "
        "figure, how often adaptive and dense (on the same readings) disagree",
    )
    parser.add_argument("--verbose", "-v", action="store_true")
    args = parser.parse_args(argv)
    replays = args.replay or published_replays()
    profiles = args.profiles.split(",") if args.profiles else profile_names()
    modes = args.modes.split(",") if args.modes else [m for m, _ in MODES]
    if not args.model:
        from bench_real_sweeps import run_all

        targets = [(name, name) for name in profiles]
        targets += [(f"replay:{p.name}", f"replay:{p}") for p in replays]
        overhead = [] if args.overhead_modes == "none" else args.overhead_modes.split(",")
        return run_all(
            targets,
            modes,
            time_scale=args.time_scale,
            target_s=args.target_cap_seconds,
            overhead_modes=overhead,
            baseline=args.baseline,
        )

    if args.seeds > 1:
        return seeded(args, profiles, modes, replays)
    print(
        "OFFLINE MODEL: caps are modelled (steady state plus modelled noise), not measured; "
        "run without --model for real simulated sweeps"
    )
    cases = [c for c in builtin_cases() if c.name in profiles and c.mode in modes]
    for path in replays:
        cases.append(replay_case(path))

    head = (
        f"{'profile':34} {'mode':17} {'caps d/a':>8} {'ratio':>5} {'time':>5} "
        f"{'sweet d/a':>9} {'near d/a':>9} {'plateau edges d | a':30} {'settle':>6} agree"
    )
    print(head)
    print("-" * len(head))
    worst_caps = worst_time = worst_settle = 0.0
    all_agree = True
    for case in cases:
        dense = sweep(case, "dense", settle_s=args.settle, window_s=args.window)
        adaptive = sweep(case, "adaptive", settle_s=args.settle, window_s=args.window)
        verdicts = agreement(dense.analysis, adaptive.analysis)
        caps_ratio = len(adaptive.caps) / len(dense.caps)
        time_ratio = adaptive.sim_time_s / dense.sim_time_s
        settle = max(adaptive.settle_s)
        all_agree &= "NO" not in verdicts.values()
        worst_caps = max(worst_caps, caps_ratio)
        worst_time = max(worst_time, time_ratio)
        worst_settle = max(worst_settle, settle)
        dp = [(p["kind"], p["start_w"], p["end_w"]) for p in dense.analysis["plateaus"]]
        ap = [(p["kind"], p["start_w"], p["end_w"]) for p in adaptive.analysis["plateaus"]]
        print(
            f"{case.name:34} {case.mode:17} {len(dense.caps):>3}/{len(adaptive.caps):<4} "
            f"{caps_ratio:5.2f} {time_ratio:5.2f} "
            f"{_cap(dense.analysis['sweet_spot']):>4}/{_cap(adaptive.analysis['sweet_spot']):<4} "
            f"{_cap(dense.analysis['near_peak']):>4}/{_cap(adaptive.analysis['near_peak']):<4} "
            f"{_edges(dp) + ' | ' + _edges(ap):30} {settle:5.2f}s {verdict_text(verdicts)}"
        )
        if args.verbose:
            print("    measured: " + ", ".join(f"{c:g} ({r})" for c, r in adaptive.reasons))
    print("-" * len(head))
    print(
        f"worst: caps ratio {worst_caps:.2f} (goal <= 0.50), sim-time ratio {worst_time:.2f} "
        f"(goal <= 0.55), adaptive settle {worst_settle:.2f} s per cap (goal < 1 s), "
        f"sweet spot, near-peak and regions agree within {AGREE_W:g} W or within the dense "
        f"sweep's noise: {'all' if all_agree else 'NOT all'}"
    )
    return 0


def seeded(
    args: argparse.Namespace, profiles: list[str], modes: list[str], replays: list[Path]
) -> int:
    """The offline model over ``args.seeds`` noise seeds: how often each figure disagrees.

    Both strategies see the same reading at the same cap, so a disagreement is the planner's,
    not noise between two sweeps. Verdicts are the real-sweep benchmark's: ``tied`` is further
    than 10 W apart but inside the dense sweep's own interval for that figure.
    """
    print(
        f"OFFLINE MODEL, {args.seeds} noise seeds: caps are modelled, not measured; both "
        "strategies see the same readings. Counts of NO (and tied) per figure:"
    )
    head = f"{'profile':34} {'mode':17} {'sweet spot':>12} {'near-peak':>12} {'regions':>8} ratio"
    print(head)
    print("-" * len(head))
    counts: dict[tuple[str, str], Counter[str]] = {}
    ratio: dict[tuple[str, str], float] = {}
    for seed in range(args.seeds):
        cases = [c for c in builtin_cases(seed) if c.name in profiles and c.mode in modes]
        cases += [replay_case(p, seed) for p in replays]
        for case in cases:
            dense = sweep(case, "dense", settle_s=args.settle, window_s=args.window)
            adaptive = sweep(case, "adaptive", settle_s=args.settle, window_s=args.window)
            key = (case.name, case.mode)
            tally = counts.setdefault(key, Counter())
            for figure, verdict in agreement(dense.analysis, adaptive.analysis).items():
                tally[f"{figure} {verdict}"] += 1
            ratio[key] = max(ratio.get(key, 0.0), len(adaptive.caps) / len(dense.caps))
    total: Counter[str] = Counter()
    for (name, mode), tally in counts.items():
        total.update(tally)
        cells = [
            f"{tally[f'{fig} NO']:>3} ({tally[f'{fig} tied']:>2})"
            for fig in ("sweet spot", "near-peak")
        ]
        print(
            f"{name:34} {mode:17} {cells[0]:>12} {cells[1]:>12} {tally['regions NO']:>8} "
            f"{ratio[(name, mode)]:.2f}"
        )
    print("-" * len(head))
    rows = args.seeds * len(counts)
    print(
        f"of {rows} sweep pairs: sweet spot NO {total['sweet spot NO']} (tied "
        f"{total['sweet spot tied']}), near-peak NO {total['near-peak NO']} (tied "
        f"{total['near-peak tied']}), regions NO {total['regions NO']}; worst caps ratio "
        f"{max(ratio.values(), default=0.0):.2f} (goal <= 0.50)"
    )
    return 0


# --- helpers ----------------------------------------------------------------------------------


def _envelope(lo: float, default: float, hi: float) -> Any:
    from powersweep.sweep.gpu import PowerEnvelope

    return PowerEnvelope(lo, default, hi, default)


def _step(grid: list[float]) -> float:
    gaps = sorted(b - a for a, b in itertools.pairwise(grid) if b > a)
    return gaps[len(gaps) // 2] if gaps else 10.0


def _noisy(by_cap: dict[float, Truth], key: str) -> Callable[[float], Truth]:
    def measure(cap: float) -> Truth:
        t = by_cap[cap]
        rng = random.Random(zlib.crc32(f"{key}:{cap:.3f}".encode()))
        return Truth(
            t.power_w * (1.0 + rng.gauss(0.0, POWER_MEDIAN_NOISE_REL)),
            t.tps * (1.0 + rng.gauss(0.0, TPS_NOISE_REL)),
            t.sm_clock_mhz,
            t.temp_max_c,
            t.thermal_throttle_pct,
        )

    return measure


def _sim_gpu_factory(
    prof: Any, work: Workload
) -> Callable[[ManualClock], tuple[Gpu, Callable[[bool], None]]]:
    def make(clock: ManualClock) -> tuple[Gpu, Callable[[bool], None]]:
        gpu = SimGpu(prof, clock, seed=1)

        def set_busy(busy: bool) -> None:
            gpu.set_workload(work if busy else Workload())

        return gpu, set_busy

    return make


def _replay_gpu_factory(
    curve: ReplayCurve,
) -> Callable[[ManualClock], tuple[Gpu, Callable[[bool], None]]]:
    def make(clock: ManualClock) -> tuple[Gpu, Callable[[bool], None]]:
        gpu = ReplayGpu(curve, clock, seed=1)
        return gpu, gpu.set_busy

    return make


def _analyse(case: Case, measured: dict[float, Truth]) -> dict[str, Any]:
    caps = sorted(measured)
    df = pl.DataFrame(
        {
            "cap_w": caps,
            case.metric: [measured[c].tps for c in caps],
            "power_w": [measured[c].power_w for c in caps],
            "sm_clock_mhz": [measured[c].sm_clock_mhz for c in caps],
            "temp_max_c": [measured[c].temp_max_c for c in caps],
            "thermal_throttle_pct": [measured[c].thermal_throttle_pct for c in caps],
            "status": ["ok"] * len(caps),
        }
    )
    # What run.json tells the analysis: the planned grid (its step, for an adaptive subset) and
    # the card's slowdown temperature.
    run = {
        "caps_planned": sorted(case.grid, reverse=True),
        "gpus": [{"default_limit_w": case.default_w, "slowdown_temp_c": case.slowdown_temp_c}],
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "caps.csv"
        write_caps_csv(df, path)
        curve = dataclasses.replace(load_curve(path), run=RunRecord.from_json(run))
        # no raw readings: the noise intervals are the curve-scatter estimate
        return analyze(curve, default_limit_w=case.default_w).to_json()


def _cap(section: dict[str, Any] | None) -> str:
    return "-" if not section else f"{section['cap_w']:g}"


def _edges(plateaus: list[tuple[str, float, float]]) -> str:
    if not plateaus:
        return "none"
    return " ".join(f"{'P' if k == 'boost_plateau' else 'C'}{s:g}-{e:g}" for k, s, e in plateaus)


def _edges_of(report: dict[str, Any]) -> str:
    return _edges([(p["kind"], p["start_w"], p["end_w"]) for p in report["plateaus"]])


if __name__ == "__main__":
    sys.exit(main())
