"""The simulated GPU's physics: curves, plateaus and ceilings emerge where the profiles say."""

from __future__ import annotations

import itertools
import math

import pytest

from powersweep.clock import ManualClock, ScaledClock
from powersweep.errors import UsageError
from powersweep.sim.physics import Workload, operating_point, power_at, steady_state, voltage
from powersweep.sim.profiles import get_profile, profile_names
from powersweep.sim.sim_gpu import LimitStore, SimGpu
from powersweep.sim.sim_rig import SimRig, ground_truth
from powersweep.sweep.gpu import CLOCK_EVENT_SW_POWER_CAP
from powersweep.sweep.planning.caps import default_caps

DECODE = Workload("decode", batch=1)


def caps_of(name: str) -> list[float]:
    p = get_profile(name)
    from powersweep.sweep.gpu import PowerEnvelope

    return default_caps(
        PowerEnvelope(p.min_limit_w, p.default_limit_w, p.max_limit_w, p.user_limit_w)
    )


def test_profiles_listed_and_unknown_rejected() -> None:
    assert {"rtx3090-air", "rtx3090-water", "rtx4090-air", "rtx5090-air", "h100-sxm"} <= set(
        profile_names()
    )
    with pytest.raises(UsageError, match="unknown simulation profile"):
        get_profile("rtx9090")


def test_power_rises_with_clock_and_voltage_is_monotonic() -> None:
    p = get_profile("rtx3090-air")
    bins = p.sm_bins_mhz()
    powers = [power_at(p, DECODE, f, 60.0) for f in bins]
    assert all(b > a for a, b in itertools.pairwise(powers))
    volts = [voltage(p, f) for f in bins]
    assert all(b >= a for a, b in itertools.pairwise(volts))


def test_power_limited_caps_draw_the_cap() -> None:
    p = get_profile("rtx3090-air")
    for cap in (200.0, 250.0, 300.0):
        op = operating_point(p, DECODE, cap, 60.0)
        assert op.limited_by == "power"
        assert op.power_w == pytest.approx(cap, abs=0.01)


def test_rtx3090_air_club3090_shape() -> None:
    truth = ground_truth([get_profile("rtx3090-air")], "decode-single", caps_of("rtx3090-air"))
    assert [c.cap_w for c in truth.caps][:1] == [190.0]
    assert truth.caps[-1].cap_w == 390.0
    assert truth.sweet_spot_cap_w == 290.0
    assert truth.plateaus == [
        {
            "kind": "boost_plateau",
            "start_w": 340.0,
            "end_w": 370.0,
            "power_w": pytest.approx(333, abs=3),
        }
    ]
    # one clock across the plateau, and the escape at 380 W runs faster
    clocks = {truth.cap(c).sm_clock_mhz for c in (340.0, 350.0, 360.0, 370.0)}
    assert clocks == {1560.0}
    assert truth.cap(380.0).sm_clock_mhz > 1560.0
    assert truth.cap(380.0).tps > truth.cap(370.0).tps


def test_draw_ceiling_where_decode_cannot_use_the_cap() -> None:
    truth = ground_truth([get_profile("rtx4090-air")], "decode-single", caps_of("rtx4090-air"))
    (ceiling,) = truth.plateaus
    assert ceiling["kind"] == "draw_ceiling"
    assert ceiling["end_w"] == 600.0
    assert 390.0 <= ceiling["start_w"] <= 410.0
    assert ceiling["power_w"] == pytest.approx(395, abs=5)
    top = truth.cap(600.0)
    assert top.power_w < 0.7 * 600.0


def test_h100_decode_far_below_cap_at_low_batch() -> None:
    truth = ground_truth([get_profile("h100-sxm")], "decode-single", caps_of("h100-sxm"))
    assert truth.cap(700.0).power_w < 0.75 * 700
    assert truth.plateaus[-1]["kind"] == "draw_ceiling"


def test_rtx5090_min_cap_is_400() -> None:
    assert caps_of("rtx5090-air")[0] == 400.0


def test_concurrency_loads_harder_than_single() -> None:
    p = [get_profile("rtx5090-air")]
    caps = caps_of("rtx5090-air")
    single = ground_truth(p, "decode-single", caps)
    many = ground_truth(p, "decode-concurrent", caps, concurrency=8)
    assert many.cap(600.0).power_w > single.cap(600.0).power_w + 20
    assert many.cap(600.0).tps > 2 * single.cap(600.0).tps


def test_air_throttles_near_slowdown_water_does_not() -> None:
    hot = ground_truth([get_profile("rtx5090-air")], "prefill-heavy", [600.0])
    assert hot.caps[0].regime == "thermal_limited"
    assert hot.caps[0].temp_c == pytest.approx(get_profile("rtx5090-air").slowdown_temp_c)
    air = ground_truth([get_profile("rtx3090-air")], "decode-single", [390.0])
    water = ground_truth([get_profile("rtx3090-water")], "decode-single", [390.0])
    assert water.caps[0].temp_c < air.caps[0].temp_c - 15
    assert water.caps[0].regime != "thermal_limited"


