"""``undervolt``: TPS/W and draw against the clock offset, the baseline cap as a line, the first
unstable step and the chosen offset marked."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from powersweep.analysis.undervolt_result_types import UndervoltAnalysis
from powersweep.errors import UsageError
from powersweep.plots._style import (
    COLORS,
    check_formats,
    make_folder,
    new_figure,
    save_figure,
    style,
)


def _f(value: float | None) -> float:
    return math.nan if value is None else float(value)


def undervolt_figure(analysis: UndervoltAnalysis, title: str | None = None) -> Figure:
    """TPS/W of each step (stable steps joined, unstable ones crossed), the baseline cap's as a
    dashed line, the chosen offset starred; draw on the right axis.

    Raises:
        UsageError: No step measured.
    """
    steps = [s for s in analysis.steps if s.sm_offset_mhz is not None]
    if not steps:
        raise UsageError("nothing to plot: no offset step measured")
    with style():
        fig = new_figure()
        ax = fig.add_subplot()
        ok = [s for s in steps if s.status == "ok"]
        ax.plot(
            [_f(s.sm_offset_mhz) for s in ok],
            [_f(s.tps_per_w) for s in ok],
            marker="o",
            color=COLORS["sweet_spot"],
            label="TPS/W (stable steps)",
        )
        bad = [s for s in steps if s.status != "ok"]
        if bad:
            ax.plot(
                [_f(s.sm_offset_mhz) for s in bad],
                [_f(s.tps_per_w) if math.isfinite(_f(s.tps_per_w)) else 0.0 for s in bad],
                marker="x",
                markersize=12,
                linestyle="none",
                color="#c0392b",
                label="unstable",
            )
        base = analysis.baseline
        if base is not None and math.isfinite(_f(base.tps_per_w)):
            ax.axhline(
                _f(base.tps_per_w),
                linestyle="--",
                color="#555555",
                label=f"{_f(base.cap_w):.0f} W cap, unlocked",
            )
        chosen = analysis.chosen
        if chosen is not None:
            ax.plot(
                [_f(chosen.sm_offset_mhz)],
                [_f(chosen.tps_per_w)],
                marker="*",
                markersize=16,
                markeredgecolor="#333333",
                linestyle="none",
                color=COLORS["sweet_spot"],
                label="answer (soaked)",
            )
        ax.set_xlabel(f"SM clock offset (MHz) at a {_f(analysis.sm_lock_mhz):.0f} MHz lock")
        ax.set_ylabel("TPS per W")
        right = ax.twinx()
        right.plot(
            [_f(s.sm_offset_mhz) for s in ok],
            [_f(s.power_w) for s in ok],
            color="#888888",
            linestyle=":",
            marker=".",
        )
        right.set_ylabel("draw (W)")
        ax.legend(loc="best")
        name = analysis.run.gpu_name or "GPU"
        fig.suptitle(title or f"{name}: undervolt search")
    return fig


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
    fmts = check_formats(formats)
    make_folder(out_dir)
    return save_figure(undervolt_figure(analysis, title), out_dir / "undervolt", fmts)
