"""powersweep.sweep.options: the sweep's option groups and how ``run.json`` records them. The
choices compare equal to their strings, every group survives a JSON round trip through
``recorded`` / ``from_recorded`` (flat, by flag name, no secret, paths as text), missing keys keep
their defaults, unknown keys are left out, and a value this version cannot take is a TypeError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from powersweep.sweep.options import (
    AXES,
    BACKENDS,
    LOAD_MODES,
    PREFILL_SHARE_OF_WINDOW,
    Axis,
    Backend,
    CardOptions,
    Cooling,
    LoadMode,
    LoadOptions,
    MeasureOptions,
    OutputOptions,
    PointOptions,
    SafetyOptions,
    ServerOptions,
    SettleMode,
    Strategy,
    SweepOptions,
)
from powersweep.sweep.sampling.windows import WindowPolicy


def _json_round_trip(options: SweepOptions) -> SweepOptions:
    return SweepOptions.from_recorded(json.loads(json.dumps(options.recorded())))


def test_choices_are_their_strings_in_the_order_the_cli_lists_them() -> None:
    assert LoadMode.PREFILL_HEAVY == "prefill-heavy" and Axis.GRID == "grid"
    assert LOAD_MODES == ("decode-single", "decode-concurrent", "prefill-heavy", "serving")
    assert AXES == ("power", "sm-clock", "mem-clock", "grid", "undervolt")
    assert BACKENDS == ("auto", "nvml", "amdsmi")
    assert f"{Cooling.AIO}" == "aio"


def test_defaults_record_flat_by_flag_name() -> None:
    recorded = SweepOptions().recorded()
    assert recorded["load_mode"] == "decode-single"
    assert recorded["target_prefill_seconds"] is None
    assert (recorded["target_cap_seconds"], recorded["min_cap_seconds"]) == (10.0, 3.0)
    assert recorded["settle"] == "auto" and recorded["settle_seconds"] == 3.0
    assert recorded["out"] == "powersweep-runs" and recorded["resume"] is None
    assert recorded["api_key_given"] is False
    # no group's own field names leak in where a flag name records them
    assert "mode" not in recorded and "windows" not in recorded and "api_key" not in recorded
    assert json.loads(json.dumps(recorded)) == recorded  # plain JSON, nothing to convert


def test_every_group_survives_the_json_round_trip() -> None:
    options = SweepOptions(
        load=LoadOptions(
            mode=LoadMode.DECODE_CONCURRENT,
            warmup_requests=1,
            concurrency=8,
            bench_runs=3,
            load_target=0.9,
            concurrency_stretch=2,
            target_prefill_s=4.0,
        ),
        measure=MeasureOptions(
            settle_s=5.0,
            settle_mode=SettleMode.FIXED,
            thermal_wait_max_s=0.0,
            sample_interval_s=0.25,
            windows=WindowPolicy(min_s=2.0, max_s=20.0, precision_pct=1.5),
        ),
        points=PointOptions(
            axis=Axis.GRID,
            sm_clocks=(900.0, 1200.0),
            mem_clocks=(5001.0,),
            hold_cap_w=300.0,
            strategy=Strategy.ADAPTIVE,
            confirm=False,
        ),
        cards=CardOptions(gpus=(0, 2), backend=Backend.AMDSMI),
        server=ServerOptions(url="http://127.0.0.1:8080", model="m"),
        safety=SafetyOptions(no_reset=True, state_dir=Path("/tmp/state"), max_failed_caps=5),
        output=OutputOptions(
            out=Path("runs"), resume=Path("runs/old"), cooling=Cooling.WATER, tariff_per_kwh=0.3
        ),
        simulate="rtx3090-air",
    )
    back = _json_round_trip(options)
    assert back == options
    assert isinstance(back.points.sm_clocks, tuple) and isinstance(back.cards.gpus, tuple)
    assert back.points.axis is Axis.GRID and back.cards.backend is Backend.AMDSMI
    assert back.output.cooling is Cooling.WATER and back.measure.settle_mode is SettleMode.FIXED


def test_the_api_key_and_url_credentials_are_never_recorded() -> None:
    options = SweepOptions(
        server=ServerOptions(url="https://user:secret@host:8000/v1?token=x#f", api_key="sk-1")
    )
    recorded = options.recorded()
    assert recorded["url"] == "https://host:8000/v1"
    assert recorded["api_key_given"] is True
    assert "secret" not in json.dumps(recorded) and "sk-1" not in json.dumps(recorded)
    # a resumed run takes the key given now: none comes back from the record
    assert SweepOptions.from_recorded(recorded).server == ServerOptions(url="https://host:8000/v1")


def test_missing_keys_keep_their_defaults_and_unknown_ones_are_left_out() -> None:
    back = SweepOptions.from_recorded({"load_mode": "prefill-heavy", "from_the_future": 1})
    assert back.load == LoadOptions(mode=LoadMode.PREFILL_HEAVY)
    assert back.measure == MeasureOptions() and back.points == PointOptions()
    assert back.output == OutputOptions() and back.simulate is None


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        ({"out": None}, OutputOptions()),
        ({"out": ""}, OutputOptions()),
        ({"resume": None, "cooling": "air"}, OutputOptions(cooling=Cooling.AIR)),
        ({"resume": "r"}, OutputOptions(resume=Path("r"))),
    ],
)
def test_output_paths_come_back_as_paths_or_defaults(
    recorded: dict[str, Any], expected: OutputOptions
) -> None:
    assert OutputOptions.from_recorded(recorded) == expected


def test_an_empty_state_dir_is_the_default_one() -> None:
    assert SafetyOptions.from_recorded({"state_dir": ""}).state_dir is None
    assert SafetyOptions.from_recorded({"state_dir": "/s"}).state_dir == Path("/s")


@pytest.mark.parametrize(
    "recorded",
    [
        {"load_mode": "decode-lots"},
        {"axis": "volts"},
        {"strategy": "greedy"},
        {"backend": "cuda"},
        {"settle": "never"},
        {"cooling": "oil"},
        {"settle_seconds": "soon"},
    ],
)
def test_a_value_this_version_cannot_take_is_a_type_error(recorded: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        SweepOptions.from_recorded(recorded)


def test_prefill_seconds_is_the_flag_else_a_quarter_of_the_window() -> None:
    window = MeasureOptions(windows=WindowPolicy(max_s=40.0))
    assert SweepOptions(measure=window).prefill_seconds == PREFILL_SHARE_OF_WINDOW * 40.0 == 10.0
    given = SweepOptions(measure=window, load=LoadOptions(target_prefill_s=3.0))
    assert given.prefill_seconds == 3.0


def test_only_a_real_sweep_changes_limits_and_only_a_clock_axis_locks_clocks() -> None:
    assert SafetyOptions().changes_limits
    assert not SafetyOptions(dry_run=True).changes_limits
    assert not SafetyOptions(observe_only=True).changes_limits
    assert not PointOptions().clock_axis
    assert all(PointOptions(axis=a).clock_axis for a in (Axis.SM_CLOCK, Axis.MEM_CLOCK, "grid"))


def test_measure_options_record_the_window_policy_by_flag_name() -> None:
    measure = MeasureOptions(windows=WindowPolicy(min_s=2.0, max_s=30.0, precision_pct=0.0))
    recorded = measure.recorded()
    assert recorded["target_cap_seconds"] == 30.0 and recorded["precision_pct"] == 0.0
    assert MeasureOptions.from_recorded(recorded) == measure


def test_only_a_serving_run_records_the_serving_options_and_reads_them_back() -> None:
    from powersweep.sweep.loads.arrivals import ArrivalProcess, LengthProfile

    assert "request_rate_rps" not in SweepOptions().recorded()
    load = LoadOptions(
        mode=LoadMode.SERVING,
        request_rate_rps=2.5,
        arrivals=ArrivalProcess.GAMMA,
        burstiness=0.5,
        lengths=LengthProfile.CODE,
        prompts_file=Path("/tmp/p.jsonl"),
        max_ttft_ms=800.0,
    )
    recorded = SweepOptions(load=load).recorded()
    assert recorded["prompts_file"] == "/tmp/p.jsonl" and recorded["arrivals"] == "gamma"
    json_like = json.loads(json.dumps(recorded))
    assert SweepOptions.from_recorded(json_like).load == load
