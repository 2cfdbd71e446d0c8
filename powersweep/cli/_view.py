"""What ``sweep`` and ``analyze`` print on stdout: a run's compact view
(:mod:`powersweep.report_view`) or, with ``--json``, its typed analysis as ``analysis.json``
holds it. Progress and logs go to stderr (:func:`powersweep.cli._common.info`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from powersweep.analysis.result_files import analysis_text
from powersweep.report_view import render_body, render_failed, render_paths

if TYPE_CHECKING:
    from powersweep.report import Report


def show_analysis(report: Report, *, as_json: bool) -> None:
    """The table and the answer, or the JSON; printed before the outputs are written, so a
    run directory one cannot write to still shows them."""
    if as_json:
        typer.echo(analysis_text(report.result), nl=False)
    else:
        typer.echo(render_body(report.result, report.headline), nl=False)


def show_paths(run: Path, paths: Sequence[Path], *, as_json: bool) -> None:
    """The run and the files written, after the view (nothing beside the JSON)."""
    if not as_json:
        typer.echo("\n" + render_paths(run, paths))


def show_failed(why: str, run: Path, paths: Sequence[Path], *, as_json: bool) -> None:
    """A run with nothing to analyse: why, and what it wrote (no JSON: there is no analysis)."""
    if not as_json:
        typer.echo(render_failed(why, run, paths), nl=False)
