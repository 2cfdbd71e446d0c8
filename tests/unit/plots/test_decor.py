"""powersweep.plots._decor: the decorations every per-run chart shares. The cap step and x range,
plateau bands (a one-cap plateau widened to a step), their labels, the default-limit line (one
per card on a rig of different cards), the header and the cap axis label."""

from __future__ import annotations

from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from powersweep.analysis.result_types import Plateau, PowerAnalysis
from powersweep.plots._data import AnalysisView, parse_analysis
from powersweep.plots._decor import (
    DEFAULT_GID,
    cap_axis_label,
    cap_step_w,
    draw_default_line,
    draw_plateau_spans,
    label_default,
    plateau_bounds,
    plateau_label_text,
    set_header,
    x_limits,
)
from powersweep.plots._layout import Obstacles


def _view(caps: list[float], **changes: Any) -> AnalysisView:
    analysis: dict[str, Any] = {
        "run": {"gpu_name": "NVIDIA GeForce RTX 3090", "n_gpus": 1, "default_limit_w": 370},
        "caps": [{"cap_w": c, "tps": 20.0, "power_w": c} for c in caps],
    }
    return parse_analysis(PowerAnalysis.from_json({**analysis, **changes}))


def _ax() -> tuple[Figure, Any]:
    fig = Figure(figsize=(4, 3), dpi=50)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def test_cap_step_is_the_median_spacing_or_a_hundredth_of_a_lone_cap() -> None:
    assert cap_step_w(_view([200, 210, 220, 260, 270])) == 10.0
    assert cap_step_w(_view([300, 300])) == 3.0  # one distinct cap
    assert cap_step_w(_view([50])) == 1.0  # at least 1 W


def test_x_limits_cover_caps_plateaus_and_the_default_with_a_margin() -> None:
    view = _view([200, 250, 300], plateaus=[{"kind": "draw_ceiling", "start_w": 300, "end_w": 420}])
    lo, hi = x_limits(view)
    # 200..420 (the plateau reaches past the caps): half a step (25 W) beats 4% (8.8 W)
    assert (lo, hi) == (175.0, 445.0)
    wide = _view([100.0 + 10 * i for i in range(31)], run={"default_limit_w": 450})
    assert x_limits(wide) == pytest.approx((100 - 14.0, 450 + 14.0))  # 4% of 350 > 5 W


def test_a_one_cap_plateau_is_widened_to_half_a_step_each_side() -> None:
    assert plateau_bounds(Plateau("boost_plateau", 250, 270, 240.0), 10) == (250, 270)
    assert plateau_bounds(Plateau("boost_plateau", 250, 250, 240.0), 10) == (245, 255)


def test_plateau_labels_say_the_draw_when_known() -> None:
    assert plateau_label_text(Plateau("boost_plateau", 1, 2, 241.6)) == (
        "boost plateau\n~242 W draw"
    )
    assert plateau_label_text(Plateau("draw_ceiling", 1, 2, None)) == "draw ceiling"


def test_plateau_spans_are_shaded_by_kind() -> None:
    view = _view(
        [200, 250, 300],
        plateaus=[
            {"kind": "boost_plateau", "start_w": 250, "end_w": 250},
            {"kind": "draw_ceiling", "start_w": 280, "end_w": 300},
        ],
    )
    _, ax = _ax()
    boost, ceiling = draw_plateau_spans(ax, view)
    assert boost.get_gid() == "plateau:boost_plateau" and boost.get_hatch() is None
    assert ceiling.get_gid() == "plateau:draw_ceiling" and ceiling.get_hatch() == "///"
    # a one-cap plateau: half of the 50 W step each side
    assert (boost.get_x(), boost.get_width()) == pytest.approx((225.0, 50.0))
    assert (ceiling.get_x(), ceiling.get_width()) == pytest.approx((280.0, 20.0))


def test_one_default_line_per_distinct_card_default_or_none_when_unknown() -> None:
    _, ax = _ax()
    obstacles = Obstacles()
    assert (
        draw_default_line(ax, _view([200, 300], run={"default_limit_w": None}), obstacles) is None
    )
    assert not ax.lines
    mixed = _view(
        [200, 300],
        run={
            "gpu_names": ["NVIDIA GeForce RTX 3090 (simulated)", "NVIDIA GeForce RTX 4090"],
            "default_limits_w": [370, 450],
            "default_limit_w": 410,
        },
    )
    draw_default_line(ax, mixed, obstacles)
    xs = sorted(line.get_xdata()[0] for line in ax.lines if line.get_gid() == DEFAULT_GID)
    assert xs == [370, 450]  # each card's, not the mean
    assert len(obstacles.points[DEFAULT_GID]) > 0


def test_default_labels_name_each_card_shortly() -> None:
    fig, ax = _ax()
    mixed = _view(
        [200, 300],
        run={
            "gpu_names": ["NVIDIA GeForce RTX 3090 (simulated)", "NVIDIA GeForce RTX 4090"],
            "default_limits_w": [370, 450.5],
        },
    )
    ax.set_xlim(*x_limits(mixed))
    renderer = fig.canvas.get_renderer()
    obstacles = Obstacles()
    draw_default_line(ax, mixed, obstacles)
    label_default(ax, mixed, renderer, obstacles, ax.get_window_extent(renderer))
    texts = [t.get_text() for t in ax.texts if t.get_gid() == "default-tdp-label"]
    assert texts == ["RTX 3090 default 370 W", "RTX 4090 default 450.5 W"]
    single = _view([200, 300])
    _, ax2 = _ax()
    label_default(ax2, single, renderer, Obstacles(), ax.get_window_extent(renderer))
    assert [t.get_text() for t in ax2.texts] == ["default limit 370 W"]


def test_header_names_the_gpu_and_what_the_chart_shows() -> None:
    fig, ax = _ax()
    view = _view([200, 300], run={"gpu_name": "RTX 3090", "n_gpus": 2, "cooling": "air"})
    set_header(fig, ax, view, None, "power draw vs power cap")
    assert fig.get_suptitle() == "2x RTX 3090: power draw vs power cap"
    assert ax.get_title(loc="left") == "air-cooled"  # the GPU is in the title already
    fig2, ax2 = _ax()
    set_header(fig2, ax2, view, "My title", "power draw vs power cap")
    assert fig2.get_suptitle() == "My title"
    assert ax2.get_title(loc="left") == "2x RTX 3090  ·  air-cooled"
    fig3, ax3 = _ax()
    set_header(fig3, ax3, None, None, "timeline of the sweep")
    assert fig3.get_suptitle() == "Timeline of the sweep"


def test_cap_axis_says_per_gpu_on_a_multi_gpu_run() -> None:
    assert cap_axis_label(_view([200])) == "power cap (W)"
    assert cap_axis_label(_view([200], run={"n_gpus": 4})) == "power cap (W per GPU)"
