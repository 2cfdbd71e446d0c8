"""Derived outputs of a run: analysis, summary and charts, from the saved CSVs alone.

The sweep calls this once it ends; ``powersweep analyze`` and ``powersweep plot`` call it on a run
directory or a bare ``caps.csv`` later.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powersweep import analysis, plots
from powersweep.analysis.cross import render_cross_mode
from powersweep.errors import PowersweepError, UsageError

CROSS_MODE_STEM = "cross-mode"


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


@dataclass(frozen=True)
class CrossReport:
    """Several runs of one GPU in different load modes, and the cap that suits them all.

    Attributes:
        analyses: Each run's analysis, in the order given.
        cross: The :func:`powersweep.analysis.cross_mode` result.
        markdown: The cross-mode section (paste-ready markdown).
        paths: Files written (each run's analysis.json and summary.md, then cross-mode.json and
            cross-mode.md).
    """

    analyses: tuple[dict[str, Any], ...]
    cross: dict[str, Any]
    markdown: str
    paths: tuple[Path, ...]


def build_cross_report(
    paths: Sequence[Path],
    *,
    out_dir: Path | None = None,
    write: bool = True,
    max_tps_loss_pct: float = 5.0,
    objective: str = "tps-per-w",
    eta: float = 0.5,
) -> CrossReport:
    """Analyse several runs (one per load mode, same GPU) and find the mixed-workload cap.

    Each run's own analysis.json and summary.md are regenerated beside it; the cross-mode result
    goes to ``<out_dir>/cross-mode.json`` and ``cross-mode.md``.

    Args:
        paths: Two or more run directories or caps.csv files.
        out_dir: Where the cross-mode files go (default: the folder holding the runs, e.g.
            ``powersweep-runs``).
        write: Whether to write any file.
        max_tps_loss_pct: Near-peak tolerance of each run's analysis.
        objective: Recommendation objective of each run's analysis.
        eta: Weight of energy in the ``cost`` objective.

    Raises:
        UsageError: Fewer than two runs, an unreadable run, or no cap common to all runs.
        PowersweepError: An output cannot be written.
    """
    if len(paths) < 2:
        raise UsageError("cross-mode analysis needs at least two runs (one per load mode)")
    pairs: list[tuple[analysis.Curve, dict[str, Any]]] = []
    written: list[Path] = []
    for path in paths:
        curve = analysis.load_curve(path)
        result = analysis.analyze(
            curve, max_tps_loss_pct=max_tps_loss_pct, objective=objective, eta=eta
        )
        if write:
            written += analysis.write_outputs(curve, result, curve.out_dir)
        pairs.append((curve, result))
    cross = analysis.cross_mode(pairs)
    markdown = render_cross_mode(cross)
    if write:
        target = out_dir or Path(os.path.commonpath([c.out_dir.resolve().parent for c, _ in pairs]))
        json_path = target / f"{CROSS_MODE_STEM}.json"
        md_path = target / f"{CROSS_MODE_STEM}.md"
        try:
            target.mkdir(parents=True, exist_ok=True)
            json_path.write_text(
                json.dumps(cross, indent=2, allow_nan=False) + "\n", encoding="utf-8"
            )
            md_path.write_text(markdown, encoding="utf-8")
        except OSError as exc:
            raise PowersweepError(
                f"cannot write the cross-mode result into {target}: {exc.strerror or exc}"
            ) from exc
        written += [json_path, md_path]
    return CrossReport(tuple(a for _, a in pairs), cross, markdown, tuple(written))
