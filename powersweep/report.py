"""Derived outputs of a run: analysis, summary and charts, from the saved CSVs alone.

The sweep calls this once it ends; ``powersweep analyze`` and ``powersweep plot`` call it on a run
directory or a bare ``caps.csv`` later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powersweep import analysis, plots


@dataclass(frozen=True)
class Report:
    """What was regenerated.

    Attributes:
        analysis: The analysis (the content of ``analysis.json``).
        summary: The markdown summary.
        paths: Files written.
    """

    analysis: dict[str, Any]
    summary: str
    paths: tuple[Path, ...]


def build_report(
    path: Path,
    *,
    out_dir: Path | None = None,
    charts: bool = True,
    formats: Sequence[str] = ("png",),
    title: str | None = None,
    write_analysis: bool = True,
    max_tps_loss_pct: float = 5.0,
    objective: str = "tps-per-w",
    eta: float = 0.5,
) -> Report:
    """Analyse a run directory or ``caps.csv`` and write the derived outputs.

    Args:
        path: Run directory or ``caps.csv``.
        out_dir: Where to write (default: next to the input).
        charts: Whether to draw the charts (into ``<out>/charts``).
        formats: Chart formats (``png``, ``svg``).
        title: Chart title override.
        write_analysis: Whether to write ``analysis.json`` and ``summary.md``.
        max_tps_loss_pct: Near-peak tolerance.
        objective: Recommendation objective.
        eta: Weight of energy in the ``cost`` objective.

    Raises:
        UsageError: The input cannot be read as a curve.
        PowersweepError: An output cannot be written.
    """
    curve = analysis.load_curve(path)
    result = analysis.analyze(
        curve, max_tps_loss_pct=max_tps_loss_pct, objective=objective, eta=eta
    )
    target = out_dir or curve.out_dir
    written: list[Path] = []
    if write_analysis:
        written += analysis.write_outputs(curve, result, target)
    if charts:
        written += plots.render_charts(
            result, target / "charts", samples=curve.samples, formats=formats, title=title
        )
    return Report(result, analysis.render_summary(curve, result), tuple(written))
