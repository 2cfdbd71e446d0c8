"""What the measured points said (``sweep/measurement/ledger.py``): each point's last status, the
figures of the points measured ok, what the checks of a point compare it with (never itself), the
local slope of the curve and the best reading so far."""

from __future__ import annotations

import math
from typing import Any

import pytest

from powersweep.sweep.loads.base import LoadRun
from powersweep.sweep.measurement.ledger import PointLedger
from powersweep.sweep.planning.points import SweepPoint
from tests.fakes.fake_chat import request_result


def _ledger_row(
    status: str = "ok", tps_per_w: float = 0.1, power_w: float = 300.0, **kw: Any
) -> dict:
    return {
        "status": status,
        "tps_per_w": tps_per_w,
        "power_w": power_w,
        "tps_per_w_stat_u95_pct": 1.0,
        "narr_tps": 30.0,
        "code_tps": 36.0,
        **kw,
    }


def _prefill_run(t0: float, ttfts: list[float]) -> LoadRun:
    requests = [
        request_result("prefill", t0=t0 + 10.0 * k, ttft_s=ttft, tokens=5)
        for k, ttft in enumerate(ttfts)
    ]
    return LoadRun(requests=requests, windows=[("prefill", t0, t0 + 10.0 * len(ttfts))])


def test_an_ok_point_keeps_its_reading_figures_and_ratio() -> None:
    ledger = PointLedger()
    point = SweepPoint(300.0)
    ledger.record(point, _ledger_row(tps_per_w=0.1, power_w=298.0), LoadRun())
    assert ledger.status == {point.key: "ok"}
    assert ledger.readings[point.key].tps_per_w == 0.1
    assert ledger.readings[point.key].stat_u95_rel == pytest.approx(0.01)
    assert ledger.figures[point.key] == pytest.approx((29.8, 298.0))
    assert ledger.ratios[point.key] == pytest.approx(1.2)
    assert ledger.failed() == []


def test_a_point_measured_again_and_failed_loses_its_figures() -> None:
    ledger = PointLedger()
    point = SweepPoint(300.0)
    ledger.record(point, _ledger_row(), _prefill_run(0.0, [0.4]))
    ledger.record(point, _ledger_row("failed"), LoadRun())
    assert ledger.status == {point.key: "failed"}
    assert (ledger.readings, ledger.figures, ledger.ratios) == ({}, {}, {})
    assert ledger.prefill_s_per_token == {} and ledger.prefill_by_rank == {}
    assert ledger.failed() == [point]


def test_a_point_without_a_finite_figure_keeps_no_reading() -> None:
    ledger = PointLedger()
    ledger.record(SweepPoint(300.0), _ledger_row(tps_per_w=math.nan, code_tps=math.nan), LoadRun())
    assert ledger.readings == {} and ledger.figures == {} and ledger.ratios == {}


def test_prefill_figures_by_position_and_a_suspect_points_ranks() -> None:
    ledger = PointLedger()
    ok, suspect = SweepPoint(300.0), SweepPoint(250.0)
    ledger.record(ok, _ledger_row(), _prefill_run(0.0, [0.4, 0.8, 1.2]))
    ledger.record(suspect, _ledger_row("suspect"), _prefill_run(100.0, [2.0]))
    # 40 prompt tokens each: the median time to first token per prompt token
    assert ledger.prefill_s_per_token == {300.0: pytest.approx(0.02)}
    assert ledger.prefill_by_rank == {
        300.0: {0: pytest.approx(0.01), 1: pytest.approx(0.02), 2: pytest.approx(0.03)},
        250.0: {0: pytest.approx(0.05)},
    }


def test_the_history_of_a_point_leaves_the_point_itself_out() -> None:
    ledger = PointLedger()
    a, b = SweepPoint(300.0), SweepPoint(250.0)
    ledger.record(a, _ledger_row(code_tps=33.0), _prefill_run(0.0, [0.4]))
    ledger.record(b, _ledger_row(code_tps=39.0), _prefill_run(100.0, [0.8]))
    history = ledger.history(a)
    assert history.ratios == (pytest.approx(1.3),)
    assert history.prefill_s_per_token == {250.0: pytest.approx(0.02)}
    assert set(history.prefill_by_rank) == {250.0}
    assert history.position == 300.0
    assert len(ledger.history(SweepPoint(200.0)).ratios) == 2


def test_the_local_slope_is_between_the_two_nearest_points_measured_ok() -> None:
    ledger = PointLedger()
    assert math.isnan(ledger.local_slope(SweepPoint(300.0)))
    ledger.record(SweepPoint(300.0), _ledger_row(tps_per_w=0.1, power_w=300.0), LoadRun())
    assert math.isnan(ledger.local_slope(SweepPoint(280.0)))  # one point: no slope
    ledger.record(SweepPoint(250.0), _ledger_row(tps_per_w=0.112, power_w=250.0), LoadRun())
    ledger.record(SweepPoint(150.0), _ledger_row(tps_per_w=0.13, power_w=150.0), LoadRun())
    expected = (math.log(30.0) - math.log(28.0)) / 50.0
    assert ledger.local_slope(SweepPoint(290.0)) == pytest.approx(expected)
    assert math.isnan(ledger.local_slope(SweepPoint()))  # no position on the axis
    # a plateau's neighbour draws as much: the next point off it tells the slope
    ledger.record(SweepPoint(310.0), _ledger_row(tps_per_w=30.0 / 301.0, power_w=301.0), LoadRun())
    off = (math.log(30.0) - math.log(28.0)) / (301.0 - 250.0)
    assert ledger.local_slope(SweepPoint(312.0)) == pytest.approx(off)


def test_nearest_figures_and_best_other_leave_the_point_out() -> None:
    ledger = PointLedger()
    a, b, c = SweepPoint(300.0), SweepPoint(250.0), SweepPoint(200.0)
    assert ledger.nearest_figures(a) is None and ledger.best_other(a) is None
    ledger.record(a, _ledger_row(tps_per_w=0.1, power_w=300.0), LoadRun())
    ledger.record(b, _ledger_row(tps_per_w=0.12, power_w=250.0), LoadRun())
    ledger.record(c, _ledger_row(tps_per_w=0.11, power_w=200.0), LoadRun())
    assert ledger.nearest_figures(a) == pytest.approx((30.0, 250.0))
    assert ledger.nearest_figures(SweepPoint(210.0)) == pytest.approx((22.0, 200.0))
    best = ledger.best_other(b)
    assert best is not None and best.tps_per_w == 0.11
    best_for_a = ledger.best_other(a)
    assert best_for_a is not None and best_for_a.tps_per_w == 0.12
