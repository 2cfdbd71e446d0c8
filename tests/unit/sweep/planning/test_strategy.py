"""The adaptive planner: same answer as a dense sweep from far fewer caps."""

from __future__ import annotations

import csv
import dataclasses
import math
import random
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from powersweep.analysis import analyze, load_curve, write_caps_csv
from powersweep.analysis.cap_points import CapPoint
from powersweep.analysis.near_peak import near_peak_index, region_groups
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.analysis.run_record import RunRecord
from powersweep.analysis.structure import find_regions
from powersweep.analysis.summary import render_summary
from powersweep.sim.profiles import get_profile, profile_names
from powersweep.sim.sim_rig import TruthCap, ground_truth
from powersweep.sweep.gpu import PowerEnvelope
from powersweep.sweep.planning.caps import default_caps
from powersweep.sweep.planning.strategy import (
    BRACKET_PEAK,
    CEILING_EDGE,
    COARSE,
    MIN_ADAPTIVE_CAPS,
    NEAR_PEAK_EDGE,
    PLATEAU_EDGE,
    PLATEAU_FILL,
    AdaptivePlanner,
    CapMeasurement,
    plan_order,
)
from tests.paths import SHARED_3090

MODES = [
    ("decode-single", {}),
    ("decode-concurrent", {"concurrency": 8}),
    ("prefill-heavy", {"prompt_tokens": 8000}),
]
GRID_21 = [190.0 + 10 * i for i in range(21)]
# The goal: at most half the caps of the dense sweep.
MAX_RATIO = 0.5 + 1e-9


def answer(
    curve: dict[float, CapMeasurement], slowdown_temp_c: float = math.nan
) -> tuple[float, float, list[tuple[str, float, float]]]:
    """Sweet spot, near-peak cap and regions as ``analyze`` finds them on these caps.

    The step is the grid's (10 W), as ``analyze`` takes it from run.json ``caps_planned``.
    """
    caps = sorted(curve)
    points = [
        CapPoint(
            c,
            c,
            curve[c].power_w,
            curve[c].tps,
            curve[c].sm_clock_mhz,
            temp_max_c=curve[c].temp_max_c,
            thermal_throttle_pct=curve[c].thermal_throttle_pct,
        )
        for c in caps
    ]
    best = max(caps, key=lambda c: (curve[c].tps_per_w, -c))
    found = find_regions(points, caps, slowdown_temp_c=slowdown_temp_c, step_w=10.0)
    groups = region_groups(caps, found)
    near = caps[near_peak_index([curve[c].tps for c in caps], groups, 5.0)]
    return best, near, [(r.kind, r.start_w, r.end_w) for r in found]


# A curve whose TPS/W varies less than this across the caps is flat: no cap binds.
FLAT_TPW_RATIO = 1.005


def run_planner(
    curve: dict[float, CapMeasurement], slowdown_temp_c: float = math.nan
) -> tuple[dict[float, CapMeasurement], list]:
    planner = AdaptivePlanner(sorted(curve), 10.0, slowdown_temp_c=slowdown_temp_c)
    measured = {c: curve[c] for c in planner.initial_caps()}
    log: list[tuple[float, str]] = [(c, COARSE) for c in measured]
    for _ in range(len(curve)):
        plan = planner.next_caps(measured)
        if not plan:
            break
        for c, why in plan:
            assert c not in measured, "the planner asked for a cap twice"
            measured[c] = curve[c]
            log.append((c, why))
    else:
        pytest.fail("planner did not stop")
    return measured, log


def assert_same_answer(
    curve: dict[float, CapMeasurement], slowdown_temp_c: float = math.nan
) -> list[tuple[float, str]]:
    measured, log = run_planner(curve, slowdown_temp_c)
    dense = answer(curve, slowdown_temp_c)
    adaptive = answer(measured, slowdown_temp_c)
    tpw = [m.tps_per_w for m in curve.values()]
    if max(tpw) <= FLAT_TPW_RATIO * min(tpw):
        # no cap binds (decode on a datacenter card): every cap is as good, none is "the" one
        assert curve[adaptive[0]].tps_per_w >= max(tpw) / FLAT_TPW_RATIO, (dense, adaptive)
    else:
        assert abs(dense[0] - adaptive[0]) <= 10.0, (dense, adaptive, log)
        # The near-peak cap is a headline figure too.
        assert abs(dense[1] - adaptive[1]) <= 10.0, (dense, adaptive, log)
    assert len(dense[2]) == len(adaptive[2]), (dense, adaptive, log)
    for (kd, sd, ed), (ka, sa, ea) in zip(dense[2], adaptive[2], strict=True):
        assert kd == ka and abs(sd - sa) <= 10.0 and abs(ed - ea) <= 10.0, (dense, adaptive)
    assert len(measured) / len(curve) <= MAX_RATIO, log
    return log


