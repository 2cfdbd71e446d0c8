"""powersweep.plots._data: what the charts draw of a typed power analysis. Its caps as arrays
sorted by cap (unknown numbers NaN, failed caps gaps, TPS/W derived where missing), the marks
that can be placed, the cards' own defaults, and the run facts as text."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from powersweep.analysis.result_types import Pick, PowerAnalysis, RunFacts
from powersweep.errors import UsageError
from powersweep.plots._data import (
    card_defaults,
    fmt_w,
    gpu_label,
    parse_analysis,
    pct_by_gpu,
    subtitle,
    text,
)

CAPS = [
    {"cap_w": 300, "status": "ok", "tps": 30.0, "power_w": 290.0, "tps_per_w": 0.1034},
    {"cap_w": 200, "status": "ok", "tps": 20.0, "power_w": 200.0, "tps_per_w": None},
    {"cap_w": 250, "status": "failed", "tps": 0.0, "power_w": 0.0, "tps_per_w": 0.0},
]


def _caps_analysis(**changes: Any) -> PowerAnalysis:
    data: dict[str, Any] = {"run": {"gpu_name": "RTX 3090", "n_gpus": 1}, "caps": CAPS}
    return PowerAnalysis.from_json({**data, **changes})


def _run_facts(**changes: Any) -> RunFacts:
    base: dict[str, Any] = {
        "gpu_name": "NVIDIA GeForce RTX 3090",
        "n_gpus": 1,
        "cooling": "air",
        "load_mode": "decode-single",
        "model": "Qwen3",
        "engine": "llama.cpp",
        "date": "2025-11-02",
    }
    return RunFacts.from_json({**base, **changes})


def test_text_is_stripped_and_blank_is_unknown() -> None:
    assert text("  air ") == "air"
    assert text("  ") is None and text(None) is None


def test_caps_are_sorted_failed_caps_are_gaps_and_missing_tps_per_w_is_derived() -> None:
    curve = parse_analysis(_caps_analysis()).curve
    assert curve.cap_w.tolist() == [200.0, 250.0, 300.0]
    assert curve.failed.tolist() == [False, True, False]
    assert curve.tps_per_w[0] == pytest.approx(0.1)  # 20 / 200: derived
    assert curve.tps_per_w[2] == pytest.approx(0.1034)  # given: kept
    for column in (curve.tps, curve.power_w, curve.tps_per_w, curve.sm_clock_mhz):
        assert math.isnan(column[1])  # the failed cap is a gap, not a zero
    assert np.isnan(curve.code_tps).all()  # never given: all unknown


def test_a_row_without_status_is_measured_and_without_draw_has_no_tps_per_w() -> None:
    view = parse_analysis(_caps_analysis(caps=[{"cap_w": 200, "tps": 20.0, "power_w": 0.0}]))
    assert view.curve.failed.tolist() == [False]  # a bare caps.csv's row
    assert math.isnan(view.curve.tps_per_w[0])  # no draw: no derived TPS/W


def test_a_curve_needs_a_cap_with_a_finite_cap() -> None:
    view = parse_analysis(_caps_analysis(caps=[{"cap_w": math.nan}, {"cap_w": 250, "tps": 1}]))
    assert view.curve.cap_w.tolist() == [250.0]
    with pytest.raises(UsageError, match="no caps to plot"):
        parse_analysis(_caps_analysis(caps=[]))


def test_metric_defaults_to_narrative_tps() -> None:
    assert parse_analysis(_caps_analysis(metric="prefill_tps")).is_prefill
    assert parse_analysis(_caps_analysis(metric="watts")).metric == "narr_tps"


def test_sweet_spot_and_near_peak_are_marked_only_with_a_known_tps_per_w() -> None:
    view = parse_analysis(
        _caps_analysis(
            sweet_spot={"cap_w": 280, "tps_per_w": 0.11},
            near_peak={"cap_w": 300, "tps_per_w": None},
        )
    )
    assert view.sweet_spot is not None and view.sweet_spot.cap_w == 280.0
    assert view.near_peak is None
    assert parse_analysis(_caps_analysis()).sweet_spot is None


def test_plateaus_keep_known_kinds_with_both_ends_ordered_and_sorted() -> None:
    plateaus = [
        {"kind": "draw_ceiling", "start_w": 380, "end_w": 350, "power_w": 300},
        {"kind": "boost_plateau", "start_w": 250, "end_w": 270},
        {"kind": "thermal", "start_w": 100, "end_w": 120},
        {"kind": "boost_plateau", "start_w": math.inf, "end_w": 200},
    ]
    view = parse_analysis(_caps_analysis(plateaus=plateaus))
    got = [(p.kind, p.start_w, p.end_w) for p in view.plateaus]
    assert got == [("boost_plateau", 250.0, 270.0), ("draw_ceiling", 350.0, 380.0)]
    assert view.plateaus[1].power_w == 300.0


def test_each_distinct_cards_default_on_a_rig_of_different_cards() -> None:
    run = _run_facts(
        gpu_names=["RTX 3090", "RTX 4090", "RTX 3090"], default_limits_w=[370, 450, 370]
    )
    assert card_defaults(run) == (("RTX 3090", 370.0), ("RTX 4090", 450.0))
    assert card_defaults(_run_facts(gpu_names=["RTX 3090"], default_limits_w=[370, 450])) == ()
    assert card_defaults(_run_facts()) == ()


def test_each_cards_share_of_its_default() -> None:
    assert pct_by_gpu(Pick(cap_w=300, pct_of_default_by_gpu=[81.0, math.nan, 67.0])) == (
        81.0,
        67.0,
    )
    assert pct_by_gpu(Pick(cap_w=300)) == ()


def test_gpu_label() -> None:
    assert gpu_label(_run_facts()) == "NVIDIA GeForce RTX 3090"
    assert gpu_label(_run_facts(n_gpus=2)) == "2x NVIDIA GeForce RTX 3090"
    assert gpu_label(_run_facts(gpu_name="  ")) == "GPU"
    assert gpu_label(_run_facts(gpu_label="RTX 3090 + RTX 4090", n_gpus=2)) == "RTX 3090 + RTX 4090"
    assert gpu_label(_run_facts(gpu_label="RTX 3090")) == "NVIDIA GeForce RTX 3090"


def test_subtitle_leaves_out_what_is_unknown() -> None:
    assert subtitle(_run_facts()) == "  ·  ".join(
        [
            "NVIDIA GeForce RTX 3090",
            "air-cooled",
            "llama.cpp / Qwen3",
            "decode-single",
            "2025-11-02",
        ]
    )
    bare = _run_facts(cooling="unspecified", engine=None, load_mode=" ", date=None)
    assert subtitle(bare, with_gpu=False) == "Qwen3"
    assert subtitle(RunFacts(), with_gpu=False) == ""


@pytest.mark.parametrize(("watts", "text_"), [(300.0, "300 W"), (300, "300 W"), (287.5, "287.5 W")])
def test_fmt_w(watts: float, text_: str) -> None:
    assert fmt_w(watts) == text_


def test_a_reading_set_aside_is_drawn_apart_and_the_curve_joins_over_it() -> None:
    from powersweep.analysis.result_types import Answer, CapRow, PowerAnalysis
    from powersweep.plots._data import parse_analysis

    caps = [
        CapRow.from_json(dict(cap_w=200.0, tps=20.0, power_w=199.0, tps_per_w=0.1005, status="ok")),
        CapRow.from_json(
            dict(cap_w=210.0, tps=40.0, power_w=209.0, tps_per_w=0.1914, status="outlier")
        ),
        CapRow.from_json(dict(cap_w=220.0, tps=22.0, power_w=219.0, tps_per_w=0.1005, status="ok")),
        CapRow.from_json(dict(cap_w=230.0, status="failed")),
    ]
    view = parse_analysis(
        PowerAnalysis(caps=caps, answer=Answer(kind="none", why="only 2 usable caps"))
    )
    assert list(view.curve.cap_w) == [200.0, 220.0, 230.0]  # no gap where the outlier was
    assert list(view.curve.failed) == [False, False, True]
    assert list(view.curve.set_aside_cap_w) == [210.0]
    assert list(view.curve.set_aside_tps_per_w) == [0.1914]
    assert view.answer_kind == "none"
