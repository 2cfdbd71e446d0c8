"""Charts of a clock-lock sweep: TPS/W against the SM clock per memory tier (peak called out),
and TPS against draw with the Pareto front (and the power-cap curve of another run overlaid).

Drawn from the typed clock analysis alone (``powersweep.analysis.clock_analysis``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from msgspec import UnsetType

from powersweep.analysis.clock_result_types import ClockAnalysis, LockPoint, Tier
from powersweep.analysis.result_types import PowerAnalysis, known
from powersweep.errors import UsageError
from powersweep.plots._style import (
    COLORS,
    check_formats,
    make_folder,
    new_figure,
    save_figure,
    style,
)

# One colour per memory tier, fastest first (colour-blind friendly, distinct in greyscale).
TIER_COLORS = ("#1f5fa8", "#e67e22", "#27ae60", "#8e44ad", "#c0392b", "#7f8c8d", "#16a085")
PEAK_GID = "clock-peak-callout"


def _tier_name(mem: float | None) -> str:
    return f"mem {_f(mem):.0f} MHz" if math.isfinite(_f(mem)) else "memory unlocked"


def _title(analysis: ClockAnalysis, title: str | None, what: str) -> str:
    head = title or analysis.run.gpu_name or "GPU"
    mode = analysis.run.load_mode
    return f"{head}: {what}" + (f" ({mode})" if mode else "")


def _label(p: LockPoint) -> str:
    parts = []
    if math.isfinite(_f(p.sm_lock_mhz)):
        parts.append(f"SM {_f(p.sm_lock_mhz):.0f}")
    if math.isfinite(_f(p.mem_lock_mhz)):
        parts.append(f"mem {_f(p.mem_lock_mhz):.0f}")
    return " / ".join(parts) + " MHz" if parts else "unlocked"


def _f(value: float | UnsetType | None) -> float:
    """The number as drawn: NaN where the analysis does not know it."""
    given = known(value)
    return math.nan if given is None else float(given)


def _lock(p: LockPoint, by_mem: bool) -> float:
    """The point's lock on the chart's x axis (the memory lock on a memory-only axis)."""
    return _f(p.mem_lock_mhz if by_mem else p.sm_lock_mhz)


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
        x, y = _lock(peak, by_mem), _f(peak.tps_per_w)
        ax.plot(
            [x],
            [y],
            marker="*",
            markersize=16,
            color=COLORS["sweet_spot"],
            markeredgecolor="#333333",
            linestyle="none",
            zorder=5,
            label="efficiency peak",
        )
        _callout_peak(ax, peak, [_lock(p, by_mem) for t in tiers for p in t.points], x, y)
        ax.set_ylabel("TPS per W")
        ymax = max(_f(p.tps_per_w) for t in tiers for p in t.points)
        ymin = min(_f(p.tps_per_w) for t in tiers for p in t.points)
        span = max(ymax - ymin, 0.05 * ymax)
        # headroom above the curves for the legend, room below the peak for its callout
        ax.set_ylim(max(0.0, ymin - 0.9 * span), ymax + 0.55 * span)
        ax.legend(loc="upper center", ncols=3)
        fig.suptitle(_title(analysis, title, "efficiency against clock locks"))
    return fig


def _plot_tiers(ax: Axes, tiers: Sequence[Tier], by_mem: bool) -> None:
    """One TPS/W line per memory tier against the SM lock, or one against the memory lock."""
    if by_mem:
        pts = sorted((p for t in tiers for p in t.points), key=lambda p: _f(p.mem_lock_mhz))
        ax.plot(
            [_f(p.mem_lock_mhz) for p in pts],
            [_f(p.tps_per_w) for p in pts],
            marker="o",
            color=TIER_COLORS[0],
            label="TPS/W",
        )
        ax.set_xlabel("memory clock lock (MHz)")
        return
    for i, t in enumerate(tiers):
        pts = [p for p in t.points if math.isfinite(_f(p.sm_lock_mhz))]
        name = _tier_name(t.mem_lock_mhz) + (" (caps TPS)" if t.caps_tps else "")
        ax.plot(
            [_f(p.sm_lock_mhz) for p in pts],
            [_f(p.tps_per_w) for p in pts],
            marker="o",
            color=TIER_COLORS[i % len(TIER_COLORS)],
            linestyle="--" if t.caps_tps else "-",
            label=name,
        )
    ax.set_xlabel("SM clock lock (MHz)")


def _callout_peak(ax: Axes, peak: LockPoint, xs: list[float], x: float, y: float) -> None:
    """The peak's locks, TPS/W, TPS and gain over the fastest point, on the side away from the
    middle of the x range (``xs``: every point's lock)."""
    text = f"Peak: {_label(peak)}\n{y:#.3g} TPS/W · {_f(peak.tps):.1f} TPS"
    gain = _f(peak.tps_per_w_vs_fastest_pct)
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
    """TPS against draw: every clock point (by tier), the Pareto front, and the power-cap curve
    of a power-axis run when given.

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
    with style():
        fig = new_figure(height_in=5.6)
        ax = fig.add_subplot()
        for i, t in enumerate(tiers):
            ax.scatter(
                [_f(p.power_w) for p in t.points],
                [_f(p.tps) for p in t.points],
                s=18,
                color=TIER_COLORS[i % len(TIER_COLORS)],
                label=_tier_name(t.mem_lock_mhz),
                zorder=3,
            )
        ax.plot(
            [_f(p.power_w) for p in front],
            [_f(p.tps) for p in front],
            color="#222222",
            linewidth=1.4,
            drawstyle="steps-post",
            label="Pareto front (clock locks)",
            zorder=4,
        )
        if power_analysis is not None:
            _plot_power_caps(ax, power_analysis)
        peak = analysis.peak
        if peak is not None:
            ax.plot(
                [_f(peak.power_w)],
                [_f(peak.tps)],
                marker="*",
                markersize=15,
                color=COLORS["sweet_spot"],
                markeredgecolor="#333333",
                linestyle="none",
                label=f"efficiency peak ({_label(peak)})",
                zorder=6,
            )
        ax.set_xlabel("draw (W)")
        ax.set_ylabel("TPS")
        # legend outside the plot: points fill the whole TPS/W plane
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=3)
        fig.suptitle(_title(analysis, title, "TPS against draw"))
    return fig


def _plot_power_caps(ax: Axes, power_analysis: PowerAnalysis) -> None:
    """The power-cap curve (measured caps by draw) and its sweet spot, over the clock points."""
    caps = [c for c in power_analysis.caps if c.status == "ok" and c.tps is not None]
    caps.sort(key=lambda c: _f(c.power_w))
    ax.plot(
        [_f(c.power_w) for c in caps],
        [_f(c.tps) for c in caps],
        color=COLORS["cap"],
        linestyle=":",
        marker="s",
        markersize=3,
        label="power caps",
        zorder=2,
    )
    spot = power_analysis.sweet_spot
    if spot is not None:
        ax.plot(
            [_f(spot.power_w)],
            [_f(spot.tps)],
            marker="D",
            markersize=8,
            color=COLORS["near_peak"],
            linestyle="none",
            label=f"best cap ({spot.cap_w:.0f} W)",
            zorder=5,
        )


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
    fmts = check_formats(formats)
    make_folder(out_dir)
    paths: list[Path] = []
    if not only_pareto:
        paths += save_figure(
            efficiency_by_clock_figure(analysis, title), out_dir / "clock-efficiency", fmts
        )
    stem = "clocks-vs-power" if power_analysis is not None else "clock-pareto"
    paths += save_figure(pareto_figure(analysis, title, power_analysis), out_dir / stem, fmts)
    return paths
