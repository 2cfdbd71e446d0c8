"""``powersweep sweep`` (also plain ``powersweep``): run a sweep and report it.

Options are grouped in help panels; choices are enums, so ``--help`` and shell completion list
them. The flags become :class:`~powersweep.sweep.options.SweepOptions`; the rig comes from the
composition root (:mod:`powersweep.cli.rigs`).
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from tqdm import tqdm

from powersweep.analysis.serving import check_options
from powersweep.cli._common import BackendOpt, info, is_root, state_dir_option, warn
from powersweep.cli.analyze import TariffOpt
from powersweep.errors import PowersweepError, UsageError
from powersweep.sim.options import SimOptions, SimServerFlavour, refuse_without_simulate
from powersweep.sweep.options import (
    Axis,
    Backend,
    Cooling,
    LoadMode,
    SettleMode,
    Strategy,
    SweepOptions,
)
from powersweep.sweep.sampling.thermal import DEFAULT_THERMAL_WAIT_S
from powersweep.sweep.sampling.windows import DEFAULT_MIN_WINDOW_S, DEFAULT_PRECISION_PCT

LOAD = "Load"
CAPS = "Caps"
CLOCKS = "Clock locks"
SERVER = "Server"
SAFETY = "Safety"
OUTPUT = "Output"
SIMULATION = "Simulation"
# Exit code of a run that ended but measured too few caps to answer.
PARTIAL_EXIT = 3


def parse_concurrency(text: str | None) -> int | None:
    """``--concurrency``: a number of streams, or auto (None).

    Raises:
        UsageError: Anything else.
    """
    if text is None or text.strip().lower() == "auto":
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise UsageError(f"--concurrency takes a number of streams or auto, not {text!r}")
    return int(text)


def _all(text: str | None) -> bool:
    return text is not None and text.strip().lower() == "all"


def parse_gpus(text: str | None) -> tuple[int, ...] | None:
    """``--gpu``: GPU indices like 0 or 0,1 (None: not given).

    Raises:
        UsageError: Anything else.
    """
    if text is None:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise UsageError(f"--gpu takes GPU indices like 0 or 0,1 (or all), not {text!r}")
        out.append(int(part))
    if not out:
        raise UsageError("--gpu is empty")
    return tuple(out)


# Each option of `powersweep sweep`, with its help panel (one alias per option keeps the
# command's signature short and lets other commands share an option).
CoolingOpt = Annotated[Cooling, typer.Option(help="Cooling class; thermal findings depend on it.")]

LoadModeOpt = Annotated[
    LoadMode, typer.Option(help="The load run at each cap.", rich_help_panel=LOAD)
]

TargetCapSecondsOpt = Annotated[
    float,
    typer.Option(
        help="The most run seconds of each point's metric window (all its rounds together; a "
        "request may run on for a margin of at most 10% of a window, 1.5 s per point in all, "
        "then it is cut).",
        rich_help_panel=LOAD,
    ),
]

MinCapSecondsOpt = Annotated[
    float,
    typer.Option(
        help="Run seconds of each prompt's first window per point; the point measures on "
        "(its metric's prompt only) until its TPS/W is known to --precision, is clearly apart "
        "from the best point so far, or --target-cap-seconds is reached.",
        rich_help_panel=LOAD,
    ),
]

PrecisionOpt = Annotated[
    float,
    typer.Option(
        help="Precision goal of each point: the 95% half-width of its TPS/W, in percent, from "
        "its own measurements (0.5: a neighbour 10 W away near the sweet spot is told apart).",
        rich_help_panel=LOAD,
    ),
]

WarmupRequestsOpt = Annotated[
    int,
    typer.Option(
        help="At most this many warm-up requests per prompt; the warm-up ends sooner once rate "
        "and draw are steady, and after 3 windows at most (0: none).",
        rich_help_panel=LOAD,
    ),
]

ConcurrencyOpt = Annotated[
    str | None,
    typer.Option(
        help="decode-concurrent: streams, or auto (probe; the default).",
        rich_help_panel=LOAD,
    ),
]

BenchRunsOpt = Annotated[
    int,
    typer.Option(
        help="decode-concurrent: windows per direction per cap (median).",
        rich_help_panel=LOAD,
    ),
]

MaxConcurrencyProbeOpt = Annotated[
    int, typer.Option(help="decode-concurrent auto: highest N probed.", rich_help_panel=LOAD)
]

LoadTargetOpt = Annotated[
    float | None,
    typer.Option(
        help="decode-concurrent auto: stop probing at this fraction of the cap.",
        rich_help_panel=LOAD,
    ),
]

ConcurrencyStretchOpt = Annotated[
    int,
    typer.Option(help="decode-concurrent auto: streams added to the pick.", rich_help_panel=LOAD),
]

TargetPrefillSecondsOpt = Annotated[
    float | None,
    typer.Option(
        help=(
            "prefill-heavy: prefill time each prompt is sized for at the first point (default: "
            "a quarter of --target-cap-seconds; at most half)."
        ),
        rich_help_panel=LOAD,
    ),
]

GpuOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu",
        "--gpus",
        help="GPU index or list (0 or 0,1), or all (default: the GPUs serving the model).",
        rich_help_panel=CAPS,
    ),
]

CapsOpt = Annotated[
    str | None,
    typer.Option(help="Caps to measure, W per GPU (260,280,300).", rich_help_panel=CAPS),
]

StepSizeOpt = Annotated[
    float, typer.Option(help="Step between default caps, W.", rich_help_panel=CAPS)
]

StrategyOpt = Annotated[
    Strategy,
    typer.Option(
        help="dense (every cap) or adaptive (coarse pass, then refine).",
        rich_help_panel=CAPS,
    ),
]

SettleOpt = Annotated[
    SettleMode,
    typer.Option(
        help="auto: measure once readings are stable (at most --settle-seconds).",
        rich_help_panel=CAPS,
    ),
]

SettleSecondsOpt = Annotated[
    float, typer.Option(help="Seconds to wait after a cap change.", rich_help_panel=CAPS)
]

ThermalWaitSecondsOpt = Annotated[
    float,
    typer.Option(
        help="Most seconds each point waits, after settling, for the card's temperature to "
        "stop drifting (under 3 C/min; 0: no wait).",
        rich_help_panel=CAPS,
    ),
]

NoConfirmOpt = Annotated[
    bool,
    typer.Option(
        "--no-confirm",
        help="Skip re-measuring the caps tied with the best within noise at the end.",
        rich_help_panel=CAPS,
    ),
]

SampleIntervalOpt = Annotated[
    float, typer.Option(help="Seconds between GPU samples.", rich_help_panel=CAPS)
]

MaxFailedCapsOpt = Annotated[
    int,
    typer.Option(help="Stop after this many failed caps in a row.", rich_help_panel=CAPS),
]

UrlOpt = Annotated[
    str | None,
    typer.Option(help="Server URL (default: probe local ports).", rich_help_panel=SERVER),
]

ModelOpt = Annotated[
    str | None, typer.Option(help="Model id (default: the server's).", rich_help_panel=SERVER)
]

ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        envvar="OPENAI_API_KEY",
        show_envvar=True,
        help="Bearer token, never stored.",
        rich_help_panel=SERVER,
    ),
]

DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Print the plan (GPUs, envelope, caps, time); change nothing.",
        rich_help_panel=SAFETY,
    ),
]

ObserveOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--observe-only",
        help="Run the load at the limit in force; change no setting.",
        rich_help_panel=SAFETY,
    ),
]

NoResetOpt = Annotated[
    bool,
    typer.Option(
        "--no-reset", help="Leave the last cap instead of restoring.", rich_help_panel=SAFETY
    ),
]

ResumeOpt = Annotated[
    Path | None,
    typer.Option(
        help="Continue an interrupted run directory from its first unfinished cap.",
        rich_help_panel=SAFETY,
    ),
]

ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        hidden=True,
        help="Accepted for old scripts: a killed sweep's journal is always put back first, and a "
        "running sweep's card is never taken.",
    ),
]

StateDirOpt = Annotated[Path | None, state_dir_option(SAFETY)]

OutOpt = Annotated[
    Path, typer.Option(help="Directory for run directories.", rich_help_panel=OUTPUT)
]

NoChartsOpt = Annotated[
    bool, typer.Option("--no-charts", help="Skip the charts.", rich_help_panel=OUTPUT)
]

QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bar.", rich_help_panel=OUTPUT)
]

SimulateOpt = Annotated[
    str | None,
    typer.Option(
        help="Simulate the GPU with a profile (see --list-profiles).",
        rich_help_panel=SIMULATION,
    ),
]

ListProfilesOpt = Annotated[
    bool,
    typer.Option(
        "--list-profiles", help="List simulation profiles and exit.", rich_help_panel=SIMULATION
    ),
]

SimServerOpt = Annotated[
    SimServerFlavour,
    typer.Option(help="Simulated server flavour.", rich_help_panel=SIMULATION),
]

TimeScaleOpt = Annotated[
    float | None,
    typer.Option(
        help="Run on scaled real time, this many times faster than the wall (default: virtual "
        "time, as fast as the CPU allows, the same figures on any machine).",
        rich_help_panel=SIMULATION,
    ),
]

SimPaceOpt = Annotated[
    float | None,
    typer.Option(
        help="Virtual time passes at most this many run seconds per wall second (a watchable "
        "run; the figures are those of the unpaced run).",
        rich_help_panel=SIMULATION,
    ),
]

SeedOpt = Annotated[int | None, typer.Option(help="Noise seed.", rich_help_panel=SIMULATION)]

SimStateOpt = Annotated[
    Path | None,
    typer.Option(help="File where simulated power limits persist.", rich_help_panel=SIMULATION),
]

SimRejectsBelowOpt = Annotated[
    float | None, typer.Option(hidden=True, help="Simulation: cards keep caps under W.")
]

SimHttpErrorOpt = Annotated[
    int | None, typer.Option(hidden=True, help="Simulation: chat requests get this status.")
]

SimSlotsOpt = Annotated[
    int | None, typer.Option(hidden=True, help="Simulation: requests served at once.")
]

SimContextOpt = Annotated[
    int | None, typer.Option(hidden=True, help="Simulation: the model's context, tokens.")
]

SimReasoningTokensOpt = Annotated[
    int, typer.Option(hidden=True, help="Simulation: reasoning tokens before the answer.")
]

SimNodeOpt = Annotated[
    str | None,
    typer.Option(
        help="Simulation: node name that seeds a fleet card's spread (PROFILE~0.03); "
        "default $POWERSWEEP_SIM_NODE or the host name.",
        rich_help_panel=SIMULATION,
    ),
]

SimFaultOpt = Annotated[
    str | None,
    typer.Option(hidden=True, help="Simulation: the server misbehaves (see sim/faults.py)."),
]

SimHideNumCtxOpt = Annotated[
    bool,
    typer.Option(
        "--sim-hide-num-ctx", hidden=True, help="Simulation (ollama): /api/show no num_ctx."
    ),
]

SimTokensPerChunkOpt = Annotated[
    int, typer.Option(hidden=True, help="Simulation: tokens packed into one stream event.")
]

SimServingGpusOpt = Annotated[
    str | None,
    typer.Option(hidden=True, help="Simulation: the cards the model is loaded on (0,1)."),
]

SimIgnoreMaxTokensOpt = Annotated[
    bool,
    typer.Option(
        "--sim-ignore-max-tokens", hidden=True, help="Simulation: generate past max_tokens."
    ),
]


AxisOpt = Annotated[
    Axis,
    typer.Option(
        help="What to sweep: the power limit, the SM clock lock, the memory clock lock, or a "
        "grid of both (under one power limit).",
        rich_help_panel=CLOCKS,
    ),
]

SmClocksOpt = Annotated[
    str | None,
    typer.Option(
        help="SM lock set-points, MHz, e.g. 900,1200 (default: about 11 supported clocks).",
        rich_help_panel=CLOCKS,
    ),
]

MemClocksOpt = Annotated[
    str | None,
    typer.Option(
        help="Memory lock set-points, MHz (default: every supported load tier).",
        rich_help_panel=CLOCKS,
    ),
]

HoldCapOpt = Annotated[
    float | None,
    typer.Option(
        "--cap",
        help="Power limit held during a clock sweep, W (default: the limit in force).",
        rich_help_panel=CLOCKS,
    ),
]


SimMemLocksRefusedOpt = Annotated[
    bool,
    typer.Option("--sim-mem-locks-refused", hidden=True, help="Simulation: memory locks refused."),
]

SimSmLockIgnoredBelowOpt = Annotated[
    float | None,
    typer.Option(hidden=True, help="Simulation: SM locks under MHz silently ignored."),
]


def sweep_command(
    cooling: CoolingOpt = Cooling.UNSPECIFIED,
    load_mode: LoadModeOpt = LoadMode.DECODE_SINGLE,
    target_cap_seconds: TargetCapSecondsOpt = 10.0,
    min_cap_seconds: MinCapSecondsOpt = DEFAULT_MIN_WINDOW_S,
    precision: PrecisionOpt = DEFAULT_PRECISION_PCT,
    warmup_requests: WarmupRequestsOpt = 3,
    concurrency: ConcurrencyOpt = None,
    bench_runs: BenchRunsOpt = 1,
    max_concurrency_probe: MaxConcurrencyProbeOpt = 16,
    load_target: LoadTargetOpt = None,
    concurrency_stretch: ConcurrencyStretchOpt = 0,
    target_prefill_seconds: TargetPrefillSecondsOpt = None,
    gpu: GpuOpt = None,
    backend: BackendOpt = Backend.AUTO,
    caps: CapsOpt = None,
    step_size: StepSizeOpt = 10.0,
    axis: AxisOpt = Axis.POWER,
    sm_clocks: SmClocksOpt = None,
    mem_clocks: MemClocksOpt = None,
    cap: HoldCapOpt = None,
    strategy: StrategyOpt = Strategy.DENSE,
    settle: SettleOpt = SettleMode.AUTO,
    settle_seconds: SettleSecondsOpt = 3.0,
    thermal_wait_seconds: ThermalWaitSecondsOpt = DEFAULT_THERMAL_WAIT_S,
    no_confirm: NoConfirmOpt = False,
    sample_interval: SampleIntervalOpt = 0.5,
    max_failed_caps: MaxFailedCapsOpt = 3,
    url: UrlOpt = None,
    model: ModelOpt = None,
    api_key: ApiKeyOpt = None,
    dry_run: DryRunOpt = False,
    observe_only: ObserveOnlyOpt = False,
    no_reset: NoResetOpt = False,
    resume: ResumeOpt = None,
    force: ForceOpt = False,
    state_dir: StateDirOpt = None,
    out: OutOpt = Path("powersweep-runs"),
    no_charts: NoChartsOpt = False,
    tariff: TariffOpt = None,
    quiet: QuietOpt = False,
    simulate: SimulateOpt = None,
    list_profiles: ListProfilesOpt = False,
    sim_server: SimServerOpt = SimServerFlavour.LLAMACPP,
    time_scale: TimeScaleOpt = None,
    sim_pace: SimPaceOpt = None,
    seed: SeedOpt = None,
    sim_state: SimStateOpt = None,
    sim_rejects_below: SimRejectsBelowOpt = None,
    sim_http_error: SimHttpErrorOpt = None,
    sim_slots: SimSlotsOpt = None,
    sim_context: SimContextOpt = None,
    sim_reasoning_tokens: SimReasoningTokensOpt = 0,
    sim_hide_num_ctx: SimHideNumCtxOpt = False,
    sim_node: SimNodeOpt = None,
    sim_mem_locks_refused: SimMemLocksRefusedOpt = False,
    sim_sm_lock_ignored_below: SimSmLockIgnoredBelowOpt = None,
    sim_tokens_per_chunk: SimTokensPerChunkOpt = 1,
    sim_ignore_max_tokens: SimIgnoreMaxTokensOpt = False,
    sim_serving_gpus: SimServingGpusOpt = None,
    sim_fault: SimFaultOpt = None,
) -> None:
    """Sweep the power-limit envelope (or clock locks) and measure tokens per watt at each."""
    from powersweep.sweep.planning.caps import parse_caps
    from powersweep.sweep.planning.clock_points import parse_clocks

    if list_profiles:
        _print_profiles()
        return
    sim = SimOptions(
        time_scale=time_scale,
        pace=sim_pace,
        seed=seed or 0,
        server=sim_server.value,
        state=sim_state,
        rejects_below_w=sim_rejects_below,
        http_error=sim_http_error,
        slots=sim_slots,
        context=sim_context,
        hide_num_ctx=sim_hide_num_ctx,
        reasoning_tokens=sim_reasoning_tokens,
        node=sim_node,
        mem_locks_refused=sim_mem_locks_refused,
        sm_lock_ignored_below_mhz=sim_sm_lock_ignored_below,
        tokens_per_chunk=sim_tokens_per_chunk,
        ignore_max_tokens=sim_ignore_max_tokens,
        serving_gpus=parse_gpus(sim_serving_gpus),
        fault=sim_fault,
    )
    if simulate is None:
        if seed is not None:
            raise UsageError("--seed works only with --simulate")
        refuse_without_simulate(sim)
    else:
        sim.validate(url)
    check_options(tariff, None, None)
    options = SweepOptions(
        cooling=cooling.value,
        load_mode=load_mode.value,
        gpus=None if _all(gpu) else parse_gpus(gpu),
        all_gpus=_all(gpu),
        caps=tuple(parse_caps(caps)) if caps is not None else None,
        step_size_w=step_size,
        target_cap_seconds=target_cap_seconds,
        min_cap_seconds=min_cap_seconds,
        precision_pct=precision,
        settle_seconds=settle_seconds,
        thermal_wait_seconds=thermal_wait_seconds,
        url=url,
        model=model,
        api_key=api_key or None,
        out=out,
        no_reset=no_reset,
        sample_interval_s=sample_interval,
        warmup_requests=warmup_requests,
        max_failed_caps=max_failed_caps,
        simulate=simulate,
        force=force,
        dry_run=dry_run,
        observe_only=observe_only,
        resume=resume,
        state_dir=state_dir,
        concurrency=parse_concurrency(concurrency),
        bench_runs=bench_runs,
        max_concurrency_probe=max_concurrency_probe,
        load_target=load_target,
        concurrency_stretch=concurrency_stretch,
        target_prefill_seconds=target_prefill_seconds,
        strategy=strategy.value,
        settle=settle.value,
        confirm=not no_confirm,
        axis=axis.value,
        sm_clocks=parse_clocks(sm_clocks, "--sm-clocks") if sm_clocks is not None else None,
        mem_clocks=parse_clocks(mem_clocks, "--mem-clocks") if mem_clocks is not None else None,
        hold_cap_w=cap,
        backend=backend.value,
        tariff_per_kwh=tariff,
    )
    if dry_run:
        _print_dry_run(options, sim)
        return
    run_sweep(options, sim, quiet=quiet, charts=not no_charts)


def _print_dry_run(options: SweepOptions, sim: SimOptions) -> None:
    from powersweep.cli.rigs import build_rig
    from powersweep.sweep.plan import dry_run

    if options.resume is not None:
        raise UsageError("--dry-run does not combine with --resume")
    rigs = functools.partial(build_rig, sim=sim)
    for line in dry_run(options, rigs, warn=warn).lines():
        typer.echo(line)


class _Progress:
    """The progress bar: opened once the caps are known, updated after each cap."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.bar: Any = None

    def on_plan(self, run_dir: Path, planned: list[float]) -> None:
        info(f"run directory: {run_dir}")
        info(f"caps: {len(planned)} from {max(planned):g} W down to {min(planned):g} W")
        if not self.quiet:
            self.bar = tqdm(total=len(planned), unit="cap", file=sys.stderr, dynamic_ncols=True)

    def on_points(self, run_dir: Path, planned: list[Any]) -> None:
        info(f"run directory: {run_dir}")
        info(f"clock points: {len(planned)}, from {planned[0].label()} down")
        if not self.quiet:
            self.bar = tqdm(total=len(planned), unit="point", file=sys.stderr, dynamic_ncols=True)

    def on_progress(self, p: Any) -> None:
        if self.bar is None:
            return
        # each phase reports its own count (an adaptive sweep plans more caps as it learns; the
        # rechecks and the confirm phase come after the planned points): the bar's total is
        # what is done plus what this phase still has, and only grows
        needed = self.bar.n + 1 + max(0, p.total - p.index)
        if needed > self.bar.total:
            self.bar.total = needed
        where = p.label or f"{p.cap_w:g} W"
        if p.status == "ok":
            self.bar.set_postfix_str(
                f"{where}: {p.tps:.1f} TPS, {p.power_w:.0f} W, {p.tps_per_w:.4f} TPS/W"
            )
        else:
            self.bar.set_postfix_str(f"{where}: {p.status}")
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def run_sweep(options: SweepOptions, sim: SimOptions, *, quiet: bool, charts: bool) -> None:
    """Run the sweep, print what was restored, write the report, and hand files to the user.

    Raises:
        PowersweepError: The sweep could not start, or failed.
        typer.Exit: Interrupted by a signal (exit 128 + signal).
    """
    from powersweep.cli.rigs import build_rig
    from powersweep.sweep.records.ownership import hand_over, invoking_user
    from powersweep.sweep.session import run_session
    from powersweep.sweep.signals import SweepInterrupted, raise_on_signals

    bar = _Progress(quiet)
    printed: list[bool] = []

    def on_restored(restored: Any) -> None:
        # Called while signals are ignored, right after the restore: a second Ctrl-C cannot
        # hide what was put back.
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
                _finish_report(result.run_dir, charts=charts)
            else:
                _failed_report(result.run_dir, outcome.error or "no point was measured")
    except SweepInterrupted as exc:
        info(
            f"{exc} while writing the report: the limits were already restored and the run is "
            f"kept; `powersweep analyze {result.run_dir}` writes the report again"
        )
        raise typer.Exit(exc.exit_code) from None
    finally:
        if is_root():
            # under sudo the run belongs to the user who typed sudo, not to root
            top = options.out if result.out_created and options.resume is None else result.run_dir
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
    info(f"done: {result.run_dir}")


