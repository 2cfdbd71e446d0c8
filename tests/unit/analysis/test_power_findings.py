"""powersweep.analysis.power_findings: the findings of a power-cap curve from the figures the
analysis computed: caps not measured, whether a cap binds, a sweet spot at the envelope's edge,
plateaus and ceilings with their advice, regimes, and the recommendation in words."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import polars as pl
import pytest

from powersweep.analysis.cap_points import CapPoint, Region
from powersweep.analysis.findings import Severity
from powersweep.analysis.power_findings import (
    boundary_findings,
    no_bind_finding,
    recommendation_findings,
    regime_findings,
    status_findings,
    structure_findings,
)
from powersweep.analysis.result_types import (
    CapsBind,
    Pick,
    Plateau,
    PowerAnalysis,
    Regime,
    RunFacts,
)


def _p(cap: float, power: float, tps: float = 30.0, **kw: float) -> CapPoint:
    return CapPoint(cap_w=cap, cap_total_w=cap, power_w=power, tps=tps, **kw)


def test_status_findings_list_caps_never_measured_ok() -> None:
    caps = pl.DataFrame(
        {
            "cap_w": [200.0, 250.0, 250.0, 300.0, 350.0, 400.0],
            "status": ["ok", "failed", "ok", "rejected", "suspect", "implausible"],
            "error": [None, "x", None, "outside the limits", None, None],
        }
    )
    (f,) = status_findings(caps)
    # 250 W was measured again ok; suspect and implausible rows are trust's findings
    assert (f.severity, f.code) == (Severity.WARNING, "caps_not_measured")
    assert f.message == (
        "1 cap(s) not measured and left out of the analysis: 300 W rejected: outside the limits"
    )
    assert status_findings(caps.filter(pl.col("status") == "ok")) == []


def test_no_bind_finding_states_the_draw_and_the_caps() -> None:
    f = no_bind_finding(CapsBind(binds=False, draw_w=[199.6, 221.4], caps_w=[300.0, 400.0]))
    assert f.code == "no_cap_binds" and f.severity is Severity.WARNING
    assert f.message.startswith(
        "no cap binds: the card drew 200-221 W under caps of 300-400 W and its TPS stayed flat "
        "within noise, so power capping"
    )
    assert f.hint is not None and "`powersweep --axis sm-clock`" in f.hint


@pytest.mark.parametrize(
    ("side", "cap", "run", "extend", "hint"),
    [
        (
            "low",
            150.0,
            {"min_limit_w": 100},
            "the card's minimum limit is 100 W: the sweep can extend 50 W",
            "extend the sweep lower, to 100 W",
        ),
        (
            "low",
            100.3,
            {"min_limit_w": 100.0},
            "this is already the card's minimum limit, so it cannot go further",
            "this is the best the card allows",
        ),
        (
            "high",
            400.0,
            {},
            "the card's maximum limit is unknown (no run.json)",
            "extend the sweep higher than 400 W if the card allows it",
        ),
        (
            "high",
            400.0,
            {"max_limit_w": "450"},
            "the card's maximum limit is 450 W: the sweep can extend 50 W",
            "extend the sweep higher, to 450 W",
        ),
    ],
)
def test_a_sweet_spot_at_the_edge_says_how_far_the_sweep_can_go(
    side: str, cap: float, run: dict[str, Any], extend: str, hint: str
) -> None:
    sweet = Pick(cap_w=cap, at_boundary=side)
    (f,) = boundary_findings(sweet, [], RunFacts.from_json(run))  # as run.json wrote it
    assert f.code == f"sweet_spot_at_{side}_boundary"
    edge, direction = ("lowest", "lower") if side == "low" else ("highest", "higher")
    assert f.message == (
        f"the sweet spot {cap:g} W is the {edge} cap measured; the true optimum may lie "
        f"{direction}; {extend}"
    )
    assert f.hint == hint


def test_no_boundary_finding_inside_the_sweep() -> None:
    assert boundary_findings(Pick(cap_w=300.0, at_boundary=None), [], RunFacts()) == []


def _region(kind: str, caps: tuple[float, ...], missing: tuple[float, ...] = ()) -> Region:
    return Region(kind, caps[0], caps[-1], 334.4, 35.123, caps, missing, 380.0)


def test_a_boost_plateau_names_its_escape_and_the_cap_to_set() -> None:
    points = [_p(c, 334.0) for c in (340, 350, 360)]
    region = [_region("boost_plateau", (340, 350, 360), (355,))]
    (f,) = structure_findings(points, region, RunFacts(), 90)
    assert (f.severity, f.code) == (Severity.INFO, "boost_plateau")
    assert f.message == (
        "boost plateau 340-360 W (355 W not measured inside it): draw stays at ~334 W and TPS "
        "at ~35.1 while the cap rises; the card escapes at 380 W"
    )
    assert f.hint == (
        "caps above 340 W up to 360 W buy nothing: set 340 W for the same TPS, or 380 W or more "
        "if you need the next boost state"
    )


def test_a_draw_ceiling_advice_follows_temperature_and_load_mode() -> None:
    region = [_region("draw_ceiling", (350, 400, 450))]
    cool = [_p(c, 317.0, temp_max_c=60.0) for c in (350, 400, 450)]
    unknown = [_p(c, 317.0) for c in (350, 400, 450)]
    hot = [_p(c, 317.0, temp_max_c=84.0) for c in (350, 400, 450)]
    throttled = [_p(c, 317.0, thermal_throttle_pct=6.0) for c in (350, 400, 450)]

    def hint(points: list[CapPoint], run: dict[str, Any], slowdown: float = 90.0) -> str:
        (f,) = structure_findings(points, region, RunFacts.from_json(run), slowdown)
        assert f.code == "draw_ceiling"
        assert f.message.startswith("draw ceiling from 350 W to the top of the sweep (450 W)")
        return str(f.hint)

    assert hint(cool, {}) == (
        "the card stays cool, so the workload cannot use more power: try `--load-mode "
        "prefill-heavy` or more concurrency (decode-concurrent)"
    )
    assert hint(cool, {"load_mode": "prefill-heavy"}) == (
        "the card stays cool: the workload or memory bandwidth limits it; caps above 350 W only "
        "waste headroom"
    )
    assert hint(unknown, {"load_mode": "decode-single"}).endswith(
        "(decode-concurrent) (no temperatures were measured: check that cooling is not the limit)"
    )
    # hot: within 8 C of slowdown, or 83 C when slowdown is unknown, or throttled
    for points, slowdown in ((hot, 92.0), (hot, math.nan), (throttled, 90.0)):
        assert hint(points, {}, slowdown).startswith("the card runs hot at the ceiling")
    assert hint(hot, {}, 93.0).startswith("the card stays cool")


def _regimes(caps: list[float], regime: str, bound: str | None = None) -> list[Regime]:
    return [Regime(cap_w=c, regime=regime, bound=bound) for c in caps]


def test_regime_findings_thermal_underloaded_and_bandwidth() -> None:
    points = [_p(c, c - 1.0, util_pct=95.0) for c in (300, 350, 400)]
    regimes = _regimes([300.0], "power_limited", bound="bandwidth")
    regimes += _regimes([350.0], "thermal_limited", bound="bandwidth")
    regimes += _regimes([400.0], "under_loaded")
    found = {f.code: f for f in regime_findings(points, regimes, 90.0)}
    assert set(found) == {"thermal_limited", "under_loaded", "bandwidth_bound"}
    assert found["thermal_limited"].message == (
        "thermal-limited at 350 W: heat, not the cap, holds the clocks there"
    )
    assert found["under_loaded"].message == "utilization under 50% at 400 W"
    assert found["bandwidth_bound"].severity is Severity.INFO
    assert found["bandwidth_bound"].message.endswith(
        "at 300 W, 350 W: decode is memory-bandwidth-bound there"
    )
    # one bandwidth-bound cap is not a finding
    one = _regimes([300.0], "power_limited", bound="bandwidth")
    assert regime_findings(points[:1], one, 90.0) == []


def test_a_workload_that_never_loads_the_gpu_is_said_once() -> None:
    points = [_p(c, 100.0 + k, util_pct=20.0) for k, c in enumerate((300, 350, 400))]
    (f,) = regime_findings(points, _regimes([300.0, 350.0, 400.0], "under_loaded"), 90.0)
    assert f.code == "workload_too_small"
    assert f.message == (
        "utilization stays low and the draw is flat at every cap: the load never kept the GPU "
        "busy, so the caps were not tested"
    )


def _result(plateaus: list[Plateau] | None = None, **sweet: Any) -> PowerAnalysis:
    base = {"cap_w": 290.0, "tps_per_w": 0.11141, "tps": 32.26, "power_w": 289.55}
    near = {
        "cap_w": 330.0,
        "max_tps_loss_pct": 5.0,
        "tps_loss_pct": 4.66,
        "tps_per_w": 0.10494,
        "pct_of_default": 89.19,
    }
    rec = sweet.pop("recommendation", {"objective": "tps-per-w", "cap_w": 290.0})
    doc = {"sweet_spot": {**base, **sweet}, "near_peak": near, "recommendation": rec}
    return replace(PowerAnalysis.from_json(doc), plateaus=plateaus or [])


def test_recommendation_findings_state_the_sweet_spot_and_near_peak() -> None:
    sweet, near = recommendation_findings(
        _result(pct_of_default=78.38, tps_per_w_gain_vs_default_pct=7.3)
    )
    assert sweet.code == "sweet_spot" and near.code == "near_peak"
    assert sweet.message == (
        "best efficiency at 290 W: 0.1114 TPS/W (32.26 TPS at 289.6 W) (78% of the default "
        "limit, +7.3% TPS/W vs the default limit)"
    )
    assert sweet.hint == "`nvidia-smi -pl 290` for the most tokens per watt"
    assert near.message == (
        "near-peak: 330 W keeps TPS within 5% of the best (loses 4.7%) at 0.1049 TPS/W (89% of "
        "the default limit)"
    )


def test_ties_are_listed_or_counted_and_a_tied_ceiling_changes_the_advice() -> None:
    few = recommendation_findings(_result(tied_caps=[280.0, 290.0, 300.0]))[0]
    assert few.message.endswith("; statistically tied: 280 W, 290 W, 300 W")
    caps = [280.0 + 10 * k for k in range(9)]
    ceiling = Plateau(kind="draw_ceiling", start_w=280.0, end_w=360.0, caps_w=caps)
    many = _result([ceiling], tied_caps=caps)
    f = recommendation_findings(many)[0]
    assert f.message.endswith("; statistically tied: 9 caps from 280 W to 360 W")
    assert f.hint is not None and f.hint.startswith(
        "every cap from 280 W to 360 W runs one operating point (the draw ceiling)"
    )
    assert "(`nvidia-smi -pl 280` is the lowest)" in f.hint


def test_a_cost_objective_and_per_card_shares_are_said() -> None:
    cost_rec = {"objective": "cost", "eta": 0.3, "cap_w": 300.0}
    result = _result(pct_of_default_by_gpu=[78.4, 82.9], recommendation=cost_rec)
    sweet, _, cost = recommendation_findings(result)
    assert sweet.message.endswith("(78% / 83% of each card's default limit)")
    assert (cost.code, cost.message, cost.hint) == (
        "cost_objective",
        "cost objective (eta 0.3): 300 W",
        None,
    )
