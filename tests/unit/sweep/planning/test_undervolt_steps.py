"""The undervolt search's steps: one at a time, bounded, refined on the 15 MHz grid, backed off
in MHz and soaked."""

from __future__ import annotations

import pytest

from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.planning.undervolt_steps import (
    BASELINE,
    MAX_RETRIES,
    REBASE,
    REFERENCE,
    REFINE,
    RETRY,
    SEARCH,
    ResumeFrom,
    UndervoltPlan,
    UndervoltSchedule,
    resume_from,
    snap_lock,
)


def _undervolt_plan(**kw: object) -> UndervoltPlan:
    base = dict(
        cap_w=280.0,
        lock_mhz=None,
        sm_clocks_mhz=(1695.0, 1680.0, 1665.0, 1650.0),
        step_mhz=30.0,
        max_mhz=1000.0,
        margin_mhz=30.0,
        soak_s=120.0,
    )
    base.update(kw)
    return UndervoltPlan(**base)  # type: ignore[arg-type]


def _drive_schedule(
    schedule: UndervoltSchedule,
    stable_up_to: float,
    clock: float = 1690.0,
    status: dict[SweepPoint, str] | None = None,
) -> list:
    """Drive the schedule like the driver: every step up to ``stable_up_to`` is ok."""
    status = {} if status is None else status
    schedule.status_of = status.get
    measured: dict[SweepPoint, dict] = {}
    asked = []
    batch = schedule.next(measured)
    while batch:
        for point, reason in batch:
            asked.append((point, reason))
            offset = point.sm_offset_mhz or 0.0
            ok = point.sm_lock_mhz is None or offset <= stable_up_to
            status[point] = "ok" if ok else "unstable"
            if ok:
                measured[point] = {"sm_clock_mhz": clock}
        batch = schedule.next(measured)
    return asked


def test_baseline_then_reference_then_steps_until_the_first_unstable() -> None:
    s = UndervoltSchedule(_undervolt_plan(), lambda _p: None)
    asked = _drive_schedule(s, stable_up_to=150.0)
    assert asked[0] == (SweepPoint(280.0, sm_offset_mhz=0.0), BASELINE)
    assert asked[1] == (SweepPoint(280.0, 1680.0, None, 0.0), REFERENCE)
    offsets = [p.sm_offset_mhz for p, r in asked[2:]]
    # 30 MHz steps to the first unstable one, then the one grid bin between the edge's two
    assert offsets == [30.0, 60.0, 90.0, 120.0, 150.0, 180.0, 165.0]
    assert [r for _, r in asked[2:]] == [SEARCH] * 6 + [REFINE]
    assert s.last_stable_mhz == 150.0 and s.first_unstable_mhz == 165.0
    assert "unstable" in s.ended


def test_a_coarse_step_is_refined_in_15_mhz_bins_and_the_margin_is_mhz() -> None:
    # issue 45: --offset-step 120 on a card stable to +249 found +240 and answered +0 (two
    # 120 MHz steps back); in MHz it refines to +240, then answers 30 MHz below
    s = UndervoltSchedule(_undervolt_plan(step_mhz=120.0), lambda _p: None)
    status: dict[SweepPoint, str] = {}
    asked = _drive_schedule(s, stable_up_to=249.0, status=status)
    offsets = [p.sm_offset_mhz for p, _ in asked[2:]]
    assert offsets == [120.0, 240.0, 360.0, 255.0]
    assert s.last_stable_mhz == 240.0 and s.first_unstable_mhz == 255.0
    assert s.refined == (240.0, 360.0)
    soak = s.soak()
    assert soak is not None and soak.sm_offset_mhz == 210.0
    s.soaked("ok")
    record = s.record()
    assert record is not None and record["chosen_mhz"] == 210.0
    assert record["margin_mhz"] == 30.0 and record["refined_between_mhz"] == [240.0, 360.0]


def test_the_refinement_climbs_every_bin_below_the_first_unstable_step() -> None:
    s = UndervoltSchedule(_undervolt_plan(step_mhz=120.0), lambda _p: None)
    asked = _drive_schedule(s, stable_up_to=350.0)
    offsets = [p.sm_offset_mhz for p, _ in asked[2:]]
    assert offsets == [120.0, 240.0, 360.0, 255.0, 270.0, 285.0, 300.0, 315.0, 330.0, 345.0]
    assert s.last_stable_mhz == 345.0 and s.first_unstable_mhz == 360.0
    assert len(asked) <= _undervolt_plan(step_mhz=120.0).max_points


def test_the_lock_given_is_kept_and_the_measured_clock_is_snapped() -> None:
    s = UndervoltSchedule(_undervolt_plan(lock_mhz=1500.0), lambda _p: None)
    asked = _drive_schedule(s, stable_up_to=0.0)
    assert asked[1][0].sm_lock_mhz == 1500.0
    clocks = (1695.0, 1680.0, 1665.0)
    assert snap_lock(1672.0, clocks) == 1665.0  # between two bins: the lower
    assert snap_lock(1694.5, clocks) == 1695.0  # a reading's rounding
    assert snap_lock(1600.0, clocks) == 1665.0  # below every listed clock: the lowest
    assert snap_lock(1500.0, ()) == 1500.0
    assert snap_lock(1514.0, ()) == 1500.0
    assert snap_lock(float("nan"), (1695.0,)) is None


