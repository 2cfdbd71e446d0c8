"""``powersweep compare``: overlay the efficiency curves of several runs."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from powersweep.cli._common import formats, info, run_label
from powersweep.errors import UsageError

# Past this many runs an overlay's legend fills the figure: draw the band view instead.
MAX_OVERLAY_RUNS = 8


class XAxis(StrEnum):
    """The compare chart's x axis."""

    WATTS = "watts"
    PCT_TDP = "pct-tdp"


def compare_command(
    paths: Annotated[list[Path], typer.Argument(help="Run directories or caps.csv files.")],
    out: Annotated[Path, typer.Option(help="Output file stem.")] = Path("powersweep-compare"),
    x: Annotated[XAxis, typer.Option(help="x axis: watts or % of the default limit.")] = (
        XAxis.WATTS
    ),
    normalize: Annotated[
        bool, typer.Option("--normalize", help="TPS/W relative to each run's peak.")
    ] = False,
    fmt: Annotated[str, typer.Option("--format", help="png, svg or png,svg.")] = "png",
) -> None:
    """Overlay the efficiency curves of several runs and print their sweet spots."""
    from powersweep import analysis, plots

    if len(paths) < 1:
        raise UsageError("compare needs at least one run")
    labelled = []
    curves = []
    from powersweep.analysis.clocks import is_clock_curve

    for p in paths:
        curve = analysis.load_curve(p)
        if is_clock_curve(curve.caps):
            raise UsageError(
                f"{p} is a clock-lock sweep: compare overlays power-cap curves; use "
                "`powersweep analyze RUN_POWER RUN_CLOCKS` to set clock locks against caps"
            )
        curves.append(curve)
        labelled.append((run_label(p), analysis.analyze(curve)))
    if len(paths) > MAX_OVERLAY_RUNS:
        from powersweep.analysis.fleet import FleetOptions, summarise
        from powersweep.plots.fleet import render_band

        info(
            f"{len(paths)} runs: drawing the band view (median, IQR and min-max per GPU, load "
            "mode and model) instead of an overlay; `powersweep fleet report` adds the fleet "
            "cap, outliers and savings"
            + (
                " (--x and --normalize apply to the overlay only)"
                if normalize or x != "watts"
                else ""
            )
        )
        written = render_band(summarise(curves, [], FleetOptions()), out, formats(fmt))
    else:
        written = plots.render_compare(
            labelled, out, x=x.value, normalize=normalize, formats=formats(fmt)
        )
    typer.echo(plots.compare_table(labelled))
    for w in written:
        info(f"chart: {w}")
