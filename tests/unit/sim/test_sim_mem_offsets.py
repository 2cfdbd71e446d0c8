"""The simulated memory clock offset (issue 45): NVML's unit raises the memory clock by half of
it, and the bandwidth-bound decode rate with it; past the card's seeded margin error replays
take bandwidth (the rate falls), further out greedy answers go wrong; the margin is the silicon
lottery's, deterministic per seed; the offset persists in the state file like the SM one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from powersweep.clock import ManualClock
from powersweep.sim.limit_store import LimitStore
from powersweep.sim.mem_stability import mem_margin
from powersweep.sim.physics import Locks, Workload
from powersweep.sim.profiles import get_profile
from powersweep.sim.sim_gpu import SimGpu
from powersweep.sim.sim_rig import SimRig
from powersweep.sweep.gpu import ClockOffset
from tests.helpers.sim import quiet_profile

DECODE = Workload("decode", batch=1)
SM_LOCK_MHZ = 1395.0  # low enough that no cap binds: the SM clock stays put


def _decoding(seed: int = 1) -> tuple[ManualClock, SimGpu]:
    clock = ManualClock()
    gpu = SimGpu(quiet_profile("rtx3090-air"), clock, seed=seed)
    assert gpu.lock_sm_clock(SM_LOCK_MHZ).accepted
    gpu.set_workload(DECODE)
    return clock, gpu


def _rate_at(gpu: SimGpu, mhz: float) -> float:
    assert gpu.set_mem_clock_offset(mhz).accepted
    return gpu.rate_tps()


def test_the_offset_raises_decode_as_the_memory_clocks_rise_raises_bandwidth() -> None:
    _, gpu = _decoding()
    p = gpu.profile
    assert gpu.truth_stable_mem_offset_mhz > 1000.0
    f = gpu.read_sample().sm_clock_mhz
    compute_s = p.decode_compute_mhz_s / f
    # +1000 in NVML's unit is +500 MHz of the 9751 MHz reported clock: the memory phase shrinks
    # by that ratio, the compute phase does not
    memory_s = p.decode_memory_s * p.mem_clock_mhz / (p.mem_clock_mhz + 500.0)
    assert _rate_at(gpu, 1000.0) == pytest.approx(1.0 / (compute_s + memory_s), rel=1e-9)
    assert gpu.read_sample().mem_clock_mhz == p.mem_clock_mhz + 500.0


def test_below_the_margin_the_rate_rises_with_each_step_and_the_draw_a_little() -> None:
    clock, gpu = _decoding()
    margin = gpu.truth_stable_mem_offset_mhz
    steps = [0.0, 250.0, 500.0, 1000.0, margin]
    rates = [_rate_at(gpu, mhz) for mhz in steps]
    assert rates == sorted(rates) and len(set(rates)) == len(rates)
    assert rates[-1] / rates[0] < 1.0 + margin / 2 / gpu.profile.mem_clock_mhz  # not more than
    assert gpu.set_mem_clock_offset(0.0).accepted
    clock.advance(1.0)
    stock_w = gpu.read_sample().power_w
    assert gpu.set_mem_clock_offset(margin).accepted
    clock.advance(1.0)
    raised_w = gpu.read_sample().power_w
    assert stock_w < raised_w < stock_w + 10.0


def test_past_the_margin_replays_take_bandwidth_and_the_rate_falls() -> None:
    _, gpu = _decoding()
    margin = gpu.truth_stable_mem_offset_mhz
    at_margin = _rate_at(gpu, margin)
    past = [_rate_at(gpu, margin + d) for d in (100.0, 300.0, 600.0)]
    assert past == sorted(past, reverse=True) and past[0] < at_margin
    assert gpu.mem_corrupt_by_mhz == 0.0  # answers still hold at the corruption threshold


def test_further_out_answers_go_wrong_and_the_server_is_told() -> None:
    clock = ManualClock()
    rig = SimRig([quiet_profile("rtx3090-air")], clock, seed=1)
    gpu = rig.gpu(0)
    assert isinstance(gpu, SimGpu)
    threshold = gpu.truth_stable_mem_offset_mhz + gpu.profile.mem_corrupt_beyond_mhz
    assert gpu.set_mem_clock_offset(threshold).accepted
    assert rig.instability_mhz() == 0.0
    assert gpu.set_mem_clock_offset(threshold + 40.0).accepted
    assert gpu.mem_corrupt_by_mhz == 40.0 and rig.instability_mhz() == 40.0
    assert gpu.resets == 0  # the memory replays; it does not crash the card
    assert rig.truth_stable_mem_offsets_mhz() == {0: gpu.truth_stable_mem_offset_mhz}


def test_the_margin_is_seeded_per_card_and_deterministic() -> None:
    p = quiet_profile("rtx3090-air")
    margins = {mem_margin(p, seed, index) for seed in range(6) for index in range(2)}
    assert len(margins) > 6
    assert mem_margin(p, 3, 1) == mem_margin(p, 3, 1)
    spread = p.stable_mem_offset_spread_mhz
    for m in margins:
        assert p.stable_mem_offset_mhz - spread <= m.stable_mhz <= p.stable_mem_offset_mhz + spread
        assert 0.5 <= m.loss_per_mhz / p.mem_replay_loss_per_mhz <= 1.5
    assert SimGpu(p, ManualClock(), seed=3, index=1).truth_stable_mem_offset_mhz == (
        mem_margin(p, 3, 1).stable_mhz
    )


def test_the_memory_offset_leaves_the_sm_offsets_figures_and_readings_alone() -> None:
    a, b = (
        SimGpu(quiet_profile("rtx3090-air"), ManualClock(), seed=2),
        SimGpu(quiet_profile("rtx3090-air"), ManualClock(), seed=2),
    )
    assert a.truth_stable_offset_mhz == b.truth_stable_offset_mhz
    a.set_workload(DECODE)
    b.set_workload(DECODE)
    assert a.read_sample() == b.read_sample()
    assert a.sm_clock_offset() == ClockOffset(True, 0.0, -200.0, 1000.0)


def test_the_offset_outlives_the_card_object_in_the_state_file(tmp_path: Path) -> None:
    store = LimitStore(tmp_path / "state.json")
    gpu = SimGpu(quiet_profile("rtx3090-air"), ManualClock(), seed=1, store=store)
    assert gpu.set_mem_clock_offset(1200.0).accepted
    again = SimGpu(
        quiet_profile("rtx3090-air"),
        ManualClock(),
        seed=1,
        store=LimitStore(tmp_path / "state.json"),
    )
    assert again.mem_clock_offset() == ClockOffset(True, 1200.0, -2000.0, 6000.0)


def test_out_of_range_and_unsupported_cards_refuse_in_one_line() -> None:
    gpu = SimGpu(quiet_profile("rtx3090-air"), ManualClock())
    result = gpu.set_mem_clock_offset(7000.0)
    assert not result.accepted
    assert result.message == "+7000 MHz is outside the memory clock offset range -2000..+6000"
    amd = SimGpu(get_profile("mi300x"), ManualClock())
    assert not amd.mem_clock_offset().supported
    assert "has no memory clock offset to set (amdsmi: Not Supported)" in (
        amd.set_mem_clock_offset(100.0).message
    )


def test_a_memory_lock_tier_is_raised_by_the_offset_too() -> None:
    clock = ManualClock()
    gpu = SimGpu(replace(get_profile("rtx5090-air"), power_noise_pct=0.0), clock, seed=1)
    gpu._set_locks(Locks(None, 12001.0))  # (the lock call itself is GeForce-refused)
    gpu.set_workload(DECODE)
    assert gpu.set_mem_clock_offset(2000.0).accepted
    assert gpu.read_sample().mem_clock_mhz == 12001.0 + 1000.0


def test_a_memory_offset_keeps_the_sm_locks_range() -> None:
    # the memory clock an offset raises must not turn the SM range lock into min = max: an idle
    # card still clocks down to the range's bottom
    clock = ManualClock()
    gpu = SimGpu(quiet_profile("rtx3090-air"), clock, seed=1)
    assert gpu.lock_sm_clock(SM_LOCK_MHZ, 210.0).accepted
    assert gpu.set_mem_clock_offset(1000.0).accepted
    clock.advance(5.0)
    assert gpu.read_sample().sm_clock_mhz == 210.0