def test_sim_gpu_settles_to_ground_truth_and_throttle_bits() -> None:
    clock = ManualClock()
    p = get_profile("rtx3090-air")
    gpu = SimGpu(p, clock, seed=1)
    assert gpu.set_power_limit(290.0).accepted
    gpu.set_workload(DECODE)
    clock.sleep(600.0)
    samples = []
    for _ in range(200):
        samples.append(gpu.read_sample())
        clock.advance(0.5)
    truth = ground_truth([p], "decode-single", [290.0]).caps[0]
    median_power = sorted(s.power_w for s in samples)[100]
    assert median_power == pytest.approx(truth.power_w, rel=0.01)
    assert gpu.rate_tps() == pytest.approx(truth.tps, rel=0.01)
    assert all(s.clock_event_bits == CLOCK_EVENT_SW_POWER_CAP for s in samples)
    assert all(s.util_pct == 100.0 and s.pstate == 2 for s in samples)
    assert samples[-1].energy_mj > samples[0].energy_mj > 0


def test_sim_gpu_heats_with_its_time_constant() -> None:
    clock = ManualClock()
    p = get_profile("rtx3090-air")
    gpu = SimGpu(p, clock)
    start = gpu.temp_c
    gpu.set_power_limit(390.0)
    gpu.set_workload(DECODE)
    clock.sleep(p.thermal.time_constant_s)
    after_tau = gpu.temp_c
    clock.sleep(20 * p.thermal.time_constant_s)
    final = gpu.temp_c
    assert (after_tau - start) / (final - start) == pytest.approx(1 - math.exp(-1), abs=0.05)


def test_envelope_and_rejected_caps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    clock = ScaledClock(1.0)
    p = replace(get_profile("rtx5090-air"), rejects_below_w=450.0)
    gpu = SimGpu(p, clock)
    res = gpu.set_power_limit(300.0)
    assert not res.accepted and "outside the envelope" in res.message
    res = gpu.set_power_limit(420.0)
    assert not res.accepted and res.readback_w == 575.0
    assert gpu.set_power_limit(500.0).accepted
    assert gpu.envelope().current_w == 500.0


def test_limit_persists_in_state_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "sim-state.json"
    clock = ScaledClock(1.0)
    rig = SimRig([get_profile("rtx3090-air")], clock, state_file=state)
    rig.gpu(0).set_power_limit(250.0)
    again = SimRig([get_profile("rtx3090-air")], clock, state_file=state)
    assert again.gpu(0).envelope().current_w == 250.0
    assert LimitStore(state).get("GPU-sim-rtx3090-air-0") == 250.0


def test_rig_rates_follow_clocks_and_batch() -> None:
    clock = ManualClock()
    rig = SimRig([get_profile("rtx3090-air")], clock)
    rig.gpu(0).set_power_limit(390.0)
    rig.work_started("decode")
    fast = rig.decode_rate_tps()
    rig.gpu(0).set_power_limit(200.0)
    slow = rig.decode_rate_tps()
    assert slow < 0.6 * fast
    rig.work_started("decode")
    assert rig.decode_rate_tps() < slow  # two streams share the card
    rig.work_finished("decode")
    rig.work_finished("decode")
    assert rig.gpu(0).read_sample().util_pct < 100


def test_steady_state_is_a_fixed_point() -> None:
    p = get_profile("rtx3090-air")
    op, temp, throttled = steady_state(p, DECODE, 300.0)
    assert not throttled
    assert temp == pytest.approx(p.thermal.ambient_c + p.thermal.resistance_c_per_w * op.power_w)


@pytest.mark.parametrize("profile", ["h100-sxm", "h200-sxm"])
def test_truth_breaks_an_exact_tie_towards_the_lowest_cap(profile: str) -> None:
    # decode-single never reaches these cards' caps: every cap from the ceiling's first runs
    # one operating point, so their TPS/W tie and the truth names the lowest of them
    caps = [350.0 + 10 * i for i in range(36)]  # the cards' default sweep
    truth = ground_truth([get_profile(profile)], "decode-single", caps)
    assert {c.regime for c in truth.caps} == {"draw_ceiling"}
    top = max(c.tps_per_w for c in truth.caps)
    assert all(c.tps_per_w == pytest.approx(top, rel=1e-6) for c in truth.caps)
    assert truth.sweet_spot_cap_w == 350.0


def test_the_kept_parts_of_each_bin_give_power_at_to_the_last_bit() -> None:
    """operating_point adds the static draw to each bin's kept (dynamic, memory) parts: the
    same floats power_at gives, at any temperature, lock, memory clock and offset."""
    from powersweep.sim.physics import _bin_parts, locked_bins, static_power_w

    profile = get_profile("rtx3090-air")
    for work, mem, offset in ((DECODE, None, 0.0), (Workload("decode", batch=8), 5001.0, 150.0)):
        bins = locked_bins(profile, 1500.0)
        for temp in (41.3, 67.9):
            static = static_power_w(profile, temp)
            kept = [static + d + m for d, m in _bin_parts(profile, work, bins, mem, offset)]
            direct = [power_at(profile, work, f, temp, mem, sm_offset_mhz=offset) for f in bins]
            assert kept == direct
