"""Cost per 1M tokens, savings against the default, and the latency-target pick."""

from __future__ import annotations

import json
import math
from typing import Any

import polars as pl
import pytest

from powersweep.analysis import serving
from powersweep.analysis.pooling import pool_repeats
from powersweep.analysis.precision import Reading
from powersweep.analysis.result_types import CapLatencyTarget, CapRow, PointFigures
from powersweep.errors import UsageError


def _p(
    cap: float, tpw: float, itl: float, ttft: float = 300.0, tps: float = 50.0
) -> dict[str, Any]:
    j = 1.0 / tpw
    return {
        "cap_w": cap,
        "tps": tps,
        "tps_per_w": tpw,
        "j_per_token": j,
        "kwh_per_mtok": j * 1e6 / 3.6e6,
        "itl_p95_ms": itl,
        "ttft_p95_ms": ttft,
    }


CURVE = [
    _p(200, 0.18, 120),
    _p(250, 0.21, 90),
    _p(300, 0.23, 75),
    _p(350, 0.22, 60),
    _p(400, 0.20, 55),
]


def _name(p: CapRow) -> str:
    return f"{p.cap_w:g} W"


def _choice(
    points: list[dict[str, Any]], *, max_ttft_ms: float | None, max_itl_ms: float | None
) -> CapLatencyTarget | None:
    """The latency pick among table rows read from ``points`` (their caps.csv precision
    columns give each row's own reading)."""
    rows = [CapRow.from_json(p) for p in points]
    own = {id(r): Reading.of(p) for r, p in zip(rows, points, strict=True)}
    return serving.latency_choice(
        rows,
        max_ttft_ms=max_ttft_ms,
        max_itl_ms=max_itl_ms,
        name=_name,
        reading=lambda r: own[id(r)],
        target=CapLatencyTarget,
    )


def _figures(point: dict[str, Any]) -> PointFigures:
    return CapRow.from_json(point).figures


def test_the_most_efficient_point_that_meets_the_target_is_picked() -> None:
    pick = _choice(CURVE, max_ttft_ms=None, max_itl_ms=80)
    assert pick is not None and pick.met
    assert pick.point.cap_w == 300
    # a tighter target moves it up the curve, to the best of what still meets it
    pick = _choice(CURVE, max_ttft_ms=None, max_itl_ms=70)
    assert pick is not None and pick.point.cap_w == 350


def test_both_targets_must_hold_and_noise_names_the_tied_points() -> None:
    curve = [*CURVE[:3], _p(350, 0.228, 60, ttft=900), _p(400, 0.227, 55)]
    pick = _choice(curve, max_ttft_ms=500, max_itl_ms=70)
    assert pick is not None and pick.point.cap_w == 400
    assert pick.tied == ["400 W"]
    loose = _choice(curve, max_ttft_ms=None, max_itl_ms=80)
    assert loose is not None and loose.point.cap_w == 300
    assert loose.tied == ["300 W", "350 W", "400 W"]


def test_a_p95_that_meets_the_target_only_within_its_own_noise_gives_way_to_a_margin() -> None:
    def bounded(p: dict[str, Any], hi: float | None, u95: float = 0.5) -> dict[str, Any]:
        return {**p, "itl_p95_hi_ms": hi, "tps_per_w_stat_u95_pct": u95, "drift_bias_pct": 0.0}

    curve = [
        bounded(_p(300, 0.230, 68), 72.0),  # meets 70 ms, but its own bound says maybe not
        bounded(_p(350, 0.229, 64), 66.0),  # meets it with a margin, as efficient within noise
        bounded(_p(400, 0.220, 55), 57.0),
    ]
    pick = _choice(curve, max_ttft_ms=None, max_itl_ms=70)
    assert pick is not None and pick.met and pick.margin
    assert pick.point.cap_w == 350 and pick.within_noise == "300 W"
    assert pick.unsure == ["its inter-token p95 may be up to 72 ms (95% bound) > 70 ms"]
    # ties come from each point's own precision: 400 W is 4% off, far outside 0.5% readings
    assert pick.tied == ["350 W"] and pick.noise_source == "own measurements"
    finding = serving._latency_finding(pick)
    assert "with a margin: 300 W is more efficient" in finding.message
    # a bound no point meets: the best stays the pick, and the answer says it is not sure
    tight = _choice(curve, max_ttft_ms=None, max_itl_ms=56)
    assert tight is not None and tight.point.cap_w == 400 and not tight.margin
    assert tight.within_noise is None
    warned = serving._latency_finding(tight)
    assert warned.severity == "warning" and "only within its own noise" in warned.message
    # a p95 from too few samples has no bound: never called sure
    few = [{**p, "itl_p95_hi_ms": None} for p in curve]
    unsure = _choice(few, max_ttft_ms=None, max_itl_ms=70)
    assert unsure is not None and not unsure.margin and unsure.point.cap_w == 300
    assert unsure.unsure == ["its inter-token p95 has too few samples to be bounded"]


