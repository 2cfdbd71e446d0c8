"""Derived outputs of a run: analysis, summary and charts, from the saved CSVs alone.

The sweep calls this once it ends; ``powersweep analyze`` and ``powersweep plot`` call it on a run
directory or a bare ``caps.csv`` later.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from powersweep import analysis
from powersweep.analysis.clock_result_types import ClockAnalysis, ClocksVersusPower
from powersweep.analysis.clock_summary import (
    clocks_versus_power,
    render_clocks_versus_power,
)
from powersweep.analysis.context import CardFacts
from powersweep.analysis.cross import render_cross_mode
from powersweep.analysis.cross_result_types import CrossModeResult
from powersweep.analysis.findings import Finding
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.analysis.saved_analysis import SavedAnalysis
from powersweep.analysis.serving import ServingOptions
from powersweep.errors import PowersweepError, UsageError
from powersweep.safe_files import write_atomic
from powersweep.sweep.axes import AnalysisSettings, axis_of

CROSS_MODE_STEM = "cross-mode"


def _plots() -> ModuleType:
    """The charts package, imported when a chart is drawn: matplotlib takes half a second to
    load, which a run without charts (``--no-charts``, ``analyze`` of the summary) never needs."""
    import powersweep.plots

    return powersweep.plots


@dataclass(frozen=True)
class Report:
    """What was regenerated.

    Attributes:
        result: The analysis, typed (its axis's record; ``to_json()`` is what ``analysis.json``
            holds).
        summary: The markdown summary.
        paths: Files written.
        headline: The answer in one line (None: no answer).
    """

    result: SavedAnalysis
    summary: str
    paths: tuple[Path, ...]
    headline: str | None = None


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
    on_analysis: Callable[[Report], None] | None = None,
    card: CardFacts | None = None,
    require_answer: bool = False,
    serving: ServingOptions | None = None,
    latency_chart: bool = False,
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
        on_analysis: Called with the analysis (no paths yet) before anything is written, so a
            caller can show it even when writing then fails (a read-only run directory).
        card: Facts about the card a bare caps.csv lacks (name, default/min/max limits).
        require_answer: Refuse a curve with no usable cap (nothing shown, nothing written)
            rather than report it; a sweep's own report still says why every cap failed.
        serving: A tariff and latency targets (cost per 1M tokens, the latency pick).
        latency_chart: Draw the TPS/W against inter-token p95 chart even without ``charts``
            (``analyze`` with a latency target).

    Raises:
        UsageError: The input cannot be read as a curve, or (``require_answer``) it has no
            usable cap.
        PowersweepError: An output cannot be written; the message names the directory and
            ``--out``.
    """
    curve = analysis.load_curve(path)
    axis = axis_of(curve)
    settings = AnalysisSettings(max_tps_loss_pct, objective, eta, serving or ServingOptions(), card)
    result = axis.analyze(curve, settings)
    if require_answer and axis.answer(result) is None:
        raise UsageError(no_answer(path, result.findings))
    summary = axis.summary(curve, result)
    if on_analysis is not None:
        on_analysis(Report(result, summary, (), axis.headline(result)))
    target = out_dir or curve.out_dir
    written: list[Path] = []
    with writing_into(target, given=out_dir is not None):
        if write_analysis:
            written += axis.write_outputs(result, summary, target)
        if charts:
            written += axis.charts(curve, result, target / "charts", formats=formats, title=title)
        # without latency columns (an older run) the summary says so; there is nothing to draw
        wanted = latency_chart or (charts and settings.serving.has_target)
        if wanted and _plots().has_latency(result):
            written += _plots().render_latency_chart(
                result, target / "charts", formats=formats, title=title
            )
    return Report(result, summary, tuple(written), axis.headline(result))


