"""powersweep.sweep.options_check: ``validate`` refuses options that cannot work, before anything
is touched, with one line naming the flag: numeric ranges (finite, inclusive bounds), choices,
the load-mode-only flags, a prefill that cannot fit its window, card and clock maxima, the
server URL, and observe-only and dry-run combinations. (The clock-axis combinations are in
``test_clock_options.py``.)"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from powersweep.errors import UsageError
from powersweep.sweep.options import (
    MAX_PLANNED_CAPS,
    MAX_STREAMS,
    Axis,
    CardOptions,
    LoadMode,
    LoadOptions,
    MeasureOptions,
    OutputOptions,
    PointOptions,
    SafetyOptions,
    ServerOptions,
    SweepOptions,
    UndervoltOptions,
)
from powersweep.sweep.options_check import validate
from powersweep.sweep.sampling.windows import WindowPolicy

CONCURRENT = LoadMode.DECODE_CONCURRENT


def _validate(**groups: Any) -> None:
    validate(SweepOptions(**groups))


def test_the_defaults_and_a_busy_concurrent_sweep_pass() -> None:
    validate(SweepOptions())
    _validate(
        load=LoadOptions(mode=CONCURRENT, concurrency=MAX_STREAMS, bench_runs=50, load_target=1.0),
        points=PointOptions(caps=tuple(float(c) for c in range(100, 100 + MAX_PLANNED_CAPS))),
        server=ServerOptions(url="localhost:8080/v1"),
    )


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        (
            {"measure": MeasureOptions(windows=WindowPolicy(max_s=0.5))},
            "--target-cap-seconds must be 1 or more and at most 3600, got 0.5",
        ),
        (
            {"measure": MeasureOptions(windows=WindowPolicy(max_s=math.inf))},
            "--target-cap-seconds must be 1 or more and at most 3600, got inf",
        ),
        (
            {"measure": MeasureOptions(windows=WindowPolicy(min_s=math.nan))},
            "--min-cap-seconds must be 1 or more and at most 3600, got nan",
        ),
        (
            {"measure": MeasureOptions(windows=WindowPolicy(precision_pct=0.0))},
            "--precision must be 0.01 or more and at most 100, got 0",
        ),
        ({"measure": MeasureOptions(settle_s=601.0)}, "--settle-seconds must be 0 or more"),
        (
            {"measure": MeasureOptions(sample_interval_s=0.001)},
            "--sample-interval must be 0.01 or more and at most 60, got 0.001",
        ),
        ({"points": PointOptions(step_size_w=0.0)}, "--step-size must be 0.1 or more"),
        ({"load": LoadOptions(warmup_requests=101)}, "--warmup-requests must be 0 or more and"),
        ({"safety": SafetyOptions(max_failed_caps=1001)}, "--max-failed-caps must be 1 or more"),
        (
            {"load": LoadOptions(mode=CONCURRENT, bench_runs=51)},
            "--bench-runs must be 1 or more and at most 50, got 51",
        ),
        (
            {"load": LoadOptions(mode=CONCURRENT, max_concurrency_probe=MAX_STREAMS + 1)},
            f"--max-concurrency-probe must be 1 or more and at most {MAX_STREAMS}",
        ),
    ],
)
def test_a_number_out_of_its_range_names_the_flag_the_range_and_the_value(
    groups: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        _validate(**groups)
    assert str(caught.value).startswith(message)


def test_the_range_bounds_are_inclusive() -> None:
    _validate(measure=MeasureOptions(windows=WindowPolicy(min_s=1.0, max_s=3600.0)))
    _validate(
        measure=MeasureOptions(settle_s=0.0, thermal_wait_max_s=3600.0, sample_interval_s=60.0)
    )
    _validate(points=PointOptions(step_size_w=0.1), load=LoadOptions(warmup_requests=0))


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        (
            {"load": LoadOptions(mode=CONCURRENT, concurrency=0)},
            "--concurrency takes a number of streams (1 or more) or auto",
        ),
        (
            {"load": LoadOptions(mode=CONCURRENT, concurrency=MAX_STREAMS + 1)},
            f"--concurrency {MAX_STREAMS + 1} is more streams than one client can drive "
            f"(at most {MAX_STREAMS})",
        ),
        (
            {"load": LoadOptions(mode=CONCURRENT, load_target=0.0)},
            "--load-target is a fraction of the cap, between 0 and 1",
        ),
        (
            {"load": LoadOptions(mode=CONCURRENT, load_target=math.nan)},
            "--load-target is a fraction of the cap, between 0 and 1",
        ),
        (
            {"load": LoadOptions(mode=CONCURRENT, concurrency_stretch=-1)},
            "--concurrency-stretch must be 0 or more",
        ),
        (
            {"load": LoadOptions(concurrency=4)},
            "--concurrency, --bench-runs, --load-target and --concurrency-stretch need "
            "--load-mode decode-concurrent",
        ),
        ({"load": LoadOptions(bench_runs=2)}, "need --load-mode decode-concurrent"),
        ({"load": LoadOptions(concurrency_stretch=1)}, "need --load-mode decode-concurrent"),
        ({"load": LoadOptions(target_prefill_s=0.0)}, "--target-prefill-seconds must be positive"),
    ],
)
def test_load_flags_are_checked_and_the_concurrent_ones_need_their_mode(
    groups: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        _validate(**groups)
    assert str(caught.value) == message or str(caught.value).endswith(message)


def test_a_prefill_longer_than_half_the_window_is_refused_with_the_longest_that_fits() -> None:
    window = MeasureOptions(windows=WindowPolicy(max_s=10.0))
    _validate(load=LoadOptions(mode=LoadMode.PREFILL_HEAVY, target_prefill_s=5.0), measure=window)
    with pytest.raises(UsageError) as caught:
        _validate(
            load=LoadOptions(mode=LoadMode.PREFILL_HEAVY, target_prefill_s=6.0), measure=window
        )
    assert str(caught.value) == (
        "--target-prefill-seconds 6 does not fit a 10 s window: lower caps prefill slower, and "
        "every prompt must end inside its window; use at most 5 (half of --target-cap-seconds) "
        "or a longer --target-cap-seconds"
    )
    # the other load modes do not send prefill prompts: the flag is only range-checked there
    _validate(load=LoadOptions(target_prefill_s=6.0), measure=window)


@pytest.mark.parametrize(
    ("points", "message"),
    [
        (
            PointOptions(caps=(300.0,) * (MAX_PLANNED_CAPS + 1)),
            f"--caps lists {MAX_PLANNED_CAPS + 1} caps; at most {MAX_PLANNED_CAPS}",
        ),
        (
            PointOptions(caps=(300.0, 5001.0)),
            "--caps 5001 W is more than any card takes (at most 5000 W)",
        ),
        (
            PointOptions(axis=Axis.GRID, hold_cap_w=6000.0),
            "--cap 6000 W is more than any card takes (at most 5000 W)",
        ),
        (
            PointOptions(axis=Axis.SM_CLOCK, sm_clocks=(900.0, 60000.0)),
            "--sm-clocks 60000 MHz is more than any card takes (at most 50000 MHz)",
        ),
        (
            PointOptions(axis=Axis.MEM_CLOCK, mem_clocks=(50001.0,)),
            "--mem-clocks 50001 MHz is more than any card takes (at most 50000 MHz)",
        ),
    ],
)
def test_more_caps_or_higher_values_than_any_card_takes_are_refused(
    points: PointOptions, message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        _validate(points=points)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ({"output": OutputOptions(cooling="oil")}, "--cooling must be one of air, water, aio"),  # type: ignore[arg-type]
        ({"load": LoadOptions(mode="decode-lots")}, "--load-mode must be one of decode-single"),  # type: ignore[arg-type]
        ({"points": PointOptions(strategy="greedy")}, "--strategy must be dense or adaptive"),  # type: ignore[arg-type]
        ({"measure": MeasureOptions(settle_mode="never")}, "--settle must be auto or fixed"),  # type: ignore[arg-type]
        ({"cards": CardOptions(backend="cuda")}, "--backend must be one of auto, nvml, amdsmi"),  # type: ignore[arg-type]
    ],
)
def test_a_choice_outside_its_list_names_the_choices(groups: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=f"^{message}"):
        _validate(**groups)


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ({"cards": CardOptions(gpus=(0, -1))}, "--gpu takes GPU indices 0, 1, ..."),
        (
            {"safety": SafetyOptions(observe_only=True), "points": PointOptions(caps=(300.0,))},
            "--observe-only measures at the limit in force: drop --caps",
        ),
        (
            {"safety": SafetyOptions(observe_only=True, dry_run=True)},
            "--dry-run and --observe-only exclude each other",
        ),
        ({"server": ServerOptions(url="ftp://host")}, "not an http(s) server URL: 'ftp://host'"),
        (
            {"server": ServerOptions(url="http://u:pw@host:99999")},
            "not an http(s) server URL (bad port): 'http://host:99999'",
        ),
    ],
)
def test_cards_safety_and_server_combinations(groups: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        _validate(**groups)
    assert str(caught.value) == message


UV = PointOptions(axis=Axis.UNDERVOLT)


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        (
            {"points": PointOptions(axis=Axis.UNDERVOLT, sm_clocks=(1500.0, 1600.0))},
            "one --sm-clocks value",
        ),
        ({"points": PointOptions(axis=Axis.UNDERVOLT, mem_clocks=(9501.0,))}, "drop --mem-clocks"),
        ({"points": UV, "safety": SafetyOptions(observe_only=True)}, "cannot be --observe-only"),
        ({"points": UV, "safety": SafetyOptions(no_reset=True)}, "drop --no-reset"),
        # no price chooses the search's answer: it would read as though one had
        ({"points": UV, "output": OutputOptions(tariff_per_kwh=0.3)}, "--tariff cannot choose"),
        (
            {"points": UV, "undervolt": UndervoltOptions(offset_step_mhz=0.0)},
            "--offset-step must be",
        ),
        ({"points": UV, "undervolt": UndervoltOptions(offset_step_mhz=math.nan)}, "--offset-step"),
        ({"points": UV, "undervolt": UndervoltOptions(margin_mhz=-15.0)}, "--offset-margin"),
        ({"points": UV, "undervolt": UndervoltOptions(margin_mhz=math.nan)}, "--offset-margin"),
        (
            {"points": UV, "undervolt": UndervoltOptions(soak_s=-1.0)},
            "--soak-seconds takes 0 to 600",
        ),
        (
            {"points": UV, "undervolt": UndervoltOptions(soak_s=601.0)},
            "--soak-seconds takes 0 to 600",
        ),
        (
            {"points": UV, "undervolt": UndervoltOptions(max_offset_mhz=10.0)},
            "at least one --offset-step",
        ),
        ({"undervolt": UndervoltOptions(soak_s=60.0)}, "work only with --axis undervolt"),
        ({"points": PointOptions(axis=Axis.UNDERVOLT, caps=(300.0,))}, "use --cap W"),
    ],
)
def test_undervolt_flags_are_checked(groups: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        _validate(**groups)


def test_an_undervolt_search_with_its_flags_passes() -> None:
    _validate(
        points=PointOptions(axis=Axis.UNDERVOLT, sm_clocks=(1695.0,), hold_cap_w=280.0),
        undervolt=UndervoltOptions(
            offset_step_mhz=15.0, margin_mhz=0.0, soak_s=600.0, max_offset_mhz=15.0
        ),
    )


SERVING = LoadMode.SERVING


@pytest.mark.parametrize(
    ("load", "says"),
    [
        ({"request_rate_rps": 0.0}, "--request-rate"),
        ({"request_rate_rps": -1.0}, "--request-rate"),
        ({"request_rate_rps": math.inf}, "--request-rate"),
        ({"burstiness": 0.0, "arrivals": "gamma"}, "--burstiness"),
        ({"burstiness": 0.5}, "--arrivals gamma"),
        ({"max_in_flight": 0}, "--max-in-flight"),
        ({"max_in_flight": MAX_STREAMS + 1}, "--max-in-flight"),
        ({"max_ttft_ms": 0.0}, "--max-ttft-ms"),
        ({"max_itl_ms": -5.0}, "--max-itl-ms"),
    ],
)
def test_serving_refuses_nonsense(load: dict[str, Any], says: str) -> None:
    with pytest.raises(UsageError, match=re.escape(says)):
        _validate(load=LoadOptions(mode=SERVING, **load))


def test_serving_flags_need_the_serving_mode() -> None:
    with pytest.raises(UsageError, match="--request-rate need --load-mode serving"):
        _validate(load=LoadOptions(request_rate_rps=3.0))
    _validate(load=LoadOptions(mode=SERVING, request_rate_rps=3.0, max_ttft_ms=500.0))


def test_a_serving_window_holds_ten_arrivals_or_is_refused_with_the_length_it_needs() -> None:
    # 0.3 requests/s in the default 10 s windows: 3 arrivals, and a 250 W point of the
    # simulated 3090 failed because its 3 s first window closed before any first token
    slow = LoadOptions(mode=SERVING, request_rate_rps=0.3)
    with pytest.raises(UsageError, match=r"sends 3 requests in a 10 s window .* 34 or more"):
        _validate(load=slow)
    _validate(load=slow, measure=MeasureOptions(windows=WindowPolicy(max_s=34.0)))
    _validate(load=LoadOptions(mode=SERVING, request_rate_rps=1.0))  # the defaults hold 10


def test_a_serving_undervolt_is_refused() -> None:
    with pytest.raises(UsageError, match="undervolt"):
        _validate(load=LoadOptions(mode=SERVING), points=PointOptions(axis=Axis.UNDERVOLT))


def test_a_prompts_file_without_prompts_is_refused(tmp_path: Any) -> None:
    empty = tmp_path / "p.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(UsageError, match="holds no prompt"):
        _validate(load=LoadOptions(mode=SERVING, prompts_file=empty))
    good = tmp_path / "q.jsonl"
    good.write_text('{"prompt": "hi"}\n')
    _validate(load=LoadOptions(mode=SERVING, prompts_file=good))
