"""powersweep.plots._layout: collision-free placement decided in pixels. Polylines sampled (NaN
breaks them), box and point tests, the obstacle sets, the candidate grid's order, and labels and
legends moved to the first position that covers nothing."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from powersweep.plots._layout import (
    Candidate,
    Obstacles,
    boxes_overlap,
    densify,
    grid_candidates,
    line_points,
    place_legend,
    place_or_drop,
    place_text,
    points_in,
    text_extent,
    vline_points,
)


def test_densify_samples_each_segment_and_a_nan_breaks_the_line() -> None:
    xy = np.array([[0.0, 0.0], [9.0, 0.0], [np.nan, np.nan], [20.0, 0.0], [20.0, 1.0]])
    pts = densify(xy, step_px=3.0)
    xs = pts[:, 0].tolist()
    assert xs[:4] == [0.0, 3.0, 6.0, 9.0]  # 0..9 every 3 px
    assert not any(9.0 < x < 20.0 for x in xs)  # nothing across the gap
    assert pts[-1].tolist() == [20.0, 1.0]  # a short segment: its ends only
    assert len(pts) == 6
    assert densify(np.array([[np.nan, 1.0]])).shape == (0, 2)


def test_boxes_overlap_only_when_they_share_area() -> None:
    a = Bbox.from_extents(0, 0, 10, 10)
    assert boxes_overlap(a, Bbox.from_extents(5, 5, 15, 15))
    assert boxes_overlap(a, Bbox.from_extents(2, 2, 3, 3))  # inside
    assert not boxes_overlap(a, Bbox.from_extents(10, 0, 20, 10))  # touching edge
    assert not boxes_overlap(a, Bbox.from_extents(0, 11, 10, 20))


def test_points_in_counts_points_on_the_edge() -> None:
    box = Bbox.from_extents(0, 0, 10, 10)
    pts = np.array([[0.0, 0.0], [5.0, 5.0], [10.0, 10.0], [10.1, 5.0], [-1.0, 3.0]])
    assert points_in(box, pts) == 3
    assert points_in(box, np.empty((0, 2))) == 0


def test_obstacles_extend_named_sets_and_leave_out_the_ignored() -> None:
    obs = Obstacles()
    obs.add_points("tps", np.array([[1.0, 1.0]]))
    obs.add_points("tps", np.array([[2.0, 2.0]]))
    obs.add_points("power", np.array([[3.0, 3.0]]))
    obs.add_points("empty", np.empty((0, 2)))
    assert obs.points["tps"].tolist() == [[1.0, 1.0], [2.0, 2.0]]
    assert obs.all_points().tolist() == [[3.0, 3.0], [1.0, 1.0], [2.0, 2.0]]  # by name
    assert obs.all_points(ignore=("power",)).tolist() == [[1.0, 1.0], [2.0, 2.0]]
    assert obs.all_points(ignore=("power", "tps")).shape == (0, 2)


def test_grid_candidates_come_nearest_the_anchor_first_and_keep_their_distance() -> None:
    axes_box = Bbox.from_extents(0, 0, 1000, 1000)
    cands = grid_candidates(np.array([60.0, 60.0]), axes_box, nx=3, ny=3)
    assert len(cands) == 9
    assert cands[0] == Candidate((0.06, 0.06))
    assert cands[-1] == Candidate((0.94, 0.94))
    # equal distances: ordered by x then y, never by chance
    assert [c.xytext for c in cands[1:3]] == [
        pytest.approx((0.06, 0.5)),
        pytest.approx((0.5, 0.06)),
    ]
    far = grid_candidates(np.array([60.0, 60.0]), axes_box, nx=3, ny=3, min_dist_px=1.0)
    assert Candidate((0.06, 0.06)) not in far and len(far) == 8


def _figure_axes() -> tuple[Figure, object]:
    fig = Figure(figsize=(4, 3), dpi=50)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    return fig, ax


def test_place_text_takes_the_first_clean_candidate_and_records_its_box() -> None:
    fig, ax = _figure_axes()
    (line,) = ax.plot([0, 10], [8, 8])  # type: ignore[attr-defined]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    area = ax.get_window_extent(renderer)  # type: ignore[attr-defined]
    obs = Obstacles()
    obs.add_points("line", line_points(line))
    ann = ax.annotate("label", xy=(5, 5), xytext=(5, 8))  # type: ignore[attr-defined]
    # on the line, outside the axes, then clear of both
    cands = [Candidate((5, 8)), Candidate((50, 2)), Candidate((5, 3))]
    box = place_text(ann, cands, renderer, obs, area)
    assert ann.get_position() == (5, 3)
    assert obs.boxes == [box]
    assert box.contains(*text_extent(ann, renderer).get_points().mean(axis=0))
    # the same spot is now taken by a box: a second label goes elsewhere
    second = ax.annotate("other", xy=(5, 5), xytext=(5, 3))  # type: ignore[attr-defined]
    place_text(second, [Candidate((5, 3)), Candidate((2, 5))], renderer, obs, area)
    assert second.get_position() == (2, 5)
    # ignoring the line, the first candidate is clean
    third = ax.annotate("third", xy=(5, 5), xytext=(0, 0))  # type: ignore[attr-defined]
    place_text(third, [Candidate((7, 8))], renderer, obs, area, ignore_points=("line",))
    assert third.get_position() == (7, 8)


def test_place_text_falls_back_to_the_least_bad_candidate_and_needs_one() -> None:
    fig, ax = _figure_axes()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    area = ax.get_window_extent(renderer)  # type: ignore[attr-defined]
    obs = Obstacles()
    first = ax.annotate("first", xy=(5, 5), xytext=(5, 5))  # type: ignore[attr-defined]
    place_text(first, [Candidate((5, 5))], renderer, obs, area)
    ann = ax.annotate("second", xy=(5, 5), xytext=(0, 0))  # type: ignore[attr-defined]
    # wholly outside the axes, or over the first label: covering a label is the lesser harm
    place_text(ann, [Candidate((50, 50)), Candidate((5, 5))], renderer, obs, area)
    assert ann.get_position() == (5, 5)
    assert len(obs.boxes) == 2
    with pytest.raises(ValueError, match="at least one candidate"):
        place_text(ann, [], renderer, obs, area)


def test_place_legend_avoids_the_curve() -> None:
    fig, ax = _figure_axes()
    (line,) = ax.plot([0, 4], [10, 7], label="falling")  # type: ignore[attr-defined]
    legend = ax.legend(loc="upper left")  # type: ignore[attr-defined]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    obs = Obstacles()
    obs.add_points("line", line_points(line))
    upper_left = legend.get_window_extent(renderer)
    assert points_in(upper_left, obs.all_points()) > 0  # where it was asked for, it covers
    box = place_legend(legend, renderer, obs)
    assert points_in(box, obs.all_points()) == 0
    assert obs.boxes == [box]


def test_vline_points_span_the_axes_height() -> None:
    fig, ax = _figure_axes()
    pts = vline_points(ax, 5.0)  # type: ignore[arg-type]
    bbox = ax.get_window_extent(fig.canvas.get_renderer())  # type: ignore[attr-defined]
    assert np.allclose(pts[:, 0], pts[0, 0])
    assert pts[:, 1].min() == pytest.approx(bbox.y0) and pts[:, 1].max() == pytest.approx(bbox.y1)


def test_place_or_drop_places_where_clean_and_removes_the_label_where_nothing_is() -> None:
    fig, ax = _figure_axes()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    area = ax.get_window_extent(renderer)  # type: ignore[attr-defined]
    obs = Obstacles()
    first = ax.annotate("first", xy=(5, 5), xytext=(5, 5))  # type: ignore[attr-defined]
    assert place_or_drop(first, [Candidate((50, 50)), Candidate((5, 5))], renderer, obs, area)
    assert first.get_position() == (5, 5) and len(obs.boxes) == 1
    # over the first label or outside the axes: thinned, never drawn over them
    second = ax.annotate("second", xy=(5, 5), xytext=(0, 0))  # type: ignore[attr-defined]
    assert not place_or_drop(second, [Candidate((5, 5)), Candidate((50, 5))], renderer, obs, area)
    assert second not in ax.texts and len(obs.boxes) == 1  # type: ignore[attr-defined]


def test_a_step_line_counts_its_corners_as_drawn() -> None:
    _fig, ax = _figure_axes()
    (line,) = ax.plot([0, 10], [2, 8], drawstyle="steps-post")  # type: ignore[attr-defined]
    corner = ax.transData.transform([[10, 2]])[0]  # type: ignore[attr-defined]
    across = ax.transData.transform([[5, 5]])[0]  # type: ignore[attr-defined]
    pts = line_points(line)
    near = np.hypot(*(pts - corner).T).min()
    assert near < 1.0  # the level runs to x=10 before it rises
    assert np.hypot(*(pts - across).T).min() > 20.0  # no diagonal through the middle
