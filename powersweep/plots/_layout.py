"""Collision-free placement of labels, callouts and legends, decided from the drawn geometry.

Every position is judged in display (pixel) coordinates after a layout pass: a candidate is
rejected when its box leaves the axes, overlaps a box placed before it (text, legend) or covers
points of the curves.

The reasoning: docs/figures.md, "powersweep.plots._layout".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox, Transform

from powersweep.plots._data import FloatArray

# Density of the sample points that stand for a curve, in pixels (at 200 dpi).
_STEP_PX = 3.0
# Air kept around every box, in pixels.
PAD_PX = 5.0

_OUTSIDE_COST = 10_000.0
_BOX_COST = 1_000.0
_ARROW_COST = 50.0
_POINT_COST = 1.0

Position = tuple[float, float]
LegendLoc = Literal[
    "upper left",
    "upper right",
    "lower right",
    "lower left",
    "upper center",
    "lower center",
    "center left",
    "center right",
]


@dataclass
class Obstacles:
    """What a new label must not cover: boxes already placed and sampled curve points.

    Attributes:
        boxes: Display-space boxes of texts and legends placed so far (padded).
        points: Display-space curve samples, by name (so a label can ignore its own line).
    """

    boxes: list[Bbox] = field(default_factory=list)
    points: dict[str, FloatArray] = field(default_factory=dict)

    def add_points(self, name: str, pts: FloatArray) -> None:
        """Adds (or extends) the named set of display points."""
        if name in self.points:
            pts = np.vstack([self.points[name], pts])
        self.points[name] = pts

    def all_points(self, ignore: Iterable[str] = ()) -> FloatArray:
        """All sampled points except the ignored sets, as an (N, 2) array."""
        skip = set(ignore)
        chosen = [p for name, p in sorted(self.points.items()) if name not in skip and len(p)]
        return np.vstack(chosen) if chosen else np.empty((0, 2))


def densify(xy_px: FloatArray, step_px: float = _STEP_PX) -> FloatArray:
    """Samples a polyline every ``step_px`` pixels; NaN vertices break it as they do on screen."""
    out: list[FloatArray] = []
    finite = np.asarray(np.isfinite(xy_px).all(axis=1), dtype=np.bool_)
    for i in range(len(xy_px)):
        if not finite[i]:
            continue
        out.append(xy_px[i : i + 1])
        if i + 1 < len(xy_px) and finite[i + 1]:
            a, b = xy_px[i], xy_px[i + 1]
            n = int(np.hypot(*(b - a)) // step_px)
            if n > 1:
                t = np.linspace(0.0, 1.0, n + 1)[1:-1, None]
                out.append(a + t * (b - a))
    return np.vstack(out) if out else np.empty((0, 2))


def line_points(line: Line2D) -> FloatArray:
    """Display-space samples of a drawn line (its own transform)."""
    xy = np.column_stack(
        [
            np.asarray(line.get_xdata(), dtype=np.float64),
            np.asarray(line.get_ydata(), dtype=np.float64),
        ]
    )
    if not len(xy):
        return np.empty((0, 2))
    px = _transform(line.get_transform(), xy)
    drawn = _steps(px, str(line.get_drawstyle())) if len(px) > 1 else px
    pts = densify(drawn) if line.get_linestyle() not in ("None", "none", "") else px
    return np.vstack([pts, _marker_ring(line, px)])


def _steps(px: FloatArray, drawstyle: str) -> FloatArray:
    """The vertices of the polyline as drawn: a step line's corners added (``steps-post``: the
    level holds until the next x; ``steps-pre`` / ``steps``: it jumps first)."""
    if drawstyle not in ("steps-post", "steps-pre", "steps"):
        return px
    out = np.empty((2 * len(px) - 1, 2))
    out[0::2] = px
    if drawstyle == "steps-post":
        out[1::2] = np.column_stack([px[1:, 0], px[:-1, 1]])
    else:
        out[1::2] = np.column_stack([px[:-1, 0], px[1:, 1]])
    return out


def _marker_ring(line: Line2D, px: FloatArray) -> FloatArray:
    """Points on the rim of each drawn marker, so a box cannot cover a big marker's edge.

    A marker is several pixels wide (the sweet-spot star is 13 pt); its centre alone would let a
    legend or label sit over most of it.
    """
    marker = line.get_marker()
    if marker in (None, "None", "none", "", " ") or not len(px):
        return np.empty((0, 2))
    figure = line.get_figure()
    dpi = float(figure.dpi) if figure is not None else 72.0
    radius = float(line.get_markersize()) * dpi / 72.0 / 2.0
    if radius < 2.0:
        return np.empty((0, 2))
    angles = np.linspace(0.0, 2.0 * np.pi, 8, endpoint=False)
    ring = np.column_stack([np.cos(angles), np.sin(angles)]) * radius
    finite = px[np.isfinite(px).all(axis=1)]
    return (finite[:, None, :] + ring[None, :, :]).reshape(-1, 2)


def vline_points(ax: Axes, x_data: float) -> FloatArray:
    """Display-space samples of a full-height vertical line at ``x_data``."""
    trans = ax.get_xaxis_transform()
    return densify(_transform(trans, np.array([[x_data, 0.0], [x_data, 1.0]])))


def _transform(trans: Transform, xy: FloatArray) -> FloatArray:
    return np.asarray(trans.transform(xy), dtype=np.float64)


def text_extent(text: Text, renderer: RendererBase, pad_px: float = 0.0) -> Bbox:
    """Display box of a text and its bbox patch, without an annotation's arrow."""
    if isinstance(text, Annotation):
        text.update_positions(renderer)
    bbox = Text.get_window_extent(text, renderer)
    patch = text.get_bbox_patch()
    if patch is not None:
        text.update_bbox_position_size(renderer)
        bbox = Bbox.union([bbox, patch.get_window_extent(renderer)])
    return bbox.padded(pad_px) if pad_px else bbox


