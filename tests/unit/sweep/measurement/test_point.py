"""The measurement protocol (``sweep/measurement/point.py``) on fake cards and a fake load.

Each test measures one or a few points through :class:`PointMeasurer` as the driver does (the
sampler ticking on the virtual clock's loop), with no server and no HTTP: set and verify, settle
under the point's load, the bounded thermal wait, the load in rounds until the point is precise
or separated, its check, measured once more if disturbed, ``suspect``, the rows.
"""

from __future__ import annotations

import math

import pytest

from powersweep.errors import PowersweepError
from powersweep.runformat import CONFIRM_REASON
from powersweep.sweep.measurement.point import DISCARDED
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.sampling.windows import (
    STOP_FAILED,
    STOP_MAX,
    STOP_PRECISE,
    STOP_SEPARATED,
    WindowPolicy,
)
from tests.fakes.fake_bench import Bench

POLICY = WindowPolicy(min_s=3.0, max_s=10.0, precision_pct=0.5)


def assert_nothing_else_runs_while_measured(bench: Bench) -> None:
    """The load that keeps the card busy between windows was stopped before each window."""
    for call in bench.load.calls:
        for span in bench.load.busy:
            if span.start_s <= call.started_s:
                assert span.end_s is not None and span.end_s <= call.started_s, (span, call)


def test_a_refused_cap_is_rejected_and_no_load_runs() -> None:
    bench = Bench(gpus=2, gpu={"refuse_below_w": 200.0}, windows=POLICY)
    (row,) = bench.measure(SweepPoint(150.0))
    assert row["status"] == "rejected"
    assert "fake GPU 0 kept 350 W" in row["error"] and "fake GPU 1" in row["error"]
    assert bench.load.calls == [] and bench.load.busy == []  # not measured, not even settled
    assert bench.writer.caps == [row]
    assert any("cap 150 W rejected" in w for w in bench.warnings)
    assert all(g.limit_w == 350.0 for g in bench.gpus)


def test_a_precise_point_stops_after_its_first_round_with_every_prompt() -> None:
    bench = Bench(windows=POLICY, load={"noise_pct": 0.1})
    (row,) = bench.measure(SweepPoint(250.0))
    assert row["status"] == "ok"
    assert (row["rounds"], row["stop_reason"]) == (1, STOP_PRECISE)
    assert row["tps_per_w_stat_u95_pct"] <= POLICY.precision_pct
    (call,) = bench.load.calls
    assert (call.cap_w, call.metric_only, call.window_s) == (250.0, False, POLICY.min_s)
    # the row as written, and as the driver and the progress are told it
    assert bench.writer.caps == [row]
    assert [(p, r["status"]) for p, r in bench.points] == [(SweepPoint(250.0), "ok")]
    assert [(p.index, p.total, p.status) for p in bench.progress] == [(1, 1, "ok")]
    assert bench.gpus[0].limit_w == 250.0


def test_a_noisy_point_measures_in_rounds_up_to_the_maximum_window() -> None:
    bench = Bench(windows=POLICY, load={"noise_pct": 5.0})
    (row,) = bench.measure(SweepPoint(250.0))
    calls = bench.load.calls
    assert row["status"] == "ok"
    assert (row["rounds"], row["stop_reason"]) == (len(calls), STOP_MAX)
    assert len(calls) >= 2
    # the first round runs every prompt, the next ones the metric's only
    assert [c.metric_only for c in calls] == [False] + [True] * (len(calls) - 1)
    # the metric's windows of all rounds together reach the maximum and never pass it
    assert sum(c.window_s for c in calls) == pytest.approx(POLICY.max_s)
    assert row["tps_per_w_stat_u95_pct"] > POLICY.precision_pct


def test_a_point_clearly_apart_from_the_best_stops_as_separated() -> None:
    def noise(cap: float) -> float:
        return 0.1 if cap < 200 else 3.0

    # TPS/W falls with the cap: 150 W is the best; 300 W reads 30% under it, to within 2-3%
    bench = Bench(windows=POLICY, load={"noise_pct": noise})
    best, apart = bench.measure(SweepPoint(150.0), SweepPoint(300.0))
    assert best["stop_reason"] == STOP_PRECISE
    assert (apart["rounds"], apart["stop_reason"]) == (1, STOP_SEPARATED)
    # alone, the same point is not precise: it measures to the maximum
    (alone,) = Bench(windows=POLICY, load={"noise_pct": noise}).measure(SweepPoint(300.0))
    assert alone["stop_reason"] == STOP_MAX


