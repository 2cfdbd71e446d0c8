"""The main chart: TPS and TPS/W against the power cap, with the sweet spot called out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Unpack

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.container import Container, ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.transforms import Bbox, blended_transform_factory

from powersweep.analysis.result_types import Pick, PowerAnalysis, known
from powersweep.plots._data import (
    AnalysisView,
    FloatArray,
    fmt_w,
    parse_analysis,
    pct_by_gpu,
)
from powersweep.plots._decor import (
    cap_axis_label,
    draw_default_line,
    draw_plateau_spans,
    label_default,
    label_plateaus,
    set_header,
    x_limits,
)
from powersweep.plots._frame import LineStyle, laid_out, with_bars
from powersweep.plots._layout import (
    Obstacles,
    grid_candidates,
    place_legend,
    place_text,
)
from powersweep.plots._style import COLORS, new_figure, style
from powersweep.runformat import as_float

# Headroom above the highest point so that labels have somewhere to go.
_HEADROOM = 1.32

SWEET_GID = "sweet-spot-callout"
NEAR_PEAK_GID = "near-peak-label"


def fmt_tpw(value: float) -> str:
    """TPS/W with three significant digits, never in scientific notation for real values."""
    if not value >= 0.001:
        return f"{value:.2e}"
    # '#' keeps significant trailing zeros (0.240, not 0.24); a bare trailing point goes.
    return f"{value:#.3g}".rstrip(".")


def sweet_spot_text(view: AnalysisView) -> str:
    """The callout text: cap, TPS/W, TPS and % of the default limit."""
    spot = view.sweet_spot
    assert spot is not None
    title = {"none": "Best measured", "boundary": "Best cap (boundary)"}.get(
        view.answer_kind, "Sweet spot"
    )
    lines = [f"{title}: {fmt_w(spot.cap_w)}"]
    facts = [f"{fmt_tpw(as_float(spot.tps_per_w))} TPS/W"]
    tps, pct = as_float(spot.tps), as_float(spot.pct_of_default)
    if math.isfinite(tps):
        facts.append(f"{tps:.1f} TPS")
    lines.append("  ·  ".join(facts))
    by_gpu = pct_by_gpu(spot)
    if by_gpu:
        pcts = " / ".join(f"{p:.0f}%" for p in by_gpu)
        lines.append(f"{pcts} of each card's default")
    elif math.isfinite(pct):
        lines.append(f"{pct:.0f}% of default limit")
    if view.answer_kind == "none":
        lines.append("no answer: see the summary")
        return "\n".join(lines)
    near = view.near_peak
    if near is not None and near.cap_w == spot.cap_w:
        # The near-peak diamond is not drawn on top of the star; the callout says it instead.
        lines.append("also the near-peak cap")
    boundary = known(spot.at_boundary)
    if boundary == "low":
        lines.append("lowest cap swept: try lower")
    elif boundary == "high":
        lines.append("highest cap swept: try higher")
    return "\n".join(lines)


def _ylim_top(*arrays: np.ndarray) -> float:
    finite = np.concatenate([a[np.isfinite(a)] for a in arrays])
    top = float(finite.max()) if len(finite) else 1.0
    return top * _HEADROOM if top > 0 else 1.0


def efficiency_figure(analysis: PowerAnalysis, title: str | None = None) -> Figure:
    """Builds the efficiency chart: TPS (left axis) and TPS/W (right axis, dashed) per cap.

    Failed caps are gaps (NaN) with a grey cross on the x axis. The sweet spot gets a callout
    with an arrow; the near-peak cap, plateaus and the default limit are marked and labelled.
    Labels are placed from the drawn geometry so that they overlap neither each other, nor the
    legend, nor the curves.

    Args:
        analysis: The typed analysis.
        title: Figure title; defaults to the GPU name.

    Returns:
        The laid-out figure (Agg canvas attached), ready to save.

    Raises:
        UsageError: The analysis has no cap to plot.
    """
    view = parse_analysis(analysis)
    with style():
        return _build(view, title)


def _build(view: AnalysisView, title: str | None) -> Figure:
    fig = new_figure()
    ax = fig.add_subplot()
    ax2 = ax.twinx()
    ax2.grid(False)
    ax2.spines["top"].set_visible(False)

    set_header(fig, ax, view, title, "tokens per watt vs power cap")
    ax.set_xlabel(cap_axis_label(view))
    tps_name = "prefill TPS" if view.is_prefill else "decode TPS"
    ax.set_ylabel(f"{tps_name} (tokens/s)")
    tpw_source = "prefill" if view.is_prefill else "narrative"
    ax2.set_ylabel(f"TPS/W ({tpw_source} tokens/s per W)", color=COLORS["tps_per_w"])
    ax2.tick_params(axis="y", colors=COLORS["tps_per_w"])

    draw_plateau_spans(ax, view)
    drawn = _plot_curves(ax, ax2, view)
    markers = _plot_markers(ax2, view)
    lines: list[Line2D] = drawn.lines + markers
    handles: list[Artist | Container] = drawn.handles + list(markers)

    curve = view.curve
    tps_top = curve.tps + np.nan_to_num(curve.half_width(curve.tps, curve.tps_u95_pct))
    tpw_half = curve.half_width(curve.tps_per_w, curve.tps_per_w_u95_pct)
    ax.set_xlim(*x_limits(view))
    ax.set_ylim(0.0, _ylim_top(tps_top, curve.code_tps))
    ax2.set_ylim(0.0, _ylim_top(curve.tps_per_w + np.nan_to_num(tpw_half)))

    legend = ax2.legend(handles=handles, loc="upper left", ncols=1, fontsize=7.5)
    legend.set_zorder(7)
    renderer, obstacles = laid_out(fig, lines)
    area = ax.get_window_extent(renderer)
    for line, half in drawn.bars:
        obstacles.add_points(str(line.get_gid()), _bar_points(line, half))
    draw_default_line(ax, view, obstacles)
    place_legend(legend, renderer, obstacles)
    # The default limit's label has few places (beside its line): it goes before the callouts,
    # whose arrows then steer round it.
    label_default(ax2, view, renderer, obstacles, area)

    spot = view.sweet_spot
    if spot is not None:
        _callout_sweet_spot(ax2, view, spot, renderer, obstacles, area)
    near = view.near_peak if view.answer_kind != "none" else None
    if near is not None and (spot is None or near.cap_w != spot.cap_w):
        _callout_near_peak(ax2, near, renderer, obstacles, area)

    label_plateaus(ax2, view, renderer, obstacles, area)
    return fig


def _with_bars(
    ax: Axes,
    x: FloatArray,
    y: FloatArray,
    half: FloatArray,
    label: str,
    **style: Unpack[LineStyle],
) -> tuple[Line2D, Artist | Container]:
    """:func:`~powersweep.plots._frame.with_bars`, the bars' caps as thick as the bars, the
    bars just under their curve and the curve named by its gid."""
    line, handle = with_bars(ax, x, y, half, label, capthick=0.9, **style)
    if isinstance(handle, ErrorbarContainer):
        line.set_gid(style.get("gid"))
        for part in [*handle.lines[1], *handle.lines[2]]:
            part.set_zorder(float(style.get("zorder", 3)) - 0.05)
    return line, handle


def _bar_points(line: Line2D, half: FloatArray) -> FloatArray:
    """Display points at the ends of a line's error bars, so no label covers them."""
    x = np.asarray(line.get_xdata(), dtype=np.float64)
    y = np.asarray(line.get_ydata(), dtype=np.float64)
    ok = np.isfinite(half) & np.isfinite(y)
    if not ok.any():
        return np.empty((0, 2))
    ends = np.concatenate([y[ok] - half[ok], y[ok] + half[ok]])
    xy = np.column_stack([np.concatenate([x[ok], x[ok]]), ends])
    return np.asarray(line.get_transform().transform(xy), dtype=np.float64)


