"""powersweep.sim.replay_curve: a measured caps.csv read as a curve to replay (which rows count,
gaps filled, stand-ins where a column is missing, the envelope, the name) and the noise-free
truth of a replay. test_replay.py drives the replayed card and rig built on it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from powersweep.errors import UsageError
from powersweep.sim.replay_curve import (
    FALLBACK_PREFILL_TPS,
    FALLBACK_TEMP_C,
    replay_profile,
    replay_truth,
)
from tests.helpers.files import write_text


def test_only_ok_rows_with_draw_and_tps_count_and_a_repeated_cap_keeps_its_last_row(
    tmp_path: Path,
) -> None:
    path = write_text(
        tmp_path,
        "cap_w,narr_tps,power_w,status\n"
        "300,30.0,280.0,ok\n"
        "200,20.0,190.0,ok\n"
        "250,,240.0,ok\n"  # no TPS
        "260,25.0,0,ok\n"  # no draw
        "270,26.0,260.0,failed\n"
        "200,21.0,195.0,ok\n",  # the same cap measured again: the later row counts
    )
    curve = replay_profile(path)
    assert curve.caps_w == (200.0, 300.0)
    assert curve.power_w == (195.0, 280.0)
    assert curve.tps == (21.0, 30.0)
    assert curve.metric == "narr_tps" and curve.load_mode == "decode-single"
    assert curve.n_gpus == 1


def test_a_sparse_clock_column_is_filled_and_missing_columns_get_stand_ins(
    tmp_path: Path,
) -> None:
    path = write_text(
        tmp_path,
        "cap_w,narr_tps,power_w,sm_clock_mhz\n200,20,190,1000\n250,25,240,\n300,30,280,1400\n",
    )
    curve = replay_profile(path)
    assert curve.sm_clock_mhz == (1000.0, 1200.0, 1400.0)  # interpolated over the caps
    assert curve.prefill_tps is None and curve.temp_c is None
    assert curve.prefill_at(250.0) == FALLBACK_PREFILL_TPS
    assert curve.temp_at(250.0) == FALLBACK_TEMP_C
    no_clocks = replay_profile(
        write_text(tmp_path, "cap_w,narr_tps,power_w\n200,20,190\n300,30,280\n", "bare.csv")
    )
    assert all(math.isnan(c) for c in no_clocks.sm_clock_mhz)


def test_prefill_and_temperature_columns_are_interpolated_and_clamped(tmp_path: Path) -> None:
    path = write_text(
        tmp_path,
        "cap_w,prefill_tps,power_w,temp_max_c,n_gpus\n200,1000,380,60,2\n300,1600,560,70,2\n",
    )
    curve = replay_profile(path)
    assert curve.metric == "prefill_tps" and curve.load_mode == "prefill-heavy"
    assert curve.n_gpus == 2
    assert curve.prefill_at(250.0) == pytest.approx(1300.0)
    assert curve.temp_at(275.0) == pytest.approx(67.5)
    assert curve.temp_at(100.0) == 60.0 and curve.temp_at(999.0) == 70.0


def test_the_envelope_is_the_measured_range_and_a_given_default_is_clamped_into_it(
    tmp_path: Path,
) -> None:
    curve = replay_profile(
        write_text(tmp_path, "cap_w,narr_tps,power_w\n200,20,190\n250,25,240\n300,30,280\n")
    )
    env = curve.envelope()
    assert (env.min_w, env.default_w, env.max_w, env.current_w) == (200.0, 300.0, 300.0, 300.0)
    assert curve.envelope(250.0).default_w == 250.0
    assert curve.envelope(450.0).default_w == 300.0
    assert curve.envelope(100.0).current_w == 200.0


def test_the_name_comes_from_the_argument_then_run_json_then_the_file(tmp_path: Path) -> None:
    text = "cap_w,narr_tps,power_w\n200,20,190\n300,30,280\n"
    bare = write_text(tmp_path, text, "community.csv")
    assert replay_profile(bare).gpu_name == "replay of community.csv"
    assert replay_profile(bare, gpu_name="My 3090").gpu_name == "My 3090"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_text(run_dir, text)
    (run_dir / "run.json").write_text(json.dumps({"gpus": [{"name": "NVIDIA RTX 3090"}]}))
    curve = replay_profile(run_dir)
    assert curve.gpu_name == "NVIDIA RTX 3090 (replay)"
    assert curve.source == run_dir


def test_a_clock_lock_curve_is_refused(tmp_path: Path) -> None:
    path = write_text(
        tmp_path, "cap_w,narr_tps,power_w,sm_lock_mhz\n300,20,190,1200\n300,30,280,1800\n"
    )
    with pytest.raises(UsageError, match="is a clock-lock curve: replay replays power-cap curves"):
        replay_profile(path)


def test_a_curve_with_one_usable_cap_is_refused(tmp_path: Path) -> None:
    path = write_text(tmp_path, "cap_w,narr_tps,power_w,status\n200,20,190,ok\n300,30,280,failed\n")
    with pytest.raises(UsageError, match="at least two caps with status ok"):
        replay_profile(path)


def test_truth_is_the_interpolated_curve_with_its_best_cap(tmp_path: Path) -> None:
    path = write_text(
        tmp_path,
        "cap_w,narr_tps,power_w,sm_clock_mhz\n200,20,200,900\n300,27,270,1200\n400,30,380,1500\n",
    )
    curve = replay_profile(path)
    truth = replay_truth(curve, [400, 250, 300, 300.0])
    assert [c["cap_w"] for c in truth["caps"]] == [250.0, 300.0, 400.0]  # sorted, once each
    at_250 = truth["caps"][0]
    assert (at_250["tps"], at_250["power_w"], at_250["sm_clock_mhz"]) == pytest.approx(
        (23.5, 235.0, 1050.0)
    )
    assert at_250["temp_c"] == FALLBACK_TEMP_C
    assert all("regime" in c for c in truth["caps"])
    # 20/200 = 0.1, 23.5/235 = 0.1 and 27/270 = 0.1 tie: the lowest cap wins
    assert truth["sweet_spot"] == {"cap_w": 250.0, "tps_per_w": pytest.approx(0.1)}
    assert (truth["load_mode"], truth["concurrency"], truth["prompt_tokens"]) == (
        "decode-single",
        1,
        None,
    )


def test_truth_needs_a_cap(tmp_path: Path) -> None:
    curve = replay_profile(write_text(tmp_path, "cap_w,narr_tps,power_w\n200,20,190\n300,30,280\n"))
    with pytest.raises(UsageError, match="at least one cap"):
        replay_truth(curve, [])
