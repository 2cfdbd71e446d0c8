"""The simulated card's readings behave as real drivers' do (issue 24): a one-second moving
average for the power usage of Ampere and newer, an instant field that follows the draw, and an
energy counter that advances in steps at its update period while integrating the true draw."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from powersweep.clock import ManualClock
from powersweep.sim.physics import Workload
from powersweep.sim.profiles import ENERGY_DRIFT_GAIN, get_profile
from powersweep.sim.sim_gpu import SimGpu


def _loaded(**changes: object) -> tuple[ManualClock, SimGpu]:
    clock = ManualClock()
    profile = replace(get_profile("rtx3090-air"), power_noise_pct=0.0, **changes)
    gpu = SimGpu(profile, clock, seed=1)
    gpu.set_workload(Workload("decode"))
    clock.advance(60.0)
    return clock, gpu


def _trace(clock: ManualClock, gpu: SimGpu, seconds: float, dt: float = 0.05) -> list:
    out = []
    for _ in range(round(seconds / dt)):
        clock.advance(dt)
        out.append((clock.now(), gpu.read_sample()))
    return out


def test_power_usage_lags_a_cap_step_by_its_one_second_window_the_instant_field_does_not() -> None:
    clock, gpu = _loaded()
    before = gpu.read_sample()
    gpu.set_power_limit(200.0)
    t0 = clock.now()
    trace = _trace(clock, gpu, 2.0)
    after = trace[-1][1]
    step = before.power_w - after.power_w
    assert step > 50.0  # the cap binds: a real step
    # the instant reading is within 2% of the step of its new level 0.4 s after the change
    instant_at = next(
        t for t, s in trace if abs(s.power_instant_w - after.power_instant_w) < 0.02 * step
    )
    assert instant_at - t0 <= 0.4
    # the moving average is half-way at 0.5 s and there only after the full second
    half = min(trace, key=lambda ts: abs(ts[0] - t0 - 0.5))[1]
    assert half.power_w == pytest.approx(before.power_w - step / 2, abs=0.05 * step)
    usage_at = next(t for t, s in trace if abs(s.power_w - after.power_w) < 0.02 * step)
    assert 0.95 <= usage_at - t0 <= 1.05
    # the figures' draw is the instant one
    assert after.draw_w == after.power_instant_w


def test_a_pre_ampere_card_has_no_instant_field_and_a_short_average() -> None:
    clock, gpu = _loaded(instant_power_field=False, power_usage_average_s=0.0)
    before = gpu.read_sample()
    assert math.isnan(before.power_instant_w) and before.draw_w == before.power_w
    gpu.set_power_limit(200.0)
    trace = _trace(clock, gpu, 1.0)
    after = trace[-1][1]
    at_04 = min(trace, key=lambda ts: abs(ts[0] - clock.now() + 0.6))[1]
    assert at_04.power_w == pytest.approx(after.power_w, rel=0.02)


def test_energy_counter_advances_in_steps_of_its_update_period() -> None:
    clock, gpu = _loaded()
    period = gpu.profile.energy_counter_period_s
    assert period == 0.1
    trace = _trace(clock, gpu, 3.0, dt=0.01)
    changes = [t for (t, a), (_, b) in itertools.pairwise(trace) if b.energy_mj != a.energy_mj]
    gaps = [b - a for a, b in itertools.pairwise(changes)]
    assert len(changes) == pytest.approx(3.0 / period, abs=1)
    assert all(g == pytest.approx(period, abs=0.011) for g in gaps)


def test_energy_counter_integrates_the_true_draw_exactly_between_its_updates() -> None:
    clock, gpu = _loaded()
    period = gpu.profile.energy_counter_period_s
    for _ in range(600):
        clock.advance(0.05)
        counter, true = gpu.read_sample().energy_mj, gpu.true_energy_mj
        # the counter holds the true energy of its last update: behind by less than a period's
        # energy (and its 1 mJ resolution), never ahead
        assert -1.0 <= true - counter <= gpu.read_sample().power_instant_w * period * 1000.0 + 1.0


def test_a_planted_drift_makes_the_counter_run_fast() -> None:
    clock, gpu = _loaded(energy_counter_gain=ENERGY_DRIFT_GAIN)
    counter0, true0 = gpu.read_sample().energy_mj, gpu.true_energy_mj
    for _ in range(300):
        clock.advance(0.1)
    counter1, true1 = gpu.read_sample().energy_mj, gpu.true_energy_mj
    assert (counter1 - counter0) / (true1 - true0) == pytest.approx(ENERGY_DRIFT_GAIN, abs=0.005)