def _print_restored(restored: Any) -> None:
    for r in restored:
        if r.get("limit_w") is not None:
            state = "restored" if r["ok"] else "NOT restored"
            info(f"GPU {r['gpu_index']}: power limit {state} to {r['limit_w']:g} W")
        if r.get("clocks"):
            info(f"GPU {r['gpu_index']}: {r['clocks']}")


def _failed_report(run_dir: Path, why: str) -> None:
    """The summary of a run with no usable point (what went wrong), or a warning."""
    from powersweep.report import build_failed_report

    try:
        info(f"summary: {build_failed_report(run_dir, why)}")
    except PowersweepError as exc:
        warn(str(exc))


def _finish_report(run_dir: Path, *, charts: bool) -> None:
    from powersweep.report import build_report
    from powersweep.sweep.signals import SweepInterrupted

    try:
        report = build_report(run_dir, charts=charts)
    except SweepInterrupted:
        raise
    except UsageError as exc:
        # no usable point: the user still gets the account of what went wrong
        warn(f"could not analyse the run: {exc}")
        _failed_report(run_dir, str(exc))
        return
    except PowersweepError as exc:
        warn(f"could not analyse the run: {exc}")
        return
    if report.analysis.get("kind") == "clocks":
        from powersweep.analysis.clock_analysis import point_label

        peak = report.analysis.get("peak")
        if peak:
            info(
                f"efficiency peak: {point_label(peak)}, {peak['tps_per_w']:.4f} TPS/W, "
                f"{peak['tps']:.1f} TPS, {peak['power_w']:.0f} W"
            )
        info(f"summary: {run_dir / 'summary.md'}")
        return
    spot = report.analysis.get("sweet_spot") or {}
    cap = spot.get("cap_w")
    if cap is not None:
        info(
            f"sweet spot: {cap:g} W, {spot.get('tps_per_w', math.nan):.4f} TPS/W, "
            f"{spot.get('tps', math.nan):.1f} TPS"
        )
    info(f"summary: {run_dir / 'summary.md'}")


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