def test_a_failed_load_is_failed_after_one_round_and_not_checked() -> None:
    bench = Bench(windows=POLICY)
    bench.load.fail(250.0)
    failed, ok = bench.measure(SweepPoint(250.0), SweepPoint(240.0))
    assert failed["status"] == "failed"
    assert (failed["rounds"], failed["stop_reason"]) == (1, STOP_FAILED)
    assert "fake failure at 250 W" in failed["error"]
    assert len(bench.load.calls_at(250.0)) == 1  # a failure is not measured again here
    assert bench.load.checks == [240.0]
    assert ok["status"] == "ok"
    assert bench.measurer.ledger.failed() == [SweepPoint(250.0)]


def test_points_failed_in_a_row_stop_the_sweep() -> None:
    bench = Bench(windows=POLICY, max_failed=2)
    for cap in (250.0, 230.0, 220.0):
        bench.load.fail(cap)
    # an ok point between two failures starts the count again
    rows = bench.measure(SweepPoint(250.0), SweepPoint(240.0), SweepPoint(230.0))
    assert [r["status"] for r in rows] == ["failed", "ok", "failed"]
    with pytest.raises(PowersweepError, match="2 caps in a row failed"):
        bench.measure(SweepPoint(220.0))


def test_a_disturbed_point_is_measured_once_more_and_the_first_attempt_discarded() -> None:
    bench = Bench(windows=POLICY)
    bench.load.disturb(250.0, times=1)
    (row,) = bench.measure(SweepPoint(250.0))
    assert row["status"] == "ok"
    attempts = [c for c in bench.load.calls_at(250.0) if not c.metric_only]
    assert len(attempts) == 2 and bench.load.checks == [250.0, 250.0]
    assert bench.faults.to_list()[0]["kind"] == "remeasured"
    # the doubtful attempt stays on record, labelled so no figure uses it
    discarded, _ = bench.writer.samples[0]
    assert discarded and all(r.phase == DISCARDED for r in discarded)
    assert bench.writer.caps == [row]
    assert_nothing_else_runs_while_measured(bench)


def test_a_point_still_disturbed_is_suspect_and_never_measured_a_third_time() -> None:
    bench = Bench(windows=POLICY)
    bench.load.disturb(250.0)  # every time
    suspect, after = bench.measure(SweepPoint(250.0), SweepPoint(240.0))
    assert suspect["status"] == "suspect"
    assert suspect["error"] == "measured twice, still disturbed: fake disturbance at 250 W"
    assert [c.metric_only for c in bench.load.calls_at(250.0)].count(False) == 2
    assert bench.load.checks.count(250.0) == 2
    assert {f["kind"] for f in bench.faults.to_list()} == {"remeasured", "suspect"}
    assert after["status"] == "ok"
    assert bench.measurer.ledger.status[SweepPoint(250.0).key] == "suspect"


def test_the_journal_check_comes_before_every_setting_change() -> None:
    bench = Bench(gpus=2, windows=POLICY, gpu={"refuse_below_w": 200.0})
    bench.measure(SweepPoint(250.0), SweepPoint(150.0), SweepPoint(240.0))
    seen = [e[:2] for e in bench.events]
    point = [("before_change",), ("set_power_limit", 0), ("set_power_limit", 1)]
    assert seen == point * 3


def test_observing_only_changes_nothing() -> None:
    bench = Bench(gpus=2, windows=POLICY, observe_only=True)
    (row,) = bench.measure(SweepPoint(None))
    assert row["status"] == "ok" and row["cap_w"] == 350.0  # the limit in force
    assert bench.events == []
    assert all(g.calls["set_power_limit"] == 0 for g in bench.gpus)


