"""Before anything changes (``sweep/plan.py``), on fake cards: the dry run's plan (the cards, the
caps or clock points, the estimates) as the CLI prints it, built without changing anything, and
where the restore journal goes."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from powersweep.clock import ScaledClock
from powersweep.errors import UsageError
from powersweep.sweep.gpu import PowerEnvelope
from powersweep.sweep.options import (
    Axis,
    OutputOptions,
    PointOptions,
    SafetyOptions,
    ServerOptions,
    SweepOptions,
)
from powersweep.sweep.plan import DryRun, dry_run, journal_for
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.rig import Rig
from tests.fakes.fake_gpu import FakeGpu


def _plan_options(**points: Any) -> SweepOptions:
    safety = points.pop("safety", SafetyOptions())
    return SweepOptions(points=PointOptions(**points), safety=safety)


def test_the_journal_goes_to_the_state_dir_given_or_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = dataclasses.replace(_plan_options(), safety=SafetyOptions(state_dir=tmp_path / "given"))
    assert journal_for(given).path.parent == tmp_path / "given"
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "env"))
    assert journal_for(_plan_options()).path.parent == tmp_path / "env"


def _dry(**kw: Any) -> DryRun:
    base: dict[str, Any] = dict(
        gpus=(
            {
                "index": 0,
                "name": "Fake GPU",
                "uuid": "GPU-fake-0",
                "min_limit_w": 100.0,
                "max_limit_w": 400.0,
                "default_limit_w": 350.0,
                "original_limit_w": 320.0,
            },
        ),
        selection="the only GPU",
        envelope=PowerEnvelope(100.0, 350.0, 400.0, 320.0),
        caps_w=(400.0, 350.0, 300.0),
        estimated_wall_s=125.0,
        journal_path=Path("/state/journal.json"),
    )
    return DryRun(**{**base, **kw})


def test_the_dry_run_lines_of_a_power_sweep() -> None:
    assert _dry(estimated_run_s=125.0, bound_run_s=59.4).lines() == [
        "dry run: nothing will be changed",
        "GPU 0: Fake GPU (GPU-fake-0), limits 100-400 W, default 350 W, now 320 W",
        "GPUs picked: 0 (the only GPU)",
        "envelope (GPU): 100-400 W",
        "caps (3, W per GPU): 400, 350, 300",
        "estimated wall time: 2 min 05 s",
        "at most: 59 s of run time (every point measured to --target-cap-seconds, every wait "
        "to its bound)",
        "restore journal: /state/journal.json",
    ]


def test_the_dry_run_lines_of_a_clock_sweep_on_virtual_time() -> None:
    points = (
        SweepPoint(None, 1500.0, 9501.0),
        SweepPoint(None, 900.0, 9501.0),
        SweepPoint(None, 900.0, 5001.0),
    )
    lines = _dry(
        points=points,
        axis="grid",
        caps_w=(320.0,),
        estimated_wall_s=None,
        estimated_run_s=600.0,
        journal_path=None,
    ).lines()
    assert lines[4:] == [
        "axis: grid, 3 points under a 320 W (in force) power limit",
        "SM locks (MHz): 900, 1500",
        "memory locks (MHz): 9501, 5001",
        "estimated run time: 10 min 00 s (virtual time: the simulated run takes only the CPU it "
        "needs)",
    ]
    held = _dry(points=(SweepPoint(250.0, None, 9501.0),), axis="mem-clock").lines()
    assert held[4].startswith("axis: mem-clock, 1 ")
    assert held[4].endswith(" under a 250 W held (--cap) power limit")
    assert "SM locks (MHz): none (unlocked)" in held


class _Backend:
    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus

    def device_count(self) -> int:
        return len(self.gpus)

    def gpu(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def close(self) -> None:
        pass


def _rigs(gpus: list[FakeGpu], *, outlive: bool) -> Any:
    @contextlib.contextmanager
    def build(options: SweepOptions) -> Iterator[Rig]:
        yield Rig(backend=_Backend(gpus), clock=ScaledClock(1.0), limits_outlive_process=outlive)

    return build


def test_a_dry_run_plans_without_changing_anything(tmp_path: Path) -> None:
    gpu = FakeGpu(0, limit_w=320.0)
    options = SweepOptions(
        points=PointOptions(step_size_w=100.0),
        server=ServerOptions(url="http://10.255.255.1:8000"),
        safety=SafetyOptions(state_dir=tmp_path),
        output=OutputOptions(out=tmp_path / "runs"),
    )
    plan = dry_run(options, _rigs([gpu], outlive=True))
    assert plan.caps_w == (400.0, 300.0, 200.0)
    assert plan.selection == "the only GPU" and plan.gpus[0]["original_limit_w"] == 320.0
    assert plan.journal_path == tmp_path / "journal.json"
    assert plan.estimated_wall_s == pytest.approx(plan.estimated_run_s)
    assert plan.bound_run_s is not None and plan.bound_run_s >= plan.estimated_run_s
    assert gpu.limits_set == [] and gpu.calls["set_power_limit"] == 0
    assert not (tmp_path / "runs").exists() and not (tmp_path / "journal.json").exists()
    # a rig whose limits die with the process needs no journal
    assert dry_run(options, _rigs([gpu], outlive=False)).journal_path is None


def test_a_dry_run_refuses_bad_options_before_building_the_rig() -> None:
    built: list[int] = []

    @contextlib.contextmanager
    def rigs(options: SweepOptions) -> Iterator[Rig]:
        built.append(1)
        yield Rig(backend=_Backend([FakeGpu(0)]), clock=ScaledClock(1.0))

    with pytest.raises(UsageError):
        dry_run(_plan_options(step_size_w=-5.0), rigs)
    assert built == []


def test_a_clock_dry_run_lists_its_points_under_the_limit_in_force(tmp_path: Path) -> None:
    gpu = FakeGpu(0, limit_w=320.0)
    options = SweepOptions(
        points=PointOptions(axis=Axis.SM_CLOCK, sm_clocks=(900.0, 1500.0)),
        server=ServerOptions(url="http://10.255.255.1:8000"),
        safety=SafetyOptions(state_dir=tmp_path),
    )
    plan = dry_run(options, _rigs([gpu], outlive=True))
    assert plan.axis == "sm-clock" and plan.caps_w == (320.0,)
    assert plan.points == (SweepPoint(None, 1500.0, None), SweepPoint(None, 900.0, None))
    assert "axis: sm-clock, 2 points under a 320 W (in force) power limit" in plan.lines()
    assert gpu.sm_lock_mhz is None and gpu.calls["lock_sm_clock"] == 0


def test_a_one_point_plan_says_point() -> None:
    lines = _dry(
        points=(SweepPoint(None, 1500.0, None),),
        axis="sm-clock",
        caps_w=(320.0,),
        estimated_wall_s=None,
        estimated_run_s=60.0,
        journal_path=None,
    ).lines()
    assert "axis: sm-clock, 1 point under a 320 W (in force) power limit" in lines
