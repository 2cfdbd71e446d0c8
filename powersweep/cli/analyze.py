"""``powersweep analyze``: analysis.json and summary.md from a run's CSVs (or a bare caps.csv);
several runs of one GPU in different load modes add a cross-mode answer."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from powersweep.analysis.context import CardFacts
from powersweep.analysis.objectives import OBJECTIVES, TpsPerW
from powersweep.analysis.serving import ServingOptions, check_options
from powersweep.cli._card import DefaultLimit, GpuName, MaxLimit, MinLimit, card_facts
from powersweep.cli._common import Handover, info
from powersweep.cli.flag_params import shared
from powersweep.cli.help_layout import argument, option
from powersweep.errors import UsageError
from powersweep.sweep.options import OutputOptions

# `analyze --help`'s last lines
EXAMPLES = """Examples:
  powersweep analyze powersweep-runs/RUN
  # one cap for a mixed workload, from runs of one GPU in two load modes
  powersweep analyze powersweep-runs/RUN_SINGLE powersweep-runs/RUN_CONCURRENT
  # a bare caps.csv, with the card's facts
  powersweep analyze caps.csv --gpu-name 'RTX 3090' --default-limit 350"""

# What the recommended cap optimises: the analysis's selectors name the choices.
Objective = StrEnum("Objective", {name: name for name in OBJECTIVES})  # type: ignore[misc]


TariffOpt = Annotated[float | None, shared(OutputOptions, "tariff_per_kwh", None)]
RECOMMENDATION = "Recommendation"

MaxTtftOpt = Annotated[
    float | None,
    option(
        "--max-ttft-ms",
        metavar="MS",
        help="Latency target: time-to-first-token p95 at most this.",
        doc="Latency target: the most efficient point whose time-to-first-token p95 is at most "
        "this.",
        panel=RECOMMENDATION,
    ),
]
MaxItlOpt = Annotated[
    float | None,
    option(
        "--max-itl-ms",
        metavar="MS",
        help="Latency target: inter-token p95 at most this.",
        doc="Latency target: the most efficient point whose inter-token p95 is at most this.",
        panel=RECOMMENDATION,
    ),
]


def analyze_command(
    paths: Annotated[
        list[Path],
        argument(
            metavar="RUN...",
            help="Run directories or caps.csv files (several: see above).",
            doc="Run directory or caps.csv; several runs of one GPU in different load modes "
            "add a cross-mode answer (one cap for a mixed workload); a power run and a clock "
            "run compare the best clock point with the best cap.",
        ),
    ],
    out: Annotated[
        Path | None,
        option(metavar="DIR", help="Where the files go (default: beside the run)."),
    ] = None,
    as_json: Annotated[
        bool, option("--json", help="Print the analysis JSON (and only it) on stdout.")
    ] = False,
    full: Annotated[
        bool, option("--full", help="Print the whole summary.md, not the table.")
    ] = False,
    max_tps_loss: Annotated[
        float,
        option(metavar="PCT", help="Near-peak: accept this % TPS loss.", panel=RECOMMENDATION),
    ] = 5.0,
    objective: Annotated[
        Objective, option(help="What the recommended cap optimises.", panel=RECOMMENDATION)
    ] = Objective(TpsPerW.name),
    eta: Annotated[
        float,
        option(metavar="0-1", help="cost objective: weight of energy.", panel=RECOMMENDATION),
    ] = 0.5,
    tariff: TariffOpt = OutputOptions.tariff_per_kwh,
    max_ttft_ms: MaxTtftOpt = None,
    max_itl_ms: MaxItlOpt = None,
    gpu_name: GpuName = None,
    default_limit: DefaultLimit = None,
    min_limit: MinLimit = None,
    max_limit: MaxLimit = None,
) -> None:
    """Analyse a run (or a caps.csv): write analysis.json and summary.md.

    Prints the points, the answer and the files written; --full prints the whole summary,
    --json the analysis. Several runs of one GPU in different load modes add a cross-mode
    answer (one cap for a mixed workload); a power run and a clock run compare the best clock
    point with the best cap. Printed before anything is written, so a read-only run directory
    still shows it (the error then names the directory and --out).
    """
    from powersweep.report import build_clock_comparison

    if not 0 <= max_tps_loss < 100:
        raise UsageError("--max-tps-loss must be between 0 and 100")
    if not 0 <= eta <= 1:
        raise UsageError("--eta must be between 0 and 1")
    if as_json and full:
        raise UsageError("--json and --full each choose what is printed: give one")
    clock_runs = len(paths) > 1 and _has_clock_run(paths)
    if clock_runs and len(paths) != 2:
        raise UsageError(
            "a clock-lock run compares with one power-axis run: give RUN_POWER RUN_CLOCKS"
        )
    check_options(tariff, max_ttft_ms, max_itl_ms)
    serving = ServingOptions(tariff, max_ttft_ms, max_itl_ms)
    if len(paths) > 1 and serving.given:
        raise UsageError("--tariff, --max-ttft-ms and --max-itl-ms analyse one run at a time")
    card = card_facts(gpu_name, default_limit, min_limit, max_limit)
    handover = Handover()
    handover.expect(*([out] if out is not None else [p if p.is_dir() else p.parent for p in paths]))
    written: tuple[Path, ...] = ()
    try:
        if clock_runs:
            # a power-axis run and a clock run: how the best clock point compares with the best cap
            compared = build_clock_comparison(paths, out_dir=out, max_tps_loss_pct=max_tps_loss)
            written = tuple(compared.paths)
            typer.echo(
                json.dumps(compared.comparison.to_json(), indent=2, allow_nan=False)
                if as_json
                else compared.markdown
            )
            for path in written:
                info(f"wrote {path}")
        elif len(paths) > 1:
            written = _cross(paths, out, as_json, max_tps_loss, objective, eta)
        else:
            shown = _Shown.JSON if as_json else _Shown.FULL if full else _Shown.VIEW
            written = _single(paths[0], out, shown, max_tps_loss, objective, eta, card, serving)
    finally:
        handover.hand(written)


class _Shown(StrEnum):
    """What ``analyze`` prints of one run."""

    VIEW = "view"  # the points, the answer, the files (powersweep.report_view)
    FULL = "full"  # summary.md
    JSON = "json"  # analysis.json


def _single(
    path: Path,
    out: Path | None,
    shown: _Shown,
    max_tps_loss: float,
    objective: Objective,
    eta: float,
    card: CardFacts,
    serving: ServingOptions,
) -> tuple[Path, ...]:
    """One run: printed before its files are written (the view's files after)."""
    from powersweep.cli._view import show_analysis, show_paths
    from powersweep.report import Report, build_report

    def show(report: Report) -> None:
        if shown is _Shown.FULL:
            typer.echo(report.summary)
        else:
            show_analysis(report, as_json=shown is _Shown.JSON)

    written = build_report(
        path,
        out_dir=out,
        # the one chart a latency target asks for (TPS/W against inter-token p95)
        charts=False,
        latency_chart=serving.has_target,
        serving=serving,
        max_tps_loss_pct=max_tps_loss,
        objective=objective.value,
        eta=eta,
        on_analysis=show,
        card=card,
        require_answer=True,
    ).paths
    if shown is _Shown.VIEW:
        show_paths(path, written, as_json=False)
    return written


def _cross(
    paths: list[Path],
    out: Path | None,
    as_json: bool,
    max_tps_loss: float,
    objective: Objective,
    eta: float,
) -> tuple[Path, ...]:
    """Runs of one GPU in different load modes: the cross-mode answer, printed first."""
    from powersweep.report import CrossReport, build_cross_report

    def show(cross: CrossReport) -> None:
        typer.echo(
            json.dumps(cross.cross.to_json(), indent=2, allow_nan=False)
            if as_json
            else cross.markdown
        )

    report = build_cross_report(
        paths,
        out_dir=out,
        max_tps_loss_pct=max_tps_loss,
        objective=objective.value,
        eta=eta,
        on_analysis=show,
    )
    for path in report.paths[-2:]:
        info(f"wrote {path}")
    return report.paths


def _has_clock_run(paths: list[Path]) -> bool:
    """True when one of the runs is a clock-lock sweep (its rows carry clock locks)."""
    from powersweep.analysis import load_curve
    from powersweep.sweep.axes import axis_of

    return any(axis_of(load_curve(p)).locks_clocks for p in paths)
