"""``powersweep compare``: overlay the efficiency curves of several runs."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from powersweep.cli._card import DefaultLimit, GpuName, MaxLimit, MinLimit, card_facts
from powersweep.cli._common import Handover, formats, info, run_label
from powersweep.cli.help_layout import option
from powersweep.errors import UsageError

if TYPE_CHECKING:
    from powersweep.analysis.result_types import PowerAnalysis

# Past this many runs an overlay's legend fills the figure: draw the band view instead.
MAX_OVERLAY_RUNS = 8
DEFAULT_STEM = "powersweep-compare"
# `compare --help`'s last lines
EXAMPLES = """Examples:
  powersweep compare powersweep-runs/RUN_A powersweep-runs/RUN_B
  # cards of different sizes, by % of each one's default limit
  powersweep compare runs/* --x pct-tdp --normalize"""


class XAxis(StrEnum):
    """The compare chart's x axis."""

    WATTS = "watts"
    PCT_TDP = "pct-tdp"


def compare_command(
    paths: Annotated[
        list[Path], typer.Argument(metavar="RUN...", help="Run directories or caps.csv files.")
    ],
    out: Annotated[
        Path | None,
        option(
            metavar="PATH",
            help="Output folder, or file stem (default: ./powersweep-compare).",
            doc="Output directory (the chart is powersweep-compare.<fmt> there) or file stem "
            "(default: ./powersweep-compare).",
        ),
    ] = None,
    x: Annotated[XAxis, option(help="x axis: watts or % of the default limit.")] = (XAxis.WATTS),
    normalize: Annotated[
        bool, option("--normalize", help="TPS/W relative to each run's peak.")
    ] = False,
    fmt: Annotated[str, option("--format", metavar="FMT", help="png, svg or png,svg.")] = "png",
    gpu_name: GpuName = None,
    default_limit: DefaultLimit = None,
    min_limit: MinLimit = None,
    max_limit: MaxLimit = None,
) -> None:
    """Overlay several runs' efficiency curves; print their sweet spots."""
    from powersweep import analysis, plots
    from powersweep.analysis.context import with_card_facts
    from powersweep.analysis.result_types import PowerAnalysis
    from powersweep.report import writing_into

    if len(paths) < 1:
        raise UsageError("compare needs at least one run")
    card = card_facts(gpu_name, default_limit, min_limit, max_limit)
    labelled = []
    curves = []
    from powersweep.sweep.axes import axis_of

    for p in paths:
        # The card facts fill in what each curve's run.json lacks (a bare caps.csv has none).
        curve = with_card_facts(analysis.load_curve(p), card)
        axis = axis_of(curve)
        if axis.locks_clocks:
            raise UsageError(
                f"{p} is an --axis {axis.name} run: compare overlays power-cap curves (a clock "
                "sweep is set against caps by `powersweep analyze RUN_POWER RUN_CLOCKS`; an "
                "undervolt search beside its own cap, in its summary.md)"
            )
        curves.append(curve)
        labelled.append((run_label(p), PowerAnalysis.from_json(analysis.analyze(curve))))
    # The table comes first: it is the answer even when the chart cannot be written.
    typer.echo(plots.compare_table(labelled))
    stem = _stem(out)
    handover = Handover()
    handover.expect(stem.parent)
    written: list[Path] = []
    try:
        with writing_into(stem.parent, given=out is not None):
            written = _chart(labelled, curves, stem, x, normalize, fmt)
    finally:
        handover.hand(written)
    for w in written:
        info(f"chart: {w}")


def _chart(
    labelled: list[tuple[str, PowerAnalysis]],
    curves: list[Any],
    stem: Path,
    x: XAxis,
    normalize: bool,
    fmt: str,
) -> list[Path]:
    """The overlay, or past ``MAX_OVERLAY_RUNS`` runs the band view."""
    from powersweep import plots

    if len(curves) <= MAX_OVERLAY_RUNS:
        return plots.render_compare(
            labelled, stem, x=x.value, normalize=normalize, formats=formats(fmt)
        )
    from powersweep.analysis.fleet_answer import FleetOptions, summarise
    from powersweep.plots.fleet_charts import render_band

    info(
        f"{len(curves)} runs: drawing the band view (median, IQR and min-max per GPU, load "
        "mode and model) instead of an overlay; `powersweep fleet report` adds the fleet "
        "cap, outliers and savings"
        + (" (--x and --normalize apply to the overlay only)" if normalize or x != "watts" else "")
    )
    return list(render_band(summarise(curves, [], FleetOptions()), stem, formats(fmt)))


def _stem(out: Path | None) -> Path:
    """The chart's path without suffix: an existing directory holds
    ``powersweep-compare.<fmt>``; anything else is the stem itself (``.png``/``.svg`` dropped)."""
    if out is None:
        return Path(DEFAULT_STEM)
    if out.is_dir():
        return out / DEFAULT_STEM
    return out.with_suffix("") if out.suffix.lower() in (".png", ".svg") else out
