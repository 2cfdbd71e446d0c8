"""The simulated card's SM clock offset on its voltage/frequency curve (issue 36): a positive
offset runs each clock at the voltage of a lower one (the Linux "undervolt" under a locked
clock), so the card draws less at the same clock and decodes as fast; the driver's range is
enforced, the offset outlives the card object, and each card's silicon holds only its own,
seeded, stable margin."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from powersweep.clock import ManualClock
from powersweep.sim.limit_store import LimitStore
from powersweep.sim.physics import Locks, Workload, power_at, steady_state, voltage
from powersweep.sim.profiles import GpuProfile, get_profile
from powersweep.sim.sim_gpu import SimGpu
from powersweep.sweep.gpu import ClockOffset, LockResult
from tests.helpers.sim import quiet_profile

DECODE = Workload("decode", batch=1)
LOCK = Locks(sm_mhz=1560.0)  # the 3090's top fine bin: a clock well up its voltage curve


def _settled(gpu: SimGpu, clock: ManualClock) -> tuple[float, float]:
    """(median draw, token rate) of a card decoding long enough to reach its steady state."""
    gpu.set_workload(DECODE)
    clock.sleep(600.0)
    draws = []
    for _ in range(41):
        draws.append(gpu.read_sample().power_w)
        clock.advance(0.5)
    return sorted(draws)[20], gpu.rate_tps()


# --- physics --------------------------------------------------------------------------------


def test_an_offset_runs_a_clock_at_the_voltage_of_a_lower_one_never_below_the_lowest_bin() -> None:
    p = get_profile("rtx3090-air")
    assert voltage(p, 1560.0, 150.0) == voltage(p, 1410.0)
    assert voltage(p, 1560.0, 0.0) == voltage(p, 1560.0)
    assert voltage(p, 300.0, 1000.0) == voltage(p, p.sm_min_mhz)
    assert voltage(p, 1560.0, -200.0) == voltage(p, 1760.0)  # a negative offset: more volts
    work = DECODE
    assert power_at(p, work, 1560.0, 60.0, sm_offset_mhz=150.0) < power_at(p, work, 1560.0, 60.0)


@pytest.mark.parametrize(("name", "lock_mhz"), [("rtx3090-air", 1560.0), ("rtx4090-air", 2700.0)])
def test_a_positive_offset_at_a_locked_clock_lowers_the_draw_not_the_rate(
    name: str, lock_mhz: float
) -> None:
    p = get_profile(name)
    locks = Locks(sm_mhz=lock_mhz)
    plain, plain_temp, _ = steady_state(p, DECODE, p.max_limit_w, locks)
    shifted, shifted_temp, _ = steady_state(
        p, DECODE, p.max_limit_w, locks, sm_offset_mhz=p.stable_offset_mhz
    )
    assert plain.limited_by == shifted.limited_by == "max_clock"
    assert shifted.sm_clock_mhz == plain.sm_clock_mhz == lock_mhz
    assert shifted.rate_tps == plain.rate_tps
    assert shifted.power_w < plain.power_w - 15.0  # tens of watts, as undervolters report
    assert shifted_temp < plain_temp


def test_under_a_binding_cap_the_offset_buys_clock_and_rate_at_the_same_draw() -> None:
    p = get_profile("rtx3090-air")
    plain, _, _ = steady_state(p, DECODE, 250.0)
    shifted, _, _ = steady_state(p, DECODE, 250.0, sm_offset_mhz=150.0)
    assert plain.limited_by == shifted.limited_by == "power"
    assert shifted.power_w == pytest.approx(plain.power_w, abs=0.01)
    assert shifted.sm_clock_mhz > plain.sm_clock_mhz
    assert shifted.rate_tps > plain.rate_tps


# --- the live card --------------------------------------------------------------------------


def test_the_live_card_with_an_offset_settles_at_the_ground_truth() -> None:
    clock = ManualClock()
    p = quiet_profile("rtx3090-air")
    gpu = SimGpu(p, clock, seed=1)
    assert gpu.set_power_limit(p.max_limit_w).accepted
    assert gpu.lock_sm_clock(LOCK.sm_mhz or 0.0).accepted
    assert gpu.set_sm_clock_offset(150.0).accepted
    draw, rate = _settled(gpu, clock)
    truth, _, _ = steady_state(p, DECODE, p.max_limit_w, LOCK, sm_offset_mhz=150.0)
    assert draw == pytest.approx(truth.power_w, rel=0.005)
    assert rate == pytest.approx(truth.rate_tps, rel=1e-9)
    # and under a binding cap, where the offset moves the clock
    assert gpu.set_power_limit(250.0).accepted
    gpu.reset_clock_locks()
    assert gpu.sm_offset_mhz == 150.0  # resetting the locks leaves the curve shifted
    draw, rate = _settled(gpu, clock)
    truth, _, _ = steady_state(p, DECODE, 250.0, sm_offset_mhz=150.0)
    assert draw == pytest.approx(truth.power_w, rel=0.005)
    assert rate == pytest.approx(truth.rate_tps, rel=0.005)


def test_the_live_card_draws_less_with_the_offset_and_decodes_as_fast() -> None:
    results = []
    for offset in (0.0, 150.0):
        clock = ManualClock()
        gpu = SimGpu(quiet_profile("rtx3090-air"), clock, seed=1)
        gpu.set_power_limit(390.0)
        gpu.lock_sm_clock(1560.0)
        assert gpu.set_sm_clock_offset(offset).accepted
        results.append(_settled(gpu, clock))
    (plain_w, plain_tps), (shifted_w, shifted_tps) = results
    assert shifted_w < plain_w - 15.0
    assert shifted_tps == plain_tps


def test_the_offset_outlives_the_card_object_in_the_state_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    clock = ManualClock()
    p = get_profile("rtx3090-air")
    gpu = SimGpu(p, clock, store=LimitStore(path))
    assert gpu.sm_clock_offset() == ClockOffset(True, 0.0, -200.0, 1000.0, "")
    assert gpu.set_sm_clock_offset(180.0).accepted
    # a SIGKILLed sweep's card: another process opens the same state file
    again = SimGpu(p, clock, store=LimitStore(path))
    assert again.sm_clock_offset().sm_offset_mhz == 180.0 and again.sm_offset_mhz == 180.0
    assert json.loads(path.read_text())[f"{again.identity().uuid}#sm_offset_mhz"] == 180.0
    # the offset in force shapes what the new card draws
    assert again.lock_sm_clock(1560.0).accepted
    plain_clock = ManualClock()
    plain = SimGpu(p, plain_clock)
    plain.lock_sm_clock(1560.0)
    assert _settled(again, clock)[0] < _settled(plain, plain_clock)[0] - 15.0
    assert again.set_sm_clock_offset(0).accepted  # restore puts the curve back
    assert SimGpu(p, clock, store=LimitStore(path)).sm_offset_mhz == 0.0
    # an in-memory card keeps its offset to itself, as its locks
    memory = SimGpu(p, clock)
    assert memory.set_sm_clock_offset(100.0).accepted
    assert memory.sm_offset_mhz == 100.0 and SimGpu(p, clock).sm_offset_mhz == 0.0


@pytest.mark.parametrize("mhz", [-201.0, 1000.5, 2000.0, math.nan, math.inf])
def test_an_offset_outside_the_drivers_range_is_refused_in_one_line(mhz: float) -> None:
    gpu = SimGpu(get_profile("rtx4090-air"), ManualClock())
    assert gpu.set_sm_clock_offset(120.0).accepted
    result = gpu.set_sm_clock_offset(mhz)
    assert not result.accepted and result.requested_mhz is mhz
    assert "outside the SM clock offset range -200..+1000" in result.message
    assert "\n" not in result.message
    assert gpu.sm_clock_offset().sm_offset_mhz == 120.0  # the card kept what it had


def test_the_ends_of_the_range_are_accepted() -> None:
    gpu = SimGpu(get_profile("rtx5090-air"), ManualClock())
    for mhz in (-200.0, 1000.0, 0.0):
        assert gpu.set_sm_clock_offset(mhz) == LockResult(mhz, True, "")
        assert gpu.sm_offset_mhz == mhz


@pytest.mark.parametrize("name", ["h100-sxm", "h200-sxm", "mi300x", "rx7900xtx"])
def test_a_card_without_an_offset_says_so_and_refuses_one(name: str, tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    p = get_profile(name)
    # even a stored offset (a state file from elsewhere) does not shift a card that has none
    LimitStore(path).put_sm_offset(f"GPU-sim-{p.name}-0", 150.0)
    gpu = SimGpu(p, ManualClock(), store=LimitStore(path))
    offset = gpu.sm_clock_offset()
    assert not offset.supported
    assert (offset.sm_offset_mhz, offset.min_mhz, offset.max_mhz) == (None, None, None)
    assert "no SM clock offset" in offset.message and "\n" not in offset.message
    result = gpu.set_sm_clock_offset(100.0)
    assert not result.accepted and result.message == offset.message
    assert (gpu.sm_offset_mhz, gpu.unstable_by_mhz, gpu.truth_stable_offset_mhz) == (0.0, 0.0, 0.0)


# --- the silicon lottery --------------------------------------------------------------------


def test_the_stable_margin_is_seeded_per_card_and_deterministic() -> None:
    p = get_profile("rtx3090-air")
    clock = ManualClock()

    def margin(seed: int, index: int = 0, profile: GpuProfile = p) -> float:
        return SimGpu(profile, clock, seed=seed, index=index).truth_stable_offset_mhz

    margins = [margin(seed) for seed in range(40)]
    assert margins == [margin(seed) for seed in range(40)]  # the same seed, the same card
    assert all(150.0 <= m <= 200.0 and m == round(m) for m in margins)
    assert len(set(margins)) > 10  # a lottery, not one value
    assert max(margins) - min(margins) > 25.0
    assert [margin(3, i) for i in range(4)] != [margin(3, 0)] * 4  # cards of one rig differ
    assert margin(3, 1) == margin(3, 1)
    assert margin(5, profile=replace(p, stable_offset_spread_mhz=0.0)) == 175.0
    assert 200.0 <= margin(5, profile=get_profile("rtx4090-air")) <= 250.0


def test_an_offset_beyond_the_cards_margin_is_unstable_by_the_excess() -> None:
    gpu = SimGpu(get_profile("rtx5090-air"), ManualClock(), seed=7, index=1)
    margin = gpu.truth_stable_offset_mhz
    assert gpu.unstable_by_mhz == 0.0
    for offset, unstable in ((margin, 0.0), (margin + 45.0, 45.0), (-200.0, 0.0), (1000.0, None)):
        assert gpu.set_sm_clock_offset(offset).accepted
        assert gpu.unstable_by_mhz == (1000.0 - margin if unstable is None else unstable)
    with pytest.raises(AttributeError):
        gpu.unstable_by_mhz = 0.0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        gpu.truth_stable_offset_mhz = 0.0  # type: ignore[misc]


def test_the_lottery_leaves_the_reading_noise_as_it_was() -> None:
    # the margin has its own generator: cards that differ only in it read exactly alike
    readings = []
    for spread in (0.0, 25.0):
        clock = ManualClock()
        gpu = SimGpu(replace(get_profile("rtx3090-air"), stable_offset_spread_mhz=spread), clock)
        gpu.set_workload(DECODE)
        samples = []
        for _ in range(20):
            clock.advance(0.5)
            samples.append(gpu.read_sample())
        readings.append(samples)
    assert readings[0] == readings[1]
