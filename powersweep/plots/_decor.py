"""Decorations shared by the per-run charts: plateau bands, the default-limit line, their labels."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox

from powersweep.analysis.result_types import Plateau
from powersweep.plots._data import AnalysisView, card_defaults, fmt_w, gpu_label, subtitle
from powersweep.plots._layout import Candidate, Obstacles, place_text, vline_points
from powersweep.plots._style import COLORS
from powersweep.runformat import as_float

PLATEAU_NAMES = {"boost_plateau": "boost plateau", "draw_ceiling": "draw ceiling"}
DEFAULT_GID = "default-tdp"


def cap_step_w(view: AnalysisView) -> float:
    """Typical spacing between swept caps (W); 1% of the cap range for a one-cap sweep."""
    caps = np.unique(view.curve.cap_w)
    if len(caps) > 1:
        return float(np.median(np.diff(caps)))
    return max(1.0, 0.01 * float(caps[0]))


def x_limits(view: AnalysisView) -> tuple[float, float]:
    """X range covering every cap, every plateau and the default limit, with a margin."""
    xs = list(view.curve.cap_w)
    xs += [p.start_w for p in view.plateaus] + [p.end_w for p in view.plateaus]
    xs += [w for _, w in _defaults(view)]
    lo, hi = min(xs), max(xs)
    margin = max(0.04 * (hi - lo), 0.5 * cap_step_w(view))
    return lo - margin, hi + margin


def plateau_bounds(plateau: Plateau, step_w: float) -> tuple[float, float]:
    """Band edges of a plateau; a single-cap plateau is widened to half a step each side."""
    if plateau.end_w > plateau.start_w:
        return plateau.start_w, plateau.end_w
    return plateau.start_w - step_w / 2, plateau.end_w + step_w / 2


def draw_plateau_spans(ax: Axes, view: AnalysisView) -> list[Rectangle]:
    """Shades each plateau (gid ``plateau:<kind>``): amber for boost, hatched grey for ceilings."""
    spans: list[Rectangle] = []
    step = cap_step_w(view)
    for plateau in view.plateaus:
        lo, hi = plateau_bounds(plateau, step)
        ceiling = plateau.kind == "draw_ceiling"
        span = ax.axvspan(
            lo,
            hi,
            facecolor=COLORS[plateau.kind],
            alpha=0.22 if ceiling else 0.25,
            hatch="///" if ceiling else None,
            edgecolor=COLORS[plateau.kind] if ceiling else "none",
            linewidth=0.0,
            zorder=0.5,
            gid=f"plateau:{plateau.kind}",
        )
        spans.append(span)
    return spans


def _defaults(view: AnalysisView) -> list[tuple[str, float]]:
    """(label, W) of each default-limit line: the card's, or each card's on a rig of
    different cards."""
    per_card = card_defaults(view.run)
    if per_card:
        return [(f"{_short(name)} default {fmt_w(w)}", w) for name, w in per_card]
    default_w = as_float(view.run.default_limit_w)
    return [(f"default limit {fmt_w(default_w)}", default_w)] if math.isfinite(default_w) else []


def _short(name: str) -> str:
    """``RTX 3090`` of ``NVIDIA GeForce RTX 3090 (simulated)``: the vertical label is short."""
    for prefix in ("NVIDIA ", "GeForce "):
        name = name.removeprefix(prefix)
    return name.split(" (", 1)[0]


def draw_default_line(ax: Axes, view: AnalysisView, obstacles: Obstacles) -> Line2D | None:
    """Vertical dash-dot line at the default (factory) power limit (each card's), when known."""
    line = None
    for _, default_w in _defaults(view):
        line = ax.axvline(
            default_w,
            color=COLORS["default_tdp"],
            linestyle="-.",
            linewidth=1.0,
            zorder=1.5,
            gid=DEFAULT_GID,
        )
        obstacles.add_points(DEFAULT_GID, vline_points(ax, default_w))
    return line


def plateau_label_text(plateau: Plateau) -> str:
    """``boost plateau`` / ``draw ceiling`` with its draw level when known."""
    name = PLATEAU_NAMES[plateau.kind]
    draw_w = as_float(plateau.power_w)
    if math.isfinite(draw_w):
        return f"{name}\n~{draw_w:.0f} W draw"
    return name


def label_plateaus(
    ax: Axes,
    view: AnalysisView,
    renderer: RendererBase,
    obstacles: Obstacles,
    area: Bbox,
) -> list[Annotation]:
    """Writes each plateau's name over its band, at the height where it covers nothing."""
    labels: list[Annotation] = []
    ys = [0.95, 0.88, 0.81, 0.74, 0.67, 0.6, 0.53, 0.46, 0.39, 0.32, 0.25, 0.18, 0.11, 0.05]
    step = cap_step_w(view)
    x_lo, x_hi = ax.get_xlim()
    for plateau in view.plateaus:
        lo, hi = plateau_bounds(plateau, step)
        centre = (lo + hi) / 2
        nudge = 0.04 * (x_hi - x_lo)
        xs = [centre, centre - nudge, centre + nudge, centre - 2 * nudge, centre + 2 * nudge]
        ceiling = plateau.kind == "draw_ceiling"
        ann = ax.annotate(
            plateau_label_text(plateau),
            xy=(centre, 0.5),
            xycoords=("data", "axes fraction"),
            xytext=(centre, ys[0]),
            textcoords=("data", "axes fraction"),
            ha="center",
            va="center",
            fontsize=7.5,
            color="#4d4d4d" if ceiling else "#9a6400",
            fontstyle="italic",
            zorder=6,
            gid=f"plateau-label:{plateau.kind}",
            annotation_clip=False,
        )
        ann.set_in_layout(False)
        cands = [Candidate((x, y)) for y in ys for x in xs]
        place_text(ann, cands, renderer, obstacles, area)
        labels.append(ann)
    return labels


def label_default(
    ax: Axes,
    view: AnalysisView,
    renderer: RendererBase,
    obstacles: Obstacles,
    area: Bbox,
) -> Annotation | None:
    """Names the default-limit line(s) with vertical text beside each."""
    ann = None
    for text, default_w in _defaults(view):
        ann = ax.annotate(
            text,
            xy=(default_w, 0.5),
            xycoords=("data", "axes fraction"),
            xytext=(-7.0, 0.0),
            textcoords="offset points",
            rotation=90,
            ha="center",
            va="center",
            fontsize=7.5,
            color=COLORS["default_tdp"],
            zorder=6,
            gid="default-tdp-label",
            annotation_clip=False,
        )
        ann.set_in_layout(False)
        ys = [0.78, 0.7, 0.62, 0.54, 0.46, 0.38, 0.3, 0.22]
        cands = [Candidate((dx, 0.0), (default_w, y)) for y in ys for dx in (-7.0, 7.0)]
        place_text(ann, cands, renderer, obstacles, area, ignore_points=(DEFAULT_GID,))
    return ann


def set_header(
    fig: Figure, ax: Axes, view: AnalysisView | None, title: str | None, what: str
) -> None:
    """Figure title (GPU name and what the chart shows) and the run-facts subtitle."""
    if view is None:
        fig.suptitle(title or what[:1].upper() + what[1:])
        return
    fig.suptitle(title or f"{gpu_label(view.run)}: {what}")
    facts = subtitle(view.run, with_gpu=title is not None)
    if facts:
        ax.set_title(facts, loc="left", fontsize=8, color="#555555")


def cap_axis_label(view: AnalysisView) -> str:
    """X label of the cap axis (per GPU on multi-GPU runs)."""
    n_gpus = view.run.n_gpus or 1
    return "power cap (W per GPU)" if n_gpus > 1 else "power cap (W)"
