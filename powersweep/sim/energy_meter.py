"""A simulated card's energy: the true energy it drew, the driver's total-energy counter (which
advances only at its own update period, on a phase of its own) and the draw averaged over the
driver's power-usage window (``nvmlDeviceGetPowerUsage`` on Ampere and newer) or over a lagging
sensor's window (``--sim-world sensor-lag``).

The reasoning: docs/simulated-rig.md, "powersweep.sim.energy_meter".
"""

from __future__ import annotations

import math
import random
from collections import deque

from powersweep.sim.profiles import GpuProfile
from powersweep.sim.world import SENSOR_LAG_WINDOW_S

# A one-second average of ten short readings: its noise is the instant reading's over sqrt(10).
_AVERAGE_NOISE_SHARE = 1.0 / math.sqrt(10.0)


class EnergyMeter:
    """The energy figures of one card, integrated over piecewise constant draws.

    Args:
        profile: The card's physics (its counter's period and gain, its average window, its
            idle draw before the start).
        now_s: Run time at the start.
        seed: The rig's seed (the counter's update phase).
        index: The card's index (the counter's update phase).
        quantum_w: ``--sim-world sensor-lag``: both power readings average the true draw over
            :data:`~powersweep.sim.world.SENSOR_LAG_WINDOW_S` and step in this many watts
            (None: the instant reading follows the draw within 0.1 s, 0.01 W steps).
    """

    def __init__(
        self,
        profile: GpuProfile,
        now_s: float,
        seed: int,
        index: int,
        quantum_w: float | None = None,
    ) -> None:
        self._profile = profile
        self._quantum_w = quantum_w
        lag_window_s = SENSOR_LAG_WINDOW_S if quantum_w is not None else 0.0
        self.true_mj = 0.0  # the true energy since the start, exact
        self.counter_mj = 0.0  # what the driver's counter holds: its last update
        period = profile.energy_counter_period_s
        # each card's counter updates on its own phase, unrelated to the sampler's ticks
        self._counter_phase_s = random.Random(seed * 7919 + index).random() * period
        # (run seconds, true energy mJ) at each advance over the last average window; before
        # the start the card idled
        window = max(profile.power_usage_average_s, lag_window_s)
        self._kept_s = window
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
        window = self._kept_s
        trail = self._trail
        trail.append((t1, self.true_mj))
        while len(trail) > 2 and trail[1][0] <= t1 - window:
            trail.popleft()

    def moving_average_w(self, window_s: float | None = None) -> float:
        """The true draw averaged over the last ``window_s`` (default ``power_usage_average_s``;
        NaN for none); a window other than the longest kept is found in the trail."""
        window = self._profile.power_usage_average_s if window_s is None else window_s
        if window <= 0:
            return math.nan
        trail = self._trail
        t_end, e_end = trail[-1]
        start = t_end - window
        i = 0
        if window != self._kept_s:
            while i + 2 < len(trail) and trail[i + 1][0] <= start:
                i += 1
        (ta, ea), (tb, eb) = trail[i], trail[i + 1]
        # the draw is constant between two advances: the energy at the window's start is on
        # the straight line between the breakpoints around it
        e_start = ea + (eb - ea) * (start - ta) / (tb - ta) if tb > ta else ea
        return (e_end - e_start) / window / 1000.0

    def readings(
        self, short_w: float, rng: random.Random, avg_rng: random.Random
    ) -> tuple[float, float]:
        """(instant, power usage) readings, W, with the sensor's Gaussian noise: the instant one
        from ``short_w`` (the draw a 0.1 s reading holds), the usage the average over
        ``power_usage_average_s`` (the instant one where the card has no average). With
        sensor-lag the instant one averages over the lagging window too, and both step in
        quanta."""
        p = self._profile
        noise = p.power_noise_pct / 100.0
        if self._quantum_w is not None:
            short_w = self.moving_average_w(SENSOR_LAG_WINDOW_S)
        short = self._reading(short_w * (1.0 + rng.gauss(0.0, noise)))
        if p.power_usage_average_s <= 0:
            return short, short  # before Ampere the power usage is itself the short reading
        average = self.moving_average_w()
        return short, self._reading(
            average * (1.0 + avg_rng.gauss(0.0, noise * _AVERAGE_NOISE_SHARE))
        )

    def _reading(self, watts: float) -> float:
        """A reading as the sensor gives it: to 0.01 W, or in whole quanta (sensor-lag)."""
        if self._quantum_w is None:
            return round(watts, 2)
        return round(round(watts / self._quantum_w) * self._quantum_w, 2)
