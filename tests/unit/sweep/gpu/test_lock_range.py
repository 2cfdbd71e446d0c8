"""SM clock locks as ranges (issue 45): the idle floor a lock's bottom defaults to, the sweep's
locks from it to each point's clock, putting a range back, and the simulated card idling at the
lock's minimum (a single-value lock keeps the clock, and the draw, up)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from powersweep.analysis.undervolt import analyze_undervolt
from powersweep.analysis.undervolt_summary import headline, render_undervolt_summary
from powersweep.clock import ManualClock
from powersweep.errors import GpuError
from powersweep.sim.physics import IDLE, Locks, operating_point
from powersweep.sim.profiles import get_profile
from powersweep.sim.sim_gpu import SimGpu
from powersweep.sweep.gpu import SupportedClocks
from powersweep.sweep.gpu.lock_range import (
    DEFAULT_IDLE_FLOOR_MHZ,
    card_idle_floor_mhz,
    idle_floor_mhz,
    range_min_mhz,
)
from powersweep.sweep.locks import ClockLocker
from powersweep.sweep.measurement.idle_draw import measure_idle
from powersweep.sweep.planning.points import SweepPoint
from tests.fakes.fake_gpu import FakeGpu
from tests.unit.analysis.test_undervolt import _curve, _search


class _NoClockList(FakeGpu):
    def supported_clocks(self) -> SupportedClocks:
        raise GpuError("GPU 0 does not list its supported clocks")


def test_the_idle_floor_is_the_lowest_sm_clock_at_the_top_memory_clock_else_210() -> None:
    listed = SupportedClocks((9751.0, 405.0), {9751.0: (1860.0, 900.0, 210.0), 405.0: (405.0,)})
    assert idle_floor_mhz(listed) == 210.0
    assert idle_floor_mhz(SupportedClocks((9751.0,), {9751.0: (1800.0, 300.0)})) == 300.0
    assert idle_floor_mhz(None) == DEFAULT_IDLE_FLOOR_MHZ == 210.0
    assert card_idle_floor_mhz(_NoClockList(0)) == 210.0
    # --sm-clock-min wins; neither goes above the lock's top
    assert range_min_mhz(1485.0, None, 210.0) == 210.0
    assert range_min_mhz(1485.0, 900.0, 210.0) == 900.0
    assert range_min_mhz(600.0, 900.0, 210.0) == 600.0


def test_the_sweep_locks_sm_from_the_cards_floor_or_the_given_minimum_to_the_point() -> None:
    gpu = FakeGpu(0)  # lists SM clocks down to 210 MHz
    locker = ClockLocker([gpu], lambda _m: None)
    assert locker.apply(SweepPoint(300.0, 1485.0)) is None
    assert (gpu.sm_lock_min_mhz, gpu.sm_lock_mhz) == (210.0, 1485.0)
    assert gpu.locked_clocks().sm_min_mhz == 210.0
    given = FakeGpu(1)
    ClockLocker([given], lambda _m: None, sm_min_mhz=900.0).apply(SweepPoint(300.0, 1485.0))
    assert (given.sm_lock_min_mhz, given.sm_lock_mhz) == (900.0, 1485.0)
    # the floor is read once per card, at its first lock
    locker.apply(SweepPoint(300.0, 1200.0))
    assert gpu.calls["supported_clocks"] == 1 and gpu.sm_lock_min_mhz == 210.0


def test_a_range_in_force_before_the_sweep_is_put_back_as_a_range() -> None:
    gpu = FakeGpu(0)
    gpu.lock_sm_clock(1700.0, 300.0)
    locker = ClockLocker([gpu], lambda _m: None)
    locker.apply(SweepPoint(300.0, 1200.0))
    (ok, said) = locker.put_back()[0]
    assert ok and said == "clocks locked back to SM 300-1700 MHz"
    assert (gpu.sm_lock_min_mhz, gpu.sm_lock_mhz) == (300.0, 1700.0)


def test_the_simulated_card_idles_at_the_locks_minimum() -> None:
    p = get_profile("rtx3090-air")
    floor = operating_point(p, IDLE, 300.0, 40.0, Locks(1560.0, None, 210.0))
    single = operating_point(p, IDLE, 300.0, 40.0, Locks(1560.0))
    unlocked = operating_point(p, IDLE, 300.0, 40.0)
    assert floor.sm_clock_mhz == unlocked.sm_clock_mhz == 210.0
    assert floor.power_w == unlocked.power_w == p.idle_w
    # min = max keeps the idle card at its clock: 100+ W on a 3090, as users report
    assert single.sm_clock_mhz == 1560.0 and single.power_w > 100.0
    assert single.power_w - floor.power_w > 80.0


def test_idle_draw_is_read_at_the_lock_in_force_on_the_run_clock() -> None:
    clock = ManualClock()
    gpu = SimGpu(get_profile("rtx3090-air"), clock, seed=1)

    async def idle(low: float | None) -> tuple[float, float]:
        assert gpu.lock_sm_clock(1485.0, low).accepted
        got = await measure_idle([gpu], clock, (low or 1485.0, 1485.0))
        assert got.seconds == 5.0 and got.samples == 12
        return got.power_w, got.sm_clock_mhz

    low_w, low_sm = asyncio.run(idle(210.0))
    high_w, high_sm = asyncio.run(idle(None))
    assert low_sm == 210.0 and high_sm == 1485.0
    assert high_w > low_w + 50.0


def test_the_undervolt_summary_shows_the_idle_draw_beside_the_answer(tmp_path: Path) -> None:
    idle = {
        "sm_lock_mhz": 1485.0,
        "sm_lock_range_mhz": [210.0, 1485.0],
        "power_w": 28.2,
        "sm_clock_mhz": 210.0,
        "seconds": 5.0,
        "samples": 12,
    }
    run = {"options": {"axis": "undervolt"}, "idle": idle}
    curve = _curve(tmp_path, _search(150.0, soaks=((90.0, "ok"),)), run)
    a = analyze_undervolt(curve)
    assert a.idle is not None and a.idle.range_text == "SM 210-1485 MHz"
    line = headline(a)
    assert line is not None and line.endswith("; idle at the lock: 28 W, SM 210 MHz")
    text = render_undervolt_summary(curve, a)
    assert "Idle at the lock (SM 210-1485 MHz, 5 s with no requests): 28 W per card" in text
    # a run from before issue 45 has no idle record, and says nothing of it
    (tmp_path / "old").mkdir()
    bare = analyze_undervolt(_curve(tmp_path / "old", _search(150.0)))
    assert bare.idle is None and "Idle at the lock" not in render_undervolt_summary(curve, bare)


def test_the_boot_unit_locks_sm_from_the_range_bottom_and_passes_it_to_powersweep() -> None:
    from powersweep.sweep.settings.boot_unit import BootCommand, BootSetting, render_unit

    s = BootSetting("GPU-a", "RTX 3090", 290.0, 1485.0, None, "run-x", sm_clock_min_mhz=210.0)
    text = render_unit([s], BootCommand("nvidia-smi", ("/usr/bin/nvidia-smi",)), "run-x")
    assert "ExecStart=-/usr/bin/nvidia-smi -i GPU-a -lgc 210,1485" in text.splitlines()
    assert s.describe() == "290 W, SM 210-1485 MHz"
    assert BootSetting.from_dict(s.to_dict()) == s
    undervolt = BootSetting("GPU-a", "RTX 3090", None, 1485.0, None, "x", "nvidia", 135.0, 210.0)
    ours = BootCommand("powersweep", ("/usr/bin/powersweep", "apply"))
    assert "--sm-clock 1485 --sm-clock-min 210 --sm-offset=135" in render_unit(
        [undervolt], ours, "x"
    )
    # a unit written before lock ranges kept min = max
    old = BootSetting.from_dict({"uuid": "GPU-a", "sm_clock_mhz": 1485.0, "power_limit_w": None})
    legacy = render_unit([old], BootCommand("nvidia-smi", ("/usr/bin/nvidia-smi",)), "x")
    assert "-lgc 1485,1485" in legacy
