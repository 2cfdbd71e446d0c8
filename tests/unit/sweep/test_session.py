"""The pure parts of one sweep session (``sweep/session.py``): root before any change, when a
restore journal is needed, the plan a resumed or observe-only sweep measures, and the budget of a
request without a window. The session itself runs end to end in the integration tests."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from powersweep.clock import ManualClock
from powersweep.errors import PowersweepError
from powersweep.sweep import session
from powersweep.sweep.loads.base import REQUEST_MARGIN_S
from powersweep.sweep.options import (
    LoadMode,
    LoadOptions,
    PointOptions,
    SafetyOptions,
    Strategy,
    SweepOptions,
)
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.resume import ResumeState
from powersweep.sweep.rig import Rig


def test_a_real_sweep_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session.os, "geteuid", lambda: 1000)
    with pytest.raises(PowersweepError) as info:
        session.require_root()
    assert info.value.exit_code == 2
    assert str(info.value).startswith("changing GPU power limits needs root: re-run with sudo")
    monkeypatch.setattr(session.os, "geteuid", lambda: 0)
    session.require_root()


@pytest.mark.parametrize(
    ("safety", "outlive", "needed"),
    [
        (SafetyOptions(), True, True),
        (SafetyOptions(), False, False),  # a simulated rig without --sim-state
        (SafetyOptions(dry_run=True), True, False),
        (SafetyOptions(observe_only=True), True, False),
    ],
)
def test_a_journal_is_kept_only_for_limits_that_outlive_the_process(
    safety: SafetyOptions, outlive: bool, needed: bool
) -> None:
    rig = Rig(backend=None, clock=ManualClock(), limits_outlive_process=outlive)  # type: ignore[arg-type]
    assert session.needs_journal(SweepOptions(safety=safety), rig) is needed


def _adaptive(**safety: Any) -> SweepOptions:
    return SweepOptions(
        points=PointOptions(strategy=Strategy.ADAPTIVE), safety=SafetyOptions(**safety)
    )


def test_a_resumed_or_observe_only_sweep_measures_every_point_left() -> None:
    fresh = session._sweep_plan(_adaptive(), [300.0, 250.0], None)
    assert fresh.points.strategy == Strategy.ADAPTIVE
    assert fresh.caps_w == (300.0, 250.0) and fresh.clock_points == ()
    observe = session._sweep_plan(_adaptive(observe_only=True), [300.0], None)
    assert observe.points.strategy == Strategy.DENSE
    resumed = ResumeState({}, None, [250.0], [300.0])  # type: ignore[arg-type]
    plan = session._sweep_plan(_adaptive(), [250.0], resumed, [SweepPoint(250.0, 1500.0)])
    assert plan.points.strategy == Strategy.DENSE
    assert plan.clock_points == (SweepPoint(250.0, 1500.0),)


def test_a_request_without_a_window_may_take_twice_the_longest_window() -> None:
    options = SweepOptions()  # a 10 s window, prompts sized for 2.5 s of prefill
    assert session._request_budget_s(options) == 2 * 10.0 + REQUEST_MARGIN_S
    prefill = dataclasses.replace(
        options, load=LoadOptions(mode=LoadMode.PREFILL_HEAVY, target_prefill_s=60.0)
    )
    assert session._request_budget_s(prefill) == 2 * 60.0 + REQUEST_MARGIN_S
