"""The ``powersweep`` command line.

``powersweep [OPTIONS]`` is ``powersweep sweep [OPTIONS]`` (that is how users type it:
``sudo powersweep --cooling air --load-mode decode-single``). Every failure a user can cause ends
in one ``error: ...`` line on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from powersweep import __version__
from powersweep.errors import PowersweepError, UsageError


def _quiet_ctrl_c_while_loading() -> None:
    # A Ctrl-C while the command is still importing has nothing to clean up (no limit was
    # touched): end quietly instead of printing an import traceback. main() puts Python's
    # handler back. Only for the real command, not when a test or a program imports this.
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    if threading.current_thread() is threading.main_thread() and program in (
        "powersweep",
        "__main__.py",
    ):
        signal.signal(signal.SIGINT, signal.SIG_DFL)


_quiet_ctrl_c_while_loading()

import typer  # noqa: E402
from tqdm import tqdm  # noqa: E402

COMMANDS = ("sweep", "restore", "analyze", "plot", "compare", "import")

app = typer.Typer(
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    no_args_is_help=False,
    help=(
        "Find the GPU power cap with the best LLM tokens per watt. "
        "`powersweep [OPTIONS]` runs `powersweep sweep [OPTIONS]`."
    ),
)


def _warn(message: str) -> None:
    tqdm.write(f"warning: {message}", file=sys.stderr)


def _info(message: str) -> None:
    tqdm.write(message, file=sys.stderr)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"powersweep {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Find the GPU power cap with the best LLM tokens per watt."""


def _parse_concurrency(text: str | None) -> int | None:
    if text is None or text.strip().lower() == "auto":
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise UsageError(f"--concurrency takes a number of streams or auto, not {text!r}")
    return int(text)


