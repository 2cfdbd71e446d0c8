"""Plateaus, ceilings and regimes on synthetic curves with known answers (seeded noise)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from powersweep.analysis import analyze, load_curve
from powersweep.analysis.cap_points import CapPoint, binding_margin_w, is_thermal
from powersweep.analysis.structure import find_regions, regimes


def _points(caps: np.ndarray, draw: np.ndarray, tps: np.ndarray) -> list[CapPoint]:
    return [
        CapPoint(cap_w=float(c), cap_total_w=float(c), power_w=float(d), tps=float(t))
        for c, d, t in zip(caps, draw, tps, strict=True)
    ]


def _found(points: list[CapPoint]) -> list[tuple[str, float, float]]:
    return [(r.kind, r.start_w, r.end_w) for r in find_regions(points, [p.cap_w for p in points])]


def _curve_4090(seed: int, step: int = 10) -> list[CapPoint]:
    """Draw follows the cap up to 400 W, then creeps 392 -> 395 W up to 600 W."""
    rng = np.random.default_rng(seed)
    caps = np.arange(200, 601, step, dtype=float)
    draw = np.where(caps < 400, caps - 1.0, 392.0 + 3.0 * (caps - 400) / 200)
    draw = draw + rng.normal(0, 0.3, caps.size)
    tps = np.where(caps < 400, 40 * caps / 400, 40.0) * (1 + rng.normal(0, 0.005, caps.size))
    return _points(caps, draw, tps)


def _curve_5090(seed: int, step: int = 10) -> list[CapPoint]:
    """Draw stalls at ~547 W (+-1.5) from the 550 W cap up; decode TPS jitters by +-3%."""
    rng = np.random.default_rng(seed)
    caps = np.arange(400, 601, step, dtype=float)
    draw = np.minimum(caps - 1.0, 547.0) + rng.uniform(-1.5, 1.5, caps.size)
    tps = np.minimum(caps, 547.0) / 547 * 60 * (1 + rng.uniform(-0.03, 0.03, caps.size))
    return _points(caps, draw, tps)


def _smooth(seed: int, tps_noise: float, power_noise: float = 0.5) -> list[CapPoint]:
    rng = np.random.default_rng(seed)
    caps = np.arange(150, 451, 10, dtype=float)
    draw = caps - 0.5 + rng.normal(0, power_noise, caps.size)
    tps = 50 * (1 - np.exp(-caps / 200)) * (1 + rng.normal(0, tps_noise, caps.size))
    return _points(caps, draw, tps)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("step", [10, 25])
def test_4090_drifting_ceiling_is_one_region(seed: int, step: int) -> None:
    found = _found(_curve_4090(seed, step))
    assert found == [("draw_ceiling", 400.0, 600.0)]


@pytest.mark.parametrize("seed", range(8))
def test_5090_noisy_ceiling_is_found(seed: int) -> None:
    found = _found(_curve_5090(seed))
    assert len(found) == 1
    kind, start, end = found[0]
    assert kind == "draw_ceiling"
    assert abs(start - 550) <= 10
    assert end == 600


def test_5090_ceiling_with_draw_over_the_cap_starts_where_it_stalls() -> None:
    # Some boards read over their cap; the draw stalls at ~547 W from the 530 W cap up.
    rng = np.random.default_rng(3)
    caps = np.arange(400, 601, 10, dtype=float)
    draw = np.minimum(caps + 17.0, 547.0) + rng.uniform(-1.5, 1.5, caps.size)
    tps = np.minimum(caps + 17, 547.0) / 547 * 60 * (1 + rng.uniform(-0.03, 0.03, caps.size))
    (found,) = _found(_points(caps, draw, tps))
    assert found[0] == "draw_ceiling"
    assert abs(found[1] - 530) <= 10 and found[2] == 600


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("tps_noise", "power_noise"), [(0.01, 0.5), (0.06, 0.5), (0.01, 2.0)])
def test_smooth_power_limited_curve_has_no_structure(
    seed: int, tps_noise: float, power_noise: float
) -> None:
    assert _found(_smooth(seed, tps_noise, power_noise)) == []


def test_soft_knee_is_not_a_plateau() -> None:
    # Above 350 W the draw still rises 0.3 W per W: bending, not flat.
    caps = np.arange(200, 451, 10, dtype=float)
    draw = np.where(caps < 350, caps - 1.0, 349 + 0.3 * (caps - 350))
    assert _found(_points(caps, draw, draw / 10)) == []


def test_boost_plateau_with_escape_and_sm_clock() -> None:
    caps = np.arange(200, 401, 10, dtype=float)
    draw = np.where(caps < 300, caps - 0.5, np.where(caps <= 340, 297.0, caps - 0.5))
    tps = draw / 10
    clock = np.where((caps >= 300) & (caps <= 340), 1500.0, 900 + 2 * caps)
    points = [
        CapPoint(float(c), float(c), float(d), float(t), sm_clock_mhz=float(k))
        for c, d, t, k in zip(caps, draw, tps, clock, strict=True)
    ]
    (region,) = find_regions(points, list(caps))
    assert (region.kind, region.start_w, region.end_w) == ("boost_plateau", 300.0, 340.0)
    assert region.escape_w == 350.0
    assert region.power_w == pytest.approx(297.0)


def test_plateau_tolerates_one_missing_cap_but_splits_on_a_wide_hole() -> None:
    caps = np.arange(200, 401, 10, dtype=float)
    draw = np.where(caps < 300, caps - 0.5, np.where(caps <= 350, 296.0, caps - 0.5))
    keep = caps != 320  # one cap failed in the middle of 300-350
    points = _points(caps[keep], draw[keep], draw[keep] / 10)
    (region,) = find_regions(points, list(caps))
    assert (region.kind, region.start_w, region.end_w) == ("boost_plateau", 300.0, 350.0)
    assert region.missing_caps_w == (320.0,)

    # Two missing caps leave 300 and 330-350: the hole splits, 300 alone is no plateau.
    keep = (caps != 310) & (caps != 320)
    points = _points(caps[keep], draw[keep], draw[keep] / 10)
    (region,) = find_regions(points, list(caps))
    assert (region.start_w, region.end_w) == (330.0, 350.0)


def test_two_flat_caps_are_not_a_plateau() -> None:
    caps = np.arange(200, 401, 10, dtype=float)
    draw = np.where((caps == 300) | (caps == 310), 299.0, caps - 0.5)
    draw = np.where(caps > 310, caps - 0.5, draw)
    assert _found(_points(caps, draw, draw / 10)) == []


def test_flat_top_close_to_the_cap_is_not_a_ceiling() -> None:
    # Flat over the last caps but only ~2% under the top cap: not "clearly below the cap".
    caps = np.array([300, 305, 310, 315, 320], dtype=float)
    draw = np.array([299.0, 304.0, 313.0, 313.2, 313.4])
    assert _found(_points(caps, draw, draw / 10)) == []


def test_regimes_thermal_underloaded_and_thermal_is_not_a_ceiling() -> None:
    caps = np.arange(250, 401, 10, dtype=float)
    points = []
    for c in caps:
        hot = c >= 340
        points.append(
            CapPoint(
                cap_w=float(c),
                cap_total_w=float(c),
                power_w=330.0 if hot else float(c) - 0.5,
                tps=33.0 if hot else float(c) / 10,
                temp_max_c=86.0 if hot else 70.0,
                util_pct=30.0 if c == 250 else 99.0,
            )
        )
    regions = find_regions(points, list(caps), slowdown_temp_c=88.0)
    assert regions == []
    got = {r.cap_w: r.regime for r in regimes(points, regions, slowdown_temp_c=88.0)}
    assert got[250.0] == "under_loaded"
    assert got[300.0] == "power_limited"
    assert all(got[float(c)] == "thermal_limited" for c in caps if c >= 340)


def test_bandwidth_bound_hint_when_clock_follows_the_cap_but_tps_does_not() -> None:
    caps = np.arange(200, 301, 10, dtype=float)
    points = [
        CapPoint(
            cap_w=float(c),
            cap_total_w=float(c),
            power_w=float(c) - 1,
            tps=30.0 if c >= 250 else float(c) / 250 * 30,
            sm_clock_mhz=float(c) * 6,
        )
        for c in caps
    ]
    bounds = {r.cap_w: r.bound for r in regimes(points, [])}
    assert bounds[270.0] == "bandwidth"
    assert bounds[220.0] is None


def test_ceiling_through_the_full_pipeline(tmp_path: Path) -> None:
    points = _curve_4090(1)
    df = pl.DataFrame(
        {
            "cap_w": [p.cap_w for p in points],
            "narr_tps": [p.tps for p in points],
            "power_w": [p.power_w for p in points],
            "temp_max_c": [62.0] * len(points),
        }
    )
    path = tmp_path / "caps.csv"
    df.write_csv(path)
    result = analyze(load_curve(path), bootstrap=0).to_json()
    assert [(p["kind"], p["start_w"], p["end_w"]) for p in result["plateaus"]] == [
        ("draw_ceiling", 400.0, 600.0)
    ]
    assert math.isclose(result["plateaus"][0]["power_w"], 393.5, abs_tol=1.0)
    ceiling = [f for f in result["findings"] if f["code"] == "draw_ceiling"]
    assert len(ceiling) == 1 and "prefill-heavy" in ceiling[0]["hint"]
    regimes_by_cap = {r["cap_w"]: r["regime"] for r in result["regimes"]}
    assert regimes_by_cap[500.0] == "draw_ceiling" and regimes_by_cap[300.0] == "power_limited"


# --- issue 13: draw ceilings when TPS jitters ---------------------------------------------------


def _noisy_5090(with_bits: bool = True) -> list[CapPoint]:
    """A 5090-like decode curve: the draw follows the cap to ~505 W, then stalls at 505-512 W
    while TPS jitters by up to 12% from cap to cap; the power-cap bit is set only where it binds."""
    caps = [float(c) for c in range(400, 601, 10)]
    jitter = [0.0, 0.09, -0.1, 0.12, -0.05, 0.11, -0.12, 0.04, -0.08, 0.1, -0.11]
    out = []
    for i, cap in enumerate(caps):
        if cap <= 500:
            power = cap - 0.3
            tps = 0.09 * power
        else:
            k = i - 10
            power = 505.0 + (3.0 if k % 2 else -1.0) + 0.05 * (cap - 500)
            tps = 45.5 * (1 + jitter[k % len(jitter)])
        out.append(
            CapPoint(
                cap_w=cap,
                cap_total_w=cap,
                power_w=power,
                tps=tps,
                temp_max_c=70.0,
                pwr_throttle_pct=(100.0 if cap <= 500 else 0.0) if with_bits else math.nan,
                thermal_throttle_pct=0.0 if with_bits else math.nan,
            )
        )
    return out


@pytest.mark.parametrize("with_bits", [True, False])
def test_a_draw_ceiling_is_found_where_draw_stops_following_whatever_tps_does(
    with_bits: bool,
) -> None:
    points = _noisy_5090(with_bits)
    caps = [p.cap_w for p in points]
    found = [(r.kind, r.start_w, r.end_w) for r in find_regions(points, caps)]
    assert found == [("draw_ceiling", 510.0, 600.0)]
    got = {r.cap_w: r.regime for r in regimes(points, find_regions(points, caps))}
    # power_limited only where the cap binds (bit set / draw at the cap), never 15-30 W under it
    assert {c for c, r in got.items() if r == "power_limited"} == {c for c in caps if c <= 500}
    assert all(got[c] == "draw_ceiling" for c in caps if c > 500)


def test_binding_margin_is_how_tightly_the_card_holds_its_cap() -> None:
    points = _noisy_5090()
    assert binding_margin_w(points, 10.0) == pytest.approx(1.0)  # readings 0.3 W under: floor
    loose = [
        dataclasses.replace(p, power_w=p.cap_total_w - 2.0) if p.cap_w <= 500 else p for p in points
    ]
    assert binding_margin_w(loose, 10.0) == pytest.approx(2.0)


def test_thermal_counts_near_slowdown_even_with_the_bit_clear() -> None:
    p = CapPoint(cap_w=400.0, cap_total_w=400.0, power_w=380.0, tps=40.0, temp_max_c=87.5,
                 thermal_throttle_pct=0.0)  # fmt: skip
    assert is_thermal(p, 88.0)
    cooler = dataclasses.replace(p, temp_max_c=85.0)
    assert not is_thermal(cooler, 88.0)  # 3 C under with the bit clear: not thermal
    assert is_thermal(dataclasses.replace(cooler, thermal_throttle_pct=math.nan), 88.0)


def _bending_ceiling(seed: int) -> list[CapPoint]:
    """38 caps, 100-470 W: the draw holds the cap up to 330 W; from 340 W on it falls 5 W short,
    then 8, 11, 12, 14 W (it still rises, bending away), then stays flat at ~377 W to the top."""
    rng = np.random.default_rng(seed)
    caps = np.arange(100, 471, 10, dtype=float)
    short = {340.0: 5.0, 350.0: 8.0, 360.0: 11.0, 370.0: 12.0, 380.0: 14.0}
    draw = np.array(
        [
            c - 0.5 if c < 340 else c - short[c] if c in short else 377.0 + 0.02 * (c - 390)
            for c in caps
        ]
    )
    draw = draw + rng.normal(0, 0.4, caps.size)
    tps = 40 * np.minimum(draw, 377.0) / 377.0 * (1 + rng.normal(0, 0.004, caps.size))
    return _points(caps, draw, tps)


@pytest.mark.parametrize("seed", range(8))
def test_a_draw_ceiling_starts_where_tps_stops_following_the_cap(seed: int) -> None:
    points = _bending_ceiling(seed)
    assert len(points) == 38
    # From 340 W the draw falls 5-14 W short of the cap but still rises, and TPS with it: a cap
    # that does not bind cannot change TPS, so those caps bind (a bursty or slewing draw under
    # them) and the ceiling starts where TPS stops rising: 390 W (400 W where the noise of
    # 390 W, still 0.6 W short, hides it)
    ((kind, start, end),) = _found(points)
    assert (kind, end) == ("draw_ceiling", 470.0) and start in (390.0, 400.0)
    got = {
        r.cap_w: r.regime for r in regimes(points, find_regions(points, [p.cap_w for p in points]))
    }
    assert {c for c, r in got.items() if r == "draw_ceiling"} == {
        p.cap_w for p in points if p.cap_w >= start
    }
    assert all(got[c] == "power_limited" for c in (340.0, 350.0, 360.0, 370.0, 380.0))


def test_a_cap_short_only_by_noise_or_back_at_its_cap_does_not_move_the_ceiling() -> None:
    # 330 W draws 1.2 W under (within the binding margin the other caps teach): not short
    points = [
        dataclasses.replace(p, power_w=p.cap_w - 1.2) if p.cap_w == 330.0 else p
        for p in _bending_ceiling(0)
    ]
    assert _found(points) == [("draw_ceiling", 390.0, 470.0)]
    # one cap back at its cap inside the bend, where TPS still follows the cap anyway
    back = [
        dataclasses.replace(p, power_w=p.cap_w - 0.5) if p.cap_w == 350.0 else p for p in points
    ]
    assert _found(back) == [("draw_ceiling", 390.0, 470.0)]


@pytest.mark.parametrize("seed", range(4))
def test_a_ceiling_measured_sparsely_is_joined_where_physics_fills_the_gaps(seed: int) -> None:
    # the 4090 curve's ceiling measured only every fourth cap (an adaptive sweep's coarse pass)
    # plus the caps around its start: a higher cap never lowers the draw, so a gap whose upper
    # end draws under the lower end's own cap is under the cap all through
    dense = _curve_4090(seed)
    keep = {390.0, 400.0, 410.0, *(float(c) for c in range(440, 601, 40)), 600.0}
    sparse = [p for p in dense if p.cap_w in keep or p.cap_w < 390]
    grid = [p.cap_w for p in dense]
    found = [(r.kind, r.start_w, r.end_w) for r in find_regions(sparse, grid, step_w=10.0)]
    assert found == [("draw_ceiling", 400.0, 600.0)]
    # a gap the draw could cross (its upper end draws above the lower end's cap) is not joined
    rising = [dataclasses.replace(p, power_w=p.cap_w - 1.0) if p.cap_w < 560 else p for p in sparse]
    assert not any(
        r.start_w < 560 for r in find_regions(rising, grid, step_w=10.0) if r.kind == "draw_ceiling"
    )
