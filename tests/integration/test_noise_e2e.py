"""Issue 13 end to end: the sweet spot is the best measured cap, its noise is shown in every load
mode, and caps tied within noise are measured again and pooled."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from powersweep.analysis.precision import Reading
from tests.integration.conftest import (
    only_run_dir,
    powersweep,
    powersweeps_side_by_side,
    read_csv,
    read_json,
)

SEEDS = range(10)
# The caps around the rtx3090-air decode-single peak (truth 290 W, 280 W 0.6% behind), with the
# default windows and warm-up: five caps keep ten sweeps within the suite's budget.
PEAK_CAPS = "270,280,290,300,310"
# On virtual time only the model's own noise (per-token jitter, the sensor's noise and
# resolution, the client's per-request overhead) moves a reading, and 10 s windows (also 5 s
# ones) tell 280 from 290 W in every seed: nothing is tied and the confirm phase is skipped.
# 3 s windows measure less: there 280 W is tied with 290 W in every seed, so the confirm phase
# has to work. A few seeds of those run beside the ten.
SHORT_SEEDS = range(3)
SHORT_WINDOW = ("--target-cap-seconds", "3")


def _seeded_sweep_args(out: Path, seed: int, *extra: str) -> list[str]:
    return [
        "--simulate",
        "rtx3090-air",
        "--cooling",
        "air",
        "--load-mode",
        "decode-single",
        "--caps",
        PEAK_CAPS,
        "--no-charts",
        "--quiet",
        "--seed",
        str(seed),
        "--out",
        str(out),
        *extra,
    ]


def _best_row(analysis: dict[str, Any]) -> dict[str, Any]:
    ok = [r for r in analysis["caps"] if r["status"] == "ok"]
    return max(ok, key=lambda r: (r["tps_per_w"], -r["cap_w"]))


def _check_confirm(run: Path) -> bool:
    """The confirm phase's record, marks and pooling in one run; True if it measured again."""
    meta = read_json(run / "run.json")
    confirm = meta["confirm"]
    caps = read_csv(run / "caps.csv")
    again = [float(r["cap_w"]) for r in caps if r["reason"] == "confirm"]
    analysis = read_json(run / "analysis.json")
    if not confirm["caps_w"]:
        # Nothing was tied: then nothing was measured twice.
        assert confirm["skipped"] and not again
        return False
    assert len(confirm["caps_w"]) == 2
    assert set(confirm["caps_w"]) <= set(confirm["tied_before"])
    # measured in order, most likely best first; it stops once the rest is separated
    assert again == confirm["caps_w"][: len(again)] and again
    if len(again) < len(confirm["caps_w"]):
        assert confirm["stopped"].startswith("separated after")
    # (the run's reference point, read again at its end, is marked as a repeat too)
    reference = meta["run_to_run"]["reference"]["cap_w"]
    marked_caps = {*again, reference}
    assert "tied with the best" in confirm["reason"]
    # The re-measured readings are kept, marked, in the raw CSVs...
    requests = read_csv(run / "requests.csv")
    marked = {float(r["cap_w"]) for r in requests if r["confirm"] == "true"}
    assert marked == marked_caps
    samples = read_csv(run / "samples.csv")
    assert {float(r["cap_w"]) for r in samples if r["confirm"] == "true"} >= marked
    # ... pooled in the analysis (one row per cap in the table, two measurements behind it) ...
    rows = {r["cap_w"]: r for r in analysis["caps"]}
    assert len(rows) == len(analysis["caps"])
    # (the reference is a third reading where confirmed)
    for cap in again:
        assert rows[cap]["n_measurements"] == 2 + (cap == reference)
        readings = [float(r["narr_tps"]) for r in caps if float(r["cap_w"]) == cap]
        assert min(readings) <= rows[cap]["tps"] <= max(readings)
    assert analysis["sweet_spot"]["cap_w"] == confirm["best_after_w"]
    # ... and said to be pooled, never "ignored" as a plain repeat would be ...
    codes = [f["code"] for f in analysis["findings"]]
    assert "duplicate_cap" not in codes
    assert codes.count("confirm_pooled") == len(marked_caps)
    # ... and listed, with why, in the summary.
    summary = (run / "summary.md").read_text()
    assert "| Re-measured |" in summary and "tied with the best" in summary
    return True