def load_real_3090() -> dict[float, CapMeasurement]:
    with SHARED_3090.open() as f:
        return {
            float(r["cap_w"]): CapMeasurement(
                float(r["power_w"]), float(r["narr_tps"]), float(r["sm_clock_mhz"])
            )
            for r in csv.DictReader(f)
        }


@pytest.mark.skipif(not SHARED_3090.is_file(), reason="shared 3090 curve not available")
def test_real_3090_curve_same_answer_with_half_the_caps() -> None:
    curve = load_real_3090()
    log = assert_same_answer(curve)
    assert len(log) <= len(curve) // 2  # 10 of 21
    measured = {c for c, _ in log}
    # the peak (290 W) and both plateau edges (340, 370 W) were measured
    assert {290.0, 340.0, 370.0} <= measured


@pytest.mark.parametrize("profile", profile_names())
@pytest.mark.parametrize(("mode", "kw"), MODES)
def test_builtin_profiles_same_answer(profile: str, mode: str, kw: dict[str, int]) -> None:
    p = get_profile(profile)
    caps = default_caps(
        PowerEnvelope(p.min_limit_w, p.default_limit_w, p.max_limit_w, p.user_limit_w)
    )
    truth = ground_truth([p], mode, caps, **kw)
    curve = {c.cap_w: truth_measurement(c) for c in truth.caps}
    dense = answer(curve, p.slowdown_temp_c)
    # like with like: the dense analysis itself agrees with the simulator's own answer
    assert [(r["kind"], r["start_w"], r["end_w"]) for r in truth.plateaus] == dense[2]
    assert_same_answer(curve, p.slowdown_temp_c)


@pytest.mark.parametrize("profile", profile_names())
@pytest.mark.parametrize(("mode", "kw"), MODES)
def test_on_the_same_noisy_readings_the_sweet_spot_is_within_a_step(
    profile: str, mode: str, kw: dict[str, int]
) -> None:
    """Reading noise moves both sweeps' answers; the planner must not add a miss of its own.

    Each seed reads every cap once with the simulator's noise (0.35% on TPS, a third of that on
    draw); the adaptive sweep sees its subset of those very readings, so any gap to the dense
    answer is the planner's.
    """
    p = get_profile(profile)
    caps = default_caps(
        PowerEnvelope(p.min_limit_w, p.default_limit_w, p.max_limit_w, p.user_limit_w)
    )
    truth = ground_truth([p], mode, caps, **kw)
    clean = {c.cap_w: truth_measurement(c) for c in truth.caps}
    tpw = [m.tps_per_w for m in clean.values()]
    if max(tpw) <= FLAT_TPW_RATIO * min(tpw):
        pytest.skip("no cap binds: every cap is as efficient as the best")
    rng = random.Random(f"{profile}:{mode}")
    for _ in range(5):
        curve = {
            c: dataclasses.replace(
                m,
                tps=m.tps * (1 + rng.gauss(0.0, 0.0035)),
                power_w=m.power_w * (1 + rng.gauss(0.0, 0.0035 / 3)),
            )
            for c, m in clean.items()
        }
        measured, log = run_planner(curve, p.slowdown_temp_c)
        dense, adaptive = answer(curve, p.slowdown_temp_c), answer(measured, p.slowdown_temp_c)
        assert abs(dense[0] - adaptive[0]) <= 10.0, (dense, adaptive, log)
        assert len(measured) <= len(curve) // 2, log


