"""powersweep.plots.clock_charts: the clock-lock charts, read from their artists. TPS/W against
the SM lock, one line per memory tier (dashed where the tier caps TPS) or against the memory lock
on a memory axis, the peak starred and called out on the side away from the middle; TPS against
draw with the Pareto front, the peak and a power-cap run overlaid; the files each writes, and
nothing to plot as one error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.axes import Axes

from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.errors import UsageError
from powersweep.plots.clock_charts import (
    PEAK_GID,
    TIER_COLORS,
    efficiency_by_clock_figure,
    pareto_figure,
    render_clock_charts,
)
from tests.chart_layout import layout_problems, unnamed_artists


def _clock_point(sm: float | None, mem: float | None, tps: float, power: float) -> dict[str, Any]:
    return {
        "sm_lock_mhz": sm,
        "mem_lock_mhz": mem,
        "tps": tps,
        "power_w": power,
        "tps_per_w": tps / power,
    }


FAST = [
    _clock_point(1200, 9501, 30.0, 200.0),
    _clock_point(1500, 9501, 36.0, 220.0),
    _clock_point(1800, 9501, 38.0, 260.0),
]
SLOW = [_clock_point(1200, 5001, 27.0, 190.0), _clock_point(1500, 5001, 29.0, 200.0)]


def _grid_analysis(**changes: Any) -> ClockAnalysis:
    peak = {**FAST[1], "tps_per_w_vs_fastest_pct": 11.9}
    base: dict[str, Any] = {
        "axis": "grid",
        "run": {"gpu_name": "RTX 3090", "load_mode": "decode-single"},
        "tiers": [
            {"mem_lock_mhz": 9501, "points": FAST},
            {"mem_lock_mhz": 5001, "caps_tps": True, "points": SLOW},
        ],
        "peak": peak,
        "pareto_front": [SLOW[0], FAST[0], FAST[1], FAST[2]],
    }
    return ClockAnalysis.from_json({**base, **changes})


def _line_by_label(ax: Axes, label: str) -> Any:
    (line,) = [x for x in ax.lines if x.get_label() == label]
    return line


def _xy(line: Any) -> tuple[list[float], list[float]]:
    return (
        np.asarray(line.get_xdata(), dtype=float).tolist(),
        np.asarray(line.get_ydata(), dtype=float).tolist(),
    )


def test_each_memory_tier_is_a_line_against_the_sm_lock() -> None:
    fig = efficiency_by_clock_figure(_grid_analysis())
    (ax,) = fig.axes
    fast, slow = _line_by_label(ax, "mem 9501 MHz"), _line_by_label(ax, "mem 5001 MHz (caps TPS)")
    assert _xy(fast) == ([1200.0, 1500.0, 1800.0], pytest.approx([0.15, 36 / 220, 38 / 260]))
    assert fast.get_color() == TIER_COLORS[0] and fast.get_linestyle() == "-"
    assert slow.get_color() == TIER_COLORS[1] and slow.get_linestyle() == "--"
    assert ax.get_xlabel() == "SM clock lock (MHz)" and ax.get_ylabel() == "TPS per W"
    assert fig.get_suptitle() == "RTX 3090: efficiency against clock locks (decode-single)"


def test_the_peak_is_starred_and_called_out_with_its_gain() -> None:
    (ax,) = efficiency_by_clock_figure(_grid_analysis(), title="my card").axes
    assert _xy(_line_by_label(ax, "efficiency peak")) == ([1500.0], [pytest.approx(36 / 220)])
    (callout,) = [t for t in ax.texts if t.get_gid() == PEAK_GID]
    assert callout.get_text() == (
        "Peak: SM 1500 / mem 9501 MHz\n0.164 TPS/W · 36.0 TPS\n+12% TPS/W vs fastest point"
    )
    # the peak sits left of the middle of 1200-1800 MHz: the callout goes right of it
    assert callout.get_horizontalalignment() == "left"
    assert ax.figure.get_suptitle().startswith("my card: ")  # type: ignore[union-attr]


def test_a_peak_right_of_the_middle_is_called_out_on_its_left_without_a_small_gain() -> None:
    peak = {**FAST[2], "tps_per_w_vs_fastest_pct": 0.2}
    (ax,) = efficiency_by_clock_figure(_grid_analysis(peak=peak)).axes
    (callout,) = [t for t in ax.texts if t.get_gid() == PEAK_GID]
    assert callout.get_horizontalalignment() == "right"
    assert "vs fastest point" not in callout.get_text()


def test_a_memory_axis_draws_against_the_memory_lock() -> None:
    points = [_clock_point(None, 9501, 36.0, 220.0), _clock_point(None, 5001, 29.0, 200.0)]
    analysis = _grid_analysis(
        axis="mem-clock",
        tiers=[
            {"mem_lock_mhz": 9501, "points": [points[0]]},
            {"mem_lock_mhz": 5001, "points": [points[1]]},
        ],
        peak=points[0],
    )
    (ax,) = efficiency_by_clock_figure(analysis).axes
    assert ax.get_xlabel() == "memory clock lock (MHz)"
    assert _xy(_line_by_label(ax, "TPS/W"))[0] == [5001.0, 9501.0]  # one line, by memory lock
    (callout,) = [t for t in ax.texts if t.get_gid() == PEAK_GID]
    assert callout.get_text().startswith("Peak: mem 9501 MHz\n")


def test_unlocked_points_read_as_memory_unlocked_and_unlocked() -> None:
    point = _clock_point(1500, None, 36.0, 220.0)
    analysis = _grid_analysis(
        axis="sm-clock", tiers=[{"mem_lock_mhz": None, "points": [point]}], peak=point
    )
    (ax,) = efficiency_by_clock_figure(analysis).axes
    assert _line_by_label(ax, "memory unlocked") is not None
    fig = pareto_figure(_grid_analysis(peak=_clock_point(None, None, 36.0, 220.0)))
    assert "efficiency peak (unlocked)" in [x.get_label() for x in fig.axes[0].lines]


def test_the_pareto_chart_scatters_each_tier_and_steps_along_the_front() -> None:
    fig = pareto_figure(_grid_analysis())
    (ax,) = fig.axes
    offsets = [c.get_offsets().tolist() for c in ax.collections]
    assert offsets == [
        [[200.0, 30.0], [220.0, 36.0], [260.0, 38.0]],
        [[190.0, 27.0], [200.0, 29.0]],
    ]
    front = _line_by_label(ax, "Pareto front (clock locks)")
    assert _xy(front) == ([190.0, 200.0, 220.0, 260.0], [27.0, 30.0, 36.0, 38.0])
    assert front.get_drawstyle() == "steps-post"
    assert _xy(_line_by_label(ax, "efficiency peak (SM 1500 / mem 9501 MHz)")) == ([220.0], [36.0])
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("draw (W)", "TPS")
    assert fig.get_suptitle() == "RTX 3090: TPS against draw (decode-single)"


def test_a_power_cap_run_is_overlaid_with_its_best_cap() -> None:
    power = PowerAnalysis.from_json(
        {
            "caps": [
                {"cap_w": 300, "status": "ok", "tps": 37.0, "power_w": 295.0},
                {"cap_w": 200, "status": "ok", "tps": 31.0, "power_w": 198.0},
                {"cap_w": 250, "status": "failed", "tps": None, "power_w": None},
            ],
            "sweet_spot": {"cap_w": 200, "tps": 31.0, "power_w": 198.0},
        }
    )
    (ax,) = pareto_figure(_grid_analysis(), power_analysis=power).axes
    assert _xy(_line_by_label(ax, "power caps")) == (
        [198.0, 295.0],
        [31.0, 37.0],
    )  # ok caps, by draw
    assert _xy(_line_by_label(ax, "best cap (200 W)")) == ([198.0], [31.0])


def test_nothing_measured_is_nothing_to_plot() -> None:
    empty = ClockAnalysis.from_json({"axis": "sm-clock"})
    for draw in (efficiency_by_clock_figure, pareto_figure):
        with pytest.raises(UsageError, match=r"^nothing to plot: no clock point measured ok$"):
            draw(empty)
    no_peak = _grid_analysis(peak=None)
    with pytest.raises(UsageError, match="nothing to plot"):
        efficiency_by_clock_figure(no_peak)
    assert pareto_figure(no_peak).axes  # the points can still be drawn


def test_render_writes_both_charts_or_the_comparison(tmp_path: Path) -> None:
    out = tmp_path / "charts"
    paths = render_clock_charts(_grid_analysis(), out, formats=("svg",))
    assert [p.name for p in paths] == ["clock-efficiency.svg", "clock-pareto.svg"]
    assert all(p.stat().st_size > 0 for p in paths)
    power = PowerAnalysis.from_json({"caps": [{"cap_w": 300, "tps": 37.0, "power_w": 295.0}]})
    (only,) = render_clock_charts(_grid_analysis(), out, power_analysis=power, only_pareto=True)
    assert only.name == "clocks-vs-power.png"
    with pytest.raises(UsageError):
        render_clock_charts(_grid_analysis(), out, formats=("bmp",))


def _stated(point: dict[str, Any], u_tps: float, u_tpw: float) -> dict[str, Any]:
    return {**point, "tps_u95_pct": u_tps, "tps_per_w_u95_pct": u_tpw}


def _bar_halves(ax: Axes) -> list[list[float]]:
    """Each error bar set's half-widths, in the order drawn."""
    return [
        [(seg[1][1] - seg[0][1]) / 2 for seg in c.lines[2][0].get_segments() if len(seg)]
        for c in ax.containers
    ]