def test_no_point_meets_it_and_the_closest_is_named_with_its_miss() -> None:
    pick = _choice(CURVE, max_ttft_ms=None, max_itl_ms=40)
    assert pick is not None and not pick.met
    assert pick.point.cap_w == 400
    assert pick.misses == ["itl_p95 55 ms > 40 ms"]
    assert _choice(CURVE, max_ttft_ms=None, max_itl_ms=None) is None


def test_a_point_without_the_latency_columns_never_meets_a_target() -> None:
    curve = [{**p, "itl_p95_ms": None} for p in CURVE]
    pick = _choice(curve, max_ttft_ms=None, max_itl_ms=1000)
    assert pick is not None and not pick.met and pick.point is None
    assert "name" not in pick.to_json()  # no point measured against it: none is named


def test_savings_per_million_tokens_and_per_year_against_the_reference() -> None:
    chosen, ref = CURVE[2], CURVE[4]
    out = serving.cost_summary(_figures(chosen), _figures(ref), 0.30)
    assert out is not None and out.chosen is not None
    saved = ref["kwh_per_mtok"] - chosen["kwh_per_mtok"]
    assert out.kwh_saved_per_mtok == pytest.approx(saved)
    assert out.cost_saved_per_mtok == pytest.approx(saved * 0.30)
    mtok_year = 50.0 * 365 * 24 * 3600 / 1e6
    assert out.kwh_saved_per_year == pytest.approx(saved * mtok_year)
    assert out.cost_saved_per_year == pytest.approx(saved * mtok_year * 0.30)
    assert out.chosen.cost_per_mtok == pytest.approx(chosen["kwh_per_mtok"] * 0.30)
    energy_only = serving.cost_summary(_figures(chosen), None, None)
    assert energy_only is not None and energy_only.reference is None
    assert "cost_saved_per_mtok" not in energy_only.to_json()


@pytest.mark.parametrize(
    ("tariff", "ttft", "itl", "needle"),
    [
        (-1.0, None, None, "--tariff"),
        (math.inf, None, None, "--tariff"),
        (None, 0.0, None, "--max-ttft-ms"),
        (None, None, math.nan, "--max-itl-ms"),
    ],
)
def test_options_no_user_means_are_refused(
    tariff: float | None, ttft: float | None, itl: float | None, needle: str
) -> None:
    with pytest.raises(UsageError, match=needle):
        serving.check_options(tariff, ttft, itl)


def test_the_confirm_phase_pools_energy_by_tokens_and_percentiles_by_window() -> None:
    rows = pl.DataFrame(
        {
            "cap_w": [300.0, 300.0],
            "narr_tps": [50.0, 52.0],
            "power_w": [300.0, 300.0],
            "window_s": [8.0, 4.0],
            "n_samples": [16, 8],
            "reason": ["dense", "confirm"],
            "j_per_token": [6.0, 5.7],
            "j_per_token_sampled": [6.1, 5.8],
            "kwh_per_mtok": [6.0 / 3.6, 5.7 / 3.6],
            "energy_tokens": [300.0, 100.0],
            "itl_p95_ms": [80.0, 110.0],
            "ttft_p95_ms": [400.0, 700.0],
        }
    )
    (row,) = pool_repeats(rows, "narr_tps").iter_rows(named=True)
    assert row["j_per_token"] == pytest.approx((6.0 * 300 + 5.7 * 100) / 400)
    assert row["kwh_per_mtok"] == pytest.approx(row["j_per_token"] / 3.6)
    assert row["energy_tokens"] == 400.0
    assert row["itl_p95_ms"] == pytest.approx((80 * 8 + 110 * 4) / 12)