def truth_measurement(c: TruthCap) -> CapMeasurement:
    """What a sweep measures at a noise-free cap, thermal bits included.

    A thermally limited cap runs at the slowdown temperature with the thermal clock-event bit
    set in (nearly) every sample; any other cap has it clear.
    """
    thermal = c.regime == "thermal_limited"
    return CapMeasurement(
        c.power_w,
        c.tps,
        c.sm_clock_mhz,
        temp_max_c=c.temp_c,
        thermal_throttle_pct=100.0 if thermal else 0.0,
    )


def test_initial_caps_every_fourth_with_the_top_but_not_the_floor() -> None:
    grid = [190.0 + 10 * i for i in range(21)]
    assert AdaptivePlanner(grid, 10.0).initial_caps() == [230, 270, 310, 350, 390]
    # 230..600: the last regular pick (590) is too close to the top to be worth a cap
    grid = [230.0 + 10 * i for i in range(38)] + [600.0]
    coarse = AdaptivePlanner(grid, 10.0).initial_caps()
    assert coarse[0] == 270 and coarse[-1] == 600 and 590 not in coarse
    # a short envelope keeps both ends
    assert AdaptivePlanner([100.0 + 10 * i for i in range(9)], 10.0).initial_caps() == [
        100,
        140,
        180,
    ]


def test_best_at_the_lowest_coarse_cap_brackets_down_to_the_floor() -> None:
    grid = [190.0 + 10 * i for i in range(21)]
    planner = AdaptivePlanner(grid, 10.0)

    def falling(c: float) -> CapMeasurement:  # efficiency best at the floor
        return CapMeasurement(power_w=c, tps=c * (0.2 - c / 10_000))

    measured = {c: falling(c) for c in planner.initial_caps()}
    asks: list[float] = []
    while plan := planner.next_caps(measured):
        asks += [c for c, _ in plan]
        measured.update({c: falling(c) for c, _ in plan})
    assert 190.0 in measured and asks and min(asks) < 230.0
    assert max(measured, key=lambda c: measured[c].tps_per_w) == 190.0


def test_coarse_caps_are_asked_first_and_peak_is_bracketed() -> None:
    grid = [100.0 + 10 * i for i in range(17)]
    planner = AdaptivePlanner(grid, 10.0)
    assert planner.next_caps({}) == [(c, COARSE) for c in planner.initial_caps()]

    def tpw_peak_at_200(c: float) -> CapMeasurement:
        return CapMeasurement(power_w=c - 0.3, tps=(c - 0.3) * (1 - abs(c - 200.0) / 400.0))

    measured = {c: tpw_peak_at_200(c) for c in planner.initial_caps()}  # 100,140,...,260
    # 180 and 220 are the best coarse caps' neighbours at two steps: 200 lies between
    asks = []
    while plan := planner.next_caps(measured):
        asks += plan
        measured.update({c: tpw_peak_at_200(c) for c, _ in plan})
    assert (200.0, BRACKET_PEAK) in asks or 200.0 in planner.initial_caps()
    best = max(measured, key=lambda c: measured[c].tps_per_w)
    assert best == 200.0


def _plan_all(planner: AdaptivePlanner, curve: Any) -> tuple[dict[float, CapMeasurement], list]:
    measured = {c: curve(c) for c in planner.initial_caps()}
    asks: list[tuple[float, str]] = []
    while plan := planner.next_caps(measured):
        asks += plan
        measured.update({c: curve(c) for c, _ in plan})
    return measured, asks


def test_with_caps_to_spare_the_near_peak_crossing_is_narrowed_to_neighbours() -> None:
    def concave(c: float) -> CapMeasurement:  # TPS ~ sqrt(cap): 5% under the top at 400 W
        return CapMeasurement(power_w=c - 0.3, tps=10.0 * math.sqrt(c))

    grid = [200.0 + 10 * i for i in range(25)]  # 200-440 W
    measured, asks = _plan_all(AdaptivePlanner(grid, 10.0), concave)
    caps = sorted(measured)
    k = near_peak_index([measured[c].tps for c in caps], [], 5.0)
    # the crossing (the truth: the first cap with sqrt(c) >= 0.95 sqrt(440) is 400 W) has its
    # lower neighbour measured, so no dense sweep can put it a step lower
    assert caps[k] == 400.0 and caps[k - 1] == 390.0
    assert (390.0, NEAR_PEAK_EDGE) in asks or (400.0, NEAR_PEAK_EDGE) in asks
    assert len(measured) <= len(grid) // 2

    # (with no caps to spare the two-step bracket stands: every built-in profile's sweep above
    # keeps to half the caps)


