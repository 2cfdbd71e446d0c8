"""``powersweep fleet report DIR...``: one answer per GPU model over many runs, the spread between
cards, the outliers and what a fleet cap saves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from powersweep.cli._common import Handover, formats, info
from powersweep.cli.help_layout import HelpCommand, HelpGroup, option
from powersweep.errors import UsageError

# `fleet report --help`'s last lines
EXAMPLES = """Examples:
  # every node's runs, copied into one folder
  powersweep fleet report runs/ --tariff 0.30 --duty 0.5"""

fleet_app = typer.Typer(
    cls=HelpGroup,
    help="Fleets: many runs into one report, and apply it.",
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)


@fleet_app.callback(invoke_without_command=True)
def _fleet(ctx: typer.Context) -> None:
    """Fleets: many runs into one report, and apply it."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


@fleet_app.command("report", cls=HelpCommand, epilog=EXAMPLES)
def report_command(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN...",
            help="Run directories, or folders holding them (searched recursively).",
        ),
    ],
    out: Annotated[
        Path, option(metavar="DIR", help="Where fleet.md, fleet.json and charts/ go.")
    ] = Path("powersweep-fleet"),
    tariff: Annotated[
        float | None,
        option(metavar="PRICE", help="Electricity price per kWh, for the cost per 1M tokens."),
    ] = None,
    duty: Annotated[
        float,
        option(metavar="0-1", help="Share of the year the cards serve at the measured load."),
    ] = 1.0,
    max_tps_loss: Annotated[
        float, option(metavar="PCT", help="Near-peak: accept this % TPS loss.")
    ] = 5.0,
    reanalyze: Annotated[
        bool,
        option("--reanalyze", help="Analyse every caps.csv, even beside a fresh analysis.json."),
    ] = False,
    fmt: Annotated[
        str, option("--format", metavar="FMT", help="Charts: png, svg or png,svg.")
    ] = "png",
    no_charts: Annotated[bool, option("--no-charts", help="Write no charts.")] = False,
    as_json: Annotated[
        bool, option("--json", help="Print fleet.json on stdout instead of fleet.md.")
    ] = False,
) -> None:
    """One answer per GPU model over many runs (one per node or card).

    The spread between cards, the fleet cap, the outliers and the savings. Runs are grouped by
    GPU, load mode and model. Writes fleet.md (paste-ready), fleet.json and charts/ into --out.
    """
    from powersweep.analysis.fleet_answer import FleetOptions, fleet_report
    from powersweep.analysis.fleet_summary import render_fleet_summary, write_fleet_outputs

    if not 0 <= max_tps_loss < 100:
        raise UsageError("--max-tps-loss must be between 0 and 100")
    chart_formats = formats(fmt)
    fleet = fleet_report(
        paths,
        FleetOptions(
            tariff_per_kwh=tariff, duty=duty, max_tps_loss_pct=max_tps_loss, reanalyze=reanalyze
        ),
    )
    # under sudo, fleet.md, fleet.json, the charts and the folders made for them are the user's
    handover = Handover()
    handover.expect(out, out / "charts")
    written: list[Path] = []
    try:
        written += write_fleet_outputs(fleet, out)
        if not no_charts:
            from powersweep.plots.fleet_charts import render_fleet_charts

            written += render_fleet_charts(fleet, out / "charts", chart_formats)
    finally:
        handover.hand(written)
    typer.echo(json.dumps(fleet.to_json(), indent=1) if as_json else render_fleet_summary(fleet))
    skipped = len(fleet.unreadable)
    if skipped:
        info(f"warning: {skipped} run(s) left out, without a usable curve (listed in fleet.md)")
    for path in written:
        info(f"wrote {path}")


def _register_apply() -> None:
    # its own module (the apply machinery it shares is large); registered under `fleet`
    from powersweep.cli.fleet_apply import EXAMPLES as APPLY_EXAMPLES
    from powersweep.cli.fleet_apply import fleet_apply_command

    fleet_app.command("apply", cls=HelpCommand, epilog=APPLY_EXAMPLES)(fleet_apply_command)


_register_apply()
