"""Multi-GPU rigs: the cards that serve the model are the ones swept, every load tick is kept,
and a rig of different cards is labelled with each."""

from __future__ import annotations

from pathlib import Path

import pytest

from powersweep.runformat import REPEAT_REASONS
from tests.integration.conftest import (
    powersweep,
    read_csv,
    read_json,
    sweep_done,
    sweep_run_dir,
)

FAST = (
    "--cooling",
    "air",
    "--quiet",
    "--no-charts",
    "--warmup-requests",
    "1",
    "--target-cap-seconds",
    "3",
    "--settle",
    "fixed",
    "--settle-seconds",
    "1",
)


def _load_ticks(run: Path, cap: float, serving: str) -> set[str]:
    """Ticks of a cap's first measured load at which the serving card was busy (a confirm
    re-measurement's ticks are marked so)."""
    return {
        s["tick"]
        for s in read_csv(run / "samples.csv")
        if s["phase"] in ("narr", "code")
        and s["confirm"] == "false"
        and s["cap_w"]
        and float(s["cap_w"]) == cap
        and s["gpu_index"] == serving
        and float(s["util_pct"]) > 50
    }


@pytest.mark.slow
def test_only_the_serving_card_is_swept(tmp_path: Path) -> None:
    run = sweep_run_dir(
        tmp_path,
        "--simulate",
        "rtx3090-air+rtx3090-air",
        "--sim-serving-gpus",
        "1",
        "--caps",
        "300,250",
        *FAST,
    )
    meta = read_json(run / "run.json")
    assert [g["index"] for g in meta["gpus"]] == [1]
    selection = meta["gpu_selection"]
    assert selection["picked"] == [1] and selection["how"] == "server"
    assert "runs on GPU 1" in selection["reason"]
    assert selection["processes"]["0"] == [] and selection["processes"]["1"]
    assert selection["confirmed"] is True and selection["warmup_util_pct"]["1"] > 50
    assert selection["not_swept_warmup_util_pct"]["0"]["peak"] < 10  # watched, stayed idle
    assert [r["gpu_index"] for r in meta["restored"]] == [1]
    assert {s["gpu_index"] for s in read_csv(run / "samples.csv")} == {"1"}
    assert "| GPUs swept | 1 (the server's process (PID " in (run / "summary.md").read_text()
    truth = {c["cap_w"]: c for c in meta["simulation"]["ground_truth"]["caps"]}
    for row in read_csv(run / "caps.csv"):
        cap = float(row["cap_w"])
        assert row["n_gpus"] == "1"
        if row["reason"] not in REPEAT_REASONS:
            assert int(row["n_samples"]) == len(_load_ticks(run, cap, "1")) > 0
        assert float(row["power_w"]) == pytest.approx(truth[cap]["power_w"], rel=0.03)
        assert float(row["narr_tps"]) == pytest.approx(truth[cap]["tps"], rel=0.03)
        assert row["sm_clock_mhz_by_gpu"].startswith("1:")
    assert (
        "GPUs picked: 1 ("
        in powersweep(
            "--simulate", "rtx3090-air+rtx3090-air", "--sim-serving-gpus", "1", "--dry-run"
        ).stdout
    )


@pytest.mark.slow
def test_a_busy_card_left_out_is_named(tmp_path: Path) -> None:
    run, err = sweep_done(
        tmp_path, "--simulate", "rtx3090-air+rtx3090-air", "--gpus", "0", "--caps", "300", *FAST
    )
    meta = read_json(run / "run.json")
    assert meta["gpu_selection"]["how"] == "given" and meta["gpu_selection"]["confirmed"]
    assert meta["gpu_selection"]["not_swept_warmup_util_pct"]["1"]["peak"] > 50
    assert "GPU 1 got busy during the warm-up" in err and "--gpus" in err


@pytest.mark.slow
def test_an_idle_card_in_the_set_drops_no_load_tick(tmp_path: Path) -> None:
    run, err = sweep_done(
        tmp_path,
        "--simulate",
        "rtx3090-air+rtx3090-air",
        "--sim-serving-gpus",
        "0",
        "--gpus",
        "all",
        "--caps",
        "300",
        *FAST,
    )
    meta = read_json(run / "run.json")
    assert [g["index"] for g in meta["gpus"]] == [0, 1]
    assert meta["gpu_selection"]["how"] == "all" and meta["gpu_selection"]["confirmed"] is False
    assert meta["gpu_selection"]["serving"] == [0]
    assert "GPU 1 stayed idle during the warm-up" in err
    # the cap, then read again at the end (the run-to-run term)
    row, again = read_csv(run / "caps.csv")
    assert again["reason"] == "reread"
    # the idle card reads ~0% utilization: a mean over both cards would drop every tick
    assert int(row["n_samples"]) == len(_load_ticks(run, 300.0, "0")) > 0
    assert float(row["util_pct"]) > 90
    sm = dict(part.split(":") for part in row["sm_clock_mhz_by_gpu"].split(";"))
    assert set(sm) == {"0", "1"} and float(sm["0"]) > float(sm["1"])  # the idle card idles


@pytest.mark.slow
def test_a_mixed_rig_is_named_after_both_cards_with_the_swept_envelope(tmp_path: Path) -> None:
    run = sweep_run_dir(
        tmp_path, "--simulate", "rtx3090-air+rtx4090-air", "--caps", "300,250", *FAST
    )
    analysis = read_json(run / "analysis.json")
    facts = analysis["run"]
    assert "RTX 3090" in facts["gpu_label"] and "RTX 4090" in facts["gpu_label"]
    assert " + " in facts["gpu_label"] and not facts["gpu_label"].startswith("2 x")
    # RTX 3090: 100-390 W, default 370 W; RTX 4090: 150-600 W, default 450 W
    assert (facts["min_limit_w"], facts["max_limit_w"]) == (150.0, 390.0)
    assert facts["default_limits_w"] == [370.0, 450.0]
    sweet = analysis["sweet_spot"]
    assert sweet["pct_of_default_by_gpu"] == pytest.approx(
        [sweet["cap_w"] / 370 * 100, sweet["cap_w"] / 450 * 100]
    )
    summary = (run / "summary.md").read_text()
    title = summary.splitlines()[0]
    assert "RTX 3090" in title and "RTX 4090" in title and "2 x" not in title
    assert "150 W min / 370 / 450 W default (per card) / 390 W max" in summary
    for row in read_csv(run / "caps.csv"):
        sm = dict(part.split(":") for part in row["sm_clock_mhz_by_gpu"].split(";"))
        assert set(sm) == {"0", "1"} and float(row["sm_clock_mhz"]) == float(sm["0"])
