"""TPS/W against inter-token latency p95: one point per cap (or clock point), the target drawn,
the pick starred. Drawn from the typed analysis alone (its ``latency_target`` and table rows)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from powersweep.analysis.clock_result_types import ClockAnalysis, LockPoint
from powersweep.analysis.result_types import CapRow, JsonRecord, PowerAnalysis
from powersweep.errors import UsageError
from powersweep.plots._frame import title_text
from powersweep.plots._style import (
    COLORS,
    new_figure,
    style,
    write_charts,
)
from powersweep.runformat import as_float

LATENCY_STEM = "latency"
PICK_GID = "latency-pick"
TARGET_GID = "latency-target"

# A point of the chart: a cap's row, or a set of clock locks.
Row = CapRow | LockPoint


def _name(p: Row) -> str:
    if isinstance(p, LockPoint):
        parts = [
            f"{what} {as_float(mhz):.0f}"
            for what, mhz in (("SM", p.sm_lock_mhz), ("mem", p.mem_lock_mhz))
            if math.isfinite(as_float(mhz))
        ]
        return " / ".join(parts) or "unlocked"
    return f"{p.cap_w:g} W"


def _points(analysis: PowerAnalysis | ClockAnalysis) -> list[Row]:
    """The measured points with an inter-token p95 and a TPS/W (a cap without a status is a
    bare caps.csv's, measured)."""
    rows: Sequence[Row] = analysis.points if isinstance(analysis, ClockAnalysis) else analysis.caps
    return [
        r
        for r in rows
        if (isinstance(r, LockPoint) or r.figures.status in (None, "ok"))
        and math.isfinite(as_float(r.figures.itl_p95_ms))
        and math.isfinite(as_float(r.figures.tps_per_w))
    ]


def _pick(analysis: PowerAnalysis | ClockAnalysis) -> Row | None:
    """The point that meets the latency target (None where none does or none was set)."""
    target = analysis.latency_target
    if target is None or not target.met or not target.point:
        return None
    return target.point


def has_latency(analysis: JsonRecord) -> bool:
    """Whether any usable point has an inter-token p95 to plot (an axis without a latency
    target, an undervolt search, has none)."""
    return isinstance(analysis, PowerAnalysis | ClockAnalysis) and bool(_points(analysis))


def latency_figure(analysis: PowerAnalysis | ClockAnalysis, title: str | None = None) -> Figure:
    """TPS/W (y) against inter-token p95 (x), each point labelled, the pick starred.

    Raises:
        UsageError: No point has an inter-token p95 (a run older than the column, or
            prefill-heavy with one-token answers).
    """
    pts = _points(analysis)
    if not pts:
        raise UsageError(
            "nothing to plot: no point has an inter-token p95 (itl_p95_ms) in caps.csv"
        )
    pick = _pick(analysis)
    target = analysis.latency_target
    limit = as_float(target.max_itl_ms) if target is not None else math.nan
    with style():
        fig = new_figure()
        ax = fig.add_subplot()
        xs = [as_float(p.figures.itl_p95_ms) for p in pts]
        ys = [as_float(p.figures.tps_per_w) for p in pts]
        ax.plot(
            xs, ys, linestyle="none", marker="o", color=COLORS["tps_per_w"], label="measured point"
        )
        for p, x, y in zip(pts, xs, ys, strict=True):
            ax.annotate(_name(p), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
        if math.isfinite(limit):
            ax.axvline(limit, color=COLORS["default_tdp"], linestyle="--", gid=TARGET_GID)
            ax.annotate(
                f"target {limit:g} ms",
                (limit, 1.0),
                xycoords=("data", "axes fraction"),
                textcoords="offset points",
                xytext=(3, -10),
                fontsize=7,
            )
        if pick is not None and math.isfinite(as_float(pick.figures.itl_p95_ms)):
            ax.plot(
                [as_float(pick.figures.itl_p95_ms)],
                [as_float(pick.figures.tps_per_w)],
                marker="*",
                markersize=12,
                linestyle="none",
                color=COLORS["sweet_spot"],
                label=f"pick: {_name(pick)}",
                gid=PICK_GID,
            )
        ax.set_xlabel("inter-token latency p95 (ms)")
        ax.set_ylabel("TPS/W")
        ax.set_title(title_text(analysis.run, title, "efficiency against latency"))
        ax.legend(loc="best")
    return fig


def render_latency_chart(
    analysis: PowerAnalysis | ClockAnalysis,
    out_dir: Path,
    *,
    formats: Sequence[str] = ("png",),
    title: str | None = None,
) -> list[Path]:
    """Write ``latency.<fmt>`` into ``out_dir``.

    Raises:
        UsageError: Bad format, or nothing to plot.
        PowersweepError: The folder or a file cannot be written.
    """
    fig = latency_figure(analysis, title)  # drawn first: nothing to plot makes no folder
    return write_charts(out_dir, formats, [(LATENCY_STEM, lambda: fig)])
