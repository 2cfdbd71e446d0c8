"""Clock locks in the simulated DVFS model, the new profiles and the clock ground truth."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from powersweep.clock import ScaledClock
from powersweep.sim.physics import Locks, Workload, steady_state
from powersweep.sim.profiles import get_profile
from powersweep.sim.sim_gpu import LimitStore, SimGpu
from powersweep.sim.sim_rig import clock_ground_truth, workload_for

DECODE = Workload("decode", batch=1)


def test_sm_lock_caps_the_core_clock_and_lowers_the_draw() -> None:
    p = get_profile("h100-sxm")
    free, _, _ = steady_state(p, DECODE, 700.0)
    locked, _, _ = steady_state(p, DECODE, 700.0, Locks(sm_mhz=1200.0))
    assert free.sm_clock_mhz == p.sm_fine_max_mhz
    assert locked.sm_clock_mhz == 1200.0 and locked.limited_by == "max_clock"
    assert locked.power_w < free.power_w - 20
    # decode barely slows: memory traffic dominates the step
    assert locked.rate_tps > 0.9 * free.rate_tps


def test_a_power_cap_still_binds_under_an_sm_lock() -> None:
    p = get_profile("rtx3090-air")
    op, _, _ = steady_state(p, DECODE, 200.0, Locks(sm_mhz=1800.0))
    assert op.limited_by == "power" and op.power_w == pytest.approx(200.0, abs=0.5)


def test_memory_tier_sets_the_bandwidth_and_saves_interface_power() -> None:
    p = get_profile("rtx5090-air")
    top, _, _ = steady_state(p, DECODE, 575.0, Locks(2400.0, 14001.0))
    low, _, _ = steady_state(p, DECODE, 575.0, Locks(2400.0, 7001.0))
    assert low.rate_tps < 0.8 * top.rate_tps
    assert low.power_w < top.power_w - 40


@pytest.mark.parametrize("name", ["h100-sxm", "h200-sxm"])
@pytest.mark.parametrize(("mode", "n"), [("decode-single", 1), ("decode-concurrent", 16)])
def test_datacenter_decode_never_reaches_the_cap_but_sm_locks_save_energy(
    name: str, mode: str, n: int
) -> None:
    p = get_profile(name)
    sms = [float(f) for f in range(495, 1981, 165)]
    truth = clock_ground_truth([p], mode, [(f, None) for f in sms], 700.0, concurrency=n)
    assert truth["unlocked_power_w"] < 0.95 * p.default_limit_w
    assert all(r["regime"] == "draw_ceiling" for r in truth["points"])
    peak = truth["peak"]
    top = truth["points"][-1]
    assert sms[0] < peak["sm_lock_mhz"] < sms[-1]
    assert peak["tps_per_w"] > 1.1 * top["tps_per_w"]


def test_h200_decodes_faster_than_h100_on_more_bandwidth() -> None:
    work = workload_for("decode-single")
    h100, _, _ = steady_state(get_profile("h100-sxm"), work, 700.0)
    h200, _, _ = steady_state(get_profile("h200-sxm"), work, 700.0)
    assert h200.rate_tps > 1.25 * h100.rate_tps


def test_5090_grid_truth_finds_the_bandwidth_capped_tier_and_a_pareto_front() -> None:
    p = get_profile("rtx5090-air")
    points = [(sm, mem) for mem in p.mem_tiers_mhz for sm in (1200.0, 1800.0, 2400.0, 2880.0)]
    truth = clock_ground_truth([p], "decode-single", points, 575.0)
    capped = [t["mem_lock_mhz"] for t in truth["tiers"] if t["caps_tps"]]
    assert 7001.0 in capped and 14001.0 not in capped
    front = truth["pareto"]
    assert len(front) >= 3
    assert [f["power_w"] for f in front] == sorted(f["power_w"] for f in front)
    tps = [f["tps"] for f in front]
    assert tps == sorted(tps)


def test_sim_gpu_locks_follow_the_lock_and_persist_in_the_state_file(tmp_path: Path) -> None:
    store = LimitStore(tmp_path / "state.json")
    clock = ScaledClock(1.0)
    gpu = SimGpu(get_profile("rtx5090-air"), clock, store=store)
    assert gpu.locked_clocks().sm_mhz is None and gpu.locked_clocks().known
    assert gpu.lock_sm_clock(1500.0).accepted and gpu.lock_mem_clock(10001.0).accepted
    gpu.set_workload(DECODE)
    sample = gpu.read_sample()
    assert sample.sm_clock_mhz == 1500.0 and sample.mem_clock_mhz == 10001.0
    again = SimGpu(get_profile("rtx5090-air"), clock, store=store)
    back = again.locked_clocks()
    assert (back.sm_mhz, back.mem_mhz) == (1500.0, 10001.0) and back.user_clock_setting_active
    again.reset_clock_locks()
    reset = SimGpu(get_profile("rtx5090-air"), clock, store=store).locked_clocks()
    assert reset.sm_mhz is None and reset.mem_mhz is None
    supported = gpu.supported_clocks()
    assert supported.mem_mhz[0] == 14001.0 and 7001.0 in supported.mem_mhz
    assert supported.sm_mhz_by_mem[14001.0][0] == 2880.0


def test_sim_gpu_refusing_memory_locks_says_so_in_one_line() -> None:
    p = replace(get_profile("rtx3090-air"), mem_locks_supported=False)
    gpu = SimGpu(p, ScaledClock(1.0))
    result = gpu.lock_mem_clock(9501.0)
    assert not result.accepted and "GeForce" in result.message and "\n" not in result.message


def test_an_ignored_sm_lock_leaves_the_card_boosting() -> None:
    p = replace(get_profile("rtx4090-air"), sm_lock_ignored_below_mhz=1000.0)
    gpu = SimGpu(p, ScaledClock(1.0))
    assert gpu.lock_sm_clock(600.0).accepted  # the driver says yes...
    gpu.set_workload(DECODE)
    assert gpu.read_sample().sm_clock_mhz > 2000.0  # ...and the card does not follow
