"""``undervolt``: TPS/W and draw against the clock offset, the baseline cap as a line, the first
unstable step and the chosen offset marked."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.container import Container
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from powersweep.analysis.undervolt_result_types import OffsetStep, UndervoltAnalysis
from powersweep.errors import UsageError
from powersweep.plots._frame import (
    ANSWER_STAR,
    LineStyle,
    halves,
    settle_legend,
    title_text,
    with_bars,
)
from powersweep.plots._style import (
    COLORS,
    new_figure,
    style,
    write_charts,
)
from powersweep.runformat import as_float

DRAW_COLOR = "#6e6e6e"


def _bars(
    ax: Axes,
    steps: Sequence[OffsetStep],
    value: str,
    u95: str,
    label: str,
    **style: Unpack[LineStyle],
) -> Artist | Container:
    """The steps' ``value`` against their offset, with their stated intervals; returns the
    legend handle."""
    x = [as_float(s.sm_offset_mhz) for s in steps]
    y = [as_float(getattr(s.figures, value)) for s in steps]
    return with_bars(ax, x, y, halves(steps, value, u95), label, **style)[1]


def undervolt_figure(analysis: UndervoltAnalysis, title: str | None = None) -> Figure:
    """TPS/W of each step (stable steps joined, unstable ones crossed, each with its stated 95%
    interval), the baseline cap's as a dashed line in its interval's band, the chosen offset
    starred; draw on the right axis, dotted, in the one legend.

    Raises:
        UsageError: No step measured.
    """
    steps = [s for s in analysis.steps if s.sm_offset_mhz is not None]
    if not steps:
        raise UsageError("nothing to plot: no offset step measured")
    with style():
        fig = new_figure()
        ax = fig.add_subplot()
        right = ax.twinx()
        right.grid(False)
        # the TPS/W axis drawn over the draw axis, so its markers and legend sit on top
        ax.set_zorder(right.get_zorder() + 1)
        ax.patch.set_visible(False)
        handles = _draw(ax, right, analysis, steps)
        ax.set_xlabel(f"SM clock offset (MHz) at a {as_float(analysis.sm_lock_mhz):.0f} MHz lock")
        ax.set_ylabel("TPS per W")
        right.set_ylabel("draw (W)", color=DRAW_COLOR)
        right.tick_params(axis="y", colors=DRAW_COLOR)
        fig.suptitle(title or title_text(analysis.run, None, "undervolt search", with_mode=False))
        _limits(ax, analysis, steps)
        legend = ax.legend(handles=handles, loc="upper left", fontsize=7.5)
        legend.set_zorder(7)
        settle_legend(fig, legend, [*ax.lines, *right.lines])
    return fig


def _draw(
    ax: Axes, right: Axes, analysis: UndervoltAnalysis, steps: Sequence[OffsetStep]
) -> list[Artist | Container]:
    """Every curve and mark of the chart; returns the legend's handles in order."""
    handles: list[Artist | Container] = []
    ok = [s for s in steps if s.figures.status == "ok" and s.reason != "reread"]
    again = [s for s in steps if s.figures.status == "ok" and s.reason == "reread"]
    bad = [s for s in steps if s.figures.status != "ok"]
    gold = COLORS["sweet_spot"]
    handles.append(
        _bars(
            ax,
            ok,
            "tps_per_w",
            "tps_per_w_u95_pct",
            "TPS/W (stable steps)",
            marker="o",
            color=gold,
            zorder=3,
        )
    )
    if again:
        handles.append(
            _bars(
                ax,
                again,
                "tps_per_w",
                "tps_per_w_u95_pct",
                "TPS/W read again",
                marker="o",
                markersize=6,
                markerfacecolor="none",
                linestyle="none",
                color="#9a7d0a",
                zorder=3,
            )
        )
    read = [s for s in bad if math.isfinite(as_float(s.figures.tps_per_w))]
    cross: LineStyle = {
        "marker": "x",
        "markersize": 12,
        "linestyle": "none",
        "color": "#c0392b",
    }
    if read:
        handles.append(_bars(ax, read, "tps_per_w", "tps_per_w_u95_pct", "unstable", **cross))
    unread = [s for s in bad if not math.isfinite(as_float(s.figures.tps_per_w))]
    if unread:
        # a step with no reading: a cross along the bottom, as a failed cap is on the cap chart
        (line,) = ax.plot(
            [as_float(s.sm_offset_mhz) for s in unread],
            [0.04] * len(unread),
            transform=blended_transform_factory(ax.transData, ax.transAxes),
            label="unstable" if not read else "_unstable, no reading",
            zorder=4,
            **cross,
        )
        handles.append(line)
    base = analysis.baseline
    if base is not None and math.isfinite(as_float(base.figures.tps_per_w)):
        level = as_float(base.figures.tps_per_w)
        label = f"{as_float(base.cap_w):.0f} W cap, unlocked"
        handles.append(ax.axhline(level, linestyle="--", color="#555555", label=label))
        (half,) = halves([base], "tps_per_w")
        if math.isfinite(half):
            handles.append(
                ax.axhspan(
                    level - half,
                    level + half,
                    color="#555555",
                    alpha=0.1,
                    lw=0,
                    label=f"{label} ±95%",
                    zorder=0.5,
                )
            )
    chosen = analysis.chosen
    if chosen is not None:
        handles.append(
            _bars(
                ax,
                [chosen],
                "tps_per_w",
                "tps_per_w_u95_pct",
                "answer (soaked)",
                markersize=16,
                ecolor="#333333",
                zorder=5,
                **ANSWER_STAR,
            )
        )
    draw = [s for s in ok if math.isfinite(as_float(s.figures.power_w))]
    if draw:
        handles.append(
            _bars(
                right,
                draw,
                "power_w",
                "power_u95_pct",
                "draw (right axis)",
                color=DRAW_COLOR,
                linestyle=":",
                marker=".",
                zorder=2,
            )
        )
    return handles


def _limits(ax: Axes, analysis: UndervoltAnalysis, steps: Sequence[OffsetStep]) -> None:
    """Every step, bar, cross and band inside the axes, with room for the legend above."""
    marks = [*steps, *(s for s in (analysis.baseline, analysis.chosen) if s is not None)]
    ys: list[float] = []
    for s, h in zip(marks, halves(marks, "tps_per_w"), strict=True):
        y = as_float(s.figures.tps_per_w)
        h = h if math.isfinite(h) else 0.0
        ys += [y - h, y + h] if math.isfinite(y) else []
    if not ys:
        return
    lo, hi = min(ys), max(ys)
    pad = 0.06 * max(hi - lo, 0.01 * abs(hi))
    ax.set_ylim(lo - pad, hi + 5 * pad)
    xs = [as_float(s.sm_offset_mhz) for s in marks if math.isfinite(as_float(s.sm_offset_mhz))]
    step = max(max(xs) - min(xs), 1.0)
    ax.set_xlim(min(xs) - 0.05 * step, max(xs) + 0.05 * step)


def render_undervolt_chart(
    analysis: UndervoltAnalysis,
    out_dir: Path,
    *,
    formats: Sequence[str] = ("png",),
    title: str | None = None,
) -> list[Path]:
    """Write ``undervolt`` in each format.

    Raises:
        UsageError: Bad format, or nothing to plot.
        PowersweepError: The folder or a file cannot be written.
    """
    return write_charts(
        out_dir, formats, [("undervolt", lambda: undervolt_figure(analysis, title))]
    )
