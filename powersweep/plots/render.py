"""Writes every chart of one run into a folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from powersweep.analysis.result_types import PowerAnalysis
from powersweep.plots._style import check_formats, make_folder, save_figure
from powersweep.plots.companions import clocks_figure, has_clocks, power_figure, timeline_figure
from powersweep.plots.efficiency import efficiency_figure


def render_charts(
    analysis: PowerAnalysis,
    out_dir: Path,
    *,
    samples: pl.DataFrame | None = None,
    formats: Sequence[str] = ("png",),
    title: str | None = None,
) -> list[Path]:
    """Renders the charts of one run.

    Writes ``efficiency``, ``power``, ``clocks`` (when the analysis has clock readings) and
    ``timeline`` (when ``samples`` is given and has rows) as ``<name>.<fmt>`` into ``out_dir``.

    Args:
        analysis: The typed analysis.
        out_dir: Folder to write into (created if missing).
        samples: samples.csv as a DataFrame, for the timeline.
        formats: ``png`` and/or ``svg``.
        title: Title of the efficiency chart (and the companions); defaults to the GPU name.

    Returns:
        The written paths, in chart then format order.

    Raises:
        UsageError: Bad format, or an analysis with nothing to plot.
        PowersweepError: The folder or a file cannot be written.
    """
    fmts = check_formats(formats)
    make_folder(out_dir)
    paths = save_figure(efficiency_figure(analysis, title), out_dir / "efficiency", fmts)
    paths += save_figure(power_figure(analysis, title), out_dir / "power", fmts)
    if has_clocks(analysis):
        paths += save_figure(clocks_figure(analysis, title), out_dir / "clocks", fmts)
    if samples is not None and samples.height > 0:
        paths += save_figure(timeline_figure(samples, analysis, title), out_dir / "timeline", fmts)
    return paths
