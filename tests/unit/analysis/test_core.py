"""load_curve and analyze: the real 3090 curve, sweet spots, recommendations, bootstrap, errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from powersweep.analysis import analyze, load_curve, write_outputs
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.analysis.summary import render_summary
from powersweep.errors import PowersweepError, UsageError
from tests.paths import SHARED_3090


def _write(tmp_path: Path, df: pl.DataFrame, name: str = "caps.csv") -> Path:
    path = tmp_path / name
    df.write_csv(path)
    return path


def _linear(caps: list[float], tps: list[float], **extra: list[Any]) -> pl.DataFrame:
    return pl.DataFrame(
        {"cap_w": caps, "narr_tps": tps, "power_w": [c - 1.0 for c in caps], **extra}
    )


@pytest.fixture
def real_3090() -> Path:
    if not SHARED_3090.is_file():
        pytest.skip(f"measured curve not found at {SHARED_3090} (../shared beside the repo)")
    return SHARED_3090


def test_real_3090_curve(real_3090: Path) -> None:
    result = analyze(load_curve(real_3090)).to_json()
    sweet = result["sweet_spot"]
    assert sweet["cap_w"] == 290.0
    assert sweet["tps_per_w"] == pytest.approx(32.26 / 289.55)
    assert sweet["at_boundary"] is None
    assert [(p["kind"], p["start_w"], p["end_w"]) for p in result["plateaus"]] == [
        ("boost_plateau", 340.0, 370.0)
    ]
    assert result["plateaus"][0]["power_w"] == pytest.approx(334.0, abs=0.5)
    # Near-peak at 5%: the lowest cap with TPS >= 0.95 * max TPS (36.26 at 390 W) -> 330 W.
    df = pl.read_csv(real_3090)
    floor = 0.95 * float(df["narr_tps"].max())  # type: ignore[arg-type]
    expected = df.filter(pl.col("narr_tps") >= floor)["cap_w"].min()
    assert result["near_peak"]["cap_w"] == expected == 330
    assert result["near_peak"]["tps_loss_pct"] == pytest.approx((36.26 - 34.57) / 36.26 * 100)
    assert result["metric"] == "narr_tps"
    assert {r["regime"] for r in result["regimes"]} == {"power_limited", "boost_plateau"}
    json.dumps(result, allow_nan=False)  # JSON-safe


def test_a_flat_draw_ceiling_under_every_cap_binds_nowhere_and_gives_no_answer(
    tmp_path: Path, real_3090: Path
) -> None:
    # decode on a datacenter card: from 350 W up the card draws ~317 W whatever the cap, and its
    # TPS does not move: no cap binds, so none is an efficiency win (not "the highest cap")
    rng = np.random.default_rng(4)
    caps = [350.0 + 10 * i for i in range(36)]
    df = pl.DataFrame(
        {
            "cap_w": caps,
            "narr_tps": list(43.08 * (1 + rng.normal(0, 0.003, len(caps)))),
            "power_w": list(316.9 + rng.normal(0, 0.3, len(caps))),
        }
    )
    result = analyze(load_curve(_write(tmp_path, df))).to_json()
    assert [(p["kind"], p["start_w"], p["end_w"]) for p in result["plateaus"]] == [
        ("draw_ceiling", 350.0, 700.0)
    ]
    assert result["answer"]["kind"] == "none" and "no cap binds" in result["answer"]["why"]
    assert result["recommendation"] is None and result["energy"] is None
    codes = [f["code"] for f in result["findings"]]
    assert codes[0] == "no_cap_binds" and "best_measured" in codes
    assert not {"sweet_spot", "near_peak", "sweet_spot_at_high_boundary"} & set(codes)
    # a curve whose sweet spot binds keeps the plain advice
    (real,) = [
        f for f in analyze(load_curve(real_3090)).to_json()["findings"] if f["code"] == "sweet_spot"
    ]
    assert real["hint"] == "`nvidia-smi -pl 290` for the most tokens per watt"


def test_real_3090_with_default_limit_reports_pct_and_gain(real_3090: Path) -> None:
    result = analyze(load_curve(real_3090), default_limit_w=370.0).to_json()
    sweet = result["sweet_spot"]
    assert sweet["pct_of_default"] == pytest.approx(290 / 370 * 100)
    gain = (32.26 / 289.55) / (34.66 / 334.00) * 100 - 100
    assert sweet["tps_per_w_gain_vs_default_pct"] == pytest.approx(gain)


def test_three_decimal_tie_is_resolved_at_full_precision(tmp_path: Path) -> None:
    # Both print 0.111 TPS/W; the raw columns say 300 W is better (0.11133 vs 0.11127).
    df = pl.DataFrame(
        {
            "cap_w": [280.0, 290.0, 300.0, 310.0],
            "narr_tps": [30.0, 32.2683, 33.289, 33.5],
            "power_w": [280.0, 290.0, 299.0, 309.0],
            "tps_per_w": [0.107, 0.111, 0.111, 0.108],
        }
    )
    result = analyze(load_curve(_write(tmp_path, df))).to_json()
    assert result["sweet_spot"]["cap_w"] == 300.0


def test_failed_cap_is_ignored_for_the_sweet_spot(tmp_path: Path) -> None:
    df = pl.DataFrame(
        {
            "cap_w": [200.0, 210.0, 220.0, 230.0],
            "narr_tps": [20.0, 40.0, 22.0, 24.0],
            "power_w": [199.0, 100.0, 219.0, 229.0],
            "status": ["ok", "failed", "ok", "ok"],
            "error": ["", "3 of 4 requests failed", "", ""],
        }
    )
    result = analyze(load_curve(_write(tmp_path, df))).to_json()
    assert result["sweet_spot"]["cap_w"] == 230.0
    codes = {f["code"]: f for f in result["findings"]}
    assert "210 W failed: 3 of 4 requests failed" in codes["caps_not_measured"]["message"]
    assert [r["cap_w"] for r in result["regimes"]] == [200.0, 220.0, 230.0]


def test_boundary_optimum_low_with_envelope(tmp_path: Path) -> None:
    caps = [150.0, 160.0, 170.0, 180.0]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _write(run_dir, _linear(caps, [20.0, 20.5, 20.8, 21.0]))
    run = {
        "schema_version": 1,
        "gpus": [
            {"name": "RTX 3090", "min_limit_w": 100, "default_limit_w": 350, "max_limit_w": 390}
        ],
    }
    (run_dir / "run.json").write_text(json.dumps(run))
    result = analyze(load_curve(run_dir)).to_json()
    assert result["sweet_spot"]["cap_w"] == 150.0
    assert result["sweet_spot"]["at_boundary"] == "low"
    (finding,) = [f for f in result["findings"] if f["code"] == "sweet_spot_at_low_boundary"]
    assert "100 W" in finding["message"] and "50 W" in finding["message"]
    assert result["run"]["gpu_name"] == "RTX 3090"


def test_boundary_optimum_high_without_envelope(tmp_path: Path) -> None:
    caps = [150.0, 160.0, 170.0, 180.0]
    result = analyze(
        load_curve(_write(tmp_path, _linear(caps, [10.0, 12.0, 14.0, 16.5])))
    ).to_json()
    assert result["sweet_spot"]["at_boundary"] == "high"
    (finding,) = [f for f in result["findings"] if f["code"] == "sweet_spot_at_high_boundary"]
    assert "unknown" in finding["message"]


def test_prefill_only_curve(tmp_path: Path) -> None:
    df = pl.DataFrame(
        {
            "cap_w": [200.0, 250.0, 300.0],
            "narr_tps": [None, None, None],
            "prefill_tps": [1500.0, 2100.0, 2300.0],
            "power_w": [199.0, 249.0, 299.0],
        },
        schema_overrides={"narr_tps": pl.Float64},
    )
    curve = load_curve(_write(tmp_path, df))
    assert curve.metric == "prefill_tps"
    result = analyze(curve).to_json()
    assert result["metric"] == "prefill_tps"
    assert result["sweet_spot"]["cap_w"] == 250.0
    assert result["caps"][0]["tps"] == 1500.0


def test_objectives(tmp_path: Path) -> None:
    caps = [200.0, 250.0, 300.0, 350.0]
    tps = [20.0, 27.0, 31.0, 32.0]
    curve = load_curve(_write(tmp_path, _linear(caps, tps)))
    assert analyze(curve).to_json()["recommendation"]["cap_w"] == 250.0  # 27/249 is the best TPS/W
    assert analyze(curve, objective="near-peak").to_json()["recommendation"]["cap_w"] == 300.0
    # eta = 1: pure energy per token, the sweet spot; eta = 0: pure time, the fastest cap.
    assert analyze(curve, objective="cost", eta=1.0).to_json()["recommendation"]["cap_w"] == 250.0
    assert analyze(curve, objective="cost", eta=0.0).to_json()["recommendation"]["cap_w"] == 350.0
    rec = analyze(curve, objective="cost", eta=0.5).to_json()["recommendation"]
    max_power = 350.0
    costs = {c: 0.5 * (c - 1) / t + 0.5 * max_power / t for c, t in zip(caps, tps, strict=True)}
    assert rec["cap_w"] == min(costs, key=lambda c: costs[c])
    assert rec["cost"] == pytest.approx(min(costs.values()))
    with pytest.raises(UsageError):
        analyze(curve, objective="fastest").to_json()
    with pytest.raises(UsageError):
        analyze(curve, eta=1.5).to_json()


def test_thermal_limited_caps_give_a_warning(tmp_path: Path) -> None:
    caps = [300.0, 320.0, 340.0, 360.0]
    df = _linear(caps, [30.0, 31.0, 31.5, 31.6], thermal_throttle_pct=[0.0, 0.0, 60.0, 80.0])
    result = analyze(load_curve(_write(tmp_path, df))).to_json()
    regimes = {r["cap_w"]: r["regime"] for r in result["regimes"]}
    assert regimes == {
        300.0: "power_limited",
        320.0: "power_limited",
        340.0: "thermal_limited",
        360.0: "thermal_limited",
    }
    (finding,) = [f for f in result["findings"] if f["code"] == "thermal_limited"]
    assert "cooling" in finding["hint"]


def test_energy_counter_disagreement(tmp_path: Path) -> None:
    df = _linear(
        [200.0, 250.0, 300.0],
        [20.0, 24.0, 27.0],
        energy_j=[1000.0, 1300.0, 1500.0],
        energy_sampled_j=[1010.0, 1200.0, 1490.0],
    )
    result = analyze(load_curve(_write(tmp_path, df))).to_json()
    (finding,) = [f for f in result["findings"] if f["code"] == "energy_mismatch"]
    assert "250 W" in finding["message"] and "200 W" not in finding["message"]


def _bootstrap_run(tmp_path: Path, seed: int = 0) -> Path:
    """Three caps: 250 and 260 W nearly tied (noisy), 300 W clearly worse."""
    rng = np.random.default_rng(seed)
    truth = {250.0: (25.0, 250.0), 260.0: (26.05, 260.0), 300.0: (27.0, 300.0)}
    samples, requests, caps = [], [], []
    tick = 0
    for cap, (tps, power) in truth.items():
        req = tps * (1 + rng.normal(0, 0.04, 8))
        for r in req:
            requests.append(
                {
                    "cap_w": cap,
                    "prompt_kind": "narr",
                    "completion_tokens": 201,
                    "decode_tps": r,
                    "ok": "true",
                }
            )
        pw = power + rng.normal(0, 3.0, 40)
        for p in pw:
            samples.append(
                {"tick": tick, "cap_w": cap, "phase": "narr", "gpu_index": 0, "power_w": p}
            )
            tick += 1
        samples.append(
            {"tick": tick, "cap_w": cap, "phase": "settle", "gpu_index": 0, "power_w": 10.0}
        )
        tick += 1
        caps.append(
            {"cap_w": cap, "narr_tps": float(np.mean(req)), "power_w": float(np.median(pw))}
        )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    pl.DataFrame(caps).write_csv(run_dir / "caps.csv")
    pl.DataFrame(samples).write_csv(run_dir / "samples.csv")
    pl.DataFrame(requests).write_csv(run_dir / "requests.csv")
    return run_dir


def test_bootstrap_ties_close_caps_and_excludes_clearly_worse(tmp_path: Path) -> None:
    curve = load_curve(_bootstrap_run(tmp_path))
    result = analyze(curve, bootstrap=400, seed=1).to_json()
    sweet = result["sweet_spot"]
    assert sweet["cap_w"] in (250.0, 260.0)
    assert set(sweet["tied_caps"]) == {250.0, 260.0}
    assert sweet["interval_w"] == [250.0, 260.0]
    shares = sweet["bootstrap"]["best_share"]
    assert shares["300.0"] < 0.05
    assert sum(shares.values()) == pytest.approx(1.0)
    # Reproducible with a seed; disabled with 0.
    assert analyze(curve, bootstrap=400, seed=1).to_json()["sweet_spot"] == sweet
    assert analyze(curve, bootstrap=0).to_json()["sweet_spot"]["tied_caps"] is None


def test_a_bare_curve_takes_its_noise_from_its_own_scatter_and_a_clean_one_the_floor(
    tmp_path: Path,
) -> None:
    # A peak at 260 W; TPS follows the cap, so each fall of TPS as the cap rises is noise. With
    # 3% scatter the curve says so (the ties widen with it); without, the typical repeatability
    # of a reading (1%) is the floor and only caps within two readings' 1.4% are tied.
    rng = np.random.default_rng(3)
    caps = [float(c) for c in range(150, 371, 10)]
    tpw = [0.1 - 1e-6 * (c - 260.0) ** 2 for c in caps]
    for sigma, source in (
        (0.03, "the curve's scatter"),
        (0.0, "typical repeatability (noise unknown)"),
    ):
        wiggle = 1.0 + rng.normal(0.0, sigma, len(caps))
        df = pl.DataFrame(
            {
                "cap_w": caps,
                "power_w": caps,
                "narr_tps": [c * v * w for c, v, w in zip(caps, tpw, wiggle, strict=True)],
            }
        )
        (tmp_path / source[:3]).mkdir()
        result = analyze(load_curve(_write(tmp_path / source[:3], df))).to_json()
        sweet = result["sweet_spot"]
        usable = [r for r in result["caps"] if r["status"] == "ok"]
        best = max(usable, key=lambda r: r["tps_per_w"])
        assert sweet["cap_w"] == best["cap_w"]
        assert sweet["noise_source"] == source
        u95 = sweet["estimate"]["reading_u95_pct"] / 100.0
        if sigma:
            assert 0.03 < u95 < 0.1  # about 2 sigma of one reading, measured from the curve
        else:
            assert u95 == 0.01
        by_cap = {r["cap_w"]: r["tps_per_w"] for r in usable}
        tied = [c for c in by_cap if abs(math.log(by_cap[c] / best["tps_per_w"])) <= 2**0.5 * u95]
        assert sweet["tied_caps"] == tied


def test_write_outputs(tmp_path: Path, real_3090: Path) -> None:
    curve = load_curve(real_3090)
    result = analyze(curve)
    paths = write_outputs(curve, result, tmp_path / "out")
    assert [p.name for p in paths] == ["analysis.json", "summary.md"]
    assert (
        paths[0].read_text()
        == json.dumps(analyze(curve).to_json(), indent=2, allow_nan=False) + "\n"
    )
    saved = json.loads(paths[0].read_text())
    assert saved["sweet_spot"]["cap_w"] == 290.0
    assert saved["sweet_spot"]["pct_of_default"] is None  # NaN/unknown -> null
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PowersweepError, match="cannot write"):
        write_outputs(curve, result, blocker / "sub")


def test_write_outputs_writes_the_analysis_byte_for_byte(tmp_path: Path) -> None:
    """Typed and written back, analysis.json is what the analysis gave: its key order (the
    recommendation's objective first) and run.json's integers (a slowdown of 90 C) kept."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    latency = {"itl_p95_ms": [9.0, 9.5, 10.0], "ttft_p95_ms": [200.0, 210.0, 220.0]}
    _write(run_dir, _linear([200.0, 250.0, 300.0], [80.0, 108.0, 118.8], **latency))
    card = {"name": "GPU", "min_limit_w": 100, "default_limit_w": 300, "slowdown_temp_c": 90}
    (run_dir / "run.json").write_text(json.dumps({"schema_version": 1, "gpus": [card]}))
    curve = load_curve(run_dir)
    result = analyze(curve, objective="cost", eta=0.3, tariff_per_kwh=0.3, max_itl_ms=9.6).to_json()
    paths = write_outputs(curve, PowerAnalysis.from_json(result), tmp_path / "out")
    text = paths[0].read_text()
    assert text == json.dumps(result, indent=2, allow_nan=False) + "\n"
    assert '"slowdown_temp_c": 90,' in text
    assert next(iter(json.loads(text)["recommendation"])) == "objective"


def test_run_dir_loads_optional_files_and_tolerates_broken_ones(tmp_path: Path) -> None:
    run_dir = _bootstrap_run(tmp_path)
    (run_dir / "samples.csv").write_text("tick,cap_w,power_w\n1,250,abc\n")
    curve = load_curve(run_dir)
    assert curve.samples is None and curve.requests is not None
    assert curve.out_dir == run_dir
    result = analyze(curve).to_json()
    assert any(f["code"] == "input_note" for f in result["findings"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty file"),
        ("cap_w,power_w\n200,199\n", "missing required column(s): narr_tps or prefill_tps"),
        ("cap_w,narr_tps\n200,20\n", "missing required column(s): power_w"),
        ("cap_w,narr_tps,power_w\n200,20,199\n210,21\n220,22,219,5\n", "malformed CSV"),
        ("cap_w,narr_tps,power_w\n200,fast,199\n", "line 2: narr_tps 'fast' is not a number"),
        ("cap_w,narr_tps,power_w\n200,,199\n210,,\n", "no row has a numeric cap_w"),
        ("cap_w,narr_tps,power_w\n", "no data rows"),
        ("cap_w,narr_tps,power_w\n-5,20,199\n", "cap_w must be positive"),
    ],
)
def test_bad_caps_files_raise_one_line_usage_errors(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "caps.csv"
    path.write_text(content)
    with pytest.raises(UsageError) as err:
        load_curve(path)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert err.value.exit_code == 2


def test_bad_paths_and_run_json(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        load_curve(tmp_path / "nope")
    with pytest.raises(UsageError, match=r"no caps\.csv"):
        load_curve(tmp_path)
    _write(tmp_path, _linear([200.0, 250.0], [20.0, 24.0]))
    (tmp_path / "run.json").write_text(json.dumps({"schema_version": 2}))
    with pytest.raises(UsageError, match="written by a newer powersweep"):
        load_curve(tmp_path)
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_curve(tmp_path)


def test_bare_csv_missing_optional_columns_are_null(tmp_path: Path) -> None:
    curve = load_curve(_write(tmp_path, _linear([200.0, 250.0], [20.0, 24.0]), "mine.csv"))
    assert curve.run is None and curve.samples is None
    assert curve.caps["sm_clock_mhz"].null_count() == 2
    assert curve.caps["status"].to_list() == ["ok", "ok"]
    assert curve.out_dir == tmp_path


def test_near_peak_is_the_last_crossing_below_the_best_tps_cap() -> None:
    from powersweep.analysis.near_peak import near_peak_index

    # best 100 -> floor 95; 96 at index 1 reads above the floor, but 94 above it does not:
    # throughput never falls as the cap rises, so the lucky 96 is noise
    assert near_peak_index([90.0, 96.0, 94.0, 95.5, 97.0, 100.0], [], 5.0) == 3
    assert near_peak_index([96.0, 97.0, 100.0], [], 5.0) == 0
    # a hot top end below the best does not count against the crossing
    assert near_peak_index([90.0, 95.0, 100.0, 93.0], [], 5.0) == 1
    # the best cap itself when nothing below holds the floor; an exact tie at the best: lower
    assert near_peak_index([80.0, 100.0], [], 5.0) == 1
    assert near_peak_index([80.0, 100.0, 100.0], [], 0.0) == 1
    # a plateau (indices 2-5) judged by its median: one low reading does not break it...
    assert near_peak_index([90.0, 96.0, 95.5, 94.0, 95.6, 95.4, 100.0], [(2, 5)], 5.0) == 1
    # ... and one lucky reading does not carry a plateau that sits under the floor
    assert near_peak_index([90.0, 93.0, 94.0, 95.2, 94.5, 94.4, 100.0], [(2, 5)], 5.0) == 6


def test_near_peak_does_not_take_a_lucky_reading_below_a_plateau(tmp_path: Path) -> None:
    # 3090-like: a boost plateau (340-370 W, draw held at 332 W) reading just under the 5%
    # floor of the top's 36.3 TPS (34.49), and the cap under it just above
    rows = [(300, 300.0, 33.0), (310, 309.8, 33.6), (320, 319.9, 34.0), (330, 329.8, 34.52)]
    rows += [(340, 332.0, 34.40), (350, 332.1, 34.55), (360, 332.2, 34.35), (370, 332.9, 34.30)]
    rows += [(380, 369.9, 35.6), (390, 382.5, 36.3)]
    path = tmp_path / "caps.csv"
    pl.DataFrame(
        {
            "cap_w": [float(c) for c, _, _ in rows],
            "power_w": [w for _, w, _ in rows],
            "narr_tps": [t for _, _, t in rows],
        }
    ).write_csv(path)
    result = analyze(load_curve(path)).to_json()
    assert [(p["kind"], p["start_w"], p["end_w"]) for p in result["plateaus"]] == [
        ("boost_plateau", 340.0, 370.0)
    ]
    # the plateau's median (34.375) is under the floor: the near-peak cap is above it
    assert result["near_peak"]["cap_w"] == 380.0
    assert (
        analyze(load_curve(path), objective="near-peak").to_json()["recommendation"]["cap_w"]
        == 380.0
    )


def test_caps_that_never_bind_are_said_first_and_nothing_is_starred(tmp_path: Path) -> None:
    # a published-style sweep: the card draws 114-129 W under caps of 400-600 W
    df = pl.DataFrame(
        {
            "cap_w": [400.0, 450.0, 500.0, 550.0, 600.0],
            "power_w": [114.0, 120.0, 125.0, 129.0, 127.0],
            "narr_tps": [30.1, 30.4, 30.3, 30.5, 30.4],
        }
    )
    curve = load_curve(_write(tmp_path, df))
    result = analyze(curve).to_json()
    assert result["power_cap_binds"] == {
        "binds": False,
        "draw_w": [114.0, 129.0],
        "caps_w": [400.0, 600.0],
        "by": None,
    }
    first = result["findings"][0]
    assert (
        first["code"] == "no_cap_binds" and "114-129 W under caps of 400-600 W" in first["message"]
    )
    assert "--axis sm-clock" in first["hint"]
    codes = {f["code"] for f in result["findings"]}
    # no cap is called an efficiency win, and no lower cap is advised
    assert not codes & {"sweet_spot", "sweet_spot_at_low_boundary", "near_peak"}
    summary = render_summary(curve, PowerAnalysis.from_json(result))
    assert "★" not in summary and "### Recommendations" not in summary
    assert "| Sweet spot | none: no cap binds" in summary
    # one binding cap is enough for the usual answer
    binding = df.with_columns(pl.Series("power_w", [399.0, 405.0, 406.0, 408.0, 407.0]))
    (tmp_path / "b").mkdir()
    again = analyze(load_curve(_write(tmp_path / "b", binding))).to_json()
    assert again["power_cap_binds"]["binds"] and again["findings"][0]["code"] != "no_cap_binds"
