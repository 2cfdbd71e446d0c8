"""powersweep.sim.world and the models it feeds (issue 44): the world's noise on the simulated rig.

Each model is off by default and, when on, leaves its signature: bursty draw averages well
under a cap that binds its bursts; a lagging sensor trails a step and reads in whole quanta;
autocorrelated jitter correlates neighbouring token gaps where the simulator's own jitter does
not; hiccups stall with their period; drift moves the rate by its amplitude; context slowdown
lengthens late gaps; a few requests are outliers. Each is seeded: one seed, one run.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from powersweep.clock import ManualClock
from powersweep.errors import UsageError
from powersweep.sim.energy_meter import EnergyMeter
from powersweep.sim.engine import ConstantEngine
from powersweep.sim.physics import Workload, steady_state
from powersweep.sim.profiles import get_profile
from powersweep.sim.server import SimServer
from powersweep.sim.server_chunks import Plan, Progress
from powersweep.sim.sim_gpu import SimGpu
from powersweep.sim.sim_options import SimOptions, refuse_without_simulate
from powersweep.sim.sim_rig import ground_truth
from powersweep.sim.virtual_time import VirtualClock
from powersweep.sim.world import (
    BURST_CYCLE_S,
    HICCUP_S,
    MODELS,
    OUTLIER_REQUEST_SHARE,
    Drift,
    World,
    finish_s,
    parse_world,
)

R3090 = get_profile("rtx3090-air")


def test_models_are_named_with_their_parameters_filled_in_and_checked() -> None:
    assert parse_world([]) == ()
    assert parse_world(["hiccups", "ar-jitter=1.5"]) == ("ar-jitter=1.5", "hiccups=6")
    assert parse_world(["drift,sensor-lag=2"]) == ("sensor-lag=2", "drift=3")
    every = parse_world([",".join(MODELS)])
    assert [s.split("=")[0] for s in every] == list(MODELS)
    for bad, words in [
        ("storms", "unknown model 'storms'"),
        ("drift=-1", "more than 0 and at most 20"),
        ("bursty-draw=1.5", "at most 0.99"),
        ("hiccups=x", "takes a number"),
        ("outlier-window=1", "no outlier"),
        ("drift,drift=2", "drift given twice"),
    ]:
        with pytest.raises(UsageError, match=words):
            parse_world([bad])


def test_the_models_are_sim_options_recorded_for_resume_and_only_with_simulate() -> None:
    sim = SimOptions(seed=4, world=parse_world(["hiccups=8", "drift"]))
    recorded = sim.recorded()
    assert recorded["sim_world"] == ["hiccups=8", "drift=3"]
    assert SimOptions.from_recorded(recorded) == sim
    assert SimOptions.from_recorded({"seed": 4}).world == ()  # a run from before the models
    with pytest.raises(UsageError, match="--sim-"):
        refuse_without_simulate(SimOptions(world=("drift=3",)))
    with pytest.raises(UsageError, match="drop --url"):
        sim.validate("http://127.0.0.1:8080")
    with pytest.raises(UsageError, match="unknown model"):
        SimOptions(world=("fog",)).validate(None)


def test_every_model_is_off_by_default() -> None:
    assert World.build((), seed=1) is None
    engine = ConstantEngine(VirtualClock())
    assert SimServer(engine).pacing is None
    # sensor-lag is the card's own: the server's pacing is untouched
    assert SimServer(engine, world=World(["sensor-lag"], 1)).pacing is None
    assert SimServer(engine, world=World(["hiccups"], 1)).pacing is not None
    world = World(["drift"], 1)
    assert world.bursts is None and world.hiccups is None and world.wander is None
    assert world.duty == 1.0 and world.tps_share() == 1.0 and not world.is_outlier(5)


def test_a_seed_gives_the_same_processes_and_another_seed_others() -> None:
    specs = [",".join(MODELS)]
    a, b, c = World(specs, 7), World(specs, 7), World(specs, 8)
    times = [0.1 * k for k in range(400)]

    def trace(w: World) -> tuple[list[Any], list[float], tuple[float, float]]:
        assert w.bursts is not None and w.hiccups is not None and w.wander is not None
        wander = w.wander
        return (
            [w.bursts.next_gap(t) for t in times],
            [wander.at(t) for t in times],
            w.hiccups.next_gap(0.0),
        )

    assert trace(a) == trace(b) and a.record() == b.record()
    other = trace(c)
    assert all(x != y for x, y in zip(trace(a), other, strict=True))
    assert [a.is_outlier(n) for n in range(300)] == [b.is_outlier(n) for n in range(300)]
    assert [a.is_outlier(n) for n in range(300)] != [c.is_outlier(n) for n in range(300)]


# --- the card: bursty draw, a lagging quantised sensor ------------------------------------


def _world_card(specs: list[str], limit_w: float = 290.0) -> tuple[ManualClock, SimGpu]:
    clock = ManualClock()
    gpu = SimGpu(replace(R3090, power_noise_pct=0.0), clock, seed=3, world=World(specs, 3))
    gpu.set_power_limit(limit_w)
    gpu.set_workload(Workload("decode"))
    return clock, gpu


def test_a_card_reads_the_same_without_its_own_models() -> None:
    # the server's models leave the card's readings as they were, float for float
    traces = []
    for specs in ([], ["drift", "hiccups", "ar-jitter"]):
        clock = ManualClock()
        world = World.build(specs, 3)
        gpu = SimGpu(R3090, clock, seed=3, world=world)
        gpu.set_workload(Workload("decode"))
        trace = []
        for _ in range(50):
            clock.advance(0.37)
            trace.append(gpu.read_sample())
        traces.append(trace)
    assert traces[0] == traces[1]


def test_bursty_draw_averages_well_under_a_cap_that_binds_each_burst() -> None:
    clock, gpu = _world_card(["bursty-draw"])
    clock.advance(120.0)  # warm
    e0, t0 = gpu.true_energy_mj, clock.now()
    averages, instants = [], []
    for _ in range(400):
        clock.advance(0.05)
        sample = gpu.read_sample()
        averages.append(sample.power_w)
        instants.append(sample.power_instant_w)
    mean_w = (gpu.true_energy_mj - e0) / 1000.0 / (clock.now() - t0)
    truth = ground_truth([R3090], "decode-single", [290.0], world=World(["bursty-draw"], 3))
    cap = truth.cap(290.0)
    assert cap.regime == "power_limited"  # the cap binds ...
    assert max(instants) == pytest.approx(290.0, abs=3.0)  # ... each burst, at the cap ...
    assert mean_w < 0.85 * 290.0  # ... while the card averages well under it
    assert statistics.median(averages) == pytest.approx(mean_w, rel=0.03)  # the 1 s average
    assert mean_w == pytest.approx(cap.power_w, rel=0.01)  # the truth is the mean draw
    # the rate reaching the client is the bursts' share of the card's (a cooler card's: its
    # temperature follows the mean draw, so it leaks less and clocks a little higher)
    burst, _, _ = steady_state(R3090, Workload("decode"), 290.0, duty=0.7)
    assert cap.tps == pytest.approx(0.7 * burst.rate_tps, rel=1e-9)
    plain = ground_truth([R3090], "decode-single", [290.0]).cap(290.0)
    assert 0.7 * plain.tps < cap.tps < 0.72 * plain.tps


def test_bursts_last_their_duty_of_the_time_on_average() -> None:
    world = World(["bursty-draw=0.6"], 2)
    assert world.bursts is not None
    segments = world.bursts.segments(0.0, 300.0)
    working = sum(b - a for a, b, w in segments if w)
    assert working / 300.0 == pytest.approx(0.6, abs=0.01)
    gaps = [b - a for a, b, w in segments[1:-1] if not w]
    assert statistics.mean(gaps) == pytest.approx(0.4 * BURST_CYCLE_S, rel=0.05)
    assert min(gaps) < 0.8 * max(gaps)  # drawn, not periodic: no tick locks onto a phase


def test_a_lagging_sensor_trails_a_step_and_reads_in_whole_quanta() -> None:
    lagging, plain = _world_card(["sensor-lag=5"]), _world_card([])
    for clock, gpu in (lagging, plain):
        clock.advance(60.0)
        gpu.set_power_limit(200.0)  # a step down of about 90 W
    readings: dict[str, list[Any]] = {"lag": [], "plain": []}
    for _ in range(30):
        for name, (clock, gpu) in (("lag", lagging), ("plain", plain)):
            clock.advance(0.05)
            readings[name].append(gpu.read_sample())
    at_half_s = 9  # 0.5 s after the step
    lag, fresh = readings["lag"][at_half_s], readings["plain"][at_half_s]
    assert fresh.power_instant_w == pytest.approx(200.0, abs=2.0)  # the instant field follows
    assert lag.power_instant_w > 225.0  # the lagging one still holds half the old draw
    for s in readings["lag"]:
        assert s.power_instant_w % 5.0 == 0.0 and s.power_w % 5.0 == 0.0
    assert readings["lag"][-1].power_instant_w == pytest.approx(200.0, abs=2.5)


def test_the_lagging_window_is_read_from_the_energy_trail() -> None:
    meter = EnergyMeter(R3090, 0.0, seed=0, index=0, quantum_w=1.0)
    meter.count(0.0, 0.5, 300.0)
    meter.count(0.5, 1.0, 100.0)
    assert meter.moving_average_w(0.5) == pytest.approx(100.0)
    assert meter.moving_average_w(1.0) == pytest.approx(200.0)
    assert meter.moving_average_w(0.75) == pytest.approx((0.25 * 300 + 0.5 * 100) / 0.75)


# --- the server's pacing ------------------------------------------------------------------


def _token_times(
    specs: list[str], n: int, *, prompt: int = 100, request_no: int = 1, seed: int = 5
) -> list[float]:
    """When each token of one request leaves a simulated server at 50 tokens/s (no jitter of
    the simulator's own), on virtual time."""
    clock = VirtualClock()
    engine = ConstantEngine(clock, decode_tps=50.0, prefill_tps=5000.0)
    world = World(specs, seed) if specs else None
    server = SimServer(engine, world=world, token_jitter_fraction=0.0, total_slots=0)
    plan = Plan(request_no, prompt, n, 0, stream=True, include_usage=False)
    times: list[float] = []

    async def run() -> None:
        async for burst in server._work(plan, Progress()):
            times.extend([clock.now()] * len(burst))

    with asyncio.Runner(loop_factory=clock.loop_factory) as runner:
        runner.run(run())
    return times


def _gaps(times: list[float]) -> np.ndarray:
    return np.diff(np.asarray(times))


def test_ar_jitter_correlates_neighbouring_gaps_and_keeps_the_long_run_rate() -> None:
    gaps = _gaps(_token_times(["ar-jitter"], 6000))
    control = _gaps(_token_times([], 6000))
    assert np.allclose(control, 0.02)  # the engine's own step, exact
    lag1 = np.corrcoef(gaps[:-1], gaps[1:])[0, 1]
    assert lag1 > 0.9
    assert gaps.std() / gaps.mean() == pytest.approx(0.02, rel=0.5)  # the stated 2% SD
    # 120 s of decode, 24 correlation times: the rate is the engine's within a few tenths
    assert len(gaps) / gaps.sum() == pytest.approx(50.0, rel=0.015)
    # the simulator's own jitter: iid delays, neighbouring gaps anti-correlated
    clock = VirtualClock()
    server = SimServer(ConstantEngine(clock, decode_tps=50.0))
    late = server._jitter(1)
    delays = np.array([late(0.02) for _ in range(6001)])
    iid = 0.02 + np.diff(delays)
    assert np.corrcoef(iid[:-1], iid[1:])[0, 1] < 0.0


def test_hiccups_stall_the_tokens_for_their_length_with_their_period() -> None:
    gaps = _gaps(_token_times(["hiccups=6"], 2000))  # 40 s
    stalls = np.flatnonzero(gaps > 0.2)
    assert len(stalls) in (6, 7)
    assert gaps[stalls] == pytest.approx(HICCUP_S + 0.02, abs=0.021)
    starts = np.cumsum(gaps)[stalls]
    # 6 s apart in run time, the stall included
    assert np.diff(starts) == pytest.approx(6.0, abs=0.03)
    rate = len(gaps) / gaps.sum()
    assert rate == pytest.approx(50.0 * (1.0 - HICCUP_S / 6.0), rel=0.01)


def test_drift_moves_the_rate_by_its_amplitude_over_its_period() -> None:
    times = np.asarray(_token_times(["drift=3"], 30_000))  # 600 s: one period
    world = World(["drift=3"], 5)
    assert world.drift is not None
    rates = []
    for t0 in np.arange(0.0, 590.0, 10.0):
        inside = (times >= t0) & (times < t0 + 10.0)
        rates.append(inside.sum() / 10.0)
    assert max(rates) / 50.0 == pytest.approx(1.03, abs=0.005)
    assert min(rates) / 50.0 == pytest.approx(0.97, abs=0.005)
    # the mean over a span, exactly as the rate averages it
    assert (times < 100.0).sum() / 100.0 == pytest.approx(50.0 * world.drift.mean(0, 100), rel=2e-3)


def test_the_drift_mean_over_a_span_is_the_integral() -> None:
    drift = Drift(0.03, 600.0, 1.0)
    grid = np.linspace(37.0, 211.0, 100_001)
    numeric = float(np.mean([drift.at(t) for t in grid]))
    assert drift.mean(37.0, 211.0) == pytest.approx(numeric, rel=1e-6)
    assert drift.mean(0.0, 600.0) == pytest.approx(1.0)
    assert drift.mean(5.0, 5.0) == drift.at(5.0)


def test_context_slowdown_lengthens_late_gaps() -> None:
    gaps = _gaps(_token_times(["context-slowdown=20"], 2000, prompt=1000))
    # each step grows by 20% per 1000 tokens of context: 1.2x at the start, 1.6x at the end
    assert gaps[:50].mean() == pytest.approx(0.02 * 1.21, rel=0.01)
    assert gaps[-50:].mean() == pytest.approx(0.02 * 1.59, rel=0.01)
    assert np.all(np.diff(gaps) > -1e-12)
    flat = _gaps(_token_times(["context-slowdown=20"], 200, prompt=0))
    assert flat[0] == pytest.approx(0.02, rel=1e-3)


def test_an_outlier_request_decodes_its_factor_faster_than_its_neighbours() -> None:
    world = World(["outlier-window=1.36"], 5)
    outliers = [n for n in range(1, 4001) if world.is_outlier(n)]
    assert len(outliers) / 4000 == pytest.approx(OUTLIER_REQUEST_SHARE, abs=0.008)
    fast = outliers[0]
    normal = next(n for n in range(1, 100) if n not in outliers)
    rate = {}
    for n in (fast, normal):
        gaps = _gaps(_token_times(["outlier-window=1.36"], 200, request_no=n))
        rate[n] = len(gaps) / gaps.sum()
    assert rate[normal] == pytest.approx(50.0)
    assert rate[fast] == pytest.approx(50.0 * 1.36)


def test_work_stands_still_in_every_gap_of_several_kinds() -> None:
    bursts, hiccups = (
        World(["bursty-draw=0.5", "hiccups=2"], 9).bursts,
        World(["hiccups=2"], 9).hiccups,
    )
    assert bursts is not None and hiccups is not None
    start = 3.0
    end = finish_s(start, 2.0, [bursts, hiccups])
    # the work done between start and end, outside both kinds of gap, is the work asked for
    grid = np.linspace(start, end, 200_001)
    free = [
        all(not (s <= t < e) for s, e in (bursts.next_gap(t), hiccups.next_gap(t))) for t in grid
    ]
    assert np.mean(free) * (end - start) == pytest.approx(2.0, rel=2e-3)


def test_the_truth_of_bursty_work_settles_its_temperature_on_the_mean_draw() -> None:
    work = Workload("decode")
    _, plain_temp, _ = steady_state(R3090, work, 290.0)
    op, temp, _ = steady_state(R3090, work, 290.0, duty=0.7)
    assert op.power_w == pytest.approx(290.0, abs=1.0)  # each burst at the cap
    assert temp < plain_temp - 5.0  # the card runs cooler on the mean draw
