"""Issue 4: every simulated profile x load mode, measured with realistic noise, against the truth.

For each built-in profile and load mode the simulator's noise-free ground truth over the default
caps is turned into a measured run (draw: 0.3% per reading, median of 20 load ticks; TPS 0.5%;
SM clocks in 15 MHz bins; whole-degree temperatures) and analysed. The sweet spot must be the best
reading, and within 10 W of the true one or with the truth inside its noise interval; every true
plateau or ceiling must be found with the right kind and edges within 10 W; no region may be
invented.

One ambiguity is physical, not an analysis flaw: when a run's first cap draws within a watt of its
cap (the truth may call it either the last power-limited cap or the first plateau cap), 20 draw
readings cannot tell the two apart. Such a region may be found or not (see ``_optional``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from powersweep.analysis import analyze, load_curve
from powersweep.analysis.cap_points import CapPoint
from powersweep.analysis.objectives import pick_sweet_spot
from powersweep.analysis.structure import find_regions, regimes
from powersweep.analysis.synthetic import synthesize_run
from powersweep.sim.profiles import GpuProfile, get_profile, profile_names
from powersweep.sim.sim_rig import ground_truth
from powersweep.sweep.gpu import PowerEnvelope
from powersweep.sweep.planning.caps import default_caps

# (load mode, concurrency): decode-concurrent at the batches the auto probe picks on these cards.
MODES = [
    ("decode-single", 1),
    ("decode-concurrent", 4),
    ("decode-concurrent", 8),
    ("prefill-heavy", 1),
]
SEEDS = range(6)
TOL_W = 10.0
# TPS/W varying less than this across the caps: a flat curve (no cap binds, e.g. H100 decode).
FLAT_TPW_RATIO = 1.01
# A first plateau cap drawing within this of its cap cannot be told from a power-limited one.
AMBIGUOUS_HEADROOM_W = 1.0
PROMPT_TOKENS = 8000


def gpu_entry(profile: GpuProfile) -> dict[str, Any]:
    """The run.json ``gpus`` entry of a simulated card."""
    return {
        "name": profile.gpu_name,
        "min_limit_w": profile.min_limit_w,
        "default_limit_w": profile.default_limit_w,
        "max_limit_w": profile.max_limit_w,
        "original_limit_w": profile.user_limit_w,
        "slowdown_temp_c": profile.slowdown_temp_c,
        "mem_clock_mhz": profile.mem_clock_mhz,
    }


def truth_of(name: str, mode: str, concurrency: int) -> dict[str, Any]:
    profile = get_profile(name)
    envelope = PowerEnvelope(
        profile.min_limit_w, profile.default_limit_w, profile.max_limit_w, profile.user_limit_w
    )
    gt = ground_truth(
        [profile],
        mode,
        default_caps(envelope),
        concurrency=concurrency,
        prompt_tokens=PROMPT_TOKENS,
    )
    return gt.to_dict()


def _flat_runs(caps: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """Runs of 3+ caps (not thermal) whose true draw stops following the cap."""
    out = []
    i = 0
    while i < len(caps):
        j = i
        while (
            j + 1 < len(caps)
            and caps[j + 1]["regime"] != "thermal_limited"
            and caps[i]["regime"] != "thermal_limited"
            and abs(caps[j + 1]["power_w"] - caps[j]["power_w"]) < AMBIGUOUS_HEADROOM_W
        ):
            j += 1
        if j - i + 1 >= 3:
            kind = "draw_ceiling" if j == len(caps) - 1 else "boost_plateau"
            out.append((kind, float(caps[i]["cap_w"]), float(caps[j]["cap_w"])))
        i = j + 1
    return out


def _required(truth: dict[str, Any]) -> list[tuple[str, float, float]]:
    """True regions whose first cap is clearly under its cap: these must be found."""
    by_cap = {c["cap_w"]: c for c in truth["caps"]}
    out = []
    for p in truth["plateaus"]:
        first = by_cap[p["start_w"]]
        if first["cap_w"] - first["power_w"] >= AMBIGUOUS_HEADROOM_W:
            out.append((p["kind"], float(p["start_w"]), float(p["end_w"])))
    return out


def _optional(truth: dict[str, Any]) -> list[tuple[str, float, float]]:
    """Regions that may be found: the true ones, and flat runs whose first cap is ambiguous."""
    strict = [(p["kind"], float(p["start_w"]), float(p["end_w"])) for p in truth["plateaus"]]
    return strict + _flat_runs(truth["caps"])


def _matches(found: tuple[str, float, float], want: tuple[str, float, float]) -> bool:
    return (
        found[0] == want[0]
        and abs(found[1] - want[1]) <= TOL_W
        and abs(found[2] - want[2]) <= TOL_W
    )


CASES = [(name, mode, n) for name in profile_names() for mode, n in MODES]


@pytest.mark.parametrize(("name", "mode", "concurrency"), CASES)
def test_measured_curve_matches_ground_truth(
    tmp_path: Path, name: str, mode: str, concurrency: int
) -> None:
    truth = truth_of(name, mode, concurrency)
    gpu = gpu_entry(get_profile(name))
    required, optional = _required(truth), _optional(truth)
    true_sweet = truth["sweet_spot"]["cap_w"]
    tpw = [c["tps_per_w"] for c in truth["caps"]]
    best_tpw = max(tpw)
    flat = best_tpw <= FLAT_TPW_RATIO * min(tpw)
    for seed in SEEDS:
        run = synthesize_run(truth, gpu, tmp_path / f"s{seed}", seed=seed, raw_files=False)
        result = analyze(load_curve(run), bootstrap=100).to_json()
        where = f"{name} {mode} x{concurrency} seed {seed}"
        sweet = result["sweet_spot"]
        # The sweet spot is the best reading, always.
        best = max(result["caps"], key=lambda r: (r["tps_per_w"], -r["cap_w"]))
        assert sweet["cap_w"] == best["cap_w"], where
        if flat:
            # no cap binds: any cap is the sweet spot, as efficient as the truth's best
            assert sweet["tps_per_w"] >= best_tpw / FLAT_TPW_RATIO, where
        else:
            # On a flat peak one reading with 0.5% noise can land two steps off, and then the
            # truth lies inside the interval the noise shows.
            lo, hi = sweet["interval_w"]
            near = abs(sweet["cap_w"] - true_sweet) <= TOL_W
            assert near or lo <= true_sweet <= hi, f"{where}: {sweet['cap_w']} [{lo}, {hi}]"
        found = [(p["kind"], p["start_w"], p["end_w"]) for p in result["plateaus"]]
        for want in required:
            assert any(_matches(f, want) for f in found), f"{where}: missed {want}; {found}"
        for f in found:
            assert any(_matches(f, want) for want in optional), f"{where}: invented {f}"
        # A cap the truth calls thermal-limited is never reported as a plateau or ceiling.
        thermal = {c["cap_w"] for c in truth["caps"] if c["regime"] == "thermal_limited"}
        in_regions = {c for p in result["plateaus"] for c in _caps_in(p, truth)}
        assert not thermal & in_regions, where


def _caps_in(region: dict[str, Any], truth: dict[str, Any]) -> list[float]:
    return [c["cap_w"] for c in truth["caps"] if region["start_w"] <= c["cap_w"] <= region["end_w"]]


def test_the_cases_cover_every_kind_of_structure() -> None:
    # The sweep above must exercise plateaus, ceilings, thermal caps and smooth curves.
    kinds = set()
    for name, mode, n in CASES:
        truth = truth_of(name, mode, n)
        kinds |= {p["kind"] for p in truth["plateaus"]}
        kinds |= {c["regime"] for c in truth["caps"]}
    assert {"boost_plateau", "draw_ceiling", "thermal_limited", "power_limited"} <= kinds


def test_the_3090_decode_single_truth_is_the_club_3090_answer(tmp_path: Path) -> None:
    truth = truth_of("rtx3090-air", "decode-single", 1)
    assert truth["sweet_spot"]["cap_w"] == 290.0
    assert [(p["kind"], p["start_w"], p["end_w"]) for p in truth["plateaus"]] == [
        ("boost_plateau", 340.0, 370.0)
    ]
    run = synthesize_run(truth, gpu_entry(get_profile("rtx3090-air")), tmp_path, seed=3)
    result = analyze(load_curve(run), bootstrap=0).to_json()
    assert result["sweet_spot"]["cap_w"] == 290.0
    assert [(p["kind"], p["start_w"], p["end_w"]) for p in result["plateaus"]] == [
        ("boost_plateau", 340.0, 370.0)
    ]


# --- the fixes the truth sweep needed, on minimal curves ------------------------------------------


def _pt(cap: float, power: float, tps: float, **kw: float) -> CapPoint:
    return CapPoint(cap_w=cap, cap_total_w=cap, power_w=power, tps=tps, **kw)


def test_the_sweet_spot_is_the_best_reading_even_next_to_a_kink() -> None:
    # A kinked peak (a boost-state transition) with one reading 0.2% above the smooth shape: the
    # sweet spot is that reading, never a fitted neighbour.
    tpw = {
        250: 0.930, 260: 0.947, 270: 0.962, 280: 0.976, 290: 1.002, 300: 0.999, 310: 1.000,
        320: 0.983, 330: 0.966, 340: 0.950, 350: 0.934,
    }  # fmt: skip
    points = [_pt(float(c), float(c), v * c) for c, v in tpw.items()]
    assert pick_sweet_spot(points).cap_w == 290.0


def test_an_exact_tie_goes_to_the_lower_cap() -> None:
    points = [_pt(200.0, 200.0, 20.0), _pt(220.0, 220.0, 22.0), _pt(240.0, 240.0, 23.0)]
    assert pick_sweet_spot(points).cap_w == 200.0


def test_cool_bit_clear_ceiling_near_slowdown_is_a_ceiling_not_thermal() -> None:
    # The 5090 decode ceiling sits at ~85 C, 3 C under slowdown, with the thermal bit clear.
    caps = [float(c) for c in range(500, 601, 10)]
    points = [
        _pt(
            c,
            min(c, 546.0),
            45.0 * min(c, 546.0) / 546.0,
            temp_max_c=85.0 if c >= 550 else 82.0,
            thermal_throttle_pct=0.0,
        )
        for c in caps
    ]
    regions = find_regions(points, caps, slowdown_temp_c=88.0)
    assert [(r.kind, r.start_w, r.end_w) for r in regions] == [("draw_ceiling", 550.0, 600.0)]
    # With the bit set the same caps are thermal-limited.
    hot = [
        CapPoint(**{**p.__dict__, "thermal_throttle_pct": 100.0 if p.cap_w >= 550 else 0.0})
        for p in points
    ]
    got = regimes(hot, find_regions(hot, caps, slowdown_temp_c=88.0), slowdown_temp_c=88.0)
    assert {r.cap_w for r in got if r.regime == "thermal_limited"} == set(caps[5:])


def test_a_cap_the_level_above_exceeds_is_not_the_start_of_a_region() -> None:
    # 370 W draws its cap; 380 and 390 W sit at 370.6 W, above what 370 W allows: only two caps
    # are flat, which is no region.
    caps = [float(c) for c in range(300, 391, 10)]
    power = [c if c <= 370 else 370.6 for c in caps]
    points = [_pt(c, p, p / 4.0) for c, p in zip(caps, power, strict=True)]
    assert find_regions(points, caps) == []


def test_a_ceiling_a_few_percent_under_a_high_top_cap_is_found() -> None:
    # H100 at batch 8: the draw stops at 670.5 W from the 680 W cap to 700 W (4% headroom).
    caps = [float(c) for c in range(600, 701, 10)]
    power = [min(c, 670.5) for c in caps]
    points = [_pt(c, p, p / 5.0) for c, p in zip(caps, power, strict=True)]
    found = [(r.kind, r.start_w, r.end_w) for r in find_regions(points, caps)]
    assert found == [("draw_ceiling", 680.0, 700.0)]


def test_synthetic_run_is_reproducible_and_follows_the_truth(tmp_path: Path) -> None:
    truth = truth_of("rtx4090-air", "decode-single", 1)
    gpu = gpu_entry(get_profile("rtx4090-air"))
    a = synthesize_run(truth, gpu, tmp_path / "a", seed=5)
    b = synthesize_run(truth, gpu, tmp_path / "b", seed=5)
    for name in ("caps.csv", "samples.csv", "requests.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    curve = load_curve(a)
    assert curve.samples is not None and curve.requests is not None
    by_cap = {c["cap_w"]: c for c in truth["caps"]}
    for row in curve.caps.iter_rows(named=True):
        true = by_cap[row["cap_w"]]
        assert row["power_w"] == pytest.approx(true["power_w"], rel=0.004)
        assert row["narr_tps"] == pytest.approx(true["tps"], rel=0.03)
        assert row["sm_clock_mhz"] % 7.5 == 0  # a median of bins, maybe between two
        assert math.isclose(row["sm_clock_mhz"], true["sm_clock_mhz"], abs_tol=15.0)
