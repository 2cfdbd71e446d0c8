"""The driver's undervolt wiring: the stability check it builds (the loop itself runs end to end
in tests/integration; SweepPlan is tested in test_sweep_plan.py)."""

from __future__ import annotations

from typing import Any

import pytest

from powersweep.errors import PowersweepError
from powersweep.sweep.driver import Sweep
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.planning.undervolt_steps import UndervoltPlan
from powersweep.sweep.sweep_plan import SweepPlan
from powersweep.sweep.verdict import FaultLog
from tests.fakes.fake_gpu import FakeGpu

PLAN = SweepPlan(
    caps_w=(300.0,),
    clock_points=(SweepPoint(300.0, sm_offset_mhz=0.0),),
    undervolt=UndervoltPlan(300.0, None, (), 30.0, 300.0, 2, 120.0),
)


class _Clock:
    def now(self) -> float:
        return 0.0


def _bare_sweep(
    client: Any, gpus: list[FakeGpu], plan: SweepPlan = PLAN
) -> tuple[Sweep, list[str]]:
    said: list[str] = []
    sweep = object.__new__(Sweep)
    sweep.plan, sweep.client, sweep.gpus = plan, client, gpus  # type: ignore[assignment]
    sweep.clock, sweep.warn = _Clock(), said.append  # type: ignore[assignment]
    sweep._faults = FaultLog()  # type: ignore[attr-defined]
    return sweep, said


class _Greedy:
    async def greedy(self, prompt: str, **kw: Any) -> Any:
        raise AssertionError("not sent while the check is built")


def test_only_an_undervolt_plan_gets_a_stability_check() -> None:
    sweep, _ = _bare_sweep(_Greedy(), [FakeGpu()], SweepPlan(caps_w=(300.0,)))
    assert sweep._stability_check(None) is None


def test_a_client_that_cannot_send_greedy_probes_is_refused() -> None:
    sweep, _ = _bare_sweep(object(), [FakeGpu()])
    with pytest.raises(PowersweepError, match="cannot send greedy probes"):
        sweep._stability_check(4096)


def test_cards_that_cannot_report_xids_are_said_and_counted() -> None:
    blind, seeing = FakeGpu(index=0), FakeGpu(index=1)
    blind.xids = None
    sweep, said = _bare_sweep(_Greedy(), [blind, seeing])
    check = sweep._stability_check(4096)
    assert check is not None and check.xids_readable == [False, True]
    assert said == [
        "GPU 0 cannot report Xid errors: each step is checked by its answers, the card's state "
        "and TPS"
    ]
    (fault,) = sweep._faults.to_list()  # type: ignore[attr-defined]
    assert fault["kind"] == "xid_unreadable"


def test_a_tps_the_card_does_not_drive_is_not_judged_and_that_is_said() -> None:
    sweep, said = _bare_sweep(_Greedy(), [FakeGpu()])
    check = sweep._stability_check(4096, tps_follows_card=False)
    assert check is not None and not check.check_stretch
    assert said == [
        "the TPS comes from a server the simulated card does not drive: no step is judged by "
        "its TPS (clock stretching)"
    ]
    assert [f["kind"] for f in sweep._faults.to_list()] == ["stretch_unchecked"]  # type: ignore[attr-defined]


def test_stale_bytes_the_transport_closed_are_a_fault_the_user_reads() -> None:
    # issue 46: a server's unasked-for second response is a fault, said, never data
    class _Stale:
        stale_connections = 2

    sweep, said = _bare_sweep(_Stale(), [FakeGpu()])
    sweep._stale_bytes()
    (fault,) = sweep._faults.to_list()
    assert fault["kind"] == "stale_bytes" and fault["count"] == 2
    assert said == [fault["examples"][0]] and "closed unread" in said[0]
    clean, quiet = _bare_sweep(object(), [FakeGpu()])
    clean._stale_bytes()
    assert clean._faults.to_list() == [] and quiet == []
