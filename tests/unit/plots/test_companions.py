"""powersweep.plots.companions: the charts beside the efficiency chart. Draw against the cap
(with its ``draw = cap`` line), the clocks (one axis or two, as the readings allow), and the
timeline of the sweep from samples.csv, summed per sampler tick."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest

from powersweep.analysis.result_types import PowerAnalysis
from powersweep.errors import UsageError
from powersweep.plots.companions import (
    clocks_figure,
    has_clocks,
    per_tick,
    power_figure,
    timeline_figure,
)
from tests.chart_layout import one_by_gid


def _three_cap_analysis(n_gpus: int = 1, sm: bool = True, mem: bool = True) -> PowerAnalysis:
    caps = []
    for i, cap in enumerate((200.0, 250.0, 300.0)):
        caps.append(
            {
                "cap_w": cap,
                "status": "ok",
                "tps": 20.0 + i,
                "power_w": (cap - 5.0) * n_gpus,
                "sm_clock_mhz": 1200.0 + 100 * i if sm else None,
                "mem_clock_mhz": 9751.0 if mem else None,
            }
        )
    return PowerAnalysis.from_json(
        {
            "run": {"gpu_name": "RTX 3090", "n_gpus": n_gpus, "default_limit_w": 300.0},
            "caps": caps,
        }
    )


def test_has_clocks_needs_one_reading_of_either_clock() -> None:
    assert has_clocks(_three_cap_analysis())
    assert has_clocks(_three_cap_analysis(sm=False))
    assert not has_clocks(_three_cap_analysis(sm=False, mem=False))


def test_power_chart_of_a_pair_compares_the_summed_draw_with_twice_the_cap() -> None:
    fig = power_figure(_three_cap_analysis(n_gpus=2), title="pair")
    ax = fig.axes[0]
    ideal = one_by_gid(ax.lines, "draw-equals-cap")
    assert ideal.get_label() == "draw = cap x 2 GPUs"
    assert ax.get_xlabel() == "power cap (W per GPU)"
    assert ax.get_ylabel() == "mean draw under load (W, all GPUs)"
    draw = np.asarray(one_by_gid(ax.lines, "power").get_ydata(), dtype=float)
    assert draw.tolist() == [390.0, 490.0, 590.0]
    assert fig.get_suptitle() == "pair"


def test_the_draw_carries_its_stated_95_interval_as_an_error_bar() -> None:
    plain_analysis = _three_cap_analysis()
    stated = [2.0, None, 0.5]  # the middle cap states none: no bar, never a zero-width one
    caps = [
        dataclasses.replace(row, figures=dataclasses.replace(row.figures, power_u95_pct=u95))
        for row, u95 in zip(plain_analysis.caps, stated, strict=True)
    ]
    ax = power_figure(dataclasses.replace(plain_analysis, caps=caps)).axes[0]
    (bars,) = [c for c in ax.containers if c.get_label() == "measured draw ±95%"]
    segments = [seg for seg in bars.lines[2][0].get_segments() if len(seg)]
    halves = [(seg[1][1] - seg[0][1]) / 2 for seg in segments]
    assert halves == pytest.approx([195.0 * 0.02, 295.0 * 0.005])
    legend = ax.get_legend()
    assert legend is not None
    assert "measured draw ±95%" in [t.get_text() for t in legend.get_texts()]
    # an analysis that states no draw interval draws the plain line
    plain = power_figure(_three_cap_analysis()).axes[0]
    assert not plain.containers
    assert one_by_gid(plain.lines, "power").get_label() == "measured draw"


def test_clocks_chart_uses_a_second_axis_only_for_both_clocks() -> None:
    both = clocks_figure(_three_cap_analysis())
    assert len(both.axes) == 2
    assert both.axes[0].get_ylabel() == "SM clock (MHz)"
    assert both.axes[1].get_ylabel() == "memory clock (MHz)"
    assert both.axes[0].get_ylim() == pytest.approx((0.0, 1400.0 * 1.3))
    mem_only = clocks_figure(_three_cap_analysis(sm=False))
    assert len(mem_only.axes) == 1
    gids = [line.get_gid() for line in mem_only.axes[0].lines]
    assert "mem_clock" in gids and "sm_clock" not in gids
    with pytest.raises(UsageError, match="no clock readings"):
        clocks_figure(_three_cap_analysis(sm=False, mem=False))


def test_per_tick_without_t_s_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"samples\.csv has no t_s column"):
        per_tick(pl.DataFrame({"tick": [0], "power_w": [1.0]}))


def test_per_tick_fills_missing_columns_as_unknown() -> None:
    samples = {"t_s": [0.0, 0.0], "tick": [0, 0], "gpu_index": [0, 1], "power_w": [1.0, 2.0]}
    ticks = per_tick(pl.DataFrame(samples))
    assert ticks["power_w"].to_list() == [3.0]
    assert ticks["cap_w"].to_list() == [None] and ticks["temp_c"].to_list() == [None]


def test_per_tick_groups_by_time_without_a_tick_column() -> None:
    samples = pl.DataFrame(
        {
            "t_s": [1.0, 0.0, 1.0, 0.0],
            "gpu_index": [1, 0, 0, 1],
            "power_w": [100.0, 90.0, 110.0, 95.0],
            "sm_clock_mhz": [1000.0, 1500.0, 1510.0, 1010.0],
        }
    )
    ticks = per_tick(samples)
    assert ticks["t_s"].to_list() == [0.0, 1.0]
    assert ticks["power_w"].to_list() == [185.0, 210.0]
    assert ticks["sm_clock_mhz"].to_list() == [1500.0, 1510.0]  # the first GPU's, not GPU 1's
    assert ticks["cap_w"].to_list() == [None, None]  # absent: unknown


def test_timeline_draws_the_combined_cap_and_a_line_at_each_cap_change() -> None:
    samples = pl.DataFrame(
        {
            "t_s": [0.0, 0.0, 1.0, 1.0, 2.0, 2.0],
            "tick": [0, 0, 1, 1, 2, 2],
            "gpu_index": [0, 1] * 3,
            "cap_w": [300.0, 300.0, 300.0, 300.0, 250.0, 250.0],
            "power_w": [280.0, 270.0, 281.0, 271.0, 240.0, 239.0],
            "temp_c": [60.0, 65.0, 61.0, 66.0, 59.0, 64.0],
            "sm_clock_mhz": [1500.0] * 6,
        }
    )
    fig = timeline_figure(samples, _three_cap_analysis(n_gpus=2))
    ax_p, ax_t, _ = fig.axes
    cap = np.asarray(one_by_gid(ax_p.lines, "cap").get_ydata(), dtype=float)
    assert cap.tolist() == [600.0, 600.0, 500.0]
    draw = np.asarray(one_by_gid(ax_p.lines, "power").get_ydata(), dtype=float)
    assert draw.tolist() == [550.0, 552.0, 479.0]
    temp = np.asarray(one_by_gid(ax_t.lines, "temp").get_ydata(), dtype=float)
    assert temp.tolist() == [65.0, 66.0, 64.0]
    (steps,) = [c for c in ax_p.collections if c.get_gid() == "cap-steps"]
    assert [seg[0][0] for seg in steps.get_segments()] == [2.0]
    assert fig.get_suptitle() == "2x RTX 3090: timeline of the sweep"


def test_a_timeline_needs_samples() -> None:
    with pytest.raises(UsageError, match=r"samples\.csv has no rows to plot"):
        timeline_figure(pl.DataFrame({"t_s": []}))
