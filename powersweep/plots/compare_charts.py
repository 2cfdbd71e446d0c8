"""Several runs on one chart (TPS/W curves, sweet spots marked) and as a markdown table."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from powersweep.analysis.result_types import Pick, PowerAnalysis, RunFacts
from powersweep.errors import UsageError
from powersweep.plots._data import (
    AnalysisView,
    FloatArray,
    fmt_w,
    gpu_label,
    parse_analysis,
    pct_by_gpu,
    text,
)
from powersweep.plots._frame import settle_legend
from powersweep.plots._style import make_folder, new_figure, save_figure, style
from powersweep.plots.efficiency import fmt_tpw
from powersweep.runformat import as_float

X_MODES = ("watts", "pct-tdp")

# Colour-blind-safe palette (Okabe-Ito), cycled for more runs.
_PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")
_MARKERS = ("o", "s", "^", "v", "D", "P", "X")


def _short_gpu(run: RunFacts) -> str:
    """``RTX 3090`` of ``NVIDIA GeForce RTX 3090`` (the vendor's words say nothing in a legend)."""
    label = gpu_label(run)
    for word in ("NVIDIA ", "GeForce "):
        label = label.replace(word, "")
    return label


def _stamp(date: str | None) -> str:
    """``2026-05-01 10:00:00`` of run.json's ``started_at`` (``2026-05-01T10:00:00Z``)."""
    return (date or "").replace("T", " ").removesuffix("Z").split("+", 1)[0].split(".", 1)[0]


def compare_labels(runs: Sequence[tuple[str, RunFacts, str]]) -> list[str]:
    """Each run's name in the compare table and legend, from its run.json's facts: GPU, cooling,
    axis and load (``RTX 3090, air, power, decode-single``); the start time is added only where
    two labels would be equal, then the given name (its folder) where that is equal too.

    Args:
        runs: ``(name, facts, axis)`` per run; ``name`` (the folder or file name) labels a
            curve whose facts name neither its GPU nor its load (a bare caps.csv).
    """
    labels = []
    for name, facts, axis in runs:
        if not (text(facts.gpu_name) or text(facts.gpu_label) or text(facts.load_mode)):
            labels.append(name)
            continue
        cooling = text(facts.cooling)
        parts = [
            _short_gpu(facts),
            cooling if cooling and cooling != "unspecified" else "",
            axis,
            text(facts.load_mode),
        ]
        labels.append(", ".join(p for p in parts if p))
    for more in (lambda i: _stamp(runs[i][1].date), lambda i: runs[i][0]):
        labels = _told_apart(labels, more)
    return _told_apart(labels, lambda i: f"#{i + 1}")


def _told_apart(labels: list[str], more: Callable[[int], str]) -> list[str]:
    """``labels`` with ``more(i)`` added to each label that another one equals (where it adds)."""
    counts = Counter(labels)
    out = []
    for i, label in enumerate(labels):
        extra = more(i) if counts[label] > 1 else ""
        out.append(f"{label}, {extra}" if extra and extra not in label else label)
    return out


def _views(analyses: Sequence[tuple[str, PowerAnalysis]]) -> list[tuple[str, AnalysisView]]:
    if not analyses:
        raise UsageError("nothing to compare: give at least one run")
    out: list[tuple[str, AnalysisView]] = []
    for label, analysis in analyses:
        try:
            out.append((label, parse_analysis(analysis)))
        except UsageError as exc:
            raise UsageError(f"{label}: {exc}") from exc
    return out


def _x_values(label: str, view: AnalysisView, caps_w: FloatArray, x: str) -> FloatArray:
    if x == "watts":
        return caps_w
    default_w = as_float(view.run.default_limit_w)
    if not (math.isfinite(default_w) and default_w > 0):
        raise UsageError(
            f"{label}: the run does not record its default power limit; compare with --x watts"
        )
    return caps_w / default_w * 100.0


def _peak(view: AnalysisView) -> float:
    finite = view.curve.tps_per_w[np.isfinite(view.curve.tps_per_w)]
    return float(finite.max()) if len(finite) else math.nan


def compare_figure(
    analyses: Sequence[tuple[str, PowerAnalysis]],
    x: str = "watts",
    normalize: bool = False,
) -> Figure:
    """Overlays the TPS/W curves of several runs, each sweet spot marked with a star.

    Args:
        analyses: ``(label, typed analysis)`` pairs, drawn in order.
        x: ``"watts"`` (cap in W) or ``"pct-tdp"`` (cap as % of each run's default limit).
        normalize: Divide each curve by its own peak TPS/W (shapes compare across GPUs).

    Raises:
        UsageError: No runs, an unknown ``x``, or ``pct-tdp`` for a run without a default limit.
    """
    if x not in X_MODES:
        raise UsageError(f"unknown x axis {x!r}; use one of {', '.join(X_MODES)}")
    views = _views(analyses)
    with style():
        fig = new_figure()
        ax = fig.add_subplot()
        fig.suptitle("Tokens per watt vs power cap")
        ax.set_title(
            ("TPS/W relative to each run's peak" if normalize else "stars: sweet spots")
            + "; bands: each cap's stated 95% interval",
            loc="left",
            fontsize=8,
            color="#555555",
        )
        ax.set_xlabel("power cap (% of default limit)" if x == "pct-tdp" else "power cap (W)")
        ax.set_ylabel("TPS/W (share of run's peak)" if normalize else "TPS/W (tokens/s per W)")
        handles: list[Line2D] = []
        all_x: list[float] = []
        all_y: list[float] = []
        for i, (label, view) in enumerate(views):
            line = _plot_run(ax, i, label, view, x, normalize)
            handles.append(line)
            all_x += [float(v) for v in np.asarray(line.get_xdata()) if np.isfinite(v)]
            all_y += [float(v) for v in np.asarray(line.get_ydata()) if np.isfinite(v)]
        if x == "pct-tdp":
            default_line = ax.axvline(
                100.0,
                color="#444444",
                linestyle="-.",
                linewidth=1.0,
                zorder=1.5,
                label="default limit",
                gid="default-tdp",
            )
            handles.append(default_line)
            all_x.append(100.0)
        if all_x:
            lo, hi = min(all_x), max(all_x)
            margin = max(0.04 * (hi - lo), 1.0)
            ax.set_xlim(lo - margin, hi + margin)
        if all_y:
            ax.set_ylim(0.0, max(all_y) * 1.3)
        legend = ax.legend(handles=handles, loc="upper left", fontsize=7.5)
        legend.set_zorder(7)
        settle_legend(fig, legend, ax.lines)
        return fig


def _plot_run(ax: Axes, i: int, label: str, view: AnalysisView, x: str, normalize: bool) -> Line2D:
    """Draws run ``i``'s TPS/W curve (named by its sweet spot) and the sweet spot's star.

    Returns:
        The curve, for the legend and the axis ranges.
    """
    color = _PALETTE[i % len(_PALETTE)]
    xs = _x_values(label, view, view.curve.cap_w, x)
    scale = _peak(view) if normalize else 1.0
    scaled = math.isfinite(scale) and scale > 0
    ys = view.curve.tps_per_w / scale if scaled else view.curve.tps_per_w
    spot = view.sweet_spot
    name = label
    if spot is not None:
        pct = f" ({_pct(spot)} of default)" if _pct(spot) else ""
        name = f"{label}: {fmt_w(spot.cap_w)}{pct}, {fmt_tpw(as_float(spot.tps_per_w))} TPS/W"
    (line,) = ax.plot(
        xs,
        ys,
        marker=_MARKERS[i % len(_MARKERS)],
        markersize=3.2,
        color=color,
        label=name,
        gid=f"run:{i}",
        zorder=3,
    )
    # each cap's stated 95% interval, a band in the run's colour (none where the run states
    # none: an older run, a bare caps.csv)
    half = view.curve.half_width(view.curve.tps_per_w, view.curve.tps_per_w_u95_pct)
    if len(half) == len(ys) and np.isfinite(half).any():
        band = half / scale if scaled else half
        ax.fill_between(
            xs, ys - band, ys + band, color=color, alpha=0.18, linewidth=0, zorder=2,
            gid=f"interval:{i}",
        )  # fmt: skip
    if spot is not None:
        sx = float(_x_values(label, view, np.array([spot.cap_w]), x)[0])
        spot_tpw = as_float(spot.tps_per_w)
        ax.plot(
            [sx],
            [spot_tpw / scale if scaled else spot_tpw],
            linestyle="none",
            marker="*",
            markersize=13,
            color=color,
            markeredgecolor="#222222",
            markeredgewidth=0.7,
            zorder=5,
            gid=f"sweet-spot:{i}",
        )
    return line


def render_compare(
    analyses: Sequence[tuple[str, PowerAnalysis]],
    out_path_stem: Path,
    *,
    x: str = "watts",
    normalize: bool = False,
    formats: Sequence[str] = ("png",),
) -> list[Path]:
    """Writes the compare chart as ``<out_path_stem>.<fmt>`` for each format.

    Raises:
        UsageError: As :func:`compare_figure`, or an unsupported format.
        PowersweepError: A file cannot be written.
    """
    fig = compare_figure(analyses, x=x, normalize=normalize)
    make_folder(out_path_stem.parent)
    return save_figure(fig, out_path_stem, formats)


def _pct(spot: Pick) -> str:
    """``78%``, or each card's own (``78% / 64%``) on a rig of different cards; empty if unknown."""
    by_gpu = pct_by_gpu(spot)
    if by_gpu:
        return " / ".join(f"{p:.0f}%" for p in by_gpu)
    pct = as_float(spot.pct_of_default)
    return f"{pct:.0f}%" if math.isfinite(pct) else ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def compare_table(analyses: Sequence[tuple[str, PowerAnalysis]]) -> str:
    """A GitHub markdown table of each run's sweet spot (``—`` where unknown).

    Columns: run (its label: :func:`compare_labels` names the GPU and load), sweet-spot cap,
    % of the default limit, TPS/W, TPS, draw, near-peak cap.
    """
    views = _views(analyses)
    header = (
        "| run | sweet spot | % of default | TPS/W | TPS | draw | near peak |\n"
        "|---|--:|--:|--:|--:|--:|--:|"
    )
    dash = "—"

    def known_num(value: float | None, fmt: str) -> str:
        return fmt.format(as_float(value)) if math.isfinite(as_float(value)) else dash

    rows = [header]
    for label, view in views:
        spot = view.sweet_spot
        near = view.near_peak
        cells = [
            _cell(label),
            fmt_w(spot.cap_w) if spot else dash,
            (_pct(spot) or dash) if spot else dash,
            fmt_tpw(as_float(spot.tps_per_w)) if spot else dash,
            known_num(spot.tps, "{:.1f}") if spot else dash,
            known_num(spot.power_w, "{:.0f} W") if spot else dash,
            fmt_w(near.cap_w) if near else dash,
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"