@dataclass
class _Drawn:
    """What the curves drew: lines (their geometry for the layout), legend handles, bar ends."""

    lines: list[Line2D] = field(default_factory=list)
    handles: list[Artist | Container] = field(default_factory=list)
    bars: list[tuple[Line2D, FloatArray]] = field(default_factory=list)

    def add(self, line: Line2D, handle: Artist | Container, half: FloatArray | None = None) -> None:
        self.lines.append(line)
        self.handles.append(handle)
        if half is not None:
            self.bars.append((line, half))


def _plot_curves(ax: Axes, ax2: Axes, view: AnalysisView) -> _Drawn:
    """TPS (and code TPS) on the left axis, TPS/W on the right, each with its stated 95%
    interval; failed caps along the bottom."""
    curve = view.curve
    drawn = _Drawn()
    main_label = "prefill TPS" if view.is_prefill else "narrative TPS"
    tps_half = curve.half_width(curve.tps, curve.tps_u95_pct)
    line, handle = _with_bars(
        ax,
        curve.cap_w,
        curve.tps,
        tps_half,
        main_label,
        marker="o",
        color=COLORS["tps"],
        gid="tps",
        zorder=3,
    )
    drawn.add(line, handle, tps_half)
    if not view.is_prefill and np.isfinite(curve.code_tps).any():
        # Code TPS often equals narrative TPS: hollow squares on top stay visible around the
        # narrative dots, where a line under them would vanish.
        (code_line,) = ax.plot(
            curve.cap_w,
            curve.code_tps,
            linestyle=":",
            marker="s",
            markersize=6.0,
            markerfacecolor="none",
            markeredgewidth=1.0,
            color=COLORS["code_tps"],
            linewidth=1.0,
            label="code TPS",
            gid="code_tps",
            zorder=3.4,
        )
        drawn.add(code_line, code_line)
    tpw_half = curve.half_width(curve.tps_per_w, curve.tps_per_w_u95_pct)
    line, handle = _with_bars(
        ax2,
        curve.cap_w,
        curve.tps_per_w,
        tpw_half,
        "TPS/W",
        linestyle="--",
        marker="o",
        markersize=3.0,
        color=COLORS["tps_per_w"],
        gid="tps_per_w",
        zorder=3,
    )
    drawn.add(line, handle, tpw_half)
    if curve.set_aside_cap_w.size:
        aside_half = curve.half_width(curve.set_aside_tps_per_w, curve.set_aside_tps_per_w_u95_pct)
        line, handle = _with_bars(
            ax2,
            curve.set_aside_cap_w,
            curve.set_aside_tps_per_w,
            aside_half,
            "outlier (left out of the picks)",
            linestyle="none",
            marker="o",
            markersize=6,
            markerfacecolor="none",
            markeredgecolor=COLORS["failed"],
            color=COLORS["failed"],
            gid="set_aside",
            zorder=4,
        )
        drawn.add(line, handle, aside_half)
    if curve.failed.any():
        failed_caps = curve.cap_w[curve.failed]
        (failed_line,) = ax.plot(
            failed_caps,
            np.full(len(failed_caps), 0.035),
            linestyle="none",
            marker="x",
            markersize=5,
            color=COLORS["failed"],
            label="failed cap (no data)",
            gid="failed",
            transform=blended_transform_factory(ax.transData, ax.transAxes),
            clip_on=False,
            zorder=4,
        )
        drawn.add(failed_line, failed_line)

    return drawn