def build_failed_report(run_dir: Path, why: str) -> Path:
    """Write ``summary.md`` for a run with no usable point: its status, each point's status,
    the faults it met and the requests they cut (:mod:`powersweep.analysis.failed_run`).

    Raises:
        PowersweepError: It cannot be written (the message names the directory).
    """
    from powersweep.analysis.failed_run import failed_run_summary

    path = run_dir / "summary.md"
    with writing_into(run_dir, given=False):
        try:
            write_atomic(path, failed_run_summary(run_dir, why), sync=False)
        except OSError as exc:
            raise PowersweepError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def no_answer(path: Path, findings: Sequence[Finding]) -> str:
    """One line saying why a curve has no answer: what set each row aside."""
    why = [
        f.message
        for f in findings
        if f.code
        in ("rows_ignored", "suspect_caps", "implausible_rows", "caps_not_measured", "input_note")
        or f.code.startswith("points_")
    ]
    detail = f" ({'; '.join(why)})" if why else ""
    line = (
        f"{path}: nothing to analyse: no cap finished with status ok and a positive finite TPS "
        f"and draw{detail}"
    )
    return " ".join(line.split())[:600]


@contextlib.contextmanager
def writing_into(target: Path, *, given: bool) -> Iterator[None]:
    """Turn a failed write into one line naming the directory and, when it was not chosen,
    ``--out`` (a run directory can be read-only: another user's, a mounted archive).

    Raises:
        PowersweepError: What the write raised, with that hint.
    """
    try:
        yield
    except UsageError:
        raise
    except PowersweepError as exc:
        if given:
            raise
        raise PowersweepError(
            f"{exc}; give --out DIR to write the outputs somewhere other than {target.resolve()}"
        ) from exc


@dataclass(frozen=True)
class ClockComparison:
    """A power-cap run and a clock-lock run of one GPU, compared.

    Attributes:
        power: The power run's analysis.
        clocks: The clock run's analysis.
        comparison: :func:`~powersweep.analysis.clock_summary.clocks_versus_power`.
        markdown: The comparison as markdown.
        paths: Files written.
    """

    power: PowerAnalysis
    clocks: ClockAnalysis
    comparison: ClocksVersusPower
    markdown: str
    paths: tuple[Path, ...]


def build_clock_comparison(
    paths: Sequence[Path],
    *,
    out_dir: Path | None = None,
    write: bool = True,
    charts: bool = True,
    max_tps_loss_pct: float = 5.0,
) -> ClockComparison:
    """Compare the best clock point with the best power cap (``analyze RUN_POWER RUN_CLOCKS``).

    Writes ``clocks-vs-power.json``, ``clocks-vs-power.md`` and the overlaid chart into
    ``out_dir`` (default: the folder holding the runs).

    Raises:
        UsageError: Not exactly one power run and one clock run.
        PowersweepError: An output cannot be written.
    """
    curves = [(axis_of(c), c) for c in (analysis.load_curve(p) for p in paths)]
    clock_curves = [(a, c) for a, c in curves if a.locks_clocks]
    power_curves = [(a, c) for a, c in curves if not a.locks_clocks]
    if len(clock_curves) != 1 or len(power_curves) != 1:
        raise UsageError(
            "comparing clock locks with power caps takes one power-axis run and one clock run"
        )
    settings = AnalysisSettings(max_tps_loss_pct)
    power = power_curves[0][0].analyze(power_curves[0][1], settings)
    clocks = clock_curves[0][0].analyze(clock_curves[0][1], settings)
    if not isinstance(power, PowerAnalysis) or not isinstance(clocks, ClockAnalysis):
        raise UsageError(
            "comparing clock locks with power caps takes a power run and an sm-clock, mem-clock "
            f"or grid run, not an --axis {clock_curves[0][0].name} one (an undervolt search sets "
            "its answer beside its own cap, in its summary.md: analyze it alone)"
        )
    comparison = clocks_versus_power(power, clocks)
    markdown = render_clocks_versus_power(comparison)
    written: list[Path] = []
    if write:
        target = out_dir or Path(
            os.path.commonpath([c.out_dir.resolve().parent for _, c in curves])
        )
        json_path = target / "clocks-vs-power.json"
        md_path = target / "clocks-vs-power.md"
        try:
            target.mkdir(parents=True, exist_ok=True)
            write_atomic(
                json_path,
                json.dumps(comparison.to_json(), indent=2, allow_nan=False) + "\n",
                sync=False,
            )
            write_atomic(md_path, markdown, sync=False)
        except OSError as exc:
            raise PowersweepError(
                f"cannot write the comparison into {target}: {exc.strerror or exc}"
            ) from exc
        written += [json_path, md_path]
        if charts:
            written += _plots().render_clock_charts(
                clocks, target / "charts", power_analysis=power, only_pareto=True
            )
    return ClockComparison(power, clocks, comparison, markdown, tuple(written))


