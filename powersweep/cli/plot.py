"""``powersweep plot``: the charts of a run (or a bare caps.csv), from its CSVs alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from powersweep.cli._card import DefaultLimit, GpuName, MaxLimit, MinLimit, card_facts
from powersweep.cli._common import Handover, formats


def plot_command(
    path: Annotated[Path, typer.Argument(help="Run directory or caps.csv.")],
    out: Annotated[Path | None, typer.Option(help="Output directory (default: beside).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="png, svg or png,svg.")] = "png",
    title: Annotated[str | None, typer.Option(help="Chart title.")] = None,
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