def _caps_csv(tmp_path: Any, *, with_latency: bool) -> Any:
    lines = [
        "cap_w,narr_tps,power_w,status" + (",j_per_token,kwh_per_mtok,itl_p95_ms" * with_latency)
    ]
    for cap, tps, itl in ((200, 36.0, 110), (250, 50.0, 80), (300, 58.0, 70), (350, 62.0, 66)):
        power = cap - 1.0
        extra = f",{power / tps},{power / tps / 3.6},{itl}" if with_latency else ""
        lines.append(f"{cap},{tps},{power},ok{extra}")
    path = tmp_path / "caps.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_analyze_picks_by_latency_and_refuses_bad_values(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from powersweep.cli import main

    caps = _caps_csv(tmp_path, with_latency=True)
    assert main(["analyze", str(caps), "--json", "--max-itl-ms", "75", "--tariff", "0.3"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["latency_target"]["point"]["cap_w"] == 300
    assert result["caps"][0]["cost_per_mtok"] == pytest.approx(199.0 / 36.0 / 3.6 * 0.3)
    for bad in (["--tariff", "-2"], ["--max-itl-ms", "0"], ["--max-ttft-ms", "inf"]):
        assert main(["analyze", str(caps), *bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and bad[0] in err and "Traceback" not in err
    assert main(["analyze", str(caps), str(caps), "--tariff", "1"]) == 2
    assert "one run at a time" in capsys.readouterr().err


def test_cli_analyze_of_a_run_older_than_the_columns_says_what_it_lacks(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from powersweep.cli import main

    caps = _caps_csv(tmp_path, with_latency=False)
    assert main(["analyze", str(caps), "--max-itl-ms", "75", "--tariff", "0.3", "--full"]) == 0
    out = capsys.readouterr().out
    assert "No point has the latency columns" in out
    assert "### Energy and cost" not in out  # no energy per token measured, nothing priced


def test_cli_apply_latency_targets_need_the_slo_objective(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from powersweep.cli import main

    sim = ["--simulate", "rtx3090-air", "--sim-state", str(tmp_path / "s.json")]
    code = main(["apply", str(tmp_path), "--max-itl-ms", "50", *sim])
    assert code == 2
    assert "--objective slo" in capsys.readouterr().err


def test_a_serving_runs_answer_names_each_points_energy_per_request_and_saturation() -> None:
    # issue 49, phase 1: the answer is TPS/W of the windows' tokens, while at a fixed arrival
    # rate a cap changes each request's energy: the finding names both, one reading per point
    caps = pl.DataFrame(
        {
            "cap_w": [350.0, 300.0, 250.0, 350.0],
            "status": ["ok", "ok", "ok", "ok"],
            "j_per_request": [1430.0, 1250.0, 1042.0, 1429.0],
            "saturated": [0.0, 0.0, 1.0, 0.0],
        }
    )
    (found,) = serving.serving_load_findings(caps, lambda r: f"{r['cap_w']:g} W")
    assert found.code == "serving_answer" and found.hint is None
    assert "J/request: 350 W 1429 J; 300 W 1250 J; 250 W 1042 J" in found.message
    assert "saturated at 250 W: their figures are the server's capacity" in found.message
    # the least per request among the points that kept up (250 W saturated); a reading that
    # states no precision is told apart from none
    assert "not saturated: 300 W (1250 J; within noise of it: 350 W)" in found.message
    stated = caps.with_columns(pl.Series("j_per_request_u95_pct", [5.0, 15.0, 1.0, 5.0]))
    (told,) = serving.serving_load_findings(stated, lambda r: f"{r['cap_w']:g} W")
    assert "300 W (1250 J ±15.0%; within noise of it: 350 W)" in told.message
    apart = stated.with_columns(pl.Series("j_per_request_u95_pct", [1.0, 1.0, 1.0, 1.0]))
    (sure,) = serving.serving_load_findings(apart, lambda r: f"{r['cap_w']:g} W")
    assert "not saturated: 300 W (1250 J ±1.0%);" in sure.message
    # another load's run has no such column: no finding
    assert serving.serving_load_findings(caps.drop("j_per_request"), str) == []
