"""Fleet charts drawn from a fleet report (``fleet.json``): readable at one run or a thousand.

No chart has one legend entry per run.

The reasoning: docs/fleets.md, "powersweep.plots.fleet_charts".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from powersweep.analysis.fleet_axis import FleetAxis
from powersweep.analysis.fleet_result_types import (
    Band,
    Envelope,
    FleetAnswer,
    FleetGroup,
    FleetReport,
    OutlierCurve,
    WithinNoise,
)
from powersweep.errors import UsageError
from powersweep.plots._style import COLORS, make_folder, new_figure, save_figure, style
from powersweep.runformat import as_float

# Groups drawn per figure; the rest are named in a note (fleet.json has them all).
MAX_GROUPS = 4
# Outlier curves drawn and named per group.
MAX_OUTLIER_CURVES = 8
MAX_OUTLIER_LINES = 14
_BAND = "#1f5fa8"
_OUTLIER_COLORS = ("#d55e00", "#cc79a7", "#e69f00", "#009e73", "#56b4e9", "#000000")


def _title(group: FleetGroup) -> str:
    gpu = str(group.gpu_name or "unknown GPU").replace("NVIDIA ", "")
    n = int(group.n_gpus or 1)
    gpu = f"{n} x {gpu}" if n > 1 else gpu
    axis = group.fleet_axis.name
    tail = "" if axis == "power" else f" · {axis}"
    return f"{gpu} · {group.load_mode} · {group.model}{tail} ({group.n_cards} cards)"


def _xlabel(axis: FleetAxis) -> str:
    return "power cap (W)" if axis.name == "power" else f"{axis.noun} ({axis.unit})"


def _answer_name(axis: FleetAxis) -> str:
    return "fleet cap" if axis.name == "power" else "fleet lock"


def _groups(fleet: FleetReport) -> list[FleetGroup]:
    groups = [g for g in fleet.groups if g.band is not None and g.band.settings]
    if not groups:
        raise UsageError("the fleet report has no group with a usable curve to draw")
    return groups


def _arr(values: Sequence[float | None]) -> np.ndarray:
    return np.array([as_float(v) for v in values], dtype=float)


def _more_note(fig: Figure, groups: Sequence[FleetGroup]) -> None:
    if len(groups) > MAX_GROUPS:
        fig.text(
            0.01,
            0.005,
            f"{len(groups) - MAX_GROUPS} more group(s) not drawn; see fleet.json / fleet.md",
            fontsize=7,
            color="#555555",
        )


def band_figure(fleet: FleetReport) -> Figure:
    """TPS/W against the cap (or clock lock) per group: median, IQR band, min-max envelope,
    outliers listed.

    Raises:
        UsageError: No group has a curve.
    """
    groups = _groups(fleet)
    shown = groups[:MAX_GROUPS]
    with style():
        fig = new_figure(height_in=3.3 * len(shown) + 0.4)
        axes = {g.fleet_axis.name for g in shown}
        what = "the power cap" if axes == {"power"} else "the setting swept"
        fig.suptitle(f"Fleet: tokens per watt against {what}")
        grid = fig.add_gridspec(len(shown), 2, width_ratios=(3.2, 1.25))
        for row, g in enumerate(shown):
            ax = fig.add_subplot(grid[row, 0])
            side = fig.add_subplot(grid[row, 1])
            _band_axes(ax, g)
            _outlier_list(side, g)
        _more_note(fig, groups)
    return fig


def _band_axes(ax: Axes, g: FleetGroup) -> None:
    axis = g.fleet_axis
    band = g.band or Band()
    caps = _arr(band.settings)
    ax.set_title(_title(g), loc="left", fontsize=8.5)
    ax.fill_between(
        caps, _arr(band.min), _arr(band.max), color=_BAND, alpha=0.12, lw=0, label="min-max"
    )
    ax.fill_between(caps, _arr(band.q1), _arr(band.q3), color=_BAND, alpha=0.32, lw=0, label="IQR")
    ax.plot(caps, _arr(band.median), color=_BAND, lw=1.8, label="median card", zorder=4)
    ymax = float(np.nanmax(_arr(band.max)))
    ymin = float(np.nanmin(_arr(band.min)))
    for i, o in enumerate(g.outliers[:MAX_OUTLIER_CURVES]):
        curve = o.curve or OutlierCurve()
        ys = _arr(curve.tps_per_w)
        xs = _arr(curve.settings)
        color = _OUTLIER_COLORS[i % len(_OUTLIER_COLORS)]
        ax.plot(xs, ys, color=color, lw=0.9, ls="--", zorder=3)
        if len(xs):
            ax.annotate(
                str(i + 1),
                (xs[-1], ys[-1]),
                xytext=(3, 0),
                textcoords="offset points",
                fontsize=7,
                color=color,
                va="center",
            )
            ymax = max(ymax, float(np.nanmax(ys)))
            ymin = min(ymin, float(np.nanmin(ys)))
    name = _answer_name(axis)
    answer = g.answer or FleetAnswer()
    fc = answer.setting
    noise = [float(x) for x in (answer.within_noise or WithinNoise()).x if x is not None]
    if len(noise) > 1:
        ax.axvspan(
            min(noise),
            max(noise),
            color=COLORS["sweet_spot"],
            alpha=0.15,
            lw=0,
            label="within noise",
        )
    if fc is not None:
        ax.axvline(float(fc), color=COLORS["sweet_spot"], lw=1.6, zorder=2, label=name)
        ax.annotate(
            f"{name} {float(fc):.0f} {axis.unit}",
            (float(fc), ymax),
            xytext=(3, 0),
            textcoords="offset points",
            fontsize=7,
        )
    default = (g.envelope_w or Envelope()).default
    if default is not None and axis.name == "power":
        ax.axvline(float(default), color=COLORS["default_tdp"], lw=0.9, ls="-.", label="default")
    ax.set_xlabel(_xlabel(axis))
    unit = "prefill TPS" if g.metric == "prefill_tps" else "TPS"
    ax.set_ylabel(f"{unit}/W")
    # zoomed to the curves: the spread between cards is the point of this chart
    if math.isfinite(ymax) and math.isfinite(ymin) and ymax > ymin >= 0:
        pad = (ymax - ymin) * 0.12
        ax.set_ylim(max(0.0, ymin - 2.5 * pad), ymax + pad * 1.5)
    ax.legend(loc="lower right", fontsize=7, ncols=2)


def _outlier_list(ax: Axes, g: FleetGroup) -> None:
    """The outliers as numbered lines, each in its curve's colour (the curves carry the numbers)."""
    ax.axis("off")
    outliers = g.outliers
    lines: list[tuple[str, str]] = [(f"Outliers: {len(outliers)} of {g.n_cards}", "#222222")]
    for i, o in enumerate(outliers[:MAX_OUTLIER_LINES]):
        cause = str(o.causes[0].code) if o.causes else "?"
        drawn = i < MAX_OUTLIER_CURVES
        tag = f"{i + 1}. " if drawn else "   "
        color = _OUTLIER_COLORS[i % len(_OUTLIER_COLORS)] if drawn else "#555555"
        lines.append((f"{tag}{_short(str(o.label), 18)}: {cause.replace('_', ' ')}", color))
    if len(outliers) > MAX_OUTLIER_LINES:
        lines.append((f"... and {len(outliers) - MAX_OUTLIER_LINES} more (fleet.md)", "#555555"))
    if not outliers:
        lines.append(("none" if int(g.n_cards or 0) >= 5 else "(needs 5+ cards)", "#555555"))
    for k, (text, color) in enumerate(lines):
        ax.text(
            0.0,
            1.0 - k * 0.07,
            text,
            va="top",
            ha="left",
            fontsize=7,
            family="DejaVu Sans Mono",
            color=color,
            transform=ax.transAxes,
        )


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else "…" + text[-(n - 1) :]