def test_each_clock_point_carries_its_stated_interval_on_both_charts() -> None:
    fast = [_stated(p, 1.0 + i, 2.0 + i) for i, p in enumerate(FAST)]
    analysis = _grid_analysis(
        tiers=[{"mem_lock_mhz": 9501, "points": fast}, {"mem_lock_mhz": 5001, "points": SLOW}]
    )
    (ax,) = efficiency_by_clock_figure(analysis).axes
    # the tier that states none draws no bar
    assert _bar_halves(ax) == [
        pytest.approx([p["tps_per_w"] * p["tps_per_w_u95_pct"] / 100 for p in fast])
    ]
    legend = ax.get_legend()
    assert legend is not None
    assert "each point's stated 95% interval" in [t.get_text() for t in legend.get_texts()]
    (ax,) = pareto_figure(analysis).axes
    assert _bar_halves(ax) == [pytest.approx([p["tps"] * p["tps_u95_pct"] / 100 for p in fast])]


def test_pareto_points_carry_their_lock_in_mhz_and_no_marker_is_cut() -> None:
    fig = pareto_figure(_grid_analysis())
    (ax,) = fig.axes
    labels = sorted(t.get_text() for t in ax.texts if t.get_gid() == "lock-label")
    assert labels == ["1200", "1200", "1500", "1800"]  # the front: both tiers' 1200, 1500, 1800
    x_lo, x_hi = ax.get_xlim()
    y_lo, y_hi = ax.get_ylim()
    for p in [*FAST, *SLOW]:
        assert x_lo < p["power_w"] < x_hi and y_lo < p["tps"] < y_hi
    # a margin of at least a marker's size on every side
    px = ax.transData.transform([[p["power_w"], p["tps"]] for p in [*FAST, *SLOW]])
    box = ax.get_window_extent()
    assert (px[:, 0] - box.x0).min() > 10 and (box.x1 - px[:, 0]).min() > 10
    assert (px[:, 1] - box.y0).min() > 10 and (box.y1 - px[:, 1]).min() > 10
    assert not layout_problems(fig) and not unnamed_artists(fig)


def test_power_caps_over_the_clock_points_are_named_in_w_where_a_label_fits() -> None:
    caps = [
        {"cap_w": w, "status": "ok", "tps": 25.0 + 0.05 * w, "power_w": w - 2.0}
        for w in range(180, 310, 4)
    ]
    power = PowerAnalysis.from_json({"caps": caps, "sweet_spot": caps[10]})
    fig = pareto_figure(_grid_analysis(), power_analysis=power)
    (ax,) = fig.axes
    named = [t.get_text() for t in ax.texts if t.get_gid() == "cap-label"]
    # 33 caps 4 W apart: some are named, never all of them on top of each other
    assert named and len(named) < len(caps)
    assert all(text.endswith(" W") for text in named)
    assert not layout_problems(fig) and not unnamed_artists(fig)
