"""``powersweep compare``: overlay the efficiency curves of several runs."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from powersweep.cli._card import DefaultLimit, GpuName, MaxLimit, MinLimit, card_facts
from powersweep.cli._common import Handover, formats, info, run_label
from powersweep.cli.help_layout import option
from powersweep.errors import PowersweepError, UsageError
from powersweep.safe_files import write_atomic

if TYPE_CHECKING:
    from powersweep.analysis.result_types import PowerAnalysis

# Past this many runs an overlay's legend fills the figure: draw the band view instead.
MAX_OVERLAY_RUNS = 8
DEFAULT_STEM = "powersweep-compare"  # the default folder: powersweep-compare-<UTC time>
CHART_STEM = "compare"  # compare.png / compare.svg and compare.md inside it
# `compare --help`'s last lines
EXAMPLES = """Examples:
  powersweep compare powersweep-runs/RUN_A powersweep-runs/RUN_B --out cmp
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
            metavar="DIR",
            help="Folder for the chart and table (default: new).",
            doc="Folder for the chart (compare.png) and the table (compare.md); default: a new "
            "./powersweep-compare-<time>/. An existing non-empty folder needs --force.",
        ),
    ] = None,
    force: Annotated[
        bool,
        option("--force", help="Write into an existing non-empty --out folder."),
    ] = False,
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
    from powersweep.report import writing_into

    if len(paths) < 1:
        raise UsageError("compare needs at least one run")
    _check_out(out, force)
    card = card_facts(gpu_name, default_limit, min_limit, max_limit)
    named: list[tuple[str, PowerAnalysis, str]] = []
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
        named.append((run_label(p), analysis.analyze(curve), axis.name))
    labels = plots.compare_labels([(name, a.run, axis) for name, a, axis in named])
    labelled = [(label, a) for label, (_, a, _) in zip(labels, named, strict=True)]
    # The table comes first: it is the answer even when the chart cannot be written.
    table = plots.compare_table(labelled)
    typer.echo(table)
    chosen = formats(fmt)
    handover = Handover()
    folder = out if out is not None else Path(f"{DEFAULT_STEM}-{_now():%Y%m%d-%H%M%S}")
    handover.expect(folder)
    written: list[Path] = []
    try:
        with writing_into(folder.parent, given=out is not None):
            folder = _make_folder(folder, fresh=out is None)
            written = _chart(labelled, curves, folder / CHART_STEM, x, normalize, chosen)
            written.append(_write_table(folder, table, labels, paths))
    finally:
        handover.hand(written)
    for w in written:
        info(f"{'table' if w.suffix == '.md' else 'chart'}: {w}")


def _now() -> datetime:
    return datetime.now(UTC)


def _check_out(out: Path | None, force: bool) -> None:
    """Refuse an ``--out`` that is a chart's file name, a file, or a non-empty folder (without
    ``--force``): compare never overwrites what it did not name itself, silently.

    Raises:
        UsageError: Which, and what to pass instead.
    """
    if out is None:
        return
    if out.suffix.lower() in (".png", ".svg", ".md"):
        raise UsageError(
            f"--out {out} names a file; compare writes its chart and table into a folder "
            f"(e.g. --out {out.with_suffix('')})"
        )
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder (new or empty) instead")
    if not force and out.is_dir() and any(out.iterdir()):
        raise UsageError(
            f"{out} exists and is not empty; pass --force to write into it (its compare "
            "chart and table replaced) or give a new --out"
        )


def _make_folder(folder: Path, *, fresh: bool) -> Path:
    """Create the output folder (``--out``'s may exist); a ``fresh`` (default) name already taken
    gets ``-2``, ``-3``.

    Raises:
        PowersweepError: It cannot be made; the message names it.
    """
    candidate, n = folder, 1
    while True:
        try:
            candidate.mkdir(parents=not fresh, exist_ok=not fresh)
            return candidate
        except FileExistsError:
            n += 1
            candidate = folder.with_name(f"{folder.name}-{n}")
        except OSError as exc:
            raise PowersweepError(f"cannot create {candidate}: {exc.strerror or exc}") from exc


def _write_table(folder: Path, table: str, labels: list[str], paths: list[Path]) -> Path:
    """``compare.md``: the table printed, then which run each label names.

    Raises:
        PowersweepError: It cannot be written.
    """
    runs = "\n".join(f"- {label}: `{p}`" for label, p in zip(labels, paths, strict=True))
    path = folder / f"{CHART_STEM}.md"
    try:
        write_atomic(path, f"# powersweep compare\n\n{table}\n## Runs\n\n{runs}\n", sync=False)
    except OSError as exc:
        raise PowersweepError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return path


def _chart(
    labelled: list[tuple[str, PowerAnalysis]],
    curves: list[Any],
    stem: Path,
    x: XAxis,
    normalize: bool,
    fmts: tuple[str, ...],
) -> list[Path]:
    """The overlay, or past ``MAX_OVERLAY_RUNS`` runs the band view."""
    from powersweep import plots

    if len(curves) <= MAX_OVERLAY_RUNS:
        return plots.render_compare(labelled, stem, x=x.value, normalize=normalize, formats=fmts)
    from powersweep.analysis.fleet_answer import FleetOptions, summarise
    from powersweep.plots.fleet_charts import render_band

    info(
        f"{len(curves)} runs: drawing the band view (median, IQR and min-max per GPU, load "
        "mode and model) instead of an overlay; `powersweep fleet report` adds the fleet "
        "cap, outliers and savings"
        + (" (--x and --normalize apply to the overlay only)" if normalize or x != "watts" else "")
    )
    return list(render_band(summarise(curves, [], FleetOptions()), stem, fmts))