def histogram_figure(fleet: FleetReport) -> Figure:
    """Where the cards' own sweet spots (or efficiency peaks) and near-peak settings fall, per
    group, with the fleet cap (or lock).

    Raises:
        UsageError: No group has a curve.
    """
    groups = _groups(fleet)
    shown = groups[:MAX_GROUPS]
    with style():
        fig = new_figure(height_in=2.6 * len(shown) + 0.4)
        fig.suptitle("Fleet: each card's own best and near-peak setting")
        for row, g in enumerate(shown):
            ax = fig.add_subplot(len(shown), 1, row + 1)
            _histogram_axes(ax, g)
        _more_note(fig, groups)
    return fig


def _histogram_axes(ax: Axes, g: FleetGroup) -> None:
    axis = g.fleet_axis
    sweet = _arr([c.sweet_spot for c in g.cards])
    near = _arr([c.near_peak for c in g.cards])
    both = np.concatenate([sweet, near])
    both = both[np.isfinite(both)]
    if not len(both):
        ax.axis("off")
        return
    step = g.step
    step = float(step) if step is not None and float(step) > 0 else 10.0
    lo, hi = float(both.min()), float(both.max())
    edges = np.arange(lo - step / 2, hi + step, step)
    ax.hist(
        sweet[np.isfinite(sweet)],
        bins=edges.tolist(),
        color=COLORS["sweet_spot"],
        alpha=0.9,
        label="sweet spot" if axis.name == "power" else "efficiency peak",
        edgecolor="#8a6d00",
        linewidth=0.5,
    )
    ax.hist(
        near[np.isfinite(near)],
        bins=edges.tolist(),
        histtype="step",
        color=COLORS["near_peak"],
        linewidth=1.4,
        label=f"near-peak {axis.noun}",
    )
    fc = (g.answer or FleetAnswer()).setting
    if fc is not None:
        ax.axvline(
            float(fc),
            color="#333333",
            lw=1.2,
            ls="--",
            label=f"{_answer_name(axis)} {float(fc):.0f} {axis.unit}",
        )
    ax.set_title(_title(g), loc="left", fontsize=8.5)
    ax.set_xlabel(_xlabel(axis))
    ax.set_ylabel("cards")
    ax.legend(loc="upper right", fontsize=7)


def render_band(
    fleet: FleetReport, out_path_stem: Path, formats: Sequence[str] = ("png",)
) -> list[Path]:
    """Write only the band chart as ``<out_path_stem>.<fmt>`` (``compare`` past a few runs).

    Raises:
        UsageError: No group has a curve, or an unsupported format.
        PowersweepError: A file cannot be written.
    """
    make_folder(out_path_stem.parent)
    return save_figure(band_figure(fleet), out_path_stem, formats)


def render_fleet_charts(
    fleet: FleetReport, out_dir: Path, formats: Sequence[str] = ("png",)
) -> list[Path]:
    """Write ``fleet-band`` and ``fleet-sweet-spots`` charts into ``out_dir``.

    Raises:
        UsageError: No group has a curve, or an unsupported format.
        PowersweepError: A file cannot be written.
    """
    make_folder(out_dir)
    written = save_figure(band_figure(fleet), out_dir / "fleet-band", formats)
    written += save_figure(histogram_figure(fleet), out_dir / "fleet-sweet-spots", formats)
    return written
