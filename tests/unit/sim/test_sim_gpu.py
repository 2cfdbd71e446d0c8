"""powersweep.sim.sim_gpu: the simulated card.

Its readings behave as real drivers' do (issue 24): a one-second moving average for the power
usage of Ampere and newer, an instant field that follows the draw, and an energy counter that
advances in steps at its update period while integrating the true draw. Its settings (limit,
persistence mode, clock locks) are checked against the profile, and persist in a state file. A card
put to work with its SM clock offset too far past its stable margin resets (issue 36): its
settings go back to their defaults and it is off the bus for a while, its readings failing and its
setters refused."""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from powersweep.clock import ManualClock
from powersweep.errors import GpuError
from powersweep.sim.limit_store import LimitStore
from powersweep.sim.physics import IDLE, UNLOCKED, Locks, Workload
from powersweep.sim.profiles import ENERGY_DRIFT_GAIN, get_profile
from powersweep.sim.sim_gpu import SimGpu
from powersweep.sim.vf_stability import RESET_OFF_BUS_S
from powersweep.sweep.gpu import CLOCK_EVENT_GPU_IDLE, CLOCK_EVENT_SW_POWER_CAP


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


def test_identity_and_envelope_come_from_the_profile_and_the_index() -> None:
    gpu = SimGpu(get_profile("rtx3090-air"), ManualClock(), index=2)
    ident = gpu.identity()
    assert (ident.index, ident.uuid, ident.vram_mib, ident.driver_version) == (
        2,
        "GPU-sim-rtx3090-air-2",
        24576,
        "sim",
    )
    assert ident.name == "NVIDIA GeForce RTX 3090 (simulated)"
    env = gpu.envelope()
    assert (env.min_w, env.default_w, env.max_w, env.current_w) == (100.0, 370.0, 390.0, 370.0)
    assert gpu.slowdown_temp_c() == 88.0


def test_a_limit_outside_the_envelope_is_refused_and_keeps_the_old_one() -> None:
    gpu = SimGpu(get_profile("rtx3090-air"), ManualClock())
    refused = gpu.set_power_limit(400.0)
    assert not refused.accepted and refused.readback_w == 370.0
    assert refused.message == "400 W is outside the envelope 100-390 W"
    done = gpu.set_power_limit(250.0)
    assert done.accepted and done.readback_w == 250.0 and done.message == ""
    assert gpu.limit_w == 250.0


def test_an_idle_card_reads_idle_and_a_loaded_one_at_its_cap_reads_power_capped() -> None:
    clock, gpu = _loaded()
    gpu.set_power_limit(200.0)
    clock.advance(30.0)
    busy = gpu.read_sample()
    assert busy.clock_event_bits == CLOCK_EVENT_SW_POWER_CAP
    assert (busy.pstate, busy.util_pct) == (2, 100.0)
    assert busy.power_w == pytest.approx(200.0, rel=0.02)
    assert busy.mem_clock_mhz == 9751.0
    gpu.set_workload(IDLE)
    clock.advance(30.0)
    idle = gpu.read_sample()
    assert idle.clock_event_bits == CLOCK_EVENT_GPU_IDLE
    assert (idle.pstate, idle.util_pct, idle.mem_clock_mhz) == (8, 0.0, 405.0)


def test_clock_locks_outside_the_cards_range_are_refused_in_one_line() -> None:
    gpu = SimGpu(get_profile("rtx3090-air"), ManualClock())
    low = gpu.lock_sm_clock(100.0)
    assert not low.accepted and low.message == "100 MHz is outside the SM clock range 210-1860"
    high = gpu.lock_mem_clock(20000.0)
    assert not high.accepted
    assert high.message == "20000 MHz is outside the memory clocks 405-9751"
    assert gpu.locks == Locks(None, None)


def test_a_memory_lock_runs_at_the_nearest_load_tier_and_resets_one_clock_at_a_time() -> None:
    clock = ManualClock()
    gpu = SimGpu(get_profile("rtx5090-air"), clock)
    assert gpu.lock_sm_clock(1500.0).accepted
    assert gpu.lock_mem_clock(12600.0).accepted
    gpu.set_workload(Workload("decode"))
    clock.advance(1.0)
    assert gpu.read_sample().mem_clock_mhz == 12001.0  # 12600 asked: the nearest load tier
    gpu.reset_clock_locks(sm=True, mem=False)
    assert gpu.locks == Locks(None, 12600.0)
    held = gpu.locked_clocks()
    assert (held.known, held.sm_mhz, held.mem_mhz, held.user_clock_setting_active) == (
        True,
        None,
        12600.0,
        True,
    )
    gpu.reset_clock_locks()
    assert not gpu.locked_clocks().user_clock_setting_active


