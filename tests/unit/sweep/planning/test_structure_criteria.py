"""powersweep.sweep.planning.structure_criteria: the adaptive planner's structure criterion,
through :meth:`AdaptivePlanner.next_caps` on a 200-400 W grid in 10 W steps (coarse pass 240,
280, 320, 360, 400). A run of caps drawing flat under their cap asks first for the lowest cap that
can reach its draw (a ceiling at the top of the envelope, a plateau below it), then the next grid
cap when that one is not flat, bisects a plateau's upper edge to two steps, fills a run the
analysis does not report yet; heat, an idle card and a run too short for any region ask nothing;
several GPUs' combined draw is read per GPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from powersweep.sweep.planning.measured import (
    CEILING_EDGE,
    CEILING_FILL,
    PLATEAU_EDGE,
    PLATEAU_FILL,
    CapMeasurement,
)
from powersweep.sweep.planning.strategy import AdaptivePlanner

GRID = [200.0 + 10.0 * k for k in range(21)]
COARSE = [240.0, 280.0, 320.0, 360.0, 400.0]
STRUCTURE = {CEILING_EDGE, CEILING_FILL, PLATEAU_EDGE, PLATEAU_FILL}


def _tps(draw_w: float) -> float:
    """Follows the draw (per GPU), flat once the draw is: a peak TPS/W far below the structure
    (a cap that does not bind cannot change TPS)."""
    return 100.0 * min(draw_w, 300.0) ** 0.5 / 17.32


def _cap_measurement(draw_w: float, tps: float, **changes: Any) -> CapMeasurement:
    base: dict[str, Any] = {
        "sm_clock_mhz": 1500.0,
        "util_pct": 95.0,
        "temp_max_c": 60.0,
        "thermal_throttle_pct": 0.0,
    }
    return CapMeasurement(power_w=draw_w, tps=tps, **{**base, **changes})


def _drive(
    draw: Callable[[float], float], n_gpus: int = 1, **changes: Any
) -> tuple[AdaptivePlanner, dict[float, CapMeasurement], list[list[tuple[float, str]]]]:
    """Measure what the planner asks (draw per GPU, summed) until it asks nothing more."""
    planner = AdaptivePlanner(GRID, 10.0, n_gpus=n_gpus)
    done: dict[float, CapMeasurement] = {}
    asked: list[list[tuple[float, str]]] = []
    for _ in range(30):
        batch = planner.next_caps(done)
        if not batch:
            break
        asked.append(batch)
        for cap, _reason in batch:
            done[cap] = _cap_measurement(n_gpus * draw(cap), _tps(draw(cap)), **changes)
    return planner, done, asked


def _structure(asked: list[list[tuple[float, str]]]) -> list[tuple[float, str]]:
    return [(c, r) for batch in asked for c, r in batch if r in STRUCTURE]


def _ceiling(cap: float) -> float:
    return min(cap, 300.0)


def test_the_coarse_pass_comes_first_and_structure_is_asked_after_it() -> None:
    _, _, asked = _drive(_ceiling)
    assert asked[0] == [(c, "coarse pass") for c in COARSE]
    assert _structure(asked[:1]) == []


def test_a_ceiling_asks_for_the_lowest_cap_that_reaches_its_draw_then_the_next() -> None:
    planner, done, asked = _drive(_ceiling)
    # 320-400 W draw 300 W: no cap under 300 W can; 300 W itself still draws its cap (not
    # flat), so the ceiling starts at the next grid cap
    assert _structure(asked) == [(300.0, CEILING_EDGE), (310.0, CEILING_EDGE)]
    (region,) = planner.regions(done)
    assert (region.kind, region.start_w, region.end_w) == ("draw_ceiling", 300.0, 400.0)
    assert len(done) <= planner.max_caps


def test_a_plateau_asks_for_its_lower_edge_then_bisects_its_upper_edge() -> None:
    def plateau(cap: float) -> float:
        return cap if cap < 280.0 or cap > 330.0 else 270.0

    planner, done, asked = _drive(plateau)
    # flat at 270 W under 280-320 W caps: 270 W is the lowest cap that can, and the cap below
    # the region it starts gives the analysis the slope; 360 W draws its cap, four steps above
    # the run's last flat cap: the edge is bisected, at 340 W, which the near-peak edge (TPS
    # rises again there) asked for in the same batch
    assert _structure(asked) == [(270.0, PLATEAU_EDGE), (260.0, PLATEAU_EDGE)]
    assert (340.0, "near-peak edge") in asked[1]
    (region,) = planner.regions(done)
    assert (region.kind, region.start_w, region.end_w) == ("boost_plateau", 270.0, 320.0)


def test_a_run_the_analysis_does_not_report_yet_is_filled_at_its_widest_gap() -> None:
    def plateau(cap: float) -> float:
        return cap if cap < 280.0 or cap > 330.0 else 275.0

    planner, done, asked = _drive(plateau)
    # 280 W is the lowest cap that can draw 275 W and is measured: two flat caps are no region
    # until the cap between them is
    assert _structure(asked) == [(340.0, PLATEAU_EDGE), (300.0, PLATEAU_FILL)]
    (region,) = planner.regions(done)
    assert region.caps_w == (280.0, 300.0, 320.0)


def test_two_gpus_draw_is_read_per_gpu() -> None:
    _, _, asked_one = _drive(_ceiling)
    two, done, asked_two = _drive(_ceiling, n_gpus=2)
    assert (
        _structure(asked_two)
        == _structure(asked_one)
        == [
            (300.0, CEILING_EDGE),
            (310.0, CEILING_EDGE),
        ]
    )
    assert done[400.0].power_w == 600.0 and two.regions(done)[0].start_w == 300.0


@pytest.mark.parametrize(
    "changes",
    [
        {"thermal_throttle_pct": 50.0},  # heat holds the draw there, not a ceiling
        {"util_pct": 20.0},  # a starved card
    ],
    ids=["thermal", "under-loaded"],
)
def test_caps_held_by_heat_or_an_idle_card_ask_for_no_structure(changes: dict[str, Any]) -> None:
    _, _, asked = _drive(_ceiling, **changes)
    assert _structure(asked) == []


def test_a_flat_top_cap_too_short_for_any_region_asks_nothing() -> None:
    # only 400 W draws under its cap (395 W): no cap below 400 W can, so no sweep could ever
    # report three caps there
    _, _, asked = _drive(lambda cap: cap if cap < 400.0 else 395.0)
    assert _structure(asked) == []


def test_flat_caps_at_levels_apart_are_separate_runs() -> None:
    def two_levels(cap: float) -> float:
        # 280 and 320 W flat at 270 W, 360 and 400 W flat at 340 W (over 3% apart)
        if cap < 280.0:
            return cap
        return 270.0 if cap <= 330.0 else 340.0

    planner, done, asked = _drive(two_levels)
    first = _structure(asked[:2])
    # the ceiling's lowest cap (340 W) is asked in the same batch as the near-peak edge
    assert (270.0, PLATEAU_EDGE) in first and (340.0, "near-peak edge") in asked[1]
    assert [(r.kind, r.start_w, r.end_w) for r in planner.regions(done)] == [
        ("boost_plateau", 270.0, 320.0),
        ("draw_ceiling", 340.0, 400.0),
    ]
