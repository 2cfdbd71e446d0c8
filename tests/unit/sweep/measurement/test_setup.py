"""Before the first point (``sweep/measurement/setup.py``), on a scripted client, sampler and load:
the warm-up written and counted, every warm-up request failing stops the sweep, the load prepared
(or a resumed run's set-up applied), the swept cards confirmed busy and the others watched."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from powersweep.clock import ManualClock
from powersweep.errors import PowersweepError
from powersweep.sweep.gpu import GpuSample
from powersweep.sweep.loads.pace import Pace
from powersweep.sweep.measurement import setup as measurement_setup
from powersweep.sweep.measurement.setup import LoadSetup
from powersweep.sweep.measurement.thermal_fit import ThermalFit
from powersweep.sweep.sampling.sampler import SampleRow
from powersweep.sweep.verdict import FaultLog
from tests.fakes.fake_bench import FakeWriter
from tests.fakes.fake_chat import FakeChat
from tests.fakes.fake_gpu import FakeGpu


class _Sampler:
    """A steady draw, no temperature slope, and the rows :meth:`drain` hands out once."""

    interval_s = 0.5

    def __init__(self, rows: list[SampleRow]) -> None:
        self.rows = rows

    def label(self, cap_w: float, phase: str) -> None:
        pass

    def median_power_w(self, t0_s: float, t1_s: float) -> float:
        return 300.0

    def temp_slope_c_per_s(self, t0_s: float, t1_s: float) -> float:
        return 0.0

    def drain(self) -> list[SampleRow]:
        rows, self.rows = self.rows, []
        return rows


class _Load:
    """Records prepare/apply; ``error`` is raised by prepare."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.prepared: list[float] = []
        self.applied: list[dict[str, Any]] = []

    async def prepare(self, cap_w: float) -> dict[str, Any]:
        self.prepared.append(cap_w)
        if self.error is not None:
            raise self.error
        return {"streams": 4}

    def apply(self, prepared: dict[str, Any]) -> dict[str, Any]:
        self.applied.append(prepared)
        return {"streams": prepared.get("streams")}


class _RisingGpu(FakeGpu):
    """A card outside the set: idle at its first reading, busy after."""

    def read_sample(self) -> GpuSample:
        sample = super().read_sample()
        self.util_pct = 95.0
        return sample


def _sample_row(gpu: int, util: float, phase: str = "warmup") -> SampleRow:
    sample = GpuSample(gpu, 300.0, math.nan, 60.0 + gpu, 1800.0, 9501.0, util, 0, 0)
    return SampleRow(float(gpu), gpu, 350.0, phase, sample)


def _setup(
    *,
    chat: FakeChat | None = None,
    load: _Load | None = None,
    rows: list[SampleRow] | None = None,
    watch: list[Any] | None = None,
    warmup_requests: int = 3,
    thermal: ThermalFit | None = None,
) -> tuple[LoadSetup, FakeWriter, list[str]]:
    clock = ManualClock()
    warnings: list[str] = []
    writer = FakeWriter()
    setup = LoadSetup(
        client=chat or FakeChat(clock),
        clock=clock,
        load=load or _Load(),  # type: ignore[arg-type]
        pace=Pace(),
        sampler=_Sampler(rows or []),  # type: ignore[arg-type]
        writer=writer,  # type: ignore[arg-type]
        faults=FaultLog(),
        gpus=[FakeGpu(0), FakeGpu(1)],
        watch=watch or [],
        meta={"schema_version": 1},
        window_s=10.0,
        warmup_requests=warmup_requests,
        warn=warnings.append,
        thermal=thermal,
    )
    if chat is not None:
        chat.clock = clock
    return setup, writer, warnings