@dataclass(frozen=True)
class CrossReport:
    """Several runs of one GPU in different load modes, and the cap that suits them all.

    Attributes:
        analyses: Each run's analysis, in the order given.
        cross: The :func:`powersweep.analysis.cross_mode` result (``to_json()``: cross-mode.json).
        markdown: The cross-mode section (paste-ready markdown).
        paths: Files written (each run's analysis.json and summary.md, then cross-mode.json and
            cross-mode.md).
    """

    analyses: tuple[PowerAnalysis, ...]
    cross: CrossModeResult
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
    on_analysis: Callable[[CrossReport], None] | None = None,
) -> CrossReport:
    """Analyse several runs (one per load mode, same GPU) and find the mixed-workload cap.

    Each run's own analysis.json and summary.md are regenerated beside it (with ``out_dir``:
    in ``<out_dir>/<run name>/``); the cross-mode result goes to ``<out_dir>/cross-mode.json``
    and ``cross-mode.md``.

    Args:
        paths: Two or more run directories or caps.csv files.
        out_dir: Where the outputs go (default: each run's own directory, and the folder
            holding the runs, e.g. ``powersweep-runs``, for the cross-mode files).
        write: Whether to write any file.
        max_tps_loss_pct: Near-peak tolerance of each run's analysis.
        objective: Recommendation objective of each run's analysis.
        eta: Weight of energy in the ``cost`` objective.
        on_analysis: Called with the result (no paths yet) before anything is written.

    Raises:
        UsageError: Fewer than two runs, an unreadable run, or no cap common to all runs.
        PowersweepError: An output cannot be written; the message names the directory and
            ``--out``.
    """
    if len(paths) < 2:
        raise UsageError("cross-mode analysis needs at least two runs (one per load mode)")
    pairs: list[tuple[analysis.Curve, PowerAnalysis]] = []
    for path in paths:
        curve = analysis.load_curve(path)
        result = analysis.analyze(
            curve, max_tps_loss_pct=max_tps_loss_pct, objective=objective, eta=eta
        )
        pairs.append((curve, result))
    cross = analysis.cross_mode(pairs)
    markdown = render_cross_mode(cross)
    analyses = tuple(a for _, a in pairs)
    if on_analysis is not None:
        on_analysis(CrossReport(analyses, cross, markdown, ()))
    written: list[Path] = []
    if write:
        for curve, result in pairs:
            target = out_dir / _run_name(curve.source) if out_dir else curve.out_dir
            with writing_into(target, given=out_dir is not None):
                written += analysis.write_outputs(curve, result, target)
        target = out_dir or Path(os.path.commonpath([c.out_dir.resolve().parent for c, _ in pairs]))
        json_path = target / f"{CROSS_MODE_STEM}.json"
        md_path = target / f"{CROSS_MODE_STEM}.md"
        with writing_into(target, given=out_dir is not None):
            try:
                target.mkdir(parents=True, exist_ok=True)
                write_atomic(
                    json_path,
                    json.dumps(cross.to_json(), indent=2, allow_nan=False) + "\n",
                    sync=False,
                )
                write_atomic(md_path, markdown, sync=False)
            except OSError as exc:
                raise PowersweepError(
                    f"cannot write the cross-mode result into {target}: {exc.strerror or exc}"
                ) from exc
        written += [json_path, md_path]
    return CrossReport(analyses, cross, markdown, tuple(written))


def _run_name(source: Path) -> str:
    """A run's folder name under ``--out``: its directory's name (a caps.csv's parent's), or a
    bare CSV's stem."""
    if source.name == "caps.csv":
        return source.parent.name
    return source.stem if source.suffix == ".csv" else source.name
