"""The sweet spot's noise: resampling units, their sums, and the interval's size against known
noise."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from powersweep.analysis import analyze, load_curve
from powersweep.analysis.noise import parse_blocks, sweet_spot_text
from powersweep.analysis.result_types import Pick
from powersweep.sweep.loads.concurrent_window import tokens_in_window, window_blocks
from powersweep.sweep.sampling.measure import decode_blocks, format_blocks
from powersweep.sweep.sampling.stream_rate import decode_tps


def _request(times: list[float], tokens: int, kind: str = "narr") -> SimpleNamespace:
    return SimpleNamespace(
        ok=True,
        prompt_kind=kind,
        completion_tokens=tokens,
        token_times_s=tuple(times),
        t_first_token_s=times[0],
        t_last_token_s=times[-1],
        t_start_s=times[0] - 0.1,
        prompt_tokens=50,
        token_source="usage",
        finish_reason="length",
        chunk_tokens=len(times),
    )


def test_decode_blocks_sum_to_the_request_rate() -> None:
    rng = np.random.default_rng(0)
    reqs = []
    t = 0.0
    for n in (500, 123):
        gaps = rng.uniform(0.02, 0.04, n - 1)
        times = [t, *(t + np.cumsum(gaps))]
        reqs.append(_request([float(x) for x in times], n))
        t = times[-1] + 1.0
    reqs.append(_request([0.0, 1.0, 2.0], 3, kind="code"))
    blocks = decode_blocks(reqs, "narr")
    assert len(blocks) == 20
    tokens = sum(b[0] for b in blocks)
    seconds = sum(b[1] for b in blocks)
    assert tokens == pytest.approx(499 + 122)
    assert tokens / seconds == pytest.approx(decode_tps(reqs, "narr"))
    parsed = np.array(parse_blocks(format_blocks(blocks)))
    assert parsed == pytest.approx(np.array(blocks), rel=1e-5)


def test_packed_chunks_count_their_tokens() -> None:
    # 4 tokens per chunk: 101 chunks carry 401 tokens (400 after the first).
    req = _request([0.01 * i for i in range(101)], 401)
    blocks = decode_blocks([req], "narr")
    assert sum(b[0] for b in blocks) == pytest.approx(400)


def test_window_blocks_cover_the_aggregate_once() -> None:
    reqs = [_request([0.1 * i + 0.03 * s for i in range(100)], 100) for s in range(3)]
    blocks = window_blocks(reqs, 1.0, 8.0, 1.0, 10)
    assert len(blocks) == 10
    assert sum(b[1] for b in blocks) == pytest.approx(7.0)
    assert sum(b[0] for b in blocks) == pytest.approx(tokens_in_window(reqs, 1.0, 8.0, 1.0))


def test_parse_blocks_drops_malformed_units() -> None:
    assert parse_blocks("10:1 x:2 5:0 7:-1 3:0.5 nan:1") == [(10.0, 1.0), (3.0, 0.5)]


def _known_noise_run(tmp_path: Path, tps_cv: float, power_sd_w: float) -> Path:
    """Three caps with known noise: 10 TPS blocks (cv ``tps_cv``) and 40 draw ticks per cap."""
    rng = np.random.default_rng(7)
    truth = {250.0: (25.0, 250.0), 260.0: (26.05, 260.0), 300.0: (27.0, 300.0)}
    caps, samples = [], []
    tick = 0
    for cap, (tps, power) in truth.items():
        secs = np.full(10, 2.0)
        toks = tps * secs * (1 + rng.normal(0, tps_cv, 10))
        pw = power + rng.normal(0, power_sd_w, 40)
        for p in pw:
            samples.append(
                {"tick": tick, "cap_w": cap, "phase": "narr", "gpu_index": 0, "power_w": p}
            )
            tick += 1
        caps.append(
            {
                "cap_w": cap,
                "narr_tps": float(toks.sum() / secs.sum()),
                "power_w": float(np.median(pw)),
                "status": "ok",
                "tps_blocks": format_blocks(list(zip(toks, secs, strict=True))),
            }
        )
    run = tmp_path / "run"
    run.mkdir()
    pl.DataFrame(caps).write_csv(run / "caps.csv")
    pl.DataFrame(samples).write_csv(run / "samples.csv")
    return run


def test_interval_has_the_size_of_the_known_noise(tmp_path: Path) -> None:
    tps_cv, power_sd = 0.02, 3.0
    result = analyze(
        load_curve(_known_noise_run(tmp_path, tps_cv, power_sd)), bootstrap=4000
    ).to_json()
    sweet = result["sweet_spot"]
    assert sweet["noise_source"] == "resampled"
    assert sweet["bootstrap"]["tps_units"] == "tps_blocks"
    for row in result["caps"]:
        lo, hi = sweet["bootstrap"]["tps_per_w_ci"][str(row["cap_w"])]
        tpw = row["tps_per_w"]
        # TPS/W units, around the reading.
        assert lo < tpw < hi
        # Mean of 10 blocks: cv / sqrt(10); median of 40 normal ticks: 1.2533 sd / sqrt(40).
        rel_tps = tps_cv / math.sqrt(10)
        rel_power = 1.2533 * power_sd / row["power_w"] / math.sqrt(40)
        want = 2 * 1.96 * tpw * math.hypot(rel_tps, rel_power)
        assert hi - lo == pytest.approx(want, rel=0.35), row["cap_w"]
    # 250 and 260 W are 0.2% apart with ~1% noise each: tied; 300 W is 10% behind: not.
    assert sweet["interval_w"] == [250.0, 260.0]
    assert (
        sweet_spot_text(Pick.from_json(sweet)) == f"{sweet['cap_w']:g} W (250-260 W within noise)"
    )


def test_a_quiet_run_ties_nothing(tmp_path: Path) -> None:
    result = analyze(load_curve(_known_noise_run(tmp_path, 0.001, 0.1)), bootstrap=1000).to_json()
    sweet = result["sweet_spot"]
    assert sweet["tied_caps"] == [260.0]
    assert sweet_spot_text(Pick.from_json(sweet)) == "260 W (no other cap within noise)"


def test_concurrent_runs_never_resample_per_stream_rates(tmp_path: Path) -> None:
    # An older decode-concurrent run: per-stream requests, no tps_blocks. Its streams' rates are
    # not units of the aggregate figure, so its noise is unknown (a typical reading's).
    run = _known_noise_run(tmp_path, 0.02, 3.0)
    caps = pl.read_csv(run / "caps.csv").drop("tps_blocks")
    caps.write_csv(run / "caps.csv")
    rows = [
        {"cap_w": c, "prompt_kind": "narr", "stream": s, "decode_tps": 6.0 + s, "ok": "true"}
        for c in caps["cap_w"].to_list()
        for s in range(4)
    ]
    pl.DataFrame(rows).write_csv(run / "requests.csv")
    (run / "run.json").write_text('{"schema_version": 1, "load_mode": "decode-concurrent"}')
    sweet = analyze(load_curve(run), bootstrap=200).to_json()["sweet_spot"]
    assert sweet["noise_source"] == "typical repeatability (noise unknown)"
    (run / "run.json").write_text('{"schema_version": 1, "load_mode": "decode-single"}')
    assert (
        analyze(load_curve(run), bootstrap=200).to_json()["sweet_spot"]["noise_source"]
        == "resampled"
    )


def test_near_peak_noise_ties_a_cap_read_at_the_floor(tmp_path: Path) -> None:
    run = _known_noise_run(tmp_path, 0.02, 3.0)
    # 5% under the best (27 TPS at 300 W) is 25.65: 260 W (26.05) clears it by three sigmas of
    # its 0.6% noise, 250 W (25.0) misses it by four: nothing is tied
    near = analyze(load_curve(run), bootstrap=2000).to_json()["near_peak"]
    assert near["cap_w"] == 260.0
    assert (near["interval_w"], near["noise_source"]) == ([260.0, 260.0], "resampled")
    assert sweet_spot_text(Pick.from_json(near)) == "260 W (no other cap within noise)"
    # 7.4% puts the floor at 25.0, right on 250 W's reading: either cap can be the near-peak one
    near = analyze(load_curve(run), bootstrap=2000, max_tps_loss_pct=7.4).to_json()["near_peak"]
    assert near["interval_w"] == [250.0, 260.0]
    assert "(250-260 W within noise)" in sweet_spot_text(Pick.from_json(near))


def test_near_peak_noise_of_a_bare_curve_moves_the_floor_by_a_typical_reading(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(3)
    caps = np.arange(200.0, 401.0, 10.0)
    # a rising curve with a flat stretch at 95% of the top (300-340 W), 0.3% reading noise
    tps = np.minimum(caps, 300.0) / 300.0 * 95.0 + np.maximum(caps - 340.0, 0.0) / 60.0 * 5.0
    tps = tps * (1.0 + rng.normal(0.0, 0.003, len(caps)))
    path = tmp_path / "caps.csv"
    pl.DataFrame({"cap_w": caps, "narr_tps": tps, "power_w": caps - 1.0}).write_csv(path)
    near = analyze(load_curve(path)).to_json()["near_peak"]
    assert near["noise_source"] == "typical repeatability (noise unknown)"
    lo, hi = near["interval_w"]
    # the flat stretch sits at the floor: the interval spans it, and no more than one step below
    assert 290.0 <= lo <= 300.0 and hi >= 340.0
    assert lo <= near["cap_w"] <= hi
    # without noise shown (bootstrap 0) nothing is claimed
    assert analyze(load_curve(path), bootstrap=0).to_json()["near_peak"]["interval_w"] is None


def test_near_peak_noise_never_comes_from_other_caps_scatter(
    tmp_path: Path,
) -> None:
    # each cap's readings agree to 0.05% (its blocks), and its level is off by ~1% from a
    # smooth curve: that scatter is the curve's shape as measured, not a cap's noise
    rng = np.random.default_rng(11)
    caps, samples, tick = [], [], 0
    for cap in np.arange(200.0, 321.0, 10.0):
        level = 100.0 * min(cap, 280.0) / 280.0 * (1.0 + rng.normal(0.0, 0.01))
        secs = np.full(10, 2.0)
        toks = level * secs * (1.0 + rng.normal(0.0, 0.0005, 10))
        for p in cap - 1.0 + rng.normal(0.0, 0.1, 20):
            samples.append({"tick": tick, "cap_w": cap, "phase": "narr", "power_w": p})
            tick += 1
        caps.append(
            {
                "cap_w": cap,
                "narr_tps": float(toks.sum() / secs.sum()),
                "power_w": cap - 1.0,
                "status": "ok",
                "tps_blocks": format_blocks(list(zip(toks, secs, strict=True))),
            }
        )
    run = tmp_path / "run"
    run.mkdir()
    pl.DataFrame(caps).write_csv(run / "caps.csv")
    pl.DataFrame(samples).write_csv(run / "samples.csv")
    near = analyze(load_curve(run), bootstrap=500, max_tps_loss_pct=10.0).to_json()["near_peak"]
    assert near["noise_source"] == "resampled"
    assert near["interval_w"] == [near["cap_w"], near["cap_w"]]