def test_the_warmup_is_written_and_the_load_prepared_at_the_first_point() -> None:
    load = _Load()
    setup, writer, warnings = _setup(load=load)
    extra = asyncio.run(
        setup.run(350.0, (1410.0, None), None, lambda prep: {"prepared_seen": prep["streams"]})
    )
    assert extra is None and warnings == []
    ((cap, results, locks, confirm),) = writer.requests
    assert (cap, locks, confirm) == (350.0, (1410.0, None), False)
    assert len(results) == 4 and all(r.prompt_kind == "warmup" for r in results)
    assert load.prepared == [350.0] and load.applied == []
    (meta,) = writer.run_json
    assert meta["warmup"]["steady"] is True and meta["warmup"]["requests"] == 4
    assert meta["load"]["streams"] == 4
    assert meta["load"]["pace"]["decode_tps"] == {
        "narr": pytest.approx(30.0),
        "code": pytest.approx(30.0),
    }
    assert meta["prepared_seen"] == 4
    assert setup.faults.to_list() == []


def test_a_server_that_failed_every_warmup_request_stops_the_sweep() -> None:
    load = _Load()
    setup, writer, _ = _setup(chat=FakeChat(ManualClock(), fail=range(1, 10)), load=load)
    with pytest.raises(PowersweepError, match=r"^the server failed every warm-up request: HTTP"):
        asyncio.run(setup.run(350.0, (None, None), None, None))
    assert load.prepared == [] and writer.run_json == []
    assert len(writer.requests[0][1]) == 2  # still written: the run shows what happened
    assert setup.faults.to_list()[0]["kind"] == "request_failed"


def test_a_resumed_run_applies_its_set_up_and_its_pace_without_a_warmup() -> None:
    load = _Load()
    chat = FakeChat(ManualClock())
    setup, writer, _ = _setup(chat=chat, load=load, warmup_requests=0)
    prepared = {"streams": 8, "pace": {"decode_tps": {"narr": 25.0}, "tokens_per_chunk": 2.0}}
    asyncio.run(setup.run(350.0, (None, None), prepared, None))
    assert chat.calls == [] and load.prepared == []
    assert load.applied == [prepared]
    assert setup.pace.decode_tps == {"narr": 25.0} and setup.pace.tokens_per_chunk == 2.0
    (meta,) = writer.run_json
    assert meta["load"]["streams"] == 8 and "warmup" not in meta


def test_a_calibration_that_cannot_size_a_prompt_is_a_sweep_error() -> None:
    error = measurement_setup.PrefillCalibrationError("the server truncates every prompt")
    setup, _, _ = _setup(load=_Load(error=error), warmup_requests=0)
    with pytest.raises(PowersweepError, match=r"^the server truncates every prompt$"):
        asyncio.run(setup.run(350.0, (None, None), None, None))


def test_the_warmup_readings_confirm_the_cards_that_serve_and_feed_the_thermal_fit() -> None:
    rows = [
        _sample_row(0, 97.0),
        _sample_row(1, 4.0),
        _sample_row(0, 40.0),
        _sample_row(1, 95.0, phase="probe"),
    ]
    thermal = ThermalFit()
    setup, writer, warnings = _setup(rows=rows, warmup_requests=0, thermal=thermal)
    asyncio.run(setup.run(350.0, (None, None), None, None))
    assert writer.samples == [(rows, False)]
    selection = writer.run_json[0]["gpu_selection"]
    assert selection["warmup_util_pct"] == {"0": 97.0, "1": 4.0}
    assert selection["confirmed"] is False
    assert [w.split(" stayed idle")[0] for w in warnings] == ["GPU 1"]
    assert [t for t, _ in thermal.recent(0.0)] == [0.0, 1.0]


def test_a_card_outside_the_set_that_gets_busy_in_the_warmup_is_named() -> None:
    outside = _RisingGpu(3, util_pct=2.0)
    setup, writer, warnings = _setup(watch=[outside])
    asyncio.run(setup.run(350.0, (None, None), None, None))
    assert outside.calls["read_sample"] >= 2
    assert any(w.startswith("GPU 3 got busy during the warm-up (2% -> 95%") for w in warnings)
    busy = writer.run_json[0]["gpu_selection"]["not_swept_warmup_util_pct"]
    assert busy == {"3": {"before": 2.0, "peak": 95.0}}
