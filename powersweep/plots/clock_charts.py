"""Charts of a clock-lock sweep: TPS/W against the SM clock per memory tier (peak called out),
and TPS against draw with the Pareto front (and the power-cap curve of another run overlaid).

Drawn from the typed clock analysis alone (``powersweep.analysis.clock_analysis``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.transforms import Bbox

from powersweep.analysis.clock_result_types import ClockAnalysis, LockPoint, Tier
from powersweep.analysis.result_types import CapRow, PowerAnalysis
from powersweep.errors import UsageError
from powersweep.plots._data import FloatArray
from powersweep.plots._frame import ANSWER_STAR, halves, title_text
from powersweep.plots._layout import Candidate, Obstacles, line_points, place_or_drop
from powersweep.plots._style import (
    COLORS,
    freeze_layout,
    new_figure,
    style,
    write_charts,
)
from powersweep.runformat import as_float

# One colour per memory tier, fastest first (colour-blind friendly, distinct in greyscale).
TIER_COLORS = ("#1f5fa8", "#e67e22", "#27ae60", "#8e44ad", "#c0392b", "#7f8c8d", "#16a085")
PEAK_GID = "clock-peak-callout"
INTERVAL_LABEL = "each point's stated 95% interval"
LOCK_LABEL_GID = "lock-label"
CAP_LABEL_GID = "cap-label"


def _tier_name(mem: float | None) -> str:
    return f"mem {as_float(mem):.0f} MHz" if math.isfinite(as_float(mem)) else "memory unlocked"


def _label(p: LockPoint) -> str:
    parts = []
    if math.isfinite(as_float(p.sm_lock_mhz)):
        parts.append(f"SM {as_float(p.sm_lock_mhz):.0f}")
    if math.isfinite(as_float(p.mem_lock_mhz)):
        parts.append(f"mem {as_float(p.mem_lock_mhz):.0f}")
    return " / ".join(parts) + " MHz" if parts else "unlocked"


def _lock(p: LockPoint, by_mem: bool) -> float:
    """The point's lock on the chart's x axis (the memory lock on a memory-only axis)."""
    return as_float(p.mem_lock_mhz if by_mem else p.sm_lock_mhz)


def efficiency_by_clock_figure(analysis: ClockAnalysis, title: str | None = None) -> Figure:
    """TPS/W against the SM lock, one line per memory tier, the peak starred and labelled.

    On a memory-only axis the x axis is the memory lock instead.

    Args:
        analysis: The typed clock analysis.
        title: Figure title; defaults to the GPU name.

    Raises:
        UsageError: No usable point.
    """
    tiers, peak = analysis.tiers, analysis.peak
    if not tiers or peak is None:
        raise UsageError("nothing to plot: no clock point measured ok")
    by_mem = analysis.axis == "mem-clock"
    with style():
        fig = new_figure()
        ax = fig.add_subplot()
        _plot_tiers(ax, tiers, by_mem)
        x, y = _lock(peak, by_mem), as_float(peak.figures.tps_per_w)
        ax.plot([x], [y], markersize=16, zorder=5, label="efficiency peak", **ANSWER_STAR)
        _callout_peak(ax, peak, [_lock(p, by_mem) for t in tiers for p in t.points], x, y)
        ax.set_ylabel("TPS per W")
        every = [p for t in tiers for p in t.points]
        half = [h if math.isfinite(h) else 0.0 for h in halves(every, "tps_per_w")]
        ymax = max(as_float(p.figures.tps_per_w) + h for p, h in zip(every, half, strict=True))
        ymin = min(as_float(p.figures.tps_per_w) - h for p, h in zip(every, half, strict=True))
        span = max(ymax - ymin, 0.05 * ymax)
        # headroom above the curves for the legend, room below the peak for its callout
        ax.set_ylim(max(0.0, ymin - 0.9 * span), ymax + 0.55 * span)
        _legend(ax)
        fig.suptitle(title_text(analysis.run, title, "efficiency against clock locks"))
    return fig


def _plot_tiers(ax: Axes, tiers: Sequence[Tier], by_mem: bool) -> None:
    """One TPS/W line per memory tier against the SM lock, or one against the memory lock."""
    if by_mem:
        pts = sorted((p for t in tiers for p in t.points), key=lambda p: as_float(p.mem_lock_mhz))
        xs = [as_float(p.mem_lock_mhz) for p in pts]
        ax.plot(
            xs,
            [as_float(p.figures.tps_per_w) for p in pts],
            marker="o",
            color=TIER_COLORS[0],
            label="TPS/W",
        )
        _bars(ax, xs, pts, "tps_per_w", TIER_COLORS[0])
        ax.set_xlabel("memory clock lock (MHz)")
        return
    for i, t in enumerate(tiers):
        pts = [p for p in t.points if math.isfinite(as_float(p.sm_lock_mhz))]
        name = _tier_name(t.mem_lock_mhz) + (" (caps TPS)" if t.caps_tps else "")
        color = TIER_COLORS[i % len(TIER_COLORS)]
        xs = [as_float(p.sm_lock_mhz) for p in pts]
        ax.plot(
            xs,
            [as_float(p.figures.tps_per_w) for p in pts],
            marker="o",
            color=color,
            linestyle="--" if t.caps_tps else "-",
            label=name,
        )
        _bars(ax, xs, pts, "tps_per_w", color)
    ax.set_xlabel("SM clock lock (MHz)")


def _bars(
    ax: Axes,
    xs: Sequence[float],
    points: Sequence[LockPoint | CapRow],
    value: str,
    color: str,
    zorder: float = 2.5,
) -> None:
    """Error bars of each point's stated 95% interval of ``value``, where any is stated; one
    legend entry names them all (:func:`_legend`)."""
    half = halves(points, value)
    if not any(math.isfinite(h) for h in half):
        return
    bars = ax.errorbar(
        xs,
        [as_float(getattr(p.figures, value)) for p in points],
        yerr=half,  # NaN: no interval stated, no bar
        fmt="none",
        ecolor=color,
        elinewidth=0.9,
        capsize=2.0,
        zorder=zorder,
    )
    bars.set_label(INTERVAL_LABEL)


def _legend(ax: Axes, below: tuple[float, float] | None = None) -> Legend:
    """The axes' legend in three columns, its top centre at the axes' top (or at ``below``,
    in axes coordinates), each label once (every tier's bars share one entry)."""
    handles, labels = ax.get_legend_handles_labels()
    unique: dict[str, Artist] = {}
    for label, handle in zip(labels, handles, strict=True):
        unique.setdefault(label, handle)  # the first tier's bars stand for all
    return ax.legend(
        list(unique.values()),
        list(unique.keys()),
        loc="upper center",
        bbox_to_anchor=below,
        ncols=3,
    )


def _callout_peak(ax: Axes, peak: LockPoint, xs: list[float], x: float, y: float) -> None:
    """The peak's locks, TPS/W, TPS and gain over the fastest point, on the side away from the
    middle of the x range (``xs``: every point's lock)."""
    text = f"Peak: {_label(peak)}\n{y:#.3g} TPS/W · {as_float(peak.figures.tps):.1f} TPS"
    gain = as_float(peak.tps_per_w_vs_fastest_pct)
    if math.isfinite(gain) and abs(gain) >= 0.5:
        text += f"\n{gain:+.0f}% TPS/W vs fastest point"
    right = x > (min(xs) + max(xs)) / 2
    ax.annotate(
        text,
        (x, y),
        xytext=(-30 if right else 30, -70),
        textcoords="offset points",
        ha="right" if right else "left",
        va="top",
        fontsize=8,
        bbox={"boxstyle": "round,pad=0.4", "fc": "#fffbea", "ec": "#bbbbbb"},
        arrowprops={"arrowstyle": "-", "color": "#888888", "lw": 0.8},
        gid=PEAK_GID,
    )


def pareto_figure(
    analysis: ClockAnalysis,
    title: str | None = None,
    power_analysis: PowerAnalysis | None = None,
) -> Figure:
    """TPS against draw: every clock point (by tier) with its stated 95% interval, the Pareto
    front with each point's lock in MHz, and the power-cap curve of a power-axis run when given
    (its caps named in W where a label fits).

    Args:
        analysis: The typed clock analysis.
        title: Figure title; defaults to the GPU name.
        power_analysis: The typed analysis of a power-axis run of the same card, overlaid.

    Raises:
        UsageError: No usable point.
    """
    tiers, front = analysis.tiers, analysis.pareto_front
    if not tiers:
        raise UsageError("nothing to plot: no clock point measured ok")
    by_mem = analysis.axis == "mem-clock"
    with style():
        fig = new_figure(height_in=5.6)
        ax = fig.add_subplot()
        for i, t in enumerate(tiers):
            color = TIER_COLORS[i % len(TIER_COLORS)]
            ax.scatter(
                [as_float(p.figures.power_w) for p in t.points],
                [as_float(p.figures.tps) for p in t.points],
                s=18,
                color=color,
                label=_tier_name(t.mem_lock_mhz),
                zorder=3,
            )
            _bars(ax, [as_float(p.figures.power_w) for p in t.points], t.points, "tps", color)
        ax.plot(
            [as_float(p.figures.power_w) for p in front],
            [as_float(p.figures.tps) for p in front],
            color="#222222",
            linewidth=1.4,
            drawstyle="steps-post",
            label="Pareto front (clock locks)",
            zorder=4,
        )
        caps = _plot_power_caps(ax, power_analysis) if power_analysis is not None else []
        peak = analysis.peak
        if peak is not None:
            ax.plot(
                [as_float(peak.figures.power_w)],
                [as_float(peak.figures.tps)],
                markersize=15,
                label=f"efficiency peak ({_label(peak)})",
                zorder=6,
                **ANSWER_STAR,
            )
        ax.set_xlabel("draw (W)")
        ax.set_ylabel("TPS")
        what = "memory" if by_mem else "SM"
        ax.set_title(
            f"numbers: each Pareto point's {what} clock lock (MHz)"
            + ("; power caps in W" if caps else ""),
            loc="left",
            fontsize=8,
            color="#555555",
        )
        _pareto_limits(ax, [p for t in tiers for p in t.points], caps)
        # legend outside the plot: points fill the whole TPS/W plane
        _legend(ax, below=(0.5, -0.13))
        fig.suptitle(title_text(analysis.run, title, "TPS against draw"))
        freeze_layout(fig)
        _label_points(fig, ax, front, caps, by_mem)
    return fig


def _pareto_limits(ax: Axes, points: Sequence[LockPoint], caps: Sequence[CapRow]) -> None:
    """Every point and its bar inside the axes with a margin, so no marker is cut at the edge
    and the labels have room."""
    marks: list[LockPoint | CapRow] = [*points, *caps]
    xs = [as_float(p.figures.power_w) for p in marks]
    ys: list[float] = []
    for p, h in zip(marks, halves(marks, "tps"), strict=True):
        h = h if math.isfinite(h) else 0.0
        ys += [as_float(p.figures.tps) - h, as_float(p.figures.tps) + h]
    xs, ys = [x for x in xs if math.isfinite(x)], [y for y in ys if math.isfinite(y)]
    if not xs or not ys:
        return
    x_pad = 0.06 * max(max(xs) - min(xs), 0.05 * max(xs))
    y_pad = 0.08 * max(max(ys) - min(ys), 0.05 * max(ys))
    ax.set_xlim(min(xs) - x_pad, max(xs) + x_pad)
    ax.set_ylim(min(ys) - y_pad, max(ys) + y_pad)


# Where a point's label may go, in points from the point, nearest first.
_LABEL_OFFSETS = (
    *((0, 8), (0, -8), (13, 0), (-13, 0), (12, 8), (-12, 8), (12, -8), (-12, -8)),
    # clear of a big marker (the peak's star)
    *((0, 15), (0, -15), (20, 0), (-20, 0)),
)


def _label_points(
    fig: Figure,
    ax: Axes,
    front: Sequence[LockPoint],
    caps: Sequence[CapRow],
    by_mem: bool,
) -> None:
    """Each Pareto point's lock in MHz, then each power cap's W, where a label fits: one that
    would cover another, a point, a bar's end or leave the axes is left out (thinned)."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    area = ax.get_window_extent(renderer)
    obstacles = Obstacles()
    for k, coll in enumerate(ax.collections):
        if isinstance(coll, PathCollection):
            obstacles.add_points(f"points {k}", _ringed(ax, np.asarray(coll.get_offsets())))
        elif isinstance(coll, LineCollection):  # the bars: their ends and middles
            ends = [seg for seg in coll.get_segments() if len(seg)]
            if ends:
                obstacles.add_points(f"bars {k}", ax.transData.transform(np.vstack(ends)))
    for line in ax.lines:
        if line.get_gid() != LOCK_LABEL_GID:
            obstacles.add_points(str(id(line)), line_points(line))
    for p in front:
        lock = as_float(p.mem_lock_mhz if by_mem else p.sm_lock_mhz)
        if math.isfinite(lock):
            _point_label(ax, f"{lock:.0f}", p, "#222222", LOCK_LABEL_GID, renderer, obstacles, area)
    for c in caps:
        _point_label(
            ax, f"{c.cap_w:.0f} W", c, COLORS["cap"], CAP_LABEL_GID, renderer, obstacles, area
        )


def _ringed(ax: Axes, xy: FloatArray, radius_px: float = 7.0) -> FloatArray:
    """Display points at and around each marker, so no label sits on one."""
    px = np.asarray(ax.transData.transform(xy), dtype=np.float64)
    angles = np.linspace(0.0, 2.0 * np.pi, 8, endpoint=False)
    ring = np.column_stack([np.cos(angles), np.sin(angles)]) * radius_px
    return np.vstack([px, (px[:, None, :] + ring[None, :, :]).reshape(-1, 2)])


def _point_label(
    ax: Axes,
    text: str,
    point: LockPoint | CapRow,
    color: str,
    gid: str,
    renderer: RendererBase,
    obstacles: Obstacles,
    area: Bbox,
) -> None:
    xy = (as_float(point.figures.power_w), as_float(point.figures.tps))
    if not all(math.isfinite(v) for v in xy):
        return
    ann = ax.annotate(
        text,
        xy=xy,
        xytext=_LABEL_OFFSETS[0],
        textcoords="offset points",
        ha="center",
        va="center",
        fontsize=6.5,
        color=color,
        zorder=7,
        gid=gid,
        annotation_clip=False,
    )
    ann.set_in_layout(False)
    cands = [Candidate(off) for off in _LABEL_OFFSETS]
    place_or_drop(ann, cands, renderer, obstacles, area)


def _plot_power_caps(ax: Axes, power_analysis: PowerAnalysis) -> list[CapRow]:
    """The power-cap curve (measured caps by draw, each with its stated interval) and its sweet
    spot, over the clock points; returns the caps drawn."""
    caps = [
        c for c in power_analysis.caps if c.figures.status == "ok" and c.figures.tps is not None
    ]
    caps.sort(key=lambda c: as_float(c.figures.power_w))
    xs = [as_float(c.figures.power_w) for c in caps]
    ax.plot(
        xs,
        [as_float(c.figures.tps) for c in caps],
        color=COLORS["cap"],
        linestyle=":",
        marker="s",
        markersize=3,
        label="power caps",
        zorder=2,
    )
    _bars(ax, xs, caps, "tps", COLORS["cap"], zorder=1.9)
    spot = power_analysis.sweet_spot
    if spot is not None:
        ax.plot(
            [as_float(spot.power_w)],
            [as_float(spot.tps)],
            marker="D",
            markersize=8,
            color=COLORS["near_peak"],
            linestyle="none",
            label=f"best cap ({spot.cap_w:.0f} W)",
            zorder=5,
        )
    return caps


def render_clock_charts(
    analysis: ClockAnalysis,
    out_dir: Path,
    *,
    formats: Sequence[str] = ("png",),
    title: str | None = None,
    power_analysis: PowerAnalysis | None = None,
    only_pareto: bool = False,
) -> list[Path]:
    """Write ``clock-efficiency`` and ``clock-pareto`` (``clocks-vs-power`` with a power run).

    Raises:
        UsageError: Bad format, or nothing to plot.
        PowersweepError: The folder or a file cannot be written.
    """
    charts = (
        []
        if only_pareto
        else [("clock-efficiency", lambda: efficiency_by_clock_figure(analysis, title))]
    )
    stem = "clocks-vs-power" if power_analysis is not None else "clock-pareto"
    charts.append((stem, lambda: pareto_figure(analysis, title, power_analysis)))
    return write_charts(out_dir, formats, charts)
