"""powersweep.analysis.synthetic: a noise-free curve written as a measured run directory: the
same seed the same files, caps.csv's figures derived from the per-tick readings as the sweep
derives them, the load mode's columns and requests, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from powersweep.analysis.load import load_curve
from powersweep.analysis.synthetic import NoiseModel, synthesize_run
from powersweep.errors import PowersweepError, UsageError

GPU = {
    "name": "Test GPU",
    "min_limit_w": 150.0,
    "default_limit_w": 300.0,
    "max_limit_w": 400.0,
    "slowdown_temp_c": 90.0,
    "mem_clock_mhz": 9751.0,
}


def _truth(mode: str = "decode-single", **extra: object) -> dict:
    caps = [
        {
            "cap_w": 300,
            "tps": 30.0,
            "power_w": 299.0,
            "sm_clock_mhz": 1507.0,
            "temp_c": 70.0,
            "regime": "boost_plateau",
        },
        {"cap_w": 200, "tps": 20.0, "power_w": 199.0, "sm_clock_mhz": 1200.0, "temp_c": 60.0},
        {
            "cap_w": 250,
            "tps": 26.0,
            "power_w": 240.0,
            "sm_clock_mhz": 1400.0,
            "temp_c": 88.0,
            "regime": "thermal_limited",
        },
    ]
    return {"load_mode": mode, "caps": caps, **extra}


def test_the_same_seed_writes_the_same_files(tmp_path: Path) -> None:
    a = synthesize_run(_truth(), GPU, tmp_path / "a", seed=7)
    b = synthesize_run(_truth(), GPU, tmp_path / "b", seed=7)
    c = synthesize_run(_truth(), GPU, tmp_path / "c", seed=8)
    assert a == tmp_path / "a"
    for name in ("run.json", "caps.csv", "samples.csv", "requests.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "caps.csv").read_bytes() != (c / "caps.csv").read_bytes()


def test_caps_csv_is_derived_from_the_load_ticks(tmp_path: Path) -> None:
    nm = NoiseModel(load_ticks=10, settle_ticks=4, tick_s=0.5, requests_per_cap=2)
    run = synthesize_run(_truth(), GPU, tmp_path / "r", seed=1, noise=nm)
    caps = pl.read_csv(run / "caps.csv")
    samples = pl.read_csv(run / "samples.csv")
    assert caps["cap_w"].to_list() == [200.0, 250.0, 300.0]  # sorted by cap
    assert samples.height == 3 * (4 + 10)
    for row in caps.iter_rows(named=True):
        mine = samples.filter(pl.col("cap_w") == row["cap_w"])
        load = mine.filter(pl.col("phase") != "settle")
        assert mine.filter(pl.col("phase") == "settle").height == 4
        assert set(load["phase"].to_list()) == {"narr", "code"}
        assert row["power_w"] == pytest.approx(float(np.median(load["power_w"].to_numpy())))
        assert row["temp_max_c"] == load["temp_c"].max()
        assert row["energy_j"] == pytest.approx(float(load["power_w"].sum()) * 0.5)
        assert row["tps_per_w"] == pytest.approx(row["narr_tps"] / row["power_w"])
        assert row["code_tps"] == pytest.approx(row["narr_tps"] * 0.985)
        assert (row["n_samples"], row["window_s"], row["settle_s"]) == (10, 5.0, 2.0)
        assert row["n_requests"] == 2 * 2 and row["status"] == "ok"
        assert all(c % 15 == 0 for c in load["sm_clock_mhz"].to_list())  # clocks in bins
    # thermal-limited: the thermal bit; a plateau: the power bit
    assert caps["thermal_throttle_pct"].to_list() == [0.0, 100.0, 0.0]
    assert caps["pwr_throttle_pct"].to_list() == [100.0, 0.0, 100.0]


def test_the_run_json_names_the_truth_and_the_analysis_reads_the_run(tmp_path: Path) -> None:
    truth = _truth()
    run = synthesize_run(truth, GPU, tmp_path / "r", seed=3, cooling="liquid", model="qwen")
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "complete" and meta["cooling"] == "liquid"
    assert meta["server"]["model"] == "qwen" and meta["load_mode"] == "decode-single"
    assert meta["gpus"] == [{"index": 0, "power_source": "simulated", **GPU}]
    assert meta["simulation"]["ground_truth"] == truth and meta["simulation"]["seed"] == 3
    assert meta["caps_planned"] == meta["caps_done"] == [200.0, 250.0, 300.0]
    curve = load_curve(run)
    assert curve.notes == () and curve.metric == "narr_tps"
    assert curve.requests is not None and curve.requests.height == 3 * 2 * 3


def test_noise_stays_near_the_truth(tmp_path: Path) -> None:
    run = synthesize_run(_truth(), GPU, tmp_path / "r", seed=5, raw_files=False)
    assert not (run / "samples.csv").exists() and not (run / "requests.csv").exists()
    caps = pl.read_csv(run / "caps.csv")
    assert caps["narr_tps"].to_list() == pytest.approx([20.0, 26.0, 30.0], rel=0.03)
    assert caps["power_w"].to_list() == pytest.approx([199.0, 240.0, 299.0], rel=0.01)


def test_a_prefill_run_has_prefill_tps_and_its_requests(tmp_path: Path) -> None:
    nm = NoiseModel(tps_rel=0.0, request_tps_rel=0.0, requests_per_cap=2)
    run = synthesize_run(
        _truth("prefill-heavy", prompt_tokens=6000), GPU, tmp_path / "r", seed=2, noise=nm
    )
    caps = pl.read_csv(run / "caps.csv")
    assert caps["prefill_tps"].to_list() == [20.0, 26.0, 30.0]
    assert caps["narr_tps"].null_count() == 3 and caps["code_tps"].null_count() == 3
    requests = pl.read_csv(run / "requests.csv")
    assert set(requests["prompt_kind"].to_list()) == {"prefill"}
    first = requests.row(0, named=True)
    assert first["prompt_tokens"] == 6000 and first["completion_tokens"] == 2
    ttft = first["t_first_token_s"] - first["t_start_s"]
    assert ttft == pytest.approx(6000 / 20.0, abs=1e-3)


def test_a_concurrent_run_splits_its_rate_over_the_streams(tmp_path: Path) -> None:
    nm = NoiseModel(tps_rel=0.0, request_tps_rel=0.0, requests_per_cap=4)
    truth = _truth("decode-concurrent", concurrency=4)
    run = synthesize_run(truth, GPU, tmp_path / "r", seed=2, noise=nm)
    requests = pl.read_csv(run / "requests.csv").filter(pl.col("cap_w") == 200.0)
    assert requests["stream"].to_list() == [0, 1, 2, 3]
    assert requests["decode_tps"].to_list() == pytest.approx([20.0] * 4)
    assert pl.read_csv(run / "caps.csv")["code_tps"].null_count() == 3
    samples = pl.read_csv(run / "samples.csv")
    assert set(samples.filter(pl.col("phase") != "settle")["phase"].to_list()) == {"concurrent"}


def test_an_unknown_sm_clock_is_no_reading(tmp_path: Path) -> None:
    truth = {"caps": [{"cap_w": 300, "tps": 30.0, "power_w": 299.0}]}
    run = synthesize_run(truth, GPU, tmp_path / "r", seed=0)
    # written as NaN, read back as not measured
    assert "NaN" in (run / "caps.csv").read_text()
    assert load_curve(run).caps["sm_clock_mhz"].to_list() == [None]
    assert json.loads((run / "run.json").read_text())["load_mode"] == "decode-single"


@pytest.mark.parametrize(
    ("truth", "error"),
    [
        ({"caps": []}, "synthetic run: the ground truth has no caps"),
        ({}, "synthetic run: the ground truth has no caps"),
        (_truth("training"), "synthetic run: unknown load mode 'training'"),
    ],
)
def test_a_truth_it_cannot_measure_is_refused(tmp_path: Path, truth: dict, error: str) -> None:
    with pytest.raises(UsageError) as exc:
        synthesize_run(truth, GPU, tmp_path / "r", seed=0)
    assert str(exc.value) == error


def test_an_unwritable_directory_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(PowersweepError, match="cannot write the synthetic run"):
        synthesize_run(_truth(), GPU, tmp_path / "file" / "r", seed=0)


def test_a_truth_or_card_of_the_wrong_shape_is_one_usage_error(tmp_path: Path) -> None:
    no_draw = {"caps": [{"cap_w": 300, "tps": 30.0}]}
    with pytest.raises(UsageError, match=r"ground truth: .*power_w.*caps\[0\]"):
        synthesize_run(no_draw, GPU, tmp_path / "a", seed=0)
    with pytest.raises(UsageError, match=r"the card: .*mem_clock_mhz"):
        synthesize_run(_truth(), {**GPU, "mem_clock_mhz": [1]}, tmp_path / "b", seed=0)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
