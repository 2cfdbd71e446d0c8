"""powersweep.analysis.binding: a cap binds where the card draws at it (or says so by its
power-cap clock reason), and a curve binds wherever its TPS follows the cap, whatever its
window-averaged draw; never by a share of the cap drawn."""

from __future__ import annotations

import math

from powersweep.analysis.binding import caps_bind, tps_rise_z, tps_sigmas
from powersweep.analysis.cap_points import CapPoint
from powersweep.analysis.curve_noise import FLOOR_SIGMA_REL, estimate
from powersweep.analysis.result_types import CapsBind


def _p(cap: float, power: float, tps: float = 30.0, **kw: float) -> CapPoint:
    return CapPoint(cap_w=cap, cap_total_w=cap, power_w=power, tps=tps, **kw)


FLOOR = estimate([])


def test_a_card_drawing_at_its_cap_binds_and_one_far_under_it_with_flat_tps_does_not() -> None:
    at_cap = [_p(300, 299.4, 30.0), _p(350, 330.0, 31.0), _p(400, 331.0, 31.0)]
    assert caps_bind(at_cap, FLOOR).by == "draw"
    # the H100 case: 317 W under caps of 350-700 W, TPS flat: no cap binds
    flat = [_p(350 + 50 * k, 317.0 + 0.2 * (k % 2), 43.08 + 0.01 * (k % 3)) for k in range(8)]
    binds = caps_bind(flat, FLOOR)
    assert binds == CapsBind(binds=False, draw_w=[317.0, 317.2], caps_w=[350.0, 700.0], by=None)
    # drawing 90% of the cap is no sign of a cap that binds (the old run-relative rule)
    assert caps_bind([_p(300, 270.0), _p(310, 270.1), _p(320, 270.0)], FLOOR).binds is False


def test_the_power_cap_clock_reason_says_a_cap_binds() -> None:
    points = [_p(300, 200.0), _p(350, 210.0, pwr_throttle_pct=80.0), _p(400, 220.0)]
    assert caps_bind(points, FLOOR).by == "draw"


def test_tps_that_follows_the_cap_binds_whatever_the_averaged_draw() -> None:
    # a bursty prefill load: the averaged draw sits 11-34% under each cap while TPS rises
    caps = [150.0, 200.0, 250.0, 300.0, 350.0]
    points = [
        _p(c, d, t)
        for c, d, t in zip(
            caps, [99.0, 150.0, 200.0, 250.0, 311.0], [1000, 1400, 1750, 2000, 2170], strict=True
        )
    ]
    binds = caps_bind(points, FLOOR)
    assert binds.binds and binds.by == "tps"


def test_a_rise_within_the_points_own_noise_is_no_binding() -> None:
    points = [_p(300 + 50 * k, 200.0, 30.0 * (1 + 0.004 * k)) for k in range(5)]
    assert caps_bind(points, FLOOR).by == "tps"  # 1.6% over the floor's 0.36% noise
    noisy = [CapPoint(p.cap_w, p.cap_total_w, p.power_w, p.tps, tps_sigma_rel=0.02) for p in points]
    assert caps_bind(noisy, FLOOR).binds is False
    assert tps_sigmas(noisy, FLOOR) == [0.02] * 5
    assert tps_sigmas(points, FLOOR) == [FLOOR_SIGMA_REL] * 5


def test_the_rise_statistic_needs_three_points() -> None:
    assert math.isnan(tps_rise_z([_p(300, 200.0), _p(350, 210.0)], [0.01, 0.01]))
    rising = [_p(300, 200.0, 30.0), _p(350, 210.0, 31.0), _p(400, 220.0, 32.0)]
    assert tps_rise_z(rising, [0.01] * 3) > 3.0
    assert tps_rise_z(list(reversed(rising)), [0.01] * 3) > 3.0  # sorted or not
