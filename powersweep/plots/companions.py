"""Companion charts: draw vs cap, clocks vs cap, and the timeline of the whole sweep."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.container import Container
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D

from powersweep.analysis.result_types import PowerAnalysis
from powersweep.errors import UsageError
from powersweep.plots._data import AnalysisView, FloatArray, parse_analysis
from powersweep.plots._decor import (
    cap_axis_label,
    draw_default_line,
    draw_plateau_spans,
    label_default,
    label_plateaus,
    set_header,
    x_limits,
)
from powersweep.plots._frame import laid_out, settle_legend, with_bars
from powersweep.plots._layout import place_legend
from powersweep.plots._style import COLORS, new_figure, style


def _finite(*arrays: FloatArray) -> FloatArray:
    joined = np.concatenate([np.asarray(a, dtype=np.float64) for a in arrays])
    return joined[np.isfinite(joined)]


def _finish(
    fig: Figure,
    ax: Axes,
    label_ax: Axes,
    view: AnalysisView,
    lines: list[Line2D],
    handles: Sequence[Artist | Container] | None = None,
) -> None:
    """Lays the figure out, then places legend, plateau and default-limit labels collision-free
    (``handles``: the legend's, where a curve's is its error bars; else the ``lines``)."""
    legend: Legend = label_ax.legend(
        handles=list(handles) if handles is not None else lines, loc="upper left", fontsize=7.5
    )
    legend.set_zorder(7)
    renderer, obstacles = laid_out(fig, lines)
    area = ax.get_window_extent(renderer)
    draw_default_line(ax, view, obstacles)
    place_legend(legend, renderer, obstacles)
    label_plateaus(label_ax, view, renderer, obstacles, area)
    label_default(label_ax, view, renderer, obstacles, area)


def power_figure(analysis: PowerAnalysis, title: str | None = None) -> Figure:
    """Actual draw against the cap, with the ``draw = cap`` line.

    Where the points leave the line the card no longer uses what the cap allows (a boost
    plateau or a draw ceiling, both shaded).

    Args:
        analysis: The typed analysis.
        title: Figure title; defaults to the GPU name.
    """
    view = parse_analysis(analysis)
    with style():
        curve = view.curve
        n_gpus = view.run.n_gpus or 1
        fig = new_figure()
        ax = fig.add_subplot()
        set_header(fig, ax, view, title, "power draw vs power cap")
        ax.set_xlabel(cap_axis_label(view))
        ax.set_ylabel(
            "mean draw under load (W, all GPUs)" if n_gpus > 1 else "mean draw under load (W)"
        )
        draw_plateau_spans(ax, view)
        x_lo, x_hi = x_limits(view)
        ideal = np.array([x_lo, x_hi])
        label = "draw = cap" if n_gpus == 1 else f"draw = cap x {n_gpus} GPUs"
        (ideal_line,) = ax.plot(
            ideal,
            ideal * n_gpus,
            linestyle=":",
            color=COLORS["cap"],
            linewidth=1.2,
            label=label,
            gid="draw-equals-cap",
            zorder=2,
        )
        draw_line, draw_handle = with_bars(
            ax,
            curve.cap_w,
            curve.power_w,
            curve.half_width(curve.power_w, curve.power_u95_pct),
            "measured draw",
            marker="o",
            color=COLORS["power"],
            ecolor=COLORS["power"],
            gid="power",
            zorder=3,
        )
        ax.set_xlim(x_lo, x_hi)
        ys = _finite(curve.power_w, curve.cap_w * n_gpus)
        y_lo, y_hi = float(ys.min()), float(ys.max())
        pad = 0.08 * max(y_hi - y_lo, 1.0)
        ax.set_ylim(max(0.0, y_lo - pad), y_hi + 2.5 * pad)
        _finish(fig, ax, ax, view, [draw_line, ideal_line], [draw_handle, ideal_line])
        return fig


def has_clocks(analysis: PowerAnalysis) -> bool:
    """True when the analysis carries at least one SM or memory clock reading."""
    curve = parse_analysis(analysis).curve
    return bool(np.isfinite(curve.sm_clock_mhz).any() or np.isfinite(curve.mem_clock_mhz).any())


def clocks_figure(analysis: PowerAnalysis, title: str | None = None) -> Figure:
    """SM clock (left axis) and memory clock (right axis) against the cap, plateaus shaded.

    Args:
        analysis: The typed analysis.
        title: Figure title; defaults to the GPU name.

    Raises:
        UsageError: The analysis has no clock readings.
    """
    view = parse_analysis(analysis)
    curve = view.curve
    has_sm = bool(np.isfinite(curve.sm_clock_mhz).any())
    has_mem = bool(np.isfinite(curve.mem_clock_mhz).any())
    if not (has_sm or has_mem):
        raise UsageError("the analysis has no clock readings to plot")
    with style():
        fig = new_figure()
        ax = fig.add_subplot()
        set_header(fig, ax, view, title, "clocks under load vs power cap")
        ax.set_xlabel(cap_axis_label(view))
        draw_plateau_spans(ax, view)
        handles: list[Line2D] = []
        label_ax = ax
        if has_sm:
            (sm_line,) = ax.plot(
                curve.cap_w,
                curve.sm_clock_mhz,
                marker="o",
                color=COLORS["sm_clock"],
                label="SM clock",
                gid="sm_clock",
                zorder=3,
            )
            handles.append(sm_line)
            ax.set_ylabel("SM clock (MHz)", color=COLORS["sm_clock"])
            sm = _finite(curve.sm_clock_mhz)
            ax.set_ylim(0.0, float(sm.max()) * 1.3)
        if has_mem:
            mem_ax = ax.twinx() if has_sm else ax
            if has_sm:
                mem_ax.grid(False)
                mem_ax.spines["top"].set_visible(False)
                label_ax = mem_ax
            (mem_line,) = mem_ax.plot(
                curve.cap_w,
                curve.mem_clock_mhz,
                marker="s",
                markersize=3.0,
                linestyle="--",
                color=COLORS["mem_clock"],
                label="memory clock",
                gid="mem_clock",
                zorder=3,
            )
            handles.append(mem_line)
            mem_ax.set_ylabel("memory clock (MHz)", color=COLORS["mem_clock"])
            mem = _finite(curve.mem_clock_mhz)
            mem_ax.set_ylim(0.0, float(mem.max()) * 1.3)
        ax.set_xlim(*x_limits(view))
        _finish(fig, ax, label_ax, view, handles)
        return fig


def _col(df: pl.DataFrame, name: str) -> FloatArray:
    """A column as float64 with nulls as NaN; all-NaN when absent."""
    if name not in df.columns:
        return np.full(df.height, math.nan)
    series = df.get_column(name).cast(pl.Float64, strict=False).fill_null(math.nan)
    return np.asarray(series.to_numpy(), dtype=np.float64)


def per_tick(samples: pl.DataFrame) -> pl.DataFrame:
    """One row per sampler tick: run time, cap, summed draw, hottest GPU, first GPU's SM clock.

    A tick where any GPU's draw failed to read gets a null sum rather than an undercount.

    Raises:
        UsageError: The samples lack ``t_s``.
    """
    if "t_s" not in samples.columns:
        raise UsageError("samples.csv has no t_s column; is it a powersweep samples.csv?")
    df = samples
    if "tick" not in df.columns:  # an older samples.csv: one tick per sampled time
        df = df.with_columns(pl.col("t_s").alias("tick"))
    for name in ("t_s", "cap_w", "power_w", "temp_c", "sm_clock_mhz", "gpu_index"):
        if name in df.columns:
            df = df.with_columns(pl.col(name).cast(pl.Float64, strict=False))
        else:
            df = df.with_columns(pl.lit(None, dtype=pl.Float64).alias(name))
    first_gpu = df.get_column("gpu_index").min()
    df = df.with_columns(
        pl.when(pl.col("gpu_index") == first_gpu)
        .then(pl.col("sm_clock_mhz"))
        .otherwise(None)
        .alias("sm_first"),
        pl.col("gpu_index").fill_null(-1),
    )
    return (
        df.group_by("tick")
        .agg(
            pl.col("t_s").min(),
            pl.col("cap_w").max(),
            pl.when(pl.col("power_w").is_null().any())
            .then(None)
            .otherwise(pl.col("power_w").sum())
            .alias("power_w"),
            pl.col("temp_c").max(),
            pl.col("sm_first").drop_nulls().first().alias("sm_clock_mhz"),
            pl.col("gpu_index").n_unique().alias("n_gpus"),
        )
        .sort("t_s")
    )


def _draw_cap_steps(axes: Sequence[Axes], t: FloatArray, cap: FloatArray) -> None:
    """A faint vertical line on every panel at each change of the cap."""
    changes = t[1:][np.diff(cap) != 0] if len(cap) > 1 else np.empty(0)
    for ax in axes:
        if len(changes):
            ax.vlines(
                changes,
                0.0,
                1.0,
                transform=ax.get_xaxis_transform(),
                colors="#cccccc",
                linewidth=0.6,
                zorder=1,
                gid="cap-steps",
            )


def _set_timeline_limits(
    panels: Sequence[tuple[Axes, FloatArray]], ax_time: Axes, t: FloatArray
) -> None:
    """Each panel's y range around its readings (room above for the legend), and the time
    range with a 1% margin."""
    for ax, values in panels:
        if len(values):
            lo, hi = float(values.min()), float(values.max())
            pad = 0.08 * max(hi - lo, 1.0)
            ax.set_ylim(max(0.0, lo - pad) if lo >= 0 else lo - pad, hi + pad * 2.5)
    finite_t = _finite(t)
    if len(finite_t):
        span = max(float(finite_t.max() - finite_t.min()), 1.0)
        ax_time.set_xlim(float(finite_t.min()) - 0.01 * span, float(finite_t.max()) + 0.01 * span)


def timeline_figure(
    samples: pl.DataFrame, analysis: PowerAnalysis | None = None, title: str | None = None
) -> Figure:
    """Draw (summed over GPUs), hottest temperature and SM clock over the whole sweep.

    The combined cap in force is drawn as a step line on the draw panel, and every cap change as
    a faint vertical line on all panels.

    Args:
        samples: samples.csv as a DataFrame (docs/run-format.md columns).
        analysis: The typed analysis, for the title and subtitle.
        title: Figure title.

    Raises:
        UsageError: The samples have no rows or no ``t_s``.
    """
    if samples.height == 0:
        raise UsageError("samples.csv has no rows to plot")
    ticks = per_tick(samples)
    view = parse_analysis(analysis) if analysis is not None else None
    t = _col(ticks, "t_s")
    cap = _col(ticks, "cap_w")
    n_gpus = _col(ticks, "n_gpus")
    combined_cap = cap * np.where(np.isfinite(n_gpus) & (n_gpus > 0), n_gpus, 1.0)
    draw = _col(ticks, "power_w")
    temp = _col(ticks, "temp_c")
    sm = _col(ticks, "sm_clock_mhz")
    with style():
        fig = new_figure(height_in=6.4)
        axes = fig.subplots(3, 1, sharex=True, height_ratios=[1.6, 1.0, 1.0])
        ax_p, ax_t, ax_c = axes
        set_header(fig, ax_p, view, title, "timeline of the sweep")
        _draw_cap_steps(axes, t, cap)
        ax_p.plot(
            t,
            combined_cap,
            drawstyle="steps-post",
            color=COLORS["cap"],
            linewidth=1.0,
            linestyle="--",
            label="cap in force (all GPUs)",
            gid="cap",
            zorder=2,
        )
        ax_p.plot(
            t,
            draw,
            color=COLORS["power"],
            linewidth=0.8,
            label="draw (sum over GPUs)",
            gid="power",
            zorder=3,
        )
        ax_p.set_ylabel("power (W)")
        legend = ax_p.legend(loc="upper left", fontsize=7.5, ncols=2)
        ax_t.plot(t, temp, color=COLORS["temp"], linewidth=0.8, gid="temp", zorder=3)
        ax_t.set_ylabel("hottest GPU (°C)")
        ax_c.plot(t, sm, color=COLORS["sm_clock"], linewidth=0.8, gid="sm_clock", zorder=3)
        ax_c.set_ylabel("SM clock (MHz)")
        ax_c.set_xlabel("run time (s)")
        panels = ((ax_p, _finite(draw, combined_cap)), (ax_t, _finite(temp)), (ax_c, _finite(sm)))
        _set_timeline_limits(panels, ax_c, t)
        fig.align_ylabels(axes)
        settle_legend(fig, legend, ax_p.lines)
        return fig