def test_limit_and_persistence_mode_outlive_the_card_object(tmp_path: Path) -> None:
    store = LimitStore(tmp_path / "state.json")
    profile = get_profile("rtx3090-air")
    first = SimGpu(profile, ManualClock(), store=store)
    assert first.persistence_mode() is False
    assert first.set_persistence_mode(True) is True
    first.set_power_limit(280.0)
    again = SimGpu(profile, ManualClock(), store=store)
    assert again.persistence_mode() is True
    assert again.envelope().current_w == 280.0
    other = SimGpu(profile, ManualClock(), index=1, store=store)  # another card: its own
    assert other.persistence_mode() is False and other.limit_w == 370.0


def test_only_a_serving_card_shows_the_servers_process() -> None:
    profile = get_profile("rtx3090-air")
    (proc,) = SimGpu(profile, ManualClock()).compute_processes() or ()
    assert proc.pid == os.getpid()
    assert proc.used_memory_mib == pytest.approx(0.9 * 24576)
    assert SimGpu(profile, ManualClock(), serving=False).compute_processes() == ()


def test_rate_of_other_work_runs_at_the_clock_the_current_work_sets() -> None:
    _, gpu = _loaded()
    decode = gpu.rate_tps()
    assert gpu.rate_tps(Workload("decode")) == decode
    # four streams at the single stream's clock: more aggregate tokens, less than four times
    batch = gpu.rate_tps(Workload("decode", batch=4))
    assert decode < batch < 4 * decode


def test_set_temperature_moves_the_card_there_now() -> None:
    clock, gpu = _loaded()
    gpu.set_temperature(80.0)
    assert gpu.temp_c == pytest.approx(80.0)
    gpu.set_workload(IDLE)
    clock.advance(600.0)
    assert gpu.temp_c < 50.0  # and it cools back towards its idle temperature


# --- a reset past the stable margin (issue 36) ------------------------------------------------


def _tuned(tmp_path: Path | None = None, **kw: object) -> tuple[ManualClock, SimGpu]:
    """An idle 3090 locked at 1560 MHz (SM) and 9751 MHz (memory), capped at 300 W."""
    clock = ManualClock()
    store = LimitStore(tmp_path / "state.json") if tmp_path else None
    gpu = SimGpu(get_profile("rtx3090-air"), clock, seed=4, store=store, **kw)  # type: ignore[arg-type]
    assert gpu.set_power_limit(300.0).accepted and gpu.lock_sm_clock(1560.0).accepted
    assert gpu.lock_mem_clock(9751.0).accepted
    return clock, gpu


def test_a_card_under_load_past_its_margin_by_the_threshold_resets(tmp_path: Path) -> None:
    clock, gpu = _tuned(tmp_path)
    margin = gpu.truth_stable_offset_mhz
    gpu.set_workload(Workload("decode"))
    # up to the threshold past the margin: unstable, but the card keeps running
    assert gpu.set_sm_clock_offset(margin + 50.0).accepted
    assert (gpu.resets, gpu.unstable_by_mhz, gpu.off_bus()) == (0, 50.0, False)
    clock.advance(30.0)
    assert gpu.resets == 0 and math.isfinite(gpu.read_sample().power_w)
    # beyond it: the driver recovers the card as after an Xid 79, at once
    assert gpu.set_sm_clock_offset(margin + 50.5).accepted
    assert gpu.resets == 1 and gpu.off_bus()
    assert (gpu.sm_offset_mhz, gpu.unstable_by_mhz, gpu.locks) == (0.0, 0.0, UNLOCKED)
    assert gpu.limit_w == gpu.profile.default_limit_w == 370.0
    # and the state file says so, as each setter writes it
    again = SimGpu(
        get_profile("rtx3090-air"), clock, seed=4, store=LimitStore(tmp_path / "state.json")
    )
    assert (again.sm_offset_mhz, again.locks, again.limit_w) == (0.0, UNLOCKED, 370.0)


