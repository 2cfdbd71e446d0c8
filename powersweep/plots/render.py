"""Writes every chart of one run into a folder."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import polars as pl
from matplotlib.figure import Figure

from powersweep.analysis.result_types import PowerAnalysis
from powersweep.plots._style import write_charts
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
    return write_charts(out_dir, formats, _charts(analysis, samples, title))


def _charts(
    analysis: PowerAnalysis, samples: pl.DataFrame | None, title: str | None
) -> Iterator[tuple[str, Callable[[], Figure]]]:
    """The run's charts, each asked for as the one before it is written."""
    yield "efficiency", lambda: efficiency_figure(analysis, title)
    yield "power", lambda: power_figure(analysis, title)
    if has_clocks(analysis):
        yield "clocks", lambda: clocks_figure(analysis, title)
    if samples is not None and samples.height > 0:
        ticks = samples
        yield "timeline", lambda: timeline_figure(ticks, analysis, title)
