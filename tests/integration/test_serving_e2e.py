"""Energy per token, cost per 1M tokens and latency targets, end to end on the simulated rig."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.files import number_or_nan
from tests.integration.conftest import powersweep, read_csv, read_json, sweep_run_dir

FAST = ("--warmup-requests", "1", "--settle-seconds", "1", "--quiet", "--cooling", "air")
PER_TOKEN = ("j_per_token", "kwh_per_mtok", "ttft_p95_ms", "itl_p95_ms", "ttft_p50_ms")


@pytest.fixture(scope="module")
def concurrent_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("serving")
    return sweep_run_dir(
        tmp / "runs",
        "--simulate",
        "rtx3090-air",
        "--load-mode",
        "decode-concurrent",
        "--concurrency",
        "4",
        "--caps",
        "220,260,300,340,370",
        "--target-cap-seconds",
        "5",
        "--tariff",
        "0.25",
        "--no-charts",
        *FAST,
        "--state-dir",
        str(tmp / "state"),
        timeout=400,
    )


@pytest.mark.slow
def test_caps_csv_carries_energy_per_token_and_latency_that_match_the_truth(
    concurrent_run: Path,
) -> None:
    rows = [r for r in read_csv(concurrent_run / "caps.csv") if r["status"] == "ok"]
    truth = read_json(concurrent_run / "run.json")["simulation"]["ground_truth"]
    true_at = {c["cap_w"]: c for c in truth["caps"]}
    assert rows
    misses = []
    for r in rows:
        assert all(r[c] for c in PER_TOKEN), r
        j, sampled = number_or_nan(r["j_per_token"]), number_or_nan(r["j_per_token_sampled"])
        # the counter and the sampled draw agree at steady load
        assert abs(j / sampled - 1.0) < 0.03, r
        assert number_or_nan(r["kwh_per_mtok"]) == pytest.approx(j * 1e6 / 3.6e6, rel=1e-4)
        t = true_at[float(r["cap_w"])]
        # over the seconds the TPS counts, as the truth's draw over its rate: within its own
        # stated precision (the figure over the whole windows was up to 6% off). A 95% interval
        # misses one reading in twenty, and one whose few batches happened to agree states
        # little: of this run's eight, one may miss, none by more than four of its half-widths
        u95 = number_or_nan(r["j_per_token_u95_pct"]) / 100.0
        off = abs(j / t["j_per_token"] - 1.0) / u95
        assert off <= 4.0, (r["cap_w"], r["reason"], j, u95, t)
        misses += [(r["cap_w"], r["reason"], round(off, 2))] if off > 1.0 else []
        # one stream's typical gap is the truth's; its p95 lies above it
        assert number_or_nan(r["itl_p50_ms"]) == pytest.approx(t["itl_ms"], rel=0.15), (r, t)
        assert number_or_nan(r["itl_p95_ms"]) >= number_or_nan(r["itl_p50_ms"])
        assert number_or_nan(r["ttft_p95_ms"]) >= number_or_nan(r["ttft_p50_ms"]) > 0
    assert len(misses) <= 1, misses


@pytest.mark.slow
def test_analyze_prices_a_million_tokens_and_the_savings_against_the_default(
    concurrent_run: Path, tmp_path: Path
) -> None:
    # the sweep's own summary priced at its --tariff; analyze reuses it, or the one given
    assert "per 1M tokens at 0.25/kWh" in (concurrent_run / "summary.md").read_text()
    again = powersweep("analyze", str(concurrent_run), "--full", "--out", str(tmp_path / "again"))
    assert "per 1M tokens at 0.25/kWh" in again.stdout
    done = powersweep(
        "analyze", str(concurrent_run), "--tariff", "0.30", "--full", "--out", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    assert "### Energy and cost" in done.stdout
    assert "per 1M tokens at 0.3/kWh" in done.stdout
    analysis = json.loads((tmp_path / "analysis.json").read_text())
    energy = analysis["energy"]
    rec_cap = analysis["recommendation"]["cap_w"]
    rows = {r["cap_w"]: r for r in analysis["caps"] if r["status"] == "ok"}
    assert energy["chosen"]["kwh_per_mtok"] == pytest.approx(rows[rec_cap]["kwh_per_mtok"])
    assert energy["chosen"]["cost_per_mtok"] == pytest.approx(rows[rec_cap]["kwh_per_mtok"] * 0.3)
    # 370 W is the 3090's default limit, measured here
    ref = rows[370.0]
    assert energy["reference"]["kwh_per_mtok"] == pytest.approx(ref["kwh_per_mtok"])
    saved = ref["kwh_per_mtok"] - rows[rec_cap]["kwh_per_mtok"]
    assert energy["cost_saved_per_mtok"] == pytest.approx(saved * 0.3)
    assert energy["cost_saved_per_year"] == pytest.approx(
        saved * 0.3 * rows[rec_cap]["tps"] * 365 * 24 * 3600 / 1e6
    )
    assert all(r["cost_per_mtok"] == pytest.approx(r["kwh_per_mtok"] * 0.3) for r in rows.values())


@pytest.mark.slow
def test_analyze_names_the_most_efficient_cap_that_meets_an_inter_token_target(
    concurrent_run: Path, tmp_path: Path
) -> None:
    caps = {
        float(r["cap_w"]): r for r in read_csv(concurrent_run / "caps.csv") if r["status"] == "ok"
    }
    target = statistics.median(number_or_nan(r["itl_p95_ms"]) for r in caps.values())
    done = powersweep(
        # the target exactly (repr): rounded to 3 decimals, it fell 0.2 us under the median
        # cap's own p95 once, and the cap missed it
        "analyze",
        str(concurrent_run),
        "--max-itl-ms",
        repr(target),
        "--full",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    analysis = json.loads((tmp_path / "analysis.json").read_text())
    pick = analysis["latency_target"]
    assert pick["met"] is True
    # against the run's own (pooled) rows: the best TPS/W among those whose p95 meets it
    rows = [r for r in analysis["caps"] if r["status"] == "ok"]
    # (the target exactly, as the tool was given it: rounded, it can fall under the median
    # cap's own p95 and leave out the cap the tool rightly picked)
    meeting = [r for r in rows if r["itl_p95_ms"] <= target]
    best = _margin_pick(meeting, target)
    assert pick["point"]["cap_w"] == best["cap_w"]
    assert f"**{best['cap_w']:g} W**" in done.stdout
    top = max(meeting, key=lambda r: r["tps_per_w"])
    if top is not best:  # the more efficient cap meets it only within its p95's own noise
        assert pick["within_noise"] == f"{top['cap_w']:g} W"
    # against the simulator's truth: one stream's true mean gap there is within the target
    truth = read_json(concurrent_run / "run.json")["simulation"]["ground_truth"]
    true_at = {c["cap_w"]: c for c in truth["caps"]}
    assert true_at[best["cap_w"]]["itl_ms"] <= target
    assert (tmp_path / "charts" / "latency.png").is_file()
    # a target nothing meets says so, and names the closest cap
    done = powersweep(
        "analyze", str(concurrent_run), "--max-itl-ms", "1", "--full", "--out", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    assert "No measured point meets it" in done.stdout
    assert "latency_target_unmet" in done.stdout.replace("\\_", "_")


@pytest.mark.slow
def test_apply_objective_slo_sets_the_latency_pick(concurrent_run: Path, tmp_path: Path) -> None:
    analysis = read_json(concurrent_run / "analysis.json")
    rows = [r for r in analysis["caps"] if r["status"] == "ok"]
    # the target exactly (repr round-trips): a pooled p95 has more digits than a rounded
    # target would keep, and 74.419016 misses 74.41901613
    tight = min(r["itl_p95_ms"] for r in rows)
    best_fast = max((r for r in rows if r["itl_p95_ms"] <= tight), key=lambda r: r["tps_per_w"])
    state = tmp_path / "state.json"
    sim = ("--simulate", "rtx3090-air", "--sim-state", str(state), "--state-dir", str(tmp_path))
    done = powersweep(
        "apply", str(concurrent_run), "--objective", "slo", "--max-itl-ms", repr(tight), *sim
    )
    assert done.returncode == 0, done.stderr
    assert f"slo recommendation {best_fast['cap_w']:g} W per GPU" in done.stderr
    status = powersweep("status", *sim[:4], "--json")
    limit = json.loads(status.stdout)["gpus"][0]["power_limit"]
    assert limit["current_w"] == pytest.approx(best_fast["cap_w"])
    # without a target, or with one nothing meets, nothing is set and the user is told why
    done = powersweep("apply", str(concurrent_run), "--objective", "slo", *sim)
    assert done.returncode != 0 and "needs a latency target" in done.stderr
    done = powersweep(
        "apply", str(concurrent_run), "--objective", "slo", "--max-itl-ms", "0.5", *sim
    )
    assert done.returncode != 0 and "no measured point" in done.stderr
    assert "Traceback" not in done.stderr


def _margin_pick(meeting: list[dict[str, Any]], target: float) -> dict[str, Any]:
    """The tool's rule: the most efficient point whose p95's own 95% upper bound meets the
    target too (a p95 at the target is itself a noisy figure); without one, the best meeting it."""
    sure = [
        r for r in meeting if r.get("itl_p95_hi_ms") is not None and r["itl_p95_hi_ms"] <= target
    ]
    return max(sure or meeting, key=lambda r: r["tps_per_w"])


@pytest.mark.slow
def test_a_clock_run_answers_the_latency_target_with_its_locks(tmp_path: Path) -> None:
    run = sweep_run_dir(
        tmp_path / "runs",
        "--simulate",
        "h100-sxm",
        "--axis",
        "sm-clock",
        "--sm-clocks",
        "705,945,1185,1425,1665,1980",
        "--load-mode",
        "decode-single",
        "--target-cap-seconds",
        "4",
        "--no-charts",
        *FAST,
        "--state-dir",
        str(tmp_path / "state"),
        timeout=400,
    )
    points = [r for r in read_csv(run / "caps.csv") if r["status"] == "ok"]
    assert points and all(r["j_per_token"] and r["itl_p95_ms"] for r in points)
    target = statistics.median(number_or_nan(r["itl_p95_ms"]) for r in points)
    done = powersweep(
        "analyze", str(run), "--max-itl-ms", repr(target), "--tariff", "0.2", "--full",
        "--out", str(tmp_path / "a"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    analysis: dict[str, Any] = json.loads((tmp_path / "a" / "analysis.json").read_text())
    pick = analysis["latency_target"]
    meeting = [p for p in analysis["points"] if p["itl_p95_ms"] <= target]
    best = _margin_pick(meeting, target)
    assert pick["met"] and pick["point"]["sm_lock_mhz"] == best["sm_lock_mhz"]
    assert "### Latency target" in done.stdout and "### Energy and cost" in done.stdout
    truth = read_json(run / "run.json")["simulation"]["ground_truth"]
    true_itl = {p["sm_lock_mhz"]: p["itl_ms"] for p in truth["points"]}
    assert true_itl[best["sm_lock_mhz"]] <= target
