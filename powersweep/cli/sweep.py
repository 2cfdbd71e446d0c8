"""``powersweep sweep`` (also plain ``powersweep``): run a sweep and report it.

Options are grouped in help panels; choices are enums, so ``--help`` and shell completion list
them. The flags become :class:`~powersweep.sweep.options.SweepOptions`; the rig comes from the
composition root (:mod:`powersweep.cli.rigs`).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from tqdm import tqdm

from powersweep.analysis.serving import check_options
from powersweep.cli._common import info, is_root, warn
from powersweep.cli.flag_params import command
from powersweep.errors import PowersweepError, UsageError
from powersweep.flags import OUTPUT, SIMULATION, flag, flag_of, negated
from powersweep.runformat import REFERENCE_REASON
from powersweep.sim.sim_options import SimOptions, refuse_without_simulate
from powersweep.sweep.options import SweepOptions
from powersweep.sweep.planning.confirm_plan import CONFIRM_MAX_CAPS

# `sweep --help`'s last lines: what a user types most
SWEEP_EXAMPLES = """Examples:
  # the demo: a simulated RTX 3090, no GPU or root needed (seconds)
  powersweep --simulate rtx3090-air --cooling air --load-mode decode-single
  # a real card, against the local server (power limits need root)
  sudo powersweep --cooling air --load-mode decode-single
  # lock the SM clock at each point instead of capping power
  sudo powersweep --axis sm-clock --cooling air
  # undervolt: step the SM clock offset at one locked clock, under 350 W
  sudo powersweep --axis undervolt --cap 350 --cooling air
  # continue an interrupted run from its first unfinished point
  sudo powersweep --resume powersweep-runs/RUN
  # the plan and its time, nothing changed
  powersweep --dry-run"""

# Exit code of a run that ended but measured too few caps to answer.
PARTIAL_EXIT = 3


@dataclass(frozen=True)
class ShowOptions:
    """How the sweep shows its run (not recorded: the run files are the same either way)."""

    charts: bool = flag(
        True,
        "--no-charts",
        help="Skip the charts.",
        panel=OUTPUT,
        takes=bool,
        given_default=False,
        parse=negated,
    )
    quiet: bool = flag(False, "--quiet", "-q", help="No progress bar.", panel=OUTPUT)
    as_json: bool = flag(
        False,
        "--json",
        help="Print the analysis as JSON, not the table.",
        doc="Print the run's analysis.json on stdout instead of the table of points, the answer "
        "and the paths (progress and logs stay on stderr).",
        panel=OUTPUT,
    )
    list_profiles: bool = flag(
        False, "--list-profiles", help="List simulation profiles and exit.", panel=SIMULATION
    )


def _sweep(ctx: typer.Context, options: SweepOptions, show: ShowOptions, sim: SimOptions) -> None:
    """Measure tokens per watt at each power cap (or clock lock).

    Each point's TPS/W comes with its own 95% interval; the run ends with the sweet spot and
    writes caps.csv, summary.md and charts into its run directory."""
    if show.list_profiles:
        _print_profiles()
        return
    if options.simulate is None:
        if ctx.params[flag_of(SimOptions, "seed").param] is not None:
            raise UsageError("--seed works only with --simulate")
        refuse_without_simulate(sim)
    else:
        sim.validate(options.server.url)
    check_options(options.output.tariff_per_kwh, None, None)
    if options.safety.dry_run:
        if show.as_json:
            raise UsageError("--json prints a sweep's analysis; a --dry-run has none")
        _print_dry_run(options, sim)
        return
    run_sweep(options, sim, quiet=show.quiet, charts=show.charts, as_json=show.as_json)


# The command typer reads: one flag per flagged field of the groups, the groups built
sweep_command = command(_sweep)


def _print_dry_run(options: SweepOptions, sim: SimOptions) -> None:
    from powersweep.cli.rigs import build_rig
    from powersweep.sweep.plan import dry_run

    if options.output.resume is not None:
        raise UsageError("--dry-run does not combine with --resume")
    rigs = functools.partial(build_rig, sim=sim)
    for line in dry_run(options, rigs, warn=warn).lines():
        typer.echo(line)


# Points a sweep measures after its plan, at most, where nothing failed: the confirm phase's and
# the re-read. The bar counts them from the start, so fewer ever come as a surprise.
AFTER_PLAN = CONFIRM_MAX_CAPS + 1
# The share done, then the points done and expected: the shown total is not tqdm's count.
BAR_FORMAT = "{percentage:3.0f}%|{bar}| {desc} [{elapsed}<{remaining}{postfix}]"


class _Progress:
    """The progress bar: opened once the plan is known, updated after each point.

    Its share done never goes down and reaches 100% only at the run's end (issue 47: it ran
    back from 91% to 85% when re-measured points came, and ended at 92%). Each point takes its
    share of what was left, 1 / (1 + the points still expected after it): where the plan holds,
    that is exactly done / planned; where the plan grows (an adaptive plan, rechecks, retries,
    an undervolt search's steps), the points still to come share what is left, and nothing
    measured is taken back. An undervolt search counts its steps up to its top offset (the
    edge ends it sooner). A run that ends (its last point, or the loop's end) shows 100%; a cut
    one shows where it was cut.
    """

    def __init__(self, quiet: bool, options: SweepOptions | None = None) -> None:
        self.quiet = quiet
        self.options = options  # how many points an adaptive plan likely measures
        self.bar: Any = None
        self.unit = "point"
        self.done = 0
        self.expected = 0  # points the run is expected to measure in all; only grows
        self.share = 0.0  # the share shown; only grows

    def on_plan(self, run_dir: Path, planned: list[float]) -> None:
        info(f"run directory: {run_dir}")
        info(f"caps: {len(planned)} from {max(planned):g} W down to {min(planned):g} W")
        likely = len(planned)
        if self.options is not None:
            from powersweep.sweep.estimate import points_measured

            likely = points_measured(self.options, likely)
        self._open(likely, "cap")

    def on_points(self, run_dir: Path, planned: list[Any], likely: int | None = None) -> None:
        info(f"run directory: {run_dir}")
        first = planned[0]
        if first.sm_offset_mhz is not None:
            info(
                f"undervolt search: the {first.cap_w:g} W cap, then the SM clock offset up "
                "from 0 at a locked clock until a step is unstable"
            )
        else:
            info(f"clock points: {len(planned)}, from {first.label()} down")
        if likely is not None:  # an undervolt search's steps come as it goes, then its re-read
            self._open(likely + 1, "step", headroom=False)
        else:
            self._open(len(planned), "point")

    def _open(self, likely: int, unit: str, headroom: bool = True) -> None:
        self.unit, self.done, self.share = unit, 0, 0.0
        self.expected = likely + (AFTER_PLAN if headroom else 0)
        if not self.quiet:
            self.bar = tqdm(
                total=self.expected,
                desc=self._counts(),
                file=sys.stderr,
                dynamic_ncols=True,
                bar_format=BAR_FORMAT,
            )

    def _counts(self) -> str:
        return f"{self.done}/{self.expected} {self.unit}s"

    def on_progress(self, p: Any) -> None:
        if self.bar is None:
            return
        # each phase reports its own count (an adaptive sweep plans more caps as it learns; the
        # rechecks and the confirm phase come after the planned points): what is still expected
        # is what this phase has left, or what was expected before, whichever is more
        self.done += 1
        # the re-read comes last: until it has, one point at least is still to come (a run
        # that reads none fills the bar as its loop ends: finish)
        left = max(1, self.expected - self.done, p.total - p.index)
        if p.reason == REFERENCE_REASON:
            left = 0  # the run's last point: a plan that counted points it did not need ends
        self.expected = self.done + left
        self.share += (1.0 - self.share) / (1 + left)
        where = p.label or f"{p.cap_w:g} W"
        if p.status == "ok":
            self.bar.set_postfix_str(
                f"{where}: {p.tps:.1f} TPS, {p.power_w:.0f} W, {p.tps_per_w:.4f} TPS/W",
                refresh=False,
            )
        else:
            self.bar.set_postfix_str(f"{where}: {p.status}", refresh=False)
        self._show()

    def finish(self) -> None:
        """The run's loop ended (not cut): whatever was still expected, it is done."""
        if self.bar is None or self.done == 0:
            return
        self.expected, self.share = self.done, 1.0
        self._show()

    def _show(self) -> None:
        # tqdm draws n / total: the total is set so that the share is the one kept here
        self.bar.total = self.done / self.share if self.share < 1.0 else self.done
        self.bar.set_description_str(self._counts(), refresh=False)
        self.bar.update(self.done - self.bar.n)  # its rate and time left follow the points
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def run_sweep(
    options: SweepOptions, sim: SimOptions, *, quiet: bool, charts: bool, as_json: bool = False
) -> None:
    """Run the sweep, print what was restored, write the report, and hand files to the user.

    The run's view (its points, the answer, the files) goes to stdout (``as_json``: its typed
    analysis instead); the progress and every message to stderr.

    Raises:
        PowersweepError: The sweep could not start, or failed.
        typer.Exit: Interrupted by a signal (exit 128 + signal).
    """
    from powersweep.cli.rigs import build_rig
    from powersweep.sweep.records.ownership import hand_over, invoking_user
    from powersweep.sweep.session import run_session
    from powersweep.sweep.signals import SweepInterrupted, raise_on_signals

    bar = _Progress(quiet, options)
    printed: list[bool] = []

    def on_restored(restored: Any, finished: bool) -> None:
        # Called while signals are ignored, right after the restore: a second Ctrl-C cannot
        # hide what was put back.
        if finished:
            bar.finish()
        bar.close()
        _print_restored(restored)
        printed.append(True)

    try:
        result = run_session(
            options,
            # a resumed run's simulated rig is the one it recorded (build_rig reads it)
            functools.partial(build_rig, sim=sim),
            progress=bar.on_progress,
            warn=warn,
            on_plan=bar.on_plan,
            on_points=bar.on_points,
            on_restored=on_restored,
        )
    finally:
        bar.close()
    outcome = result.outcome
    if not printed:
        _print_restored(outcome.restored)
    try:
        with raise_on_signals():
            if outcome.caps_done:
                _finish_report(result.run_dir, charts=charts, as_json=as_json)
            else:
                _failed_report(
                    result.run_dir, outcome.error or "no point was measured", as_json=as_json
                )
    except SweepInterrupted as exc:
        info(
            f"{exc} while writing the report: the limits were already restored and the run is "
            f"kept; `powersweep analyze {result.run_dir}` writes the report again"
        )
        raise typer.Exit(exc.exit_code) from None
    finally:
        if is_root():
            # under sudo the run belongs to the user who typed sudo, not to root
            top = (
                options.output.out
                if result.out_created and options.output.resume is None
                else result.run_dir
            )
            hand_over([top], invoking_user(), warn=warn)
    if outcome.status == "interrupted":
        info(f"interrupted: partial run kept in {result.run_dir}")
        signum = outcome.signum or 2
        raise typer.Exit(128 + signum)
    if outcome.status == "failed":
        raise PowersweepError(f"{outcome.error} (partial run in {result.run_dir})")
    if outcome.status == "partial":
        raise PowersweepError(
            f"partial run: {outcome.error} (kept in {result.run_dir})", exit_code=PARTIAL_EXIT
        )


def _print_restored(restored: Any) -> None:
    for r in restored:
        if r.get("limit_w") is not None:
            state = "restored" if r["ok"] else "NOT restored"
            info(f"GPU {r['gpu_index']}: power limit {state} to {r['limit_w']:g} W")
        if r.get("clocks"):
            info(f"GPU {r['gpu_index']}: {r['clocks']}")
        if r.get("offset"):
            info(f"GPU {r['gpu_index']}: {r['offset']}")


def _failed_report(run_dir: Path, why: str, *, as_json: bool = False) -> None:
    """The summary of a run with no usable point (what went wrong), or a warning; on stdout
    why there is no answer and the files (nothing with ``--json``: there is no analysis)."""
    from powersweep.cli._view import show_failed
    from powersweep.report import build_failed_report

    written: list[Path] = []
    try:
        written.append(build_failed_report(run_dir, why))
    except PowersweepError as exc:
        warn(str(exc))
    show_failed(why, run_dir, written, as_json=as_json)


def _finish_report(run_dir: Path, *, charts: bool, as_json: bool = False) -> None:
    """Analyse the run and write its outputs; its view (or ``as_json`` its analysis) on stdout
    as soon as the analysis is done, the files after they are written."""
    from powersweep.cli._view import show_analysis, show_paths
    from powersweep.report import Report, build_report
    from powersweep.sweep.signals import SweepInterrupted

    shown: list[bool] = []

    def show(report: Report) -> None:
        show_analysis(report, as_json=as_json)
        shown.append(True)

    try:
        report = build_report(run_dir, charts=charts, on_analysis=show)
    except SweepInterrupted:
        raise
    except UsageError as exc:
        # no usable point: the user still gets the account of what went wrong
        warn(f"could not analyse the run: {exc}")
        _failed_report(run_dir, str(exc), as_json=as_json or bool(shown))
        return
    except PowersweepError as exc:
        warn(f"could not analyse the run: {exc}")
        return
    show_paths(run_dir, report.paths, as_json=as_json)


def _print_profiles() -> None:
    from powersweep.sim.profiles import OUTLIERS, PROFILE_DESCRIPTIONS, profile_names

    for name in profile_names():
        typer.echo(f"{name:16s} {PROFILE_DESCRIPTIONS.get(name, '')}")
    typer.echo(f"{'replay:PATH':16s} a rig replaying a measured caps.csv (a community curve)")
    typer.echo(f"{'A+B':16s} two simulated cards, e.g. rtx3090-air+rtx3090-air")
    typer.echo(
        f"{'NAME~SPREAD':16s} one card of a fleet, e.g. rtx4090-air~0.03 (+-3% silicon and "
        "cooling, seeded by --sim-node)"
    )
    typer.echo(
        f"{'NAME~S~OUTLIER':16s} a planted outlier: "
        + "; ".join(f"{k} ({v})" for k, v in OUTLIERS.items())
    )