def _parse_gpus(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise UsageError(f"--gpu takes GPU indices like 0 or 0,1, not {text!r}")
        out.append(int(part))
    if not out:
        raise UsageError("--gpu is empty")
    return tuple(out)


@app.command("sweep")
def sweep_command(
    cooling: Annotated[
        str, typer.Option(help="Cooling class: air, water, aio or unspecified.")
    ] = "unspecified",
    load_mode: Annotated[
        str,
        typer.Option(help="decode-single, decode-concurrent or prefill-heavy."),
    ] = "decode-single",
    gpu: Annotated[
        str | None, typer.Option("--gpu", "--gpus", help="GPU index or list (0 or 0,1).")
    ] = None,
    caps: Annotated[
        str | None, typer.Option(help="Caps to measure, W per GPU (260,280,300).")
    ] = None,
    step_size: Annotated[float, typer.Option(help="Step between default caps, W.")] = 10.0,
    target_cap_seconds: Annotated[
        float, typer.Option(help="Seconds of load per prompt per cap.")
    ] = 10.0,
    settle_seconds: Annotated[
        float, typer.Option(help="Seconds to wait after a cap change.")
    ] = 3.0,
    url: Annotated[
        str | None, typer.Option(help="Server URL (default: probe local ports).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model id (default: the server's).")] = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="OPENAI_API_KEY", show_envvar=True, help="Bearer token, never stored."),
    ] = None,
    out: Annotated[Path, typer.Option(help="Directory for run directories.")] = Path(
        "powersweep-runs"
    ),
    no_reset: Annotated[
        bool, typer.Option("--no-reset", help="Leave the last cap instead of restoring.")
    ] = False,
    sample_interval: Annotated[float, typer.Option(help="Seconds between GPU samples.")] = 0.5,
    warmup_requests: Annotated[int, typer.Option(help="Warm-up requests per prompt.")] = 3,
    max_failed_caps: Annotated[
        int, typer.Option(help="Stop after this many failed caps in a row.")
    ] = 3,
    simulate: Annotated[
        str | None,
        typer.Option(help="Simulate the GPU with a profile (see --list-profiles)."),
    ] = None,
    time_scale: Annotated[
        float | None,
        typer.Option(help="Simulation only: run time passes this many times faster."),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Simulation only: noise seed.")] = None,
    sim_server: Annotated[
        str, typer.Option(help="Simulation only: server flavour (llamacpp, vllm, ...).")
    ] = "llamacpp",
    sim_state: Annotated[
        Path | None,
        typer.Option(help="Simulation only: file where simulated power limits persist."),
    ] = None,
    list_profiles: Annotated[
        bool, typer.Option("--list-profiles", help="List simulation profiles and exit.")
    ] = False,
    no_charts: Annotated[bool, typer.Option("--no-charts", help="Skip the charts.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the plan (GPUs, envelope, caps, time); change nothing."
        ),
    ] = False,
    observe_only: Annotated[
        bool,
        typer.Option(
            "--observe-only", help="Run the load at the limit in force; change no setting."
        ),
    ] = False,
    resume: Annotated[
        Path | None,
        typer.Option(help="Continue an interrupted run directory from its first unfinished cap."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Start even though a restore journal exists."),
    ] = False,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="POWERSWEEP_STATE_DIR",
            show_envvar=True,
            help="Where the restore journal lives (default /var/lib/powersweep as root).",
        ),
    ] = None,
    sim_rejects_below: Annotated[
        float | None, typer.Option(hidden=True, help="Simulation: cards keep caps under W.")
    ] = None,
    sim_http_error: Annotated[
        int | None, typer.Option(hidden=True, help="Simulation: chat requests get this status.")
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(help="decode-concurrent: streams, or auto (probe) [default: auto]."),
    ] = None,
    bench_runs: Annotated[
        int, typer.Option(help="decode-concurrent: windows per direction per cap (median).")
    ] = 1,
    max_concurrency_probe: Annotated[
        int, typer.Option(help="decode-concurrent auto: highest N probed.")
    ] = 16,
    load_target: Annotated[
        float | None,
        typer.Option(help="decode-concurrent auto: stop probing at this fraction of the cap."),
    ] = None,
    concurrency_stretch: Annotated[
        int, typer.Option(help="decode-concurrent auto: streams added to the pick.")
    ] = 0,
    target_prefill_seconds: Annotated[
        float, typer.Option(help="prefill-heavy: prefill time each prompt is sized for.")
    ] = 10.0,
    strategy: Annotated[
        str, typer.Option(help="dense (every cap) or adaptive (coarse pass, then refine).")
    ] = "dense",
    settle: Annotated[
        str,
        typer.Option(help="auto: measure once readings are stable (at most --settle-seconds)."),
    ] = "auto",
    sim_slots: Annotated[
        int | None, typer.Option(hidden=True, help="Simulation: requests served at once.")
    ] = None,
    sim_context: Annotated[
        int | None, typer.Option(hidden=True, help="Simulation: the model's context, tokens.")
    ] = None,
    sim_reasoning_tokens: Annotated[
        int,
        typer.Option(hidden=True, help="Simulation: reasoning tokens before the answer."),
    ] = 0,
    sim_hide_num_ctx: Annotated[
        bool,
        typer.Option(
            "--sim-hide-num-ctx",
            hidden=True,
            help="Simulation (ollama): /api/show without num_ctx.",
        ),
    ] = False,
) -> None:
    """Sweep the power-limit envelope and measure tokens per watt at each cap."""
    from powersweep.sweep.caps import parse_caps
    from powersweep.sweep.ownership import hand_over, invoking_user
    from powersweep.sweep.session import SweepOptions, run_session
    from powersweep.sweep.session import dry_run as plan_dry_run

    if list_profiles:
        _print_profiles()
        return
    if simulate is None and seed is not None:
        raise UsageError("--seed works only with --simulate")
    options = SweepOptions(
        cooling=cooling,
        load_mode=load_mode,
        gpus=_parse_gpus(gpu),
        caps=tuple(parse_caps(caps)) if caps is not None else None,
        step_size_w=step_size,
        target_cap_seconds=target_cap_seconds,
        settle_seconds=settle_seconds,
        url=url,
        model=model,
        api_key=api_key or None,
        out=out,
        no_reset=no_reset,
        sample_interval_s=sample_interval,
        warmup_requests=warmup_requests,
        max_failed_caps=max_failed_caps,
        simulate=simulate,
        time_scale=time_scale,
        seed=seed or 0,
        sim_server=sim_server,
        sim_state=sim_state,
        force=force,
        dry_run=dry_run,
        observe_only=observe_only,
        resume=resume,
        state_dir=state_dir,
        sim_rejects_below_w=sim_rejects_below,
        sim_http_error=sim_http_error,
        concurrency=_parse_concurrency(concurrency),
        bench_runs=bench_runs,
        max_concurrency_probe=max_concurrency_probe,
        load_target=load_target,
        concurrency_stretch=concurrency_stretch,
        target_prefill_seconds=target_prefill_seconds,
        strategy=strategy,
        settle=settle,
        sim_slots=sim_slots,
        sim_context=sim_context,
        sim_hide_num_ctx=sim_hide_num_ctx,
        sim_reasoning_tokens=sim_reasoning_tokens,
    )
    if dry_run:
        if resume is not None:
            raise UsageError("--dry-run does not combine with --resume")
        for line in plan_dry_run(options, warn=_warn).lines():
            typer.echo(line)
        return
    bar: Any = None

    def on_plan(run_dir: Path, planned: list[float]) -> None:
        nonlocal bar
        _info(f"run directory: {run_dir}")
        _info(f"caps: {len(planned)} from {max(planned):g} W down to {min(planned):g} W")
        if not quiet:
            bar = tqdm(total=len(planned), unit="cap", file=sys.stderr, dynamic_ncols=True)

    def on_progress(p: Any) -> None:
        if bar is None:
            return
        if p.total != bar.total:  # an adaptive sweep plans more caps as it learns
            bar.total = p.total
        if p.status == "ok":
            bar.set_postfix_str(
                f"{p.cap_w:g} W: {p.tps:.1f} TPS, {p.power_w:.0f} W, {p.tps_per_w:.4f} TPS/W"
            )
        else:
            bar.set_postfix_str(f"{p.cap_w:g} W: {p.status}")
        bar.update(1)

    try:
        result = run_session(options, progress=on_progress, warn=_warn, on_plan=on_plan)
    finally:
        if bar is not None:
            bar.close()
    outcome = result.outcome
    for r in outcome.restored:
        state = "restored" if r["ok"] else "NOT restored"
        _info(f"GPU {r['gpu_index']}: power limit {state} to {r['limit_w']:g} W")
    try:
        if outcome.caps_done:
            _finish_report(result.run_dir, charts=not no_charts)
    finally:
        if _is_root():
            # under sudo the run belongs to the user who typed sudo, not to root
            top = options.out if result.out_created and options.resume is None else result.run_dir
            hand_over([top], invoking_user(), warn=_warn)
    if outcome.status == "interrupted":
        _info(f"interrupted: partial run kept in {result.run_dir}")
        signum = outcome.signum or 2
        raise typer.Exit(128 + signum)
    if outcome.status == "failed":
        raise PowersweepError(f"{outcome.error} (partial run in {result.run_dir})")
    _info(f"done: {result.run_dir}")


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@app.command("restore")
def restore_command(
    state_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="POWERSWEEP_STATE_DIR",
            show_envvar=True,
            help="Where the restore journal lives (default /var/lib/powersweep as root).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Restore even if the sweep that wrote it still runs.")
    ] = False,
) -> None:
    """Put back the power limits a killed sweep left (from its restore journal)."""
    from powersweep.sweep.journal import Journal, default_state_dir, restore_gpus
    from powersweep.sweep.session import restore_backend

    journal = Journal(state_dir or default_state_dir())
    entry = journal.read()
    if entry is None:
        _info(f"nothing to restore: no journal at {journal.path}")
        return
    if not force and entry.pid != os.getpid() and _pid_alive(entry.pid):
        raise PowersweepError(
            f"the sweep that wrote {journal.path} (pid {entry.pid}) is still running: stop it "
            "(it restores on Ctrl-C/SIGTERM) or pass --force",
            exit_code=2,
        )
    with restore_backend(entry.backend) as backend:
        results = restore_gpus(entry, backend, warn=_warn)
    for r in results:
        where = f"GPU {r.index}" if r.index is not None else r.uuid
        if r.ok:
            _info(f"{where} ({r.uuid}): power limit restored to {r.limit_w:g} W")
        else:
            _warn(f"{where} ({r.uuid}): NOT restored to {r.limit_w:g} W: {r.message}")
    failed = [r for r in results if not r.ok]
    if failed:
        raise PowersweepError(
            f"{len(failed)} of {len(results)} GPUs not restored; the journal stays at "
            f"{journal.path} (fix the cause and run `powersweep restore` again)"
        )
    journal.remove()
    _info(f"journal removed: {journal.path}")


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _finish_report(run_dir: Path, *, charts: bool) -> None:
    from powersweep.report import build_report

    try:
        report = build_report(run_dir, charts=charts)
    except PowersweepError as exc:
        _warn(f"could not analyse the run: {exc}")
        return
    spot = report.analysis.get("sweet_spot") or {}
    cap = spot.get("cap_w")
    if cap is not None:
        _info(
            f"sweet spot: {cap:g} W, {spot.get('tps_per_w', math.nan):.4f} TPS/W, "
            f"{spot.get('tps', math.nan):.1f} TPS"
        )
    _info(f"summary: {run_dir / 'summary.md'}")