def test_the_soak_backs_off_and_a_failed_soak_backs_off_by_the_margin_again() -> None:
    s = UndervoltSchedule(_undervolt_plan(), lambda _p: None)
    _drive_schedule(s, stable_up_to=150.0)
    first = s.soak()
    assert first == SweepPoint(280.0, 1680.0, None, 120.0)
    assert s.soak() == first  # asked again before its status: the same soak
    s.soaked("unstable")
    assert s.soak() == SweepPoint(280.0, 1680.0, None, 90.0)
    s.soaked("ok")
    assert s.soak() is None
    record = s.record()
    assert record is not None
    assert record["chosen_mhz"] == 90.0 and record["last_stable_mhz"] == 150.0
    assert record["first_unstable_mhz"] == 165.0
    assert [x["status"] for x in record["soaks"]] == ["unstable", "ok"]


def test_failed_soaks_end_at_offset_zero_without_soaking_it() -> None:
    s = UndervoltSchedule(_undervolt_plan(margin_mhz=0.0), lambda _p: None)
    _drive_schedule(s, stable_up_to=30.0)
    n = 0
    while (p := s.soak()) is not None:
        n += 1
        assert p.sm_offset_mhz and p.sm_offset_mhz > 0
        s.soaked("unstable")
    assert n == 2  # 30 (45 failed its refinement), then 15: one grid bin a soak at zero margin
    assert s.chosen_mhz == 0.0
    assert n <= _undervolt_plan(margin_mhz=0.0).max_soaks


def test_without_a_soak_a_measured_step_is_the_answer_and_an_unmeasured_one_is_measured() -> None:
    s = UndervoltSchedule(_undervolt_plan(soak_s=0.0), lambda _p: None)
    status: dict[SweepPoint, str] = {}
    _drive_schedule(s, stable_up_to=150.0, status=status)
    assert s.soak() is None and s.chosen_mhz == 120.0  # a 30 MHz step measured it
    s = UndervoltSchedule(_undervolt_plan(soak_s=0.0, margin_mhz=20.0), lambda _p: None)
    status = {}
    _drive_schedule(s, stable_up_to=150.0, status=status)
    # 150 - 20 = 130 lands on the grid at 120, measured; 45 would not be
    assert s.soak() is None and s.chosen_mhz == 120.0
    s = UndervoltSchedule(_undervolt_plan(soak_s=0.0, margin_mhz=15.0), lambda _p: None)
    status = {}
    _drive_schedule(s, stable_up_to=150.0, status=status)
    soak = s.soak()  # 135 MHz: no step measured it, so it is measured before it is the answer
    assert soak is not None and soak.sm_offset_mhz == 135.0 and s.chosen_mhz is None


def test_the_search_stops_at_the_highest_offset() -> None:
    s = UndervoltSchedule(_undervolt_plan(max_mhz=100.0), lambda _p: None)
    asked = _drive_schedule(s, stable_up_to=1e9)
    assert [p.sm_offset_mhz for p, _ in asked[1:]] == [0.0, 30.0, 60.0, 90.0]
    assert "highest offset" in s.ended
    assert s.first_unstable_mhz is None


@pytest.mark.parametrize("status", ["failed", "rejected", None])
def test_a_reference_that_did_not_hold_ends_the_search(status: str | None) -> None:
    seen: dict[SweepPoint, str | None] = {}
    s = UndervoltSchedule(_undervolt_plan(lock_mhz=1500.0), seen.get)
    s.next({})
    ((ref, _),) = s.next({})
    if status is not None:
        seen[ref] = status
    assert s.next({}) == []
    assert "offset 0 itself" in s.ended
    assert s.soak() is None


def test_a_failed_baseline_without_a_lock_ends_with_a_reason() -> None:
    s = UndervoltSchedule(_undervolt_plan(), lambda _p: None)
    s.next({})
    assert s.next({}) == []
    assert "--sm-clocks" in s.ended


