"""The dry run's estimate: how long the points wait for a steady temperature."""

from __future__ import annotations

import pytest

from powersweep.sweep.estimate import (
    ADAPTIVE_WAIT_SHARE,
    JUMP_WAIT_SHARE,
    STEP_WAIT_SHARE,
    estimate_run_s,
)
from powersweep.sweep.options import (
    Cooling,
    MeasureOptions,
    OutputOptions,
    PointOptions,
    SettleMode,
    Strategy,
    SweepOptions,
)


def _estimate_options(
    thermal_wait_max_s: float = MeasureOptions.thermal_wait_max_s,
    strategy: Strategy = PointOptions.strategy,
) -> SweepOptions:
    measure = MeasureOptions(
        settle_s=2.0, settle_mode=SettleMode.FIXED, thermal_wait_max_s=thermal_wait_max_s
    )
    points = PointOptions(strategy=strategy, confirm=False)
    return SweepOptions(output=OutputOptions(cooling=Cooling.AIR), measure=measure, points=points)


def test_every_point_waits_the_first_its_bound_a_step_a_share_of_it() -> None:
    # no point carries the last one's steadiness by distance alone (issue 44): the first waits
    # for a card still heating from its warm-up, each step after it as long as its drift needs
    options = _estimate_options()
    no_wait = estimate_run_s(_estimate_options(thermal_wait_max_s=0.0), 6, 10.0)
    bound = MeasureOptions.thermal_wait_max_s
    # and the run's first settled point, read again at its end, waits as a step does
    assert estimate_run_s(options, 6, 10.0) - no_wait == pytest.approx(
        bound * (1 + 6 * STEP_WAIT_SHARE)
    )
    # a longer bound, a longer estimate
    assert estimate_run_s(
        _estimate_options(thermal_wait_max_s=30.0), 6, 10.0
    ) - no_wait == pytest.approx(30.0 * (1 + 6 * STEP_WAIT_SHARE))


def test_a_grid_of_jumps_waits_longer_at_every_point() -> None:
    # 50 W apart: each jump waits, on average, a larger share of the bound
    options = _estimate_options()
    no_wait = estimate_run_s(_estimate_options(thermal_wait_max_s=0.0), 3, 50.0)
    bound = MeasureOptions.thermal_wait_max_s
    assert estimate_run_s(options, 3, 50.0) - no_wait == pytest.approx(
        bound * (1 + 2 * JUMP_WAIT_SHARE + STEP_WAIT_SHARE)  # the reference read again: a step
    )


def test_an_adaptive_sweep_waits_as_at_jumps() -> None:
    options = _estimate_options(strategy=Strategy.ADAPTIVE)
    no_wait = estimate_run_s(
        _estimate_options(strategy=Strategy.ADAPTIVE, thermal_wait_max_s=0.0), 21, 10.0
    )
    gap = estimate_run_s(options, 21, 10.0) - no_wait
    bound = MeasureOptions.thermal_wait_max_s
    waits = 1 + round((gap / bound - 1 - STEP_WAIT_SHARE) / ADAPTIVE_WAIT_SHARE)
    assert gap == pytest.approx(
        bound * (1 + (waits - 1) * ADAPTIVE_WAIT_SHARE + STEP_WAIT_SHARE)  # the reference: a step
    )
    assert waits > 1