def _print_profiles() -> None:
    from powersweep.sim.profiles import PROFILE_DESCRIPTIONS, profile_names

    for name in profile_names():
        typer.echo(f"{name:16s} {PROFILE_DESCRIPTIONS.get(name, '')}")
    typer.echo(f"{'replay:PATH':16s} a rig replaying a measured caps.csv (a community curve)")
    typer.echo(f"{'A+B':16s} two simulated cards, e.g. rtx3090-air+rtx3090-air")


@app.command("analyze")
def analyze_command(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Run directory or caps.csv; several runs of one GPU in different load modes "
            "add a cross-mode answer (one cap for a mixed workload)."
        ),
    ],
    out: Annotated[Path | None, typer.Option(help="Output directory (default: beside).")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the analysis JSON (and only it) on stdout.")
    ] = False,
    max_tps_loss: Annotated[float, typer.Option(help="Near-peak: accept this % TPS loss.")] = 5.0,
    objective: Annotated[str, typer.Option(help="tps-per-w, near-peak or cost.")] = "tps-per-w",
    eta: Annotated[float, typer.Option(help="cost objective: weight of energy (0-1).")] = 0.5,
) -> None:
    """Analyse a run (or a bare caps.csv): writes analysis.json and summary.md."""
    from powersweep.report import build_cross_report, build_report

    if not 0 <= max_tps_loss < 100:
        raise UsageError("--max-tps-loss must be between 0 and 100")
    if objective not in ("tps-per-w", "near-peak", "cost"):
        raise UsageError(f"--objective must be tps-per-w, near-peak or cost, not {objective!r}")
    if not 0 <= eta <= 1:
        raise UsageError("--eta must be between 0 and 1")
    if len(paths) > 1:
        cross = build_cross_report(
            paths, out_dir=out, max_tps_loss_pct=max_tps_loss, objective=objective, eta=eta
        )
        typer.echo(
            json.dumps(cross.cross, indent=2, allow_nan=False) if as_json else cross.markdown
        )
        for written in cross.paths[-2:]:
            _info(f"wrote {written}")
        return
    report = build_report(
        paths[0],
        out_dir=out,
        charts=False,
        max_tps_loss_pct=max_tps_loss,
        objective=objective,
        eta=eta,
    )
    if as_json:
        typer.echo(json.dumps(report.analysis, indent=2, allow_nan=False))
    else:
        typer.echo(report.summary)


