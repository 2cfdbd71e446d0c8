"""The real-sweep code path: NVML backend (on a fake pynvml) + driver + client + a server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from powersweep.clock import ScaledClock
from powersweep.sim.engine import ConstantEngine
from powersweep.sim.server import SimServer
from powersweep.sweep.driver import Sweep, SweepPlan
from powersweep.sweep.gpu.nvml import NvmlBackend
from powersweep.sweep.options import Axis, LoadMode, LoadOptions, MeasureOptions, PointOptions
from powersweep.sweep.planning.clock_points import SweepPoint
from powersweep.sweep.records.writer import RunWriter
from powersweep.sweep.sampling.windows import WindowPolicy
from powersweep.sweep.server.client import ChatClient
from powersweep.sweep.server.discovery import discover_server
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml
from tests.integration.conftest import read_csv, read_json


def run_sweep(
    tmp_path: Path,
    devices: list[FakeDevice],
    caps: tuple[float, ...],
    points: tuple[SweepPoint, ...] = (),
    warnings: list[str] | None = None,
) -> tuple[Sweep, Path]:
    fake = FakeNvml(devices=devices)
    backend = NvmlBackend(nvml=fake)
    gpus = [backend.gpu(i) for i in range(backend.device_count())]
    # Decode TPS is tokens over the span from the first to the last token the client read: a
    # few wall milliseconds of scheduling delay at either end, times the scale, must stay small
    # against the window (3 run s at scale 10: 9 ms of delay is 3%).
    clock = ScaledClock(10.0)
    engine = ConstantEngine(clock, decode_tps=40.0)
    with SimServer(engine, flavour="llamacpp") as server:
        info = asyncio.run(discover_server(server.url, model=None, api_key=None, clock=clock))
        client = ChatClient(info, clock)
        writer = RunWriter(tmp_path, [g.identity().name for g in gpus], "decode-single")
        plan = SweepPlan(
            caps,
            clock_points=points,
            load=LoadOptions(mode=LoadMode.DECODE_SINGLE, warmup_requests=1),
            measure=MeasureOptions(settle_s=0.5, windows=WindowPolicy(max_s=3.0)),
            points=PointOptions(axis=Axis.GRID if points else Axis.POWER, confirm=False),
        )
        meta = {"schema_version": 1, "gpus": [{"index": g.index} for g in gpus]}
        sink: list[str] = warnings if warnings is not None else []
        sweep = Sweep(plan, gpus, clock, client, writer, meta, warn=sink.append)
        sweep.outcome = sweep.run()  # type: ignore[attr-defined]
    backend.close()
    return sweep, writer.path


@pytest.mark.slow
def test_nvml_sweep_sets_caps_and_restores_users_own_limit(tmp_path: Path) -> None:
    dev = FakeDevice(
        limit_mw=350_000, default_mw=370_000, power_mw=500_000, instant_power_mw=500_000
    )  # the user runs at 350 W, TDP is 370 W
    sweep, run = run_sweep(tmp_path, [dev], (300.0, 320.0))
    assert sweep.outcome.status == "complete"  # type: ignore[attr-defined]
    assert dev.limit_mw == 350_000  # back to the user's limit, not the default TDP
    caps = read_csv(run / "caps.csv")
    meta = read_json(run / "run.json")
    # (a cap read again at the end: the run-to-run term; on a real clock its readings' own
    # noise decides which)
    again = meta["run_to_run"]["reference"]["cap_w"]
    assert [float(c["cap_w"]) for c in caps] == [320.0, 300.0, again]
    assert caps[-1]["reason"] == "reread"
    # the fake clamps draw to the cap: the measured draw shows the cap was really set
    for c in caps:
        assert float(c["power_w"]) == pytest.approx(float(c["cap_w"]), abs=0.5)
        assert float(c["narr_tps"]) == pytest.approx(40.0, rel=0.03)
    assert meta["restored"] == [{"gpu_index": 0, "limit_w": 350.0, "ok": True, "message": ""}]
    assert meta["gpus"][0]["original_limit_w"] == 350.0


@pytest.mark.slow
def test_nvml_two_gpus_draw_is_summed_and_silently_kept_cap_rejected(tmp_path: Path) -> None:
    devs = [
        FakeDevice(uuid="GPU-a", limit_mw=390_000, power_mw=500_000, instant_power_mw=500_000),
        FakeDevice(
            uuid="GPU-b",
            limit_mw=390_000,
            silent_floor_mw=310_000,
            power_mw=500_000,
            instant_power_mw=500_000,
        ),
    ]
    _sweep, run = run_sweep(tmp_path, devs, (300.0, 320.0))
    caps = {float(c["cap_w"]): c for c in read_csv(run / "caps.csv")}
    assert caps[320.0]["status"] == "ok"
    assert float(caps[320.0]["power_w"]) == pytest.approx(640.0, abs=1)  # two cards at 320 W
    assert caps[320.0]["n_gpus"] == "2"
    assert caps[300.0]["status"] == "rejected"
    assert "GPU 1" in caps[300.0]["error"] and "kept" in caps[300.0]["error"]
    assert [d.limit_mw for d in devs] == [390_000, 390_000]


@pytest.mark.slow
def test_nvml_clock_grid_on_a_geforce_falls_back_and_unlocks_at_the_end(tmp_path: Path) -> None:
    dev = FakeDevice(limit_mw=350_000, mem_locks_supported=False)
    points = tuple(SweepPoint(None, sm, mem) for sm in (1410.0, 1200.0) for mem in (9751.0, 9501.0))
    warnings: list[str] = []
    sweep, run = run_sweep(tmp_path, [dev], (350.0,), points, warnings)
    assert any("NVML cannot read clock locks" in w for w in warnings), warnings
    assert any("falls back to the SM axis" in w for w in warnings), warnings
    assert sweep.outcome.status == "complete"  # type: ignore[attr-defined]
    caps = read_csv(run / "caps.csv")
    meta = read_json(run / "run.json")
    # the point that measures the run's drift best read again at the end (on a real clock its
    # readings' own noise decides which)
    again = f"{meta['run_to_run']['reference']['sm_lock_mhz']:.1f}"
    assert [(c["sm_lock_mhz"], c["mem_lock_mhz"], c["status"], c["reason"]) for c in caps] == [
        ("1410.0", "", "ok", "dense"),
        ("1200.0", "", "ok", "dense"),
        (again, "", "ok", "reread"),
    ]
    assert all(c["cap_w"] == "350.0" for c in caps)  # the limit in force, never changed
    assert dev.locked_sm is None and dev.locked_mem is None
    assert meta["axis_fallback"] == "sm-clock"
    assert meta["restored"][0]["ok"] and "unlocked" in meta["restored"][0]["clocks"]


@pytest.mark.slow
def test_nvml_lock_the_card_does_not_follow_is_rejected(tmp_path: Path) -> None:
    dev = FakeDevice(clocks_follow_locks=False, sm_clock_mhz=1800)
    points = (SweepPoint(None, 1410.0, None), SweepPoint(None, 1800.0, None))
    sweep, run = run_sweep(tmp_path, [dev], (350.0,), points)
    assert sweep.outcome.status == "complete"  # type: ignore[attr-defined]
    status = {c["sm_lock_mhz"]: (c["status"], c["error"]) for c in read_csv(run / "caps.csv")}
    assert status["1800.0"] == ("ok", "")
    assert status["1410.0"][0] == "rejected"
    assert "SM ran at 1800 MHz under a 1410 MHz lock" in status["1410.0"][1]
    assert dev.locked_sm is None
