"""powersweep.sim.energy_meter: a card's true energy integrates its draw exactly; the driver's
counter holds the energy of its last update (at its own period and phase, at its gain); the
power usage averages the true draw over its window (none where the window is 0)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from powersweep.sim.energy_meter import EnergyMeter
from powersweep.sim.profiles import get_profile


def test_the_true_energy_is_exact_and_the_counter_holds_its_last_update() -> None:
    p = replace(get_profile("rtx3090-air"), energy_counter_period_s=0.1)
    meter = EnergyMeter(p, 0.0, seed=0, index=0)
    meter.count(0.0, 1.0, 200.0)
    meter.count(1.0, 1.05, 300.0)
    assert meter.true_mj == pytest.approx(200_000.0 + 15_000.0)
    # the counter is behind the truth by less than one period's draw, never ahead
    assert 215_000.0 - 300.0 * 0.1 * 1000.0 <= meter.counter_mj <= 215_000.0
    drifting = EnergyMeter(
        replace(p, energy_counter_period_s=0.0, energy_counter_gain=1.1), 0, 0, 0
    )
    drifting.count(0.0, 2.0, 100.0)
    assert drifting.counter_mj == pytest.approx(1.1 * drifting.true_mj)


def test_the_power_usage_averages_the_draw_over_its_window() -> None:
    p = get_profile("rtx3090-air")
    assert p.power_usage_average_s == 1.0
    meter = EnergyMeter(p, 0.0, seed=1, index=0)
    assert meter.moving_average_w() == pytest.approx(p.idle_w)  # idle before the start
    meter.count(0.0, 0.5, 300.0)
    assert meter.moving_average_w() == pytest.approx((p.idle_w + 300.0) / 2)
    meter.count(0.5, 3.0, 250.0)
    assert meter.moving_average_w() == pytest.approx(250.0)
    old = EnergyMeter(replace(p, power_usage_average_s=0.0), 0.0, seed=1, index=0)
    old.count(0.0, 1.0, 250.0)
    assert math.isnan(old.moving_average_w())
