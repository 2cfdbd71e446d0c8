"""``powersweep import``: a pasted power-cap-sweep.sh summary table becomes a caps.csv."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from powersweep.cli._common import Handover
from powersweep.cli.help_layout import option

# `import --help`'s last lines
EXAMPLES = """Examples:
  powersweep import pasted.md --out caps.csv
  powersweep analyze caps.csv"""


def import_command(
    summary: Annotated[
        Path, typer.Argument(metavar="FILE", help="Markdown with a power-cap summary table.")
    ],
    out: Annotated[
        Path | None, option(metavar="FILE", help="caps.csv to write (default: beside FILE).")
    ] = None,
) -> None:
    """Turn a pasted power-cap-sweep.sh summary table into a caps.csv."""
    from powersweep import analysis

    df = analysis.import_summary(summary)
    target = out or summary.with_suffix(".caps.csv")
    handover = Handover()
    handover.expect(target.parent)
    written: list[Path] = []
    try:
        analysis.write_caps_csv(df, target)
        written.append(target)
    finally:
        handover.hand(written)
    typer.echo(str(target))
