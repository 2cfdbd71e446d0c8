"""The dry run's estimate: which points wait for a steady temperature."""

from __future__ import annotations

import pytest

from powersweep.sweep.estimate import JUMP_WAIT_SHARE, THERMAL_WAITING_POINTS, estimate_run_s
from powersweep.sweep.options import (
    Cooling,
    MeasureOptions,
    OutputOptions,
    PointOptions,
    SettleMode,
    Strategy,
    SweepOptions,
)
from powersweep.sweep.sampling.thermal import CARRY_DRAW_W, THERMAL_TRAIL_S


def _options(
    thermal_wait_s: float = MeasureOptions.thermal_wait_s,
    strategy: Strategy = PointOptions.strategy,
) -> SweepOptions:
    measure = MeasureOptions(
        settle_s=2.0, settle_mode=SettleMode.FIXED, thermal_wait_s=thermal_wait_s
    )
    points = PointOptions(strategy=strategy, confirm=False)
    return SweepOptions(output=OutputOptions(cooling=Cooling.AIR), measure=measure, points=points)


@pytest.mark.parametrize("spacing", [10.0, CARRY_DRAW_W])
def test_a_grid_of_steps_waits_at_its_first_points_only(spacing: float) -> None:
    options = _options()
    wait = THERMAL_TRAIL_S - 2.0  # judged once its trailing window since the set is full
    assert estimate_run_s(options, 6, spacing) - estimate_run_s(options, 5, spacing) == (
        pytest.approx(
            estimate_run_s(_options(thermal_wait_s=0.0), 6, spacing)
            - estimate_run_s(_options(thermal_wait_s=0.0), 5, spacing)
        )
    )
    no_wait = estimate_run_s(_options(thermal_wait_s=0.0), 6, spacing)
    # and the run's first point, read again at its end, is the jump back across the sweep: it
    # waits its whole bound
    assert estimate_run_s(options, 6, spacing) - no_wait == pytest.approx(
        THERMAL_WAITING_POINTS * wait + wait
    )


def test_a_grid_of_jumps_waits_at_every_point() -> None:
    # 50 W apart, the draw moves more than a carried point may: each point waits (a sweep of
    # 350, 300, 250 W waited at all three), the first for its whole wait, the jumps after it as
    # long as the card's fitted thermal model says (about half the bound); the first point read
    # again at the end, the jump back across the sweep, waits its whole bound
    options = _options()
    no_wait = estimate_run_s(_options(thermal_wait_s=0.0), 3, 50.0)
    per_point = THERMAL_TRAIL_S - 2.0
    assert estimate_run_s(options, 3, 50.0) - no_wait == pytest.approx(
        per_point * (2 + 2 * JUMP_WAIT_SHARE)
    )


def test_an_adaptive_sweep_waits_at_every_point_it_measures() -> None:
    options = _options(strategy=Strategy.ADAPTIVE)
    no_wait = estimate_run_s(_options(strategy=Strategy.ADAPTIVE, thermal_wait_s=0.0), 21, 10.0)
    gap = estimate_run_s(options, 21, 10.0) - no_wait
    per_point = THERMAL_TRAIL_S - 2.0
    waits = 1 + round((gap / per_point - 1) / JUMP_WAIT_SHARE)
    assert gap == pytest.approx(per_point * (1 + (waits - 1) * JUMP_WAIT_SHARE))
    assert waits > THERMAL_WAITING_POINTS