def boxes_overlap(a: Bbox, b: Bbox) -> bool:
    """True when two boxes share area (touching edges do not count)."""
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def points_in(bbox: Bbox, pts: FloatArray) -> int:
    """How many of the points lie inside the box."""
    if not len(pts):
        return 0
    inside = (
        (pts[:, 0] >= bbox.x0)
        & (pts[:, 0] <= bbox.x1)
        & (pts[:, 1] >= bbox.y0)
        & (pts[:, 1] <= bbox.y1)
    )
    return int(inside.sum())


def _inside(inner: Bbox, outer: Bbox) -> bool:
    return (
        inner.x0 >= outer.x0
        and inner.x1 <= outer.x1
        and inner.y0 >= outer.y0
        and inner.y1 <= outer.y1
    )


def _arrow_hits(anchor: FloatArray, box: Bbox, others: Sequence[Bbox]) -> int:
    """How many placed boxes the straight arrow from the box to its anchor would cross."""
    centre = np.array([(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2])
    t = np.linspace(0.0, 1.0, 40)[:, None]
    seg = centre + t * (anchor - centre)
    return sum(1 for other in others if points_in(other, seg))


def _cost(
    box: Bbox,
    area: Bbox,
    obstacles: Obstacles,
    pts: FloatArray,
    anchor_px: FloatArray | None,
) -> float:
    cost = 0.0 if _inside(box, area) else _OUTSIDE_COST
    cost += _BOX_COST * sum(1 for other in obstacles.boxes if boxes_overlap(box, other))
    cost += _POINT_COST * points_in(box, pts)
    if anchor_px is not None:
        cost += _ARROW_COST * _arrow_hits(anchor_px, box, obstacles.boxes)
    return cost


@dataclass(frozen=True)
class Candidate:
    """One position to try: the text position, and optionally a new anchor (``xy``)."""

    xytext: Position
    xy: Position | None = None


def place_text(
    text: Annotation,
    candidates: Sequence[Candidate],
    renderer: RendererBase,
    obstacles: Obstacles,
    area: Bbox,
    *,
    ignore_points: Iterable[str] = (),
    anchor_px: FloatArray | None = None,
) -> Bbox:
    """Moves ``text`` to the first candidate that collides with nothing (else the least bad one).

    Args:
        text: The annotation to move; its ``xy``/``xyann`` coordinate systems give the meaning of
            the candidate positions.
        candidates: Positions in order of preference.
        renderer: Renderer of the laid-out figure.
        obstacles: Boxes and points to avoid; the chosen box is added to it.
        area: Display box the text must stay inside (usually the axes).
        ignore_points: Names of point sets this text may cover (e.g. the line it labels).
        anchor_px: Display point of the annotation's arrow tip, when it has an arrow that should
            not cross placed boxes.

    Returns:
        The padded display box of the chosen position.
    """
    pts = obstacles.all_points(ignore_points)
    best: tuple[float, Candidate] | None = None
    for cand in candidates:
        cost, _ = _tried(text, cand, renderer, (area, obstacles, pts, anchor_px))
        if best is None or cost < best[0]:
            best = (cost, cand)
        if cost == 0.0:
            break
    if best is None:
        raise ValueError("place_text needs at least one candidate")
    _apply(text, best[1])
    box = text_extent(text, renderer, PAD_PX)
    obstacles.boxes.append(box)
    return box


def place_or_drop(
    text: Annotation,
    candidates: Sequence[Candidate],
    renderer: RendererBase,
    obstacles: Obstacles,
    area: Bbox,
    *,
    ignore_points: Iterable[str] = (),
) -> bool:
    """Moves ``text`` to the first candidate that collides with nothing, or removes it where
    none does: how dense point labels are thinned (a label that would cover another, a point or
    the axes' edge is left out, never drawn over them).

    Returns:
        True when the text was placed (its box is then an obstacle), False when removed.
    """
    pts = obstacles.all_points(ignore_points)
    for cand in candidates:
        cost, box = _tried(text, cand, renderer, (area, obstacles, pts, None))
        if cost == 0.0:
            obstacles.boxes.append(box)
            return True
    text.remove()
    return False


def _tried(
    text: Annotation,
    cand: Candidate,
    renderer: RendererBase,
    where: tuple[Bbox, Obstacles, FloatArray, FloatArray | None],
) -> tuple[float, Bbox]:
    """``text`` moved to ``cand``: what it collides with there (0: nothing) and its padded box;
    ``where`` is the area, the obstacles, their points and the arrow's tip (:func:`_cost`)."""
    _apply(text, cand)
    box = text_extent(text, renderer, PAD_PX)
    area, obstacles, pts, anchor_px = where
    return _cost(box, area, obstacles, pts, anchor_px), box


def _apply(text: Annotation, cand: Candidate) -> None:
    if cand.xy is not None:
        text.xy = cand.xy
    text.set_position(cand.xytext)


def place_legend(
    legend: Legend,
    renderer: RendererBase,
    obstacles: Obstacles,
    locs: Sequence[LegendLoc] = (
        "upper left",
        "upper right",
        "lower right",
        "lower left",
        "upper center",
        "lower center",
        "center left",
        "center right",
    ),
) -> Bbox:
    """Puts the legend at the location covering the fewest curve points and placed boxes."""
    pts = obstacles.all_points()
    best: tuple[float, LegendLoc] | None = None
    for loc in locs:
        legend.set_loc(loc)
        box = legend.get_window_extent(renderer).padded(PAD_PX)
        cost = _BOX_COST * sum(1 for o in obstacles.boxes if boxes_overlap(box, o))
        cost += _POINT_COST * points_in(box, pts)
        if best is None or cost < best[0]:
            best = (cost, loc)
        if cost == 0.0:
            break
    assert best is not None
    legend.set_loc(best[1])
    box = legend.get_window_extent(renderer).padded(PAD_PX)
    obstacles.boxes.append(box)
    return box


def grid_candidates(
    anchor_px: FloatArray,
    axes_box: Bbox,
    nx: int = 17,
    ny: int = 15,
    min_dist_px: float = 0.0,
) -> list[Candidate]:
    """A grid of axes-fraction positions, nearest to the anchor first.

    Args:
        anchor_px: Display point the label refers to.
        axes_box: Display box of the axes (for the pixel distances).
        nx: Grid columns.
        ny: Grid rows.
        min_dist_px: Positions closer than this to the anchor are left out.
    """
    xs = np.linspace(0.06, 0.94, nx)
    ys = np.linspace(0.06, 0.94, ny)
    gx, gy = np.meshgrid(xs, ys)
    fx, fy = gx.ravel(), gy.ravel()
    px = axes_box.x0 + fx * axes_box.width
    py = axes_box.y0 + fy * axes_box.height
    dist = np.hypot(px - anchor_px[0], py - anchor_px[1])
    # Ties broken by position so the order never depends on sort stability.
    order = np.lexsort((fy, fx, np.round(dist, 3)))
    return [Candidate((float(fx[i]), float(fy[i]))) for i in order if dist[i] >= min_dist_px]