def test_a_step_the_world_may_have_failed_is_measured_once_more() -> None:
    # issue 45: TPS down at the locked clock with every answer identical is read against offset
    # 0 read again; a step that failed on the server's errors is measured once more
    why: dict[float, str] = {60.0: "stretch", 120.0: "server"}
    status: dict[SweepPoint, str] = {}
    s = UndervoltSchedule(
        _undervolt_plan(), status.get, lambda p: why.get(p.sm_offset_mhz or 0.0, "")
    )
    measured: dict[SweepPoint, dict] = {}
    asked: list[tuple[SweepPoint, str]] = []
    first_time = {60.0, 120.0}
    batch = s.next(measured)
    while batch:
        for point, reason in batch:
            asked.append((point, reason))
            offset = point.sm_offset_mhz or 0.0
            fails = offset in first_time or offset > 150.0
            first_time.discard(offset)
            status[point] = "unstable" if fails and point.sm_lock_mhz else "ok"
            if not fails:
                measured[point] = {"sm_clock_mhz": 1690.0}
        batch = s.next(measured)
    steps = [(p.sm_offset_mhz, r) for p, r in asked[2:]]
    assert steps[:6] == [
        (30.0, SEARCH),
        (60.0, SEARCH),
        (0.0, REBASE),
        (60.0, RETRY),
        (90.0, SEARCH),
        (120.0, SEARCH),
    ]
    assert steps[6:8] == [(120.0, RETRY), (150.0, SEARCH)]
    assert s.last_stable_mhz == 150.0
    assert s.retried == [(60.0, "stretch"), (120.0, "server")]
    record = s.record()
    assert record is not None and record["retried"][0] == {"sm_offset_mhz": 60.0, "why": "stretch"}


def test_retries_are_once_a_step_and_bounded_a_search() -> None:
    # every step fails the first time and holds the second: three are retried, the fourth ends
    # the coarse search
    status: dict[SweepPoint, str] = {}
    s = UndervoltSchedule(_undervolt_plan(), status.get, lambda _p: "server")
    measured: dict[SweepPoint, dict] = {}
    asked = []
    seen: set[float] = set()
    batch = s.next(measured)
    while batch:
        for point, reason in batch:
            offset = point.sm_offset_mhz or 0.0
            asked.append((offset, reason))
            bad = point.sm_lock_mhz is not None and offset > 0 and offset not in seen
            seen.add(offset)
            status[point] = "unstable" if bad else "ok"
            if not bad:
                measured[point] = {"sm_clock_mhz": 1690.0}
        batch = s.next(measured)
    assert asked[2:9] == [
        (30.0, SEARCH),
        (30.0, RETRY),
        (60.0, SEARCH),
        (60.0, RETRY),
        (90.0, SEARCH),
        (90.0, RETRY),
        (120.0, SEARCH),
    ]
    assert len(s.retried) == MAX_RETRIES and s.first_unstable_mhz == 105.0
    assert s.last_stable_mhz == 90.0  # +105, refined, failed too: a fourth retry is not taken


def _csv_row(offset: float, status: str = "ok", reason: str = "search") -> dict[str, str]:
    return {
        "sm_lock_mhz": "1680",
        "sm_offset_mhz": f"{offset:g}",
        "status": status,
        "reason": reason,
    }


def test_an_interrupted_search_resumes_from_its_rows_and_its_offset_in_flight() -> None:
    rows = [
        {"sm_lock_mhz": "", "sm_offset_mhz": "0", "status": "ok", "reason": "baseline"},
        _csv_row(0.0, reason="reference"),
        _csv_row(30.0),
        _csv_row(60.0),
    ]
    record = {"sm_lock_mhz": 1680.0, "in_flight": {"sm_offset_mhz": 90.0, "reason": "search"}}
    resume = resume_from(record, rows)
    assert resume == ResumeFrom(1680.0, 60.0, 90.0, killed_at_mhz=90.0)
    # its row written, the offset in flight was answered: judged by it
    answered = resume_from(record, [*rows, _csv_row(90.0)])
    assert answered == ResumeFrom(1680.0, 90.0, None, None)
    # an unstable row stands; no lock yet: start again
    assert resume_from({"sm_lock_mhz": 1680.0}, [*rows, _csv_row(90.0, "unstable")]) == (
        ResumeFrom(1680.0, 60.0, 90.0, None)
    )
    assert resume_from({"sm_lock_mhz": None}, rows) is None


def test_a_resumed_search_takes_offset_zero_again_then_goes_on_between_its_edges() -> None:
    plan = _undervolt_plan(resume=ResumeFrom(1680.0, 60.0, 90.0, 90.0))
    s = UndervoltSchedule(plan, lambda _p: None)
    asked = _drive_schedule(s, stable_up_to=75.0)
    assert [(p.sm_offset_mhz, r) for p, r in asked] == [(0.0, REFERENCE), (75.0, REFINE)]
    assert s.last_stable_mhz == 75.0 and s.first_unstable_mhz == 90.0
    record = s.record()
    assert record is not None and record["resumed_from"]["killed_at_mhz"] == 90.0


def test_the_likely_points_are_a_search_stable_to_the_top_and_bound_it_below_the_most() -> None:
    plan = _undervolt_plan(step_mhz=120.0, max_mhz=360.0)
    s = UndervoltSchedule(plan, lambda _p: None)
    asked = _drive_schedule(
        s, stable_up_to=360.0
    )  # every coarse step holds: no edge, no grid steps
    # the baseline, offset 0 and three coarse steps, then the grid steps and one soak counted
    assert len(asked) == 5 and plan.likely_points == 5 + plan.refine_steps + 1
    assert plan.likely_points <= plan.max_points
