"""``powersweep plot``: the charts of a run (or a bare caps.csv), from its CSVs alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from powersweep.cli._card import DefaultLimit, GpuName, MaxLimit, MinLimit, card_facts
from powersweep.cli._common import Handover, formats
from powersweep.cli.help_layout import option

# `plot --help`'s last lines
EXAMPLES = """Examples:
  powersweep plot powersweep-runs/RUN --format png,svg
  # a community curve, with its card's default limit
  powersweep plot caps.csv --gpu-name 'RTX 3090' --default-limit 350"""


def plot_command(
    path: Annotated[Path, typer.Argument(metavar="RUN", help="Run directory or caps.csv.")],
    out: Annotated[
        Path | None, option(metavar="DIR", help="Where charts/ goes (default: beside the run).")
    ] = None,
    fmt: Annotated[str, option("--format", metavar="FMT", help="png, svg or png,svg.")] = "png",
    title: Annotated[str | None, option(metavar="TEXT", help="Chart title.")] = None,
    gpu_name: GpuName = None,
    default_limit: DefaultLimit = None,
    min_limit: MinLimit = None,
    max_limit: MaxLimit = None,
) -> None:
    """Draw the charts of a run (or a bare caps.csv) into charts/."""
    from powersweep.report import build_report

    handover = Handover()
    handover.expect((out or (path if path.is_dir() else path.parent)) / "charts")
    written: tuple[Path, ...] = ()
    try:
        written = build_report(
            path,
            out_dir=out,
            charts=True,
            formats=formats(fmt),
            title=title,
            write_analysis=False,
            card=card_facts(gpu_name, default_limit, min_limit, max_limit),
            require_answer=True,
        ).paths
    finally:
        handover.hand(written)
    for p in written:
        typer.echo(str(p))