def test_each_point_settles_under_load_before_it_is_measured() -> None:
    bench = Bench(windows=POLICY, settle_s=2.0, settle_mode="fixed")
    first, second = bench.measure(SweepPoint(250.0), SweepPoint(240.0))
    assert first["settle_s"] == second["settle_s"] == 2.0
    set_at = {e[2]: e[3] for e in bench.events if e[0] == "set_power_limit"}
    for cap in (250.0, 240.0):
        (measured,) = bench.load.calls_at(cap)
        assert measured.started_s - set_at[cap] >= 2.0 - 1e-9
        # the card is loaded from the set to the first window: it never idles or cools
        assert any(span.covers(set_at[cap], measured.started_s) for span in bench.load.busy)
    assert_nothing_else_runs_while_measured(bench)


def test_the_thermal_wait_is_bounded_on_a_card_that_never_steadies() -> None:
    # 30 °C/min, forever: only the bound ends the wait
    bench = Bench(windows=POLICY, thermal_wait_max_s=20.0, gpu={"heat_c_per_min": 30.0})
    first, near = bench.measure(SweepPoint(250.0), SweepPoint(240.0))
    assert 20.0 - 1e-6 <= first["thermal_wait_s"] <= 20.0 + bench.protocol.measure.sample_interval_s
    assert bench.load.calls_at(250.0)[0].started_s >= 20.0 - 1e-6
    # a point 10 W away waits too: its card has not reached its temperature either (issue 44:
    # nearness to the last point measured is no steadiness)
    assert 20.0 - 1e-6 <= near["thermal_wait_s"] <= 20.0 + bench.protocol.measure.sample_interval_s
    assert first["temp_drift_c_per_min"] == pytest.approx(30.0, rel=0.2)


def test_the_thermal_wait_ends_once_the_temperature_is_steady() -> None:
    bench = Bench(windows=POLICY, thermal_wait_max_s=40.0)
    (row,) = bench.measure(SweepPoint(250.0))
    # judged once the trailing readings fit a slope (three ticks): steady then, well before
    # the bound
    assert 0.0 < row["thermal_wait_s"] < 15.0
    assert math.isfinite(row["temp_drift_c_per_min"])


def test_a_confirm_measurement_runs_the_metric_prompt_only() -> None:
    bench = Bench(windows=POLICY)
    (row,) = bench.measure(SweepPoint(250.0), reason=CONFIRM_REASON)
    assert row["reason"] == CONFIRM_REASON
    assert all(c.metric_only for c in bench.load.calls)
    assert all(confirm for _, confirm in bench.writer.samples)


def test_a_clock_point_whose_card_ignores_its_lock_is_rejected_after_it_is_measured() -> None:
    point = SweepPoint(300.0, 1410.0, 9501.0)
    followed = Bench(windows=POLICY, clock_axis=True)
    (row,) = followed.measure(point)
    assert row["status"] == "ok" and row["sm_clock_mhz"] == 1410.0
    assert followed.gpus[0].sm_lock_mhz == 1410.0
    ignored = Bench(windows=POLICY, clock_axis=True, gpu={"follow_locks": False})
    (row,) = ignored.measure(point)
    assert row["status"] == "rejected"
    assert "SM ran at 1800 MHz under a 1410 MHz lock" in row["error"]
    assert len(ignored.load.calls) == 1  # measured, then judged by its clocks


def test_an_offset_is_never_set_without_its_sm_lock() -> None:
    # issue 45: a raised V/F curve on an unlocked card is an overclock
    from powersweep.sweep.gpu import LockResult
    from powersweep.sweep.offsets import ClockOffsetter

    bench = Bench(clock_axis=True, windows=POLICY)
    (gpu,) = bench.gpus
    bench.measurer.offsetter = ClockOffsetter(bench.gpus, bench.warnings.append)
    gpu.sm_offset_mhz = 60.0  # a step before it set one at the lock it held
    gpu.lock_sm_clock = lambda mhz, min_mhz=None: LockResult(None, False, "locks need root (test)")  # type: ignore[method-assign]
    (row,) = bench.measure(SweepPoint(300.0, 1500.0, None, 90.0))
    assert row["status"] == "rejected"
    assert "the +90 MHz offset was not set without its SM lock (offset 0 instead)" in row["error"]
    assert gpu.sm_offset_mhz == 0.0 and bench.load.calls == []
