"""A chart's layout as a person reads it: every visible text and legend box, drawn on Agg.

``layout_problems`` renders a figure and lists each pair of boxes that overlap and each box that
leaves the figure; ``legend_labels`` lists what each legend names, and ``unnamed_artists`` what
is drawn without a legend entry (issue 47: labels that never overlap, complete legends).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.collections import Collection
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

from powersweep.plots._layout import text_extent

# A box may reach this far past the figure's edge (antialiasing), in pixels.
_EDGE_PX = 0.5


def _tick_labels(axis: Axis) -> list[Text]:
    """The tick labels drawn: those of ticks inside the view, visible and not empty."""
    lo, hi = sorted(axis.get_view_interval())
    locs = axis.get_majorticklocs()
    out: list[Text] = []
    for loc, tick in zip(locs, axis.get_major_ticks(len(locs)), strict=True):
        if not lo - 1e-9 * abs(hi - lo) <= loc <= hi + 1e-9 * abs(hi - lo):
            continue
        out += [t for t in (tick.label1, tick.label2) if t.get_visible() and t.get_text()]
    return out


def _axes_texts(ax: Axes) -> list[Text]:
    texts: list[Text] = [*ax.texts, ax.title, ax._left_title, ax._right_title]
    texts += [ax.xaxis.label, ax.yaxis.label, ax.xaxis.offsetText, ax.yaxis.offsetText]
    texts += _tick_labels(ax.xaxis) + _tick_labels(ax.yaxis)
    return texts


def boxes(fig: Figure) -> list[tuple[str, Bbox]]:
    """Every visible, non-empty text (titles, axis and tick labels, annotations without their
    arrows) and every legend, as (name, display box), after a draw."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    texts: list[Text] = [*fig.texts]  # the suptitle among them
    legends: list[Legend] = list(fig.legends)
    for ax in fig.axes:
        texts += _axes_texts(ax)
        legend = ax.get_legend()
        if isinstance(legend, Legend):
            legends.append(legend)
    out: list[tuple[str, Bbox]] = []
    for t in dict.fromkeys(texts):
        if t.get_visible() and t.get_text().strip():
            name = str(t.get_gid()) if t.get_gid() else repr(t.get_text()[:30])
            out.append((name, text_extent(t, renderer)))
    out += [(f"legend {i}", lg.get_window_extent(renderer)) for i, lg in enumerate(legends)]
    return out


def plot_area_boxes(fig: Figure) -> list[tuple[str, Bbox]]:
    """Display boxes of every label, callout and legend drawn inside the plot area, after a
    draw."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    out: list[tuple[str, Bbox]] = []
    for ax in fig.axes:
        out += [(str(t.get_gid()), text_extent(t, renderer)) for t in ax.texts]
        legend = ax.get_legend()
        if isinstance(legend, Legend):
            out.append(("legend", legend.get_window_extent(renderer)))
    return out


def one_by_gid(artists: Iterable[Any], gid: str) -> Any:
    """The one artist of ``artists`` with this gid."""
    found = [a for a in artists if a.get_gid() == gid]
    assert len(found) == 1, f"expected one artist with gid {gid!r}, got {len(found)}"
    return found[0]


def layout_problems(fig: Figure) -> list[str]:
    """Each overlap of two boxes and each box outside the figure, in words (empty: clean)."""
    found = boxes(fig)
    problems = []
    for (na, a), (nb, b) in itertools.combinations(found, 2):
        if a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1:
            problems.append(f"{na} overlaps {nb}")
    problems += _arrow_crossings(fig, found)
    page = fig.bbox
    for name, box in found:
        inside = (
            box.x0 >= page.x0 - _EDGE_PX
            and box.x1 <= page.x1 + _EDGE_PX
            and box.y0 >= page.y0 - _EDGE_PX
            and box.y1 <= page.y1 + _EDGE_PX
        )
        if not inside:
            problems.append(f"{name} leaves the figure")
    return problems


def _arrow_crossings(fig: Figure, found: list[tuple[str, Bbox]]) -> list[str]:
    """Each annotation arrow that runs through another text or legend box."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    out = []
    for ax in fig.axes:
        for ann in ax.texts:
            arrow = getattr(ann, "arrow_patch", None)
            if not isinstance(ann, Annotation) or arrow is None or not ann.get_visible():
                continue
            own = text_extent(ann, renderer)
            pts = arrow.get_path().interpolated(50).vertices  # display coordinates once drawn
            for name, box in found:
                if box.bounds == own.bounds:
                    continue
                hit = (
                    (pts[:, 0] > box.x0)
                    & (pts[:, 0] < box.x1)
                    & (pts[:, 1] > box.y0)
                    & (pts[:, 1] < box.y1)
                )
                if np.any(hit):
                    what = ann.get_gid() or ann.get_text()[:30]
                    out.append(f"the arrow of {what!r} crosses {name}")
    return out


def legend_labels(fig: Figure) -> list[str]:
    """Every entry of every legend of the figure."""
    legends = list(fig.legends) + [
        lg for ax in fig.axes if isinstance(lg := ax.get_legend(), Legend)
    ]
    return [t.get_text() for lg in legends for t in lg.get_texts()]


def unnamed_artists(fig: Figure, named_by_text: tuple[str, ...] = ()) -> list[Artist]:
    """Lines and point collections drawn with data but no legend entry: neither their own label
    nor that of the container they belong to (an error bar's bars and caps) is in a legend.
    ``named_by_text``: gids of reference lines a text of their own names (the default limit)."""
    named = set(legend_labels(fig))
    out: list[Artist] = []
    for ax in fig.axes:
        owner: dict[int, str] = {}
        for container in ax.containers:
            for part in _flat(container):
                owner[id(part)] = str(container.get_label())
        drawn: list[Artist] = [
            a for a in [*ax.lines, *ax.collections] if a.get_visible() and _has_data(a)
        ]
        for a in drawn:
            if a.get_gid() in named_by_text:
                continue
            if a.get_label() not in named and owner.get(id(a)) not in named:
                out.append(a)
    return out


def _flat(items: object) -> list[object]:
    if isinstance(items, list | tuple):
        return [leaf for item in items for leaf in _flat(item)]
    return [items]


def _has_data(artist: Artist) -> bool:
    if isinstance(artist, Line2D):
        return len(artist.get_xdata()) > 0  # type: ignore[arg-type]
    if isinstance(artist, Collection):
        return len(artist.get_paths()) > 0
    return True
