"""A simulated card's energy: the true energy it drew, the driver's total-energy counter (which
advances only at its own update period, on a phase of its own) and the draw averaged over the
driver's power-usage window (``nvmlDeviceGetPowerUsage`` on Ampere and newer).

Kept apart from :mod:`powersweep.sim.sim_gpu`, which integrates the draw step by step and reads
these figures back.
"""

from __future__ import annotations

import math
import random
from collections import deque

from powersweep.sim.profiles import GpuProfile


class EnergyMeter:
    """The energy figures of one card, integrated over piecewise constant draws.

    Args:
        profile: The card's physics (its counter's period and gain, its average window, its
            idle draw before the start).
        now_s: Run time at the start.
        seed: The rig's seed (the counter's update phase).
        index: The card's index (the counter's update phase).
    """

    def __init__(self, profile: GpuProfile, now_s: float, seed: int, index: int) -> None:
        self._profile = profile
        self.true_mj = 0.0  # the true energy since the start, exact
        self.counter_mj = 0.0  # what the driver's counter holds: its last update
        period = profile.energy_counter_period_s
        # each card's counter updates on its own phase, unrelated to the sampler's ticks
        self._counter_phase_s = random.Random(seed * 7919 + index).random() * period
        # (run seconds, true energy mJ) at each advance over the last average window; before
        # the start the card idled
        window = profile.power_usage_average_s
        self._trail: deque[tuple[float, float]] = deque(
            [(now_s - window, -profile.idle_w * window * 1000.0), (now_s, 0.0)]
        )

    def count(self, t0: float, t1: float, power_w: float) -> None:
        """Integrate the true draw over ``[t0, t1]`` (constant ``power_w``) and advance the
        driver's counter to its last update instant in it, at the card's update period."""
        p = self._profile
        e0 = self.true_mj
        self.true_mj = e0 + power_w * (t1 - t0) * 1000.0
        period = p.energy_counter_period_s
        if period > 0:
            phase = self._counter_phase_s
            last_update = phase + math.floor((t1 - phase) / period) * period
            if last_update > t0:
                # the true energy at the update instant: the draw is constant over the step
                at_update = e0 + power_w * (last_update - t0) * 1000.0
                self.counter_mj = p.energy_counter_gain * at_update
        else:
            self.counter_mj = p.energy_counter_gain * self.true_mj
        window = p.power_usage_average_s
        trail = self._trail
        trail.append((t1, self.true_mj))
        while len(trail) > 2 and trail[1][0] <= t1 - window:
            trail.popleft()

    def moving_average_w(self) -> float:
        """The true draw averaged over the last ``power_usage_average_s`` (NaN for none)."""
        window = self._profile.power_usage_average_s
        if window <= 0:
            return math.nan
        trail = self._trail
        t_end, e_end = trail[-1]
        start = t_end - window
        (ta, ea), (tb, eb) = trail[0], trail[1]
        # the draw is constant between two advances: the energy at the window's start is on
        # the straight line between the breakpoints around it
        e_start = ea + (eb - ea) * (start - ta) / (tb - ta) if tb > ta else ea
        return (e_end - e_start) / window / 1000.0