def test_with_caps_to_spare_the_best_caps_neighbours_are_measured() -> None:
    def kink(c: float) -> CapMeasurement:  # efficiency rises to 290 W, then falls: a kink
        tpw = 0.1 + 0.0001 * (c - 200) if c <= 290 else 0.109 - 0.00008 * (c - 290)
        return CapMeasurement(power_w=c - 0.3, tps=tpw * (c - 0.3))

    grid = [200.0 + 10 * i for i in range(25)]
    measured, asks = _plan_all(AdaptivePlanner(grid, 10.0), kink)
    # the coarse pass and the parabola find 300 W, two steps from both its measured neighbours;
    # with caps to spare its step neighbour on the better side is measured: 290 W, the true peak
    assert (290.0, BRACKET_PEAK) in asks
    assert max(measured, key=lambda c: measured[c].tps_per_w) == 290.0
    assert len(measured) <= len(grid) // 2


def test_one_cap_to_spare_goes_to_the_near_peak_crossing() -> None:
    def kink(c: float) -> CapMeasurement:  # the sweet spot is 290 W; TPS still rises at 440 W
        tpw = 0.1 + 0.0001 * (c - 200) if c <= 290 else 0.109 - 0.00008 * (c - 290)
        return CapMeasurement(power_w=c - 0.3, tps=tpw * (c - 0.3))

    grid = [200.0 + 10 * i for i in range(25)]
    planner = AdaptivePlanner(grid, 10.0)
    _, asks = _plan_all(planner, kink)
    assert asks[-2:] == [(410.0, NEAR_PEAK_EDGE), (290.0, BRACKET_PEAK)]
    # with one cap to spare, it narrows the crossing: the sweet spot is already within a step
    short = AdaptivePlanner(grid, 10.0)
    short.max_caps = len(planner.initial_caps()) + 4
    _, asks = _plan_all(short, kink)
    assert asks == [(300.0, BRACKET_PEAK), (420.0, NEAR_PEAK_EDGE), (410.0, NEAR_PEAK_EDGE)]
    assert short.left_out == []


def staircase(cap_w: float) -> CapMeasurement:
    """Four boost plateaus and a top ceiling, each three or four caps wide: more structure than
    half a 21-cap grid can pin down."""
    draw = cap_w
    for lo, hi, level in (
        (200, 230, 195.0),
        (240, 270, 236.0),
        (280, 310, 276.0),
        (320, 350, 316.0),
    ):
        if lo <= cap_w <= hi:
            draw = min(cap_w, level)
    if cap_w >= 360:
        draw = min(cap_w, 356.0)
    return CapMeasurement(draw, 0.1 * draw**0.8, 1000.0 + draw)


def test_the_budget_stops_at_half_the_grid_and_names_the_caps_left_out() -> None:
    grid = [190.0 + 10 * i for i in range(21)]
    curve = {c: staircase(c) for c in grid}
    planner = AdaptivePlanner(grid, 10.0)
    assert planner.max_caps == 10
    measured = {c: curve[c] for c in planner.initial_caps()}
    while plan := planner.next_caps(measured):
        measured.update({c: curve[c] for c, _ in plan})
    assert len(measured) == planner.max_caps
    assert planner.left_out, "the staircase needs more caps than the budget"
    assert all(c not in measured for c, _ in planner.left_out)
    assert {why for _, why in planner.left_out} <= {PLATEAU_EDGE, PLATEAU_FILL, CEILING_EDGE}
    # the peak (TPS/W falls with draw here: the floor) was found first; structure is left out
    assert max(measured, key=lambda c: measured[c].tps_per_w) == 190.0
    # a grid too small for a coarse pass plus refinement is swept whole: half of it could not
    # place a best cap with a measured one on each side and its near-peak edge
    assert AdaptivePlanner(grid[:4], 10.0).max_caps == 4
    assert AdaptivePlanner(grid[:11], 10.0).max_caps == MIN_ADAPTIVE_CAPS


