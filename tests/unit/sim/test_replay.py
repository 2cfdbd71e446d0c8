"""Replay profiles: a simulated rig that serves a measured curve."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import pytest

from powersweep.clock import ManualClock
from powersweep.errors import UsageError
from powersweep.sim.engine import SimEngine
from powersweep.sim.replay import ReplayGpu, ReplayRig, replay_profile, replay_truth
from powersweep.sweep.gpu import Gpu, GpuBackend
from tests.paths import SHARED_3090

CSV = (
    "cap_w,narr_tps,power_w,sm_clock_mhz\n"
    "200,20.0,199.7,900\n"
    "220,24.0,219.6,1000\n"
    "240,27.0,239.8,1100\n"
    "260,29.0,250.1,1200\n"
    "280,29.1,250.0,1200\n"
    "300,29.0,249.9,1200\n"
    "320,31.0,290.0,1300\n"
)


@pytest.fixture
def curve_path(tmp_path: Path) -> Path:
    path = tmp_path / "caps.csv"
    path.write_text(CSV)
    return path


def test_exact_at_measured_caps_without_noise(curve_path: Path) -> None:
    curve = replay_profile(curve_path)
    rig = ReplayRig(curve, ManualClock(), noise=False)
    gpu = rig.gpu(0)
    rig.work_started("decode")
    for cap, tps, power, clock in ((220.0, 24.0, 219.6, 1000.0), (280.0, 29.1, 250.0, 1200.0)):
        assert gpu.set_power_limit(cap).accepted
        s = gpu.read_sample()
        assert s.power_w == pytest.approx(power)
        assert s.sm_clock_mhz == pytest.approx(clock)
        assert rig.decode_rate_tps() == pytest.approx(tps)


def test_monotone_and_linear_between_caps(curve_path: Path) -> None:
    curve = replay_profile(curve_path)
    draws = [curve.at(200.0 + i)[0] for i in range(41)]  # 200..240
    assert all(b >= a for a, b in itertools.pairwise(draws))
    power, tps, clock = curve.at(210.0)
    assert (power, tps, clock) == pytest.approx((209.65, 22.0, 950.0))
    # clamped outside the measured range
    assert curve.at(100.0) == curve.at(200.0)


def test_envelope_is_the_measured_range(curve_path: Path) -> None:
    gpu = ReplayGpu(replay_profile(curve_path), ManualClock())
    env = gpu.envelope()
    assert (env.min_w, env.default_w, env.max_w) == (200.0, 320.0, 320.0)
    result = gpu.set_power_limit(150.0)
    assert not result.accepted and "outside" in result.message


def test_noise_has_the_measured_size() -> None:
    # a straight power-limited curve with a known 1 W scatter of the draw
    import random

    rng = random.Random(5)
    rows = ["cap_w,narr_tps,power_w"]
    rows += [f"{c},{c / 10:.3f},{c - 0.5 + rng.gauss(0, 1.0):.3f}" for c in range(200, 400, 5)]
    path = Path(__import__("tempfile").mkdtemp()) / "noisy.csv"
    path.write_text("\n".join(rows) + "\n")
    curve = replay_profile(path)
    assert 0.6 < curve.power_noise_w < 1.6
    gpu = ReplayGpu(curve, ManualClock(), seed=2)
    offsets = [gpu.offsets(float(c))[0] for c in range(200, 400, 5)]
    assert 0.5 * curve.power_noise_w < statistics.pstdev(offsets) < 1.6 * curve.power_noise_w
    # same cap, same offset: revisits see one curve
    assert gpu.offsets(250.0) == gpu.offsets(250.0)


def test_protocols_are_satisfied(curve_path: Path) -> None:
    clock = ManualClock()
    rig = ReplayRig(replay_profile(curve_path), clock, seed=1)
    backend: GpuBackend = rig
    engine: SimEngine = rig
    gpu: Gpu = backend.gpu(0)
    assert backend.device_count() == 1
    assert gpu.index == 0 and gpu.identity().uuid.startswith("GPU-replay-")
    idle = gpu.read_sample()
    assert idle.util_pct == 0.0 and idle.power_w < 100.0
    engine.work_started("decode")
    clock.advance(2.0)
    busy = gpu.read_sample()
    assert busy.util_pct == 100.0 and busy.power_w > 200.0 and busy.energy_mj > 0
    assert engine.prefill_rate_tps(1000) > 0 and engine.context_tokens > 0
    engine.work_finished("decode")
    with pytest.raises(UsageError):
        backend.gpu(3)


def test_truth_finds_sweet_spot_and_plateau(curve_path: Path) -> None:
    curve = replay_profile(curve_path)
    truth = replay_truth(curve, [200.0 + 10 * i for i in range(13)])
    best = max(truth["caps"], key=lambda r: r["tps_per_w"])
    assert truth["sweet_spot"]["cap_w"] == best["cap_w"] == 280.0
    assert truth["plateaus"] == [
        {"kind": "boost_plateau", "start_w": 260.0, "end_w": 300.0, "power_w": 250.0}
    ]
    assert set(truth) == {
        "load_mode",
        "concurrency",
        "prompt_tokens",
        "caps",
        "sweet_spot",
        "plateaus",
    }


def test_shared_3090_curve_truth() -> None:
    path = SHARED_3090
    if not path.is_file():
        pytest.skip("shared 3090 curve not available")
    curve = replay_profile(path)
    truth = replay_truth(curve, curve.caps_w)
    assert truth["sweet_spot"]["cap_w"] == 290.0
    assert [(p["start_w"], p["end_w"]) for p in truth["plateaus"]] == [(340.0, 370.0)]


def test_bad_files_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        replay_profile(tmp_path / "missing.csv")
    one = tmp_path / "one.csv"
    one.write_text("cap_w,narr_tps,power_w\n200,20,199\n")
    with pytest.raises(UsageError, match="at least two caps"):
        replay_profile(one)


def test_a_replayed_card_has_no_xids_to_report(curve_path: Path) -> None:
    rig = ReplayRig(replay_profile(curve_path), ManualClock(), seed=1)
    assert rig.gpu(0).xid_events() is None
