"""What every axis's chart draws alike: the title, each point's stated 95% interval as error bars,
the answer's star, and the legend placed once the figure is laid out; a chart supplies its axes,
its curves and its labels."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol, TypedDict, Unpack

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.container import Container
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D

from powersweep.analysis.result_types import PointFigures, RunFacts
from powersweep.plots._layout import Obstacles, line_points, place_legend
from powersweep.plots._style import COLORS, freeze_layout
from powersweep.runformat import as_float


class LineStyle(TypedDict, total=False):
    """A curve's look, the matplotlib ``plot`` and ``errorbar`` keywords the charts give
    (``ecolor``: the error bars' colour)."""

    marker: str
    markersize: float
    markerfacecolor: str
    markeredgecolor: str
    linestyle: str
    color: str
    ecolor: str
    zorder: float
    gid: str


class StarStyle(TypedDict):
    """The answer's star: its marker, colours and no line (a chart adds its size)."""

    marker: str
    color: str
    markeredgecolor: str
    linestyle: str


# The answer's star (a chart adds its size): gold, outlined, no line.
ANSWER_STAR: StarStyle = {
    "marker": "*",
    "color": COLORS["sweet_spot"],
    "markeredgecolor": "#333333",
    "linestyle": "none",
}


class Point(Protocol):
    """A measured point of any axis: its figures (a cap's row, a clock point, an offset step)."""

    @property
    def figures(self) -> PointFigures: ...


def title_text(run: RunFacts, title: str | None, what: str, with_mode: bool = True) -> str:
    """``H100: TPS against draw (decode-single)``: the given title or the GPU's name, what the
    chart shows, and the load mode."""
    head = title or run.gpu_name or "GPU"
    mode = run.load_mode if with_mode else None
    return f"{head}: {what}" + (f" ({mode})" if mode else "")


def halves(points: Sequence[Point], value: str, u95: str | None = None) -> list[float]:
    """Each point's stated 95% half-width of its figure ``value`` (its ``u95``, by default
    ``<value>_u95_pct``), in the figure's units, as the analysis states it (NaN: none stated)."""
    u95 = u95 or f"{value}_u95_pct"
    return [
        abs(as_float(getattr(p.figures, value))) * as_float(getattr(p.figures, u95)) / 100.0
        for p in points
    ]


def with_bars(
    ax: Axes,
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    half: Sequence[float] | np.ndarray,
    label: str,
    capthick: float | None = None,
    **style: Unpack[LineStyle],
) -> tuple[Line2D, Artist | Container]:
    """A curve with each point's stated 95% interval as an error bar where one is stated (a
    plain line, its ``ecolor`` dropped, where none is; ``capthick``: the caps' width, else
    matplotlib's).

    Returns the curve's line (its geometry for the layout) and its legend handle: the error bar
    container, whose legend glyph shows the bar, or the line itself.
    """
    if not any(math.isfinite(h) for h in half):
        style.pop("ecolor", None)
        (line,) = ax.plot(x, y, label=label, **style)
        return line, line
    bars = ax.errorbar(
        x,
        y,
        yerr=half,  # NaN: no interval stated, no bar (never a zero-width one)
        label=f"{label} ±95%",
        elinewidth=0.9,
        capsize=2.2,
        capthick=capthick,
        **style,
    )
    return bars.lines[0], bars


def laid_out(fig: Figure, lines: Iterable[Line2D]) -> tuple[RendererBase, Obstacles]:
    """Lays the figure out and pins it; returns its renderer and the lines' points, by their
    gid, for the labels and the legend to keep clear of."""
    freeze_layout(fig)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    obstacles = Obstacles()
    for line in lines:
        obstacles.add_points(str(line.get_gid()), line_points(line))
    return renderer, obstacles


def settle_legend(fig: Figure, legend: Legend, lines: Iterable[Line2D]) -> None:
    """Lays the figure out and puts the legend where it covers the fewest of the lines' points."""
    renderer, obstacles = laid_out(fig, lines)
    place_legend(legend, renderer, obstacles)