def test_the_budget_leaves_nothing_out_when_the_answer_is_settled() -> None:
    curve = (
        load_real_3090() if SHARED_3090.is_file() else {c: short_top_ceiling(c) for c in GRID_21}
    )
    planner = AdaptivePlanner(sorted(curve), 10.0)
    measured = {c: curve[c] for c in planner.initial_caps()}
    while plan := planner.next_caps(measured):
        measured.update({c: curve[c] for c, _ in plan})
    assert planner.left_out == []
    assert len(measured) <= planner.max_caps


def test_failed_caps_are_not_asked_again() -> None:
    grid = [100.0 + 10 * i for i in range(9)]
    planner = AdaptivePlanner(grid, 10.0)
    measured = {c: CapMeasurement(c, c * 0.1) for c in planner.initial_caps()}
    measured[140.0] = CapMeasurement(float("nan"), float("nan"))
    assert all(c != 140.0 for c, _ in planner.next_caps(measured))


def test_plan_order_is_descending_without_duplicates() -> None:
    assert plan_order([300.0, 350.0, 300.0, 200.0]) == [350.0, 300.0, 200.0]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        AdaptivePlanner([], 10.0)
    with pytest.raises(ValueError):
        AdaptivePlanner([100.0], 0.0)


def short_top_ceiling(cap: float) -> CapMeasurement:
    """A curve on the cap line up to 360 W, then a draw ceiling at 361.5 W (370-390 W)."""
    power = min(cap, 361.5)
    return CapMeasurement(power, 0.25 * power, sm_clock_mhz=min(cap, 361.5) * 4.0)


def test_short_top_ceiling_needs_the_grid_step() -> None:
    grid = [190.0 + 10 * i for i in range(21)]
    subset = [190.0, 230.0, 270.0, 310.0, 350.0, 370.0, 380.0, 390.0]
    pts = [CapPoint(c, c, short_top_ceiling(c).power_w, short_top_ceiling(c).tps) for c in subset]
    # The draw alone finds it: from 370 W up the card draws far more than a binding cap's margin
    # under every cap, and the draw stops rising, whatever step the subset suggests.
    assert [(r.kind, r.start_w, r.end_w) for r in find_regions(pts, subset)] == [
        ("draw_ceiling", 370.0, 390.0)
    ]
    found = find_regions(pts, subset, step_w=10.0)
    assert [(r.kind, r.start_w, r.end_w) for r in found] == [("draw_ceiling", 370.0, 390.0)]
    # the planner asks the analysis with the grid's step
    planner = AdaptivePlanner(grid, 10.0)
    regions = planner.regions({c: short_top_ceiling(c) for c in subset})
    assert [(r.start_w, r.end_w) for r in regions] == [(370.0, 390.0)]


def test_planner_refines_a_top_cap_under_its_cap_into_a_ceiling() -> None:
    grid = [190.0 + 10 * i for i in range(21)]
    curve = {c: short_top_ceiling(c) for c in grid}
    measured, log = run_planner(curve)
    # the coarse top cap (390) draws 28.5 W under its cap: 370 is the lowest cap that can reach
    # that draw, 380 completes three caps
    assert {370.0, 380.0, 390.0} <= set(measured)
    assert [r for c, r in log if c in (370.0, 380.0)] in (
        ["ceiling edge", "ceiling fill"],
        ["ceiling edge", "ceiling edge"],
    )
    assert answer(measured)[2] == [("draw_ceiling", 370.0, 390.0)]
    assert len(measured) <= 10


def test_thermally_held_top_caps_are_not_refined_as_a_ceiling() -> None:
    grid = [400.0 + 10 * i for i in range(21)]

    def hot(cap: float) -> CapMeasurement:
        # power-limited up to 580 W, then held at 580 W by heat (bit set, at slowdown)
        power = min(cap, 580.0)
        thermal = cap > 580.0
        return CapMeasurement(
            power,
            0.3 * power,
            temp_max_c=88.0 if thermal else 80.0,
            thermal_throttle_pct=100.0 if thermal else 0.0,
        )

    curve = {c: hot(c) for c in grid}
    _, log = run_planner(curve, slowdown_temp_c=88.0)
    assert not any("ceiling" in why or "plateau" in why for _, why in log), log
    assert answer(curve, 88.0)[2] == []
    # without the thermal data the same draws look like a ceiling worth refining
    cool = {c: CapMeasurement(m.power_w, m.tps) for c, m in curve.items()}
    _, cool_log = run_planner(cool)
    assert any("ceiling" in why for _, why in cool_log)