def test_a_card_off_the_bus_fails_its_reads_and_refuses_its_settings_until_it_is_back() -> None:
    clock, gpu = _tuned()
    assert gpu.set_sm_clock_offset(gpu.truth_stable_offset_mhz + 120.0).accepted
    gpu.set_workload(Workload("decode"))  # the work meets the offset: the card resets
    assert gpu.resets == 1
    clock.advance(RESET_OFF_BUS_S - 0.01)
    lost = gpu.read_sample()
    assert lost.gpu_index == 0 and lost.read_errors == 9  # NVML's nine reads, each failed
    for value in (lost.power_w, lost.power_instant_w, lost.energy_mj, lost.temp_c):
        assert math.isnan(value)
    assert math.isnan(lost.sm_clock_mhz) and math.isnan(lost.mem_clock_mhz)
    assert math.isnan(lost.util_pct) and lost.pstate is None and lost.clock_event_bits is None
    for setter in (
        lambda: gpu.set_power_limit(300.0),
        lambda: gpu.lock_sm_clock(1560.0),
        lambda: gpu.set_sm_clock_offset(0.0),
    ):
        with pytest.raises(GpuError, match=r"^GPU 0 has fallen off the bus") as err:
            setter()
        assert "\n" not in str(err.value)
    assert gpu.limit_w == 370.0 and gpu.locks == UNLOCKED  # nothing was set
    clock.advance(0.01)  # the recovery is over: back on the bus, at offset 0 and stable
    assert not gpu.off_bus() and gpu.read_sample().read_errors == 0
    assert gpu.set_power_limit(300.0).accepted and gpu.lock_sm_clock(1560.0).accepted
    assert gpu.set_sm_clock_offset(gpu.truth_stable_offset_mhz).accepted
    assert gpu.resets == 1  # at its margin it runs on


def test_an_idle_card_holds_any_offset_and_resets_when_work_arrives() -> None:
    clock, gpu = _tuned()
    assert gpu.set_sm_clock_offset(1000.0).accepted
    clock.advance(60.0)
    assert gpu.resets == 0 and not gpu.off_bus() and gpu.unstable_by_mhz > 50.0
    gpu.set_workload(Workload("prefill", prompt_tokens=8000))
    assert gpu.resets == 1 and gpu.sm_offset_mhz == 0.0
    gpu.set_workload(IDLE)
    clock.advance(RESET_OFF_BUS_S)
    gpu.set_workload(Workload("decode"))  # offset 0 now: no second reset
    assert gpu.resets == 1


def test_a_zero_threshold_resets_at_any_instability_and_none_at_the_margin() -> None:
    _, gpu = _tuned(vf_reset_beyond_mhz=0.0)
    gpu.set_workload(Workload("decode"))
    assert gpu.set_sm_clock_offset(gpu.truth_stable_offset_mhz).accepted
    assert gpu.resets == 0
    assert gpu.set_sm_clock_offset(gpu.truth_stable_offset_mhz + 1.0).accepted
    assert gpu.resets == 1 and gpu.off_bus()


def test_a_pre_ampere_card_off_the_bus_counts_no_instant_read_it_never_had() -> None:
    clock = ManualClock()
    profile = replace(get_profile("rtx3090-air"), instant_power_field=False)
    gpu = SimGpu(profile, clock, vf_reset_beyond_mhz=0.0)
    gpu.set_workload(Workload("decode"))
    gpu.set_sm_clock_offset(gpu.truth_stable_offset_mhz + 1.0)
    assert gpu.read_sample().read_errors == 8


def test_a_reset_is_reported_once_as_xid_79_the_card_falling_off_the_bus() -> None:
    clock, gpu = _tuned()
    assert gpu.xid_events() == ()
    gpu.set_workload(Workload("decode"))
    assert gpu.set_sm_clock_offset(gpu.truth_stable_offset_mhz + 120.0).accepted
    assert gpu.resets == 1
    assert gpu.xid_events() == (79,)  # read while the card is still off the bus
    assert gpu.xid_events() == ()
    clock.advance(RESET_OFF_BUS_S)
    assert gpu.xid_events() == ()


def test_a_simulated_amd_card_has_no_xids_to_report() -> None:
    gpu = SimGpu(get_profile("mi300x"), ManualClock())
    assert gpu.xid_events() is None