@pytest.mark.slow
def test_ten_seeds_report_the_best_row_and_the_truth(tmp_path: Path) -> None:
    """The check the issue asks for, with the confirm phase checked in every run."""
    runs = [
        (tmp_path / str(seed), _seeded_sweep_args(tmp_path / str(seed), seed)) for seed in SEEDS
    ]
    runs += [
        (
            tmp_path / f"short{seed}",
            _seeded_sweep_args(tmp_path / f"short{seed}", seed, *SHORT_WINDOW),
        )
        for seed in SHORT_SEEDS
    ]
    # Side by side, a few at a time: on virtual time a sweep's figures are its seed's whatever
    # else the machine runs.
    done = powersweeps_side_by_side([args for _, args in runs])

    hits = confirmed = 0
    for i, ((out, _), (rc, err)) in enumerate(zip(runs, done, strict=True)):
        seed = out.name
        assert rc == 0, err
        run = only_run_dir(out)
        analysis = read_json(run / "analysis.json")
        meta = read_json(run / "run.json")
        sweet = analysis["sweet_spot"]
        # The starred row is the highest TPS/W of the table, every time.
        assert sweet["cap_w"] == _best_row(analysis)["cap_w"], seed
        summary = (run / "summary.md").read_text()
        starred = [line for line in summary.splitlines() if "★" in line]
        assert len(starred) == 1 and starred[0].startswith(f"| {sweet['cap_w']:.0f} ★")
        assert sweet["interval_w"][0] <= sweet["cap_w"] <= sweet["interval_w"][1]
        truth = meta["simulation"]["ground_truth"]["sweet_spot"]["cap_w"]
        assert truth == 290.0
        if i < len(SEEDS):  # the default windows
            hits += sweet["cap_w"] == truth
        confirmed += _check_confirm(run)
    assert hits >= 9, f"sweet spot equals the truth in {hits} of 10 seeds"
    # 280 W is 0.6% behind 290 W: one short reading cannot always tell them apart.
    assert confirmed >= 1