def _formats(text: str) -> tuple[str, ...]:
    formats = tuple(f.strip().lower() for f in text.split(",") if f.strip())
    bad = [f for f in formats if f not in ("png", "svg")]
    if not formats or bad:
        raise UsageError(f"--format takes png and/or svg, not {text!r}")
    return formats


@app.command("plot")
def plot_command(
    path: Annotated[Path, typer.Argument(help="Run directory or caps.csv.")],
    out: Annotated[Path | None, typer.Option(help="Output directory (default: beside).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="png, svg or png,svg.")] = "png",
    title: Annotated[str | None, typer.Option(help="Chart title.")] = None,
) -> None:
    """Draw the charts of a run (or a bare caps.csv) into charts/."""
    from powersweep.report import build_report

    report = build_report(
        path, out_dir=out, charts=True, formats=_formats(fmt), title=title, write_analysis=False
    )
    for p in report.paths:
        typer.echo(str(p))


@app.command("compare")
def compare_command(
    paths: Annotated[list[Path], typer.Argument(help="Run directories or caps.csv files.")],
    out: Annotated[Path, typer.Option(help="Output file stem.")] = Path("powersweep-compare"),
    x: Annotated[str, typer.Option(help="x axis: watts or pct-tdp.")] = "watts",
    normalize: Annotated[
        bool, typer.Option("--normalize", help="TPS/W relative to each run's peak.")
    ] = False,
    fmt: Annotated[str, typer.Option("--format", help="png, svg or png,svg.")] = "png",
) -> None:
    """Overlay the efficiency curves of several runs and print their sweet spots."""
    from powersweep import analysis, plots

    if x not in ("watts", "pct-tdp"):
        raise UsageError(f"--x must be watts or pct-tdp, not {x!r}")
    if len(paths) < 1:
        raise UsageError("compare needs at least one run")
    labelled = []
    for p in paths:
        curve = analysis.load_curve(p)
        labelled.append((_label(p), analysis.analyze(curve)))
    written = plots.render_compare(labelled, out, x=x, normalize=normalize, formats=_formats(fmt))
    typer.echo(plots.compare_table(labelled))
    for w in written:
        _info(f"chart: {w}")


def _label(path: Path) -> str:
    return path.parent.name if path.name == "caps.csv" else path.name


@app.command("import")
def import_command(
    summary: Annotated[Path, typer.Argument(help="Markdown with a power-cap summary table.")],
    out: Annotated[Path | None, typer.Option(help="caps.csv to write.")] = None,
) -> None:
    """Turn a pasted power-cap-sweep.sh summary table into a caps.csv."""
    from powersweep import analysis

    df = analysis.import_summary(summary)
    target = out or summary.with_suffix(".caps.csv")
    analysis.write_caps_csv(df, target)
    typer.echo(str(target))


def _argv_with_default_command(argv: Sequence[str]) -> list[str]:
    args = list(argv)
    if not args or args[0] in ("--help", "-h", "--version"):
        return args if args else ["sweep"]
    if args[0] not in COMMANDS:
        return ["sweep", *args]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``powersweep`` console script; returns the exit code."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.SIG_DFL
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    args = _argv_with_default_command(sys.argv[1:] if argv is None else argv)
    try:
        command = typer.main.get_command(app)
        # without standalone mode click returns the code of an Exit instead of raising it
        rc = command.main(args=args, prog_name="powersweep", standalone_mode=False)
    except typer.Exit as exc:
        return int(getattr(exc, "exit_code", 0))
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        return 130
    except typer.TyperException as exc:  # bad usage: unknown option, unparsable value
        print(f"error: {_one_line(exc.format_message())}", file=sys.stderr)
        return 2
    except PowersweepError as exc:
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if os.environ.get("POWERSWEEP_DEBUG"):
            raise
        print(
            f"error: internal error: {type(exc).__name__}: {_one_line(str(exc))} "
            "(set POWERSWEEP_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1
    return rc if isinstance(rc, int) else 0


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
