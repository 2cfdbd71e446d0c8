"""Settle detection on synthetic traces and on a simulated card."""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import replace

import pytest

from powersweep.clock import ManualClock
from powersweep.sim.physics import Workload
from powersweep.sim.profiles import get_profile
from powersweep.sim.sim_gpu import SimGpu
from powersweep.sweep.sampling.settle import (
    AVERAGED_READING_S,
    DEFAULT_WINDOW_S,
    SettleDetector,
    combine,
    wait_settled,
)


def feed(det: SettleDetector, trace: list[tuple[float, float, float]]) -> float | None:
    for t, p, c in trace:
        if det.add(t, p, c):
            return det.settled_at_s
    return None


def trace(
    done_at_s: float, *, n: int = 60, dt: float = 0.1, seed: int = 0
) -> list[tuple[float, float, float]]:
    """A cap change at 0: draw ramps 390 -> 300 W and clock 1700 -> 1400 MHz until done_at_s,
    then holds (0.3 % draw noise, clock dithering between two bins)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = i * dt
        frac = min(t / done_at_s, 1.0) if done_at_s > 0 else 1.0
        p = (390.0 - 90.0 * frac) * (1 + rng.gauss(0, 0.003))
        c = 1700.0 - 300.0 * frac if frac < 1 else rng.choice((1395.0, 1410.0))
        out.append((t, p, c))
    return out


@pytest.mark.parametrize("done_at_s", [0.3, 0.55, 1.2])
def test_step_settles_after_the_transient_not_before(done_at_s: float) -> None:
    det = SettleDetector(window_s=1.0, min_s=0.25, max_s=3.0)
    at = feed(det, trace(done_at_s))
    assert at is not None and not det.forced
    # settled only once the ramp is (nearly) over and its readings left the window
    assert done_at_s < at <= done_at_s + 1.0 + 0.1 + 1e-9  # one window, one tick
    ramp_tail = [p for t, p, _ in trace(done_at_s) if at - 1.0 <= t <= at]
    assert max(ramp_tail) - min(ramp_tail) < 0.04 * 300.0


def test_step_right_after_the_first_reading_waits_one_window() -> None:
    # one reading at the old operating point, then the new one: it must slide out first
    pts = [(0.0, 390.0, 1700.0)] + [(i * 0.1, 300.0, 1400.0) for i in range(1, 40)]
    det = SettleDetector(window_s=1.0, min_s=0.25, max_s=3.0)
    assert feed(det, pts) == pytest.approx(1.1)


def test_noise_only_settles_at_min() -> None:
    det = SettleDetector(window_s=1.0, min_s=0.25, max_s=3.0)
    at = feed(det, trace(-1.0))
    assert at == pytest.approx(0.3)  # first reading at or after 0.25 s (0.1 s ticks)


def test_never_exceeds_max() -> None:
    rng = random.Random(1)
    # a draw wandering by 5 % never settles: forced exactly at max
    wild = [(i * 0.1, 300.0 * (1 + rng.choice((-0.05, 0.05))), 1400.0) for i in range(100)]
    det = SettleDetector(window_s=1.0, min_s=0.25, max_s=2.0)
    assert feed(det, wild) == pytest.approx(2.0)
    assert det.forced


def test_clock_jump_alone_is_a_transient() -> None:
    det = SettleDetector(window_s=0.5, min_s=0.2, max_s=3.0)
    pts = [(0.0, 300.0, 1560.0)] + [(i * 0.1, 300.0, 1635.0) for i in range(1, 30)]
    assert feed(det, pts) == pytest.approx(0.6)


def test_nan_readings_are_skipped_but_count_towards_max() -> None:
    det = SettleDetector(window_s=1.0, min_s=0.25, max_s=1.0)
    assert feed(det, [(i * 0.1, math.nan, math.nan) for i in range(20)]) == pytest.approx(1.0)
    assert det.forced


def test_bad_bounds_raise() -> None:
    with pytest.raises(ValueError):
        SettleDetector(min_s=2.0, max_s=1.0)


def test_combine_sums_draw_and_takes_first_clock() -> None:
    gpu = SimGpu(get_profile("rtx3090-air"), ManualClock())
    s = gpu.read_sample()
    power, clock = combine([s, s])
    # the instant reading, not the driver's lagging one-second average
    assert s.draw_w == s.power_instant_w
    assert power == pytest.approx(2 * s.power_instant_w)
    assert clock == s.sm_clock_mhz


def test_wait_settled_on_a_loaded_sim_gpu_is_fast_and_logs_ticks() -> None:
    clock = ManualClock()
    gpu = SimGpu(get_profile("rtx3090-air"), clock, seed=3)
    gpu.set_workload(Workload("decode"))
    clock.advance(20.0)
    gpu.set_power_limit(300.0)
    ticks: list[float] = []
    settle = asyncio.run(
        wait_settled([gpu], clock, interval_s=0.1, on_tick=lambda t, _s: ticks.append(t))
    )
    # the simulated card moves its clocks with the cap at once; its power reading averages over
    # 0.1 s, so the draw is stable a few ticks later
    assert settle == pytest.approx(0.5)
    assert len(ticks) == 6 and clock.now() == pytest.approx(20.5)


def test_wait_settled_ignores_idle_readings_when_asked() -> None:
    clock = ManualClock()
    gpu = SimGpu(get_profile("rtx3090-air"), clock, seed=3)
    # idle all along: with a busy threshold nothing is fed, so the wait runs to the maximum
    settle = asyncio.run(
        wait_settled(
            [gpu],
            clock,
            interval_s=0.1,
            busy_util_pct=50.0,
            detector_factory=lambda: SettleDetector(max_s=1.5),
        )
    )
    assert settle == pytest.approx(1.5)


def test_wait_settled_rejects_bad_interval() -> None:
    with pytest.raises(ValueError):
        asyncio.run(wait_settled([], ManualClock(), interval_s=0.0))


def _step_from_idle(profile_changes: dict[str, object]) -> float:
    clock = ManualClock()
    gpu = SimGpu(replace(get_profile("rtx3090-air"), **profile_changes), clock, seed=3)
    gpu.set_workload(Workload("decode"))
    clock.advance(20.0)
    gpu.set_power_limit(300.0)
    return asyncio.run(wait_settled([gpu], clock, interval_s=0.1))


def test_settle_feeds_on_the_instant_reading_not_the_lagging_average() -> None:
    # the instant reading follows the cap within a few ticks, while the card's one-second
    # average still ramps: settle does not wait for the average
    assert _step_from_idle({}) == pytest.approx(0.5)


def test_a_card_with_only_an_averaged_reading_settles_after_its_window() -> None:
    # no instant field, a one-second power usage: the ramp of a small step passes the
    # tolerances, so the detector waits out the average's window and its own
    settle = _step_from_idle({"instant_power_field": False})
    assert settle >= AVERAGED_READING_S + DEFAULT_WINDOW_S - 1e-9
    assert settle < AVERAGED_READING_S + DEFAULT_WINDOW_S + 0.25
    # nor can the tool tell a pre-Ampere card's short average from it: it waits alike
    pre_ampere = {"instant_power_field": False, "power_usage_average_s": 0.0}
    assert _step_from_idle(pre_ampere) == pytest.approx(settle)


def test_wait_at_least_stays_within_the_maximum() -> None:
    det = SettleDetector(min_s=0.25, max_s=1.0)
    det.wait_at_least(5.0)
    assert det.min_s == 1.0
    det.wait_at_least(0.1)
    assert det.min_s == 1.0