def test_from_row_reads_thermal_columns() -> None:
    row = {
        "power_w": "300",
        "prefill_tps": "1200.5",
        "sm_clock_mhz": "",
        "temp_max_c": "87",
        "thermal_throttle_pct": "95.0",
        "util_pct": "99",
    }
    m = CapMeasurement.from_row(row, "prefill_tps")
    assert (m.power_w, m.tps, m.temp_max_c, m.thermal_throttle_pct, m.util_pct) == (
        300.0,
        1200.5,
        87.0,
        95.0,
        99.0,
    )
    assert math.isnan(m.sm_clock_mhz)


def subset_csv(path: Path, subset: list[float], curve: Any) -> Path:
    """A bare caps.csv of ``curve`` (cap -> CapMeasurement) at the ``subset`` caps."""
    df = pl.DataFrame(
        {
            "cap_w": subset,
            "narr_tps": [curve(c).tps for c in subset],
            "power_w": [curve(c).power_w for c in subset],
            "status": ["ok"] * len(subset),
        }
    )
    write_caps_csv(df, path)
    return path


def test_analyze_takes_the_step_from_caps_planned(tmp_path: Path) -> None:
    grid = GRID_21
    subset = [190.0, 230.0, 270.0, 290.0, 310.0, 350.0, 370.0, 380.0, 390.0]
    path = subset_csv(tmp_path / "caps.csv", subset, short_top_ceiling)
    bare = analyze(load_curve(path), bootstrap=0).to_json()
    # Without run.json the step is the subset's (20 W); the draw-only rule finds it all the same.
    assert [(p["kind"], p["start_w"], p["end_w"]) for p in bare["plateaus"]] == [
        ("draw_ceiling", 370.0, 390.0)
    ]
    run = {"caps_planned": sorted(grid, reverse=True)}
    typed = RunRecord.from_json(run)
    planned = analyze(dataclasses.replace(load_curve(path), run=typed), bootstrap=0).to_json()
    edges = [(p["kind"], p["start_w"], p["end_w"]) for p in planned["plateaus"]]
    assert edges == [("draw_ceiling", 370.0, 390.0)]


def test_analyze_names_the_caps_an_adaptive_budget_left_out(tmp_path: Path) -> None:
    grid = GRID_21
    subset = [190.0, 200.0, 230.0, 240.0, 270.0, 280.0, 310.0, 350.0, 370.0, 390.0]
    path = subset_csv(tmp_path / "caps.csv", subset, staircase)
    left = [{"cap_w": 330.0, "reason": PLATEAU_EDGE}, {"cap_w": 360.0, "reason": CEILING_EDGE}]
    run = {
        "caps_planned": sorted(grid, reverse=True),
        "adaptive": {"max_caps": 10, "left_out": left},
    }
    curve = dataclasses.replace(load_curve(path), run=RunRecord.from_json(run))
    result = analyze(curve, bootstrap=0).to_json()
    found = [f for f in result["findings"] if f["code"] == "adaptive_budget"]
    assert len(found) == 1 and found[0]["severity"] == "warning"
    assert "budget of 10 caps" in found[0]["message"]
    assert "330 W (plateau edge), 360 W (ceiling edge)" in found[0]["message"]
    assert "330 W (plateau edge)" in render_summary(curve, PowerAnalysis.from_json(result))
    # nothing left out: no finding
    run["adaptive"] = {"max_caps": 10, "left_out": []}
    quiet_run = RunRecord.from_json(run)
    quiet = analyze(dataclasses.replace(load_curve(path), run=quiet_run), bootstrap=0).to_json()
    assert not [f for f in quiet["findings"] if f["code"] == "adaptive_budget"]