@pytest.mark.slow
def test_decode_concurrent_states_the_aggregate_windows_precision(tmp_path: Path) -> None:
    proc = powersweep(
        "--simulate",
        "rtx3090-air",
        "--load-mode",
        "decode-concurrent",
        "--concurrency",
        "4",
        "--caps",
        "280,300,320",
        "--target-cap-seconds",
        "5",
        "--warmup-requests",
        "1",
        "--no-confirm",
        "--no-charts",
        "--quiet",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    run = only_run_dir(tmp_path)
    sweet = read_json(run / "analysis.json")["sweet_spot"]
    assert sweet["interval_w"] and sweet["noise_source"] == "own measurements"
    # --no-confirm: nothing measured twice, and the record says why.
    assert read_json(run / "run.json")["confirm"]["skipped"] == "--no-confirm"
    assert all(r["reason"] != "confirm" for r in read_csv(run / "caps.csv"))
    for row in read_csv(run / "caps.csv"):
        blocks = [tuple(map(float, b.split(":"))) for b in row["tps_blocks"].split()]
        assert len(blocks) == 10 * int(row["rounds"])  # ten slices of each round's window
        # The blocks are the aggregate window (all streams): they add up to the cap's TPS.
        rate = sum(b[0] for b in blocks) / sum(b[1] for b in blocks)
        assert rate == pytest.approx(float(row["narr_tps"]), rel=0.02)
        # The aggregate's own precision (a per-stream rate's would be four times as wide): on
        # virtual time only the model's noise (per-token jitter, the sensor's noise) widens its
        # statistical part, to a few percent of the cap's TPS/W at most; the drift of a card
        # still heating from a one-request warm-up adds its bias, the run's drift its own.
        stat = float(row["tps_per_w_stat_u95_pct"])
        bias = float(row["drift_bias_pct"]) + float(row["run_drift_bias_pct"])
        assert 0.0 < stat < 5.0
        assert float(row["tps_per_w_u95_pct"]) == pytest.approx(math.hypot(stat, bias), rel=1e-3)
    # each cap's stated half-width is its row's; the run's reference point, read twice, states
    # its two readings pooled
    rows = read_csv(run / "caps.csv")
    for row in rows:
        cap = float(row["cap_w"])
        readings = [Reading.of(r) for r in rows if float(r["cap_w"]) == cap]
        pooled = Reading.pooled(readings, readings[0].tps_per_w) if len(readings) > 1 else None
        stated = (
            100.0 * math.hypot(pooled.stat_u95_rel, pooled.bias_rel)
            if pooled is not None
            else float(row["tps_per_w_u95_pct"])
        )
        assert sweet["tps_per_w_u95_pct"][str(cap)] == pytest.approx(stated)


# Truth per profile and mode over the default caps (decode-concurrent at 4 streams); a prefill
# run's truth depends on the calibrated prompt and is read back from run.json.
def _truth_sweet_w(profile: str, mode: str) -> tuple[float, bool]:
    """The true sweet spot over the default caps, and whether the curve is flat (no cap binds:
    every cap within 1% of the best TPS/W, as decode on a datacenter card)."""
    from tests.unit.analysis.test_analysis_truth import FLAT_TPW_RATIO, truth_of

    truth = truth_of(profile, mode, 4 if mode == "decode-concurrent" else 1)
    tpw = [c["tps_per_w"] for c in truth["caps"]]
    return float(truth["sweet_spot"]["cap_w"]), max(tpw) <= FLAT_TPW_RATIO * min(tpw)


MODE_ARGS = {
    # 4 s windows, against the 0.4% between the neighbours of a peak (1% in decode-concurrent)
    "decode-single": [],
    "decode-concurrent": ["--concurrency", "4"],
    # Short prefills, but enough of them per cap: neighbours near the peak are 0.4% apart.
    "prefill-heavy": ["--target-prefill-seconds", "2", "--target-cap-seconds", "12"],
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODE_ARGS))  # one test per mode: the workers share them
def test_every_profile_and_mode_within_a_step_of_the_truth(tmp_path: Path, mode: str) -> None:
    from powersweep.sim.profiles import get_profile, profile_names

    jobs = []
    for name in profile_names():
        prof = get_profile(name)
        extra = MODE_ARGS[mode]
        truth, flat = _truth_sweet_w(name, mode)
        # Two steps each side of the truth (inside the envelope): one step off is allowed.
        caps = [truth + 10.0 * k for k in range(-2, 3)]
        caps = [c for c in caps if prof.min_limit_w <= c <= prof.max_limit_w]
        out = tmp_path / f"{name}-{mode}"
        args = [
            "--simulate",
            name,
            "--load-mode",
            mode,
            "--caps",
            ",".join(f"{c:g}" for c in caps),
            "--target-cap-seconds",
            "4",
            "--warmup-requests",
            "1",
            "--no-charts",
            "--quiet",
            "--out",
            str(out),
            *extra,  # last: a mode's own setting wins over the common one
        ]
        jobs.append((name, mode, out, args, flat))
    done = powersweeps_side_by_side([job[3] for job in jobs])
    finished = [(job, rc, err) for job, (rc, err) in zip(jobs, done, strict=True)]
    off = []
    for (name, mode, out, _, flat), rc, stderr in finished:
        assert rc == 0, f"{name} {mode}: {stderr}"
        run = only_run_dir(out)
        analysis = read_json(run / "analysis.json")
        truth = read_json(run / "run.json")["simulation"]["ground_truth"]["sweet_spot"]["cap_w"]
        sweet = analysis["sweet_spot"]
        assert sweet["cap_w"] == _best_row(analysis)["cap_w"], (name, mode)
        assert sweet["interval_w"], (name, mode)
        if flat:
            continue  # no cap binds: every cap is as good as the truth's, none is "the" one
        if abs(sweet["cap_w"] - truth) > 10.0:
            rows = {r["cap_w"]: round(r["tps_per_w"], 5) for r in analysis["caps"]}
            off.append((name, mode, sweet["cap_w"], truth, sweet["interval_w"], rows))
    assert not off, off