def _plot_markers(ax2: Axes, view: AnalysisView) -> list[Line2D]:
    """The sweet spot's star and the near-peak cap's diamond on the TPS/W curve."""
    handles: list[Line2D] = []
    spot = view.sweet_spot
    answered = view.answer_kind != "none"
    if spot is not None:
        (spot_marker,) = ax2.plot(
            [spot.cap_w],
            [as_float(spot.tps_per_w)],
            linestyle="none",
            marker="*",
            markersize=13,
            # no answer: the best reading is hollow, never the gold star of a sweet spot
            markerfacecolor=COLORS["sweet_spot"] if answered else "none",
            markeredgecolor="#333333",
            markeredgewidth=0.8,
            zorder=5,
            gid="sweet-spot-marker",
            label={"none": "best measured (no answer)", "boundary": "best cap (boundary)"}.get(
                view.answer_kind, "sweet spot"
            ),
        )
        handles.append(spot_marker)
    near = view.near_peak if answered else None
    if near is not None and (spot is None or near.cap_w != spot.cap_w):
        (near_marker,) = ax2.plot(
            [near.cap_w],
            [as_float(near.tps_per_w)],
            linestyle="none",
            marker="D",
            markersize=5.5,
            markerfacecolor=COLORS["near_peak"],
            markeredgecolor="#1e5631",
            markeredgewidth=0.6,
            zorder=5,
            gid="near-peak-marker",
            label="near-peak cap",
        )
        handles.append(near_marker)

    return handles


def _callout_sweet_spot(
    ax2: Axes,
    view: AnalysisView,
    spot: Pick,
    renderer: RendererBase,
    obstacles: Obstacles,
    area: Bbox,
) -> None:
    xy = (spot.cap_w, as_float(spot.tps_per_w))
    anchor = ax2.transData.transform(xy)
    callout = ax2.annotate(
        sweet_spot_text(view),
        xy=xy,
        xycoords="data",
        xytext=(0.5, 0.5),
        textcoords="axes fraction",
        ha="center",
        va="center",
        fontsize=8,
        zorder=8,
        gid=SWEET_GID,
        bbox={"boxstyle": "round,pad=0.45", "fc": "#fffbe6", "ec": "#b7950b", "lw": 0.9},
        arrowprops={
            "arrowstyle": "-|>",
            "color": "#7d6608",
            "lw": 1.0,
            "shrinkA": 0.0,
            "shrinkB": 7.0,
            "connectionstyle": "arc3,rad=0.0",
        },
        annotation_clip=False,
    )
    callout.set_in_layout(False)
    cands = grid_candidates(anchor, area, min_dist_px=60.0)
    place_text(callout, cands, renderer, obstacles, area, anchor_px=anchor)


def _callout_near_peak(
    ax2: Axes, near: Pick, renderer: RendererBase, obstacles: Obstacles, area: Bbox
) -> None:
    xy = (near.cap_w, as_float(near.tps_per_w))
    anchor = ax2.transData.transform(xy)
    loss_pct = as_float(near.tps_loss_pct)
    loss = f"\n{loss_pct:.1f}% below peak TPS" if math.isfinite(loss_pct) else ""
    near_label = ax2.annotate(
        f"near peak: {fmt_w(near.cap_w)}{loss}",
        xy=xy,
        xycoords="data",
        xytext=(0.5, 0.5),
        textcoords="axes fraction",
        ha="center",
        va="center",
        fontsize=7.5,
        color="#1e5631",
        zorder=8,
        gid=NEAR_PEAK_GID,
        bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": "#7dcea0", "lw": 0.7},
        arrowprops={"arrowstyle": "-", "color": "#1e5631", "lw": 0.8, "shrinkB": 4.0},
        annotation_clip=False,
    )
    near_label.set_in_layout(False)
    cands = grid_candidates(anchor, area, min_dist_px=35.0)
    place_text(near_label, cands, renderer, obstacles, area, anchor_px=anchor)
