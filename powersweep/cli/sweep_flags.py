"""The flags of ``powersweep sweep``: one annotated alias per option, in its help panel, and
the parsers of the flags typer takes as text (``--concurrency``, ``--gpu``).

Choices are enums, so ``--help`` and shell completion list them; :mod:`powersweep.cli.sweep`
builds :class:`~powersweep.sweep.options.SweepOptions` from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from powersweep.cli._common import state_dir_option
from powersweep.errors import UsageError
from powersweep.sim.sim_options import SimServerFlavour
from powersweep.sweep.options import (
    Axis,
    Cooling,
    LoadMode,
    SettleMode,
    Strategy,
)

LOAD = "Load"
CAPS = "Caps"
CLOCKS = "Clock locks"
UNDERVOLT = "Undervolt (--axis undervolt)"
SERVER = "Server"
SAFETY = "Safety"
OUTPUT = "Output"
SIMULATION = "Simulation"


def parse_concurrency(text: str | None) -> int | None:
    """``--concurrency``: a number of streams, or auto (None).

    Raises:
        UsageError: Anything else.
    """
    if text is None or text.strip().lower() == "auto":
        return None
    # ASCII digits only: str.isdigit() also takes superscripts, which int() refuses
    if not (text.strip().isascii() and text.strip().isdigit()) or int(text) < 1:
        raise UsageError(f"--concurrency takes a number of streams or auto, not {text!r}")
    return int(text)


def is_all(text: str | None) -> bool:
    """``--gpu all``."""
    return text is not None and text.strip().lower() == "all"


def parse_gpus(text: str | None, flag: str = "--gpu") -> tuple[int, ...] | None:
    """``--gpu`` (or ``flag``, which takes no ``all``): GPU indices like 0 or 0,1 (None: not
    given).

    Raises:
        UsageError: Anything else, naming ``flag``.
    """
    if text is None:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()):
            also = " (or all)" if flag == "--gpu" else ""
            raise UsageError(f"{flag} takes GPU indices like 0 or 0,1{also}, not {text!r}")
        out.append(int(part))
    if not out:
        raise UsageError(f"{flag} is empty")
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

JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the analysis as JSON on stdout, not the table.",
        rich_help_panel=OUTPUT,
    ),
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

SimWorldOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--sim-world",
        help="Simulation: give the rig a noise of the real world, NAME[=PARAM], repeatable: "
        "bursty-draw[=DUTY] (0.7), sensor-lag[=STEP_W] (5), ar-jitter[=SD_PCT] (2), "
        "context-slowdown[=PCT_PER_1K_TOKENS] (0.6), hiccups[=PERIOD_S] (6), "
        "drift[=AMPLITUDE_PCT] (3), outlier-window[=FACTOR] (1.36). Off by default.",
        rich_help_panel=SIMULATION,
    ),
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
        help="What to sweep: the power limit, the SM clock lock, the memory clock lock, a "
        "grid of both (under one power limit), or the SM clock offset at one locked clock "
        "(undervolt: checked for stability, beside the --cap it starts from).",
        rich_help_panel=CLOCKS,
    ),
]

OffsetStepOpt = Annotated[
    float,
    typer.Option(
        "--offset-step",
        help="Undervolt: coarse step between SM clock offsets, MHz (the edge it finds is then "
        "refined in 15 MHz steps).",
        rich_help_panel=UNDERVOLT,
    ),
]

OffsetMarginOpt = Annotated[
    float,
    typer.Option(
        "--offset-margin",
        help="Undervolt: MHz the answer stays below the last stable offset (on the 15 MHz grid).",
        rich_help_panel=UNDERVOLT,
    ),
]

SoakSecondsOpt = Annotated[
    float,
    typer.Option(
        "--soak-seconds",
        help="Undervolt: seconds the chosen offset runs under the load before its last check.",
        rich_help_panel=UNDERVOLT,
    ),
]

MemOffsetStepOpt = Annotated[
    float,
    typer.Option(
        "--mem-offset-step",
        help="Undervolt: then step the memory clock offset by MHz at the answer's SM settings "
        "(NVML's unit, twice what Afterburner shows on GDDR6X/GDDR7) while TPS rises beyond "
        "noise; 0: leave the memory alone.",
        rich_help_panel=UNDERVOLT,
    ),
]

MaxMemOffsetOpt = Annotated[
    float | None,
    typer.Option(
        "--max-mem-offset",
        help="Undervolt: the highest memory clock offset to try, MHz (default: the driver's).",
        rich_help_panel=UNDERVOLT,
    ),
]

MemOffsetMarginOpt = Annotated[
    float | None,
    typer.Option(
        "--mem-offset-margin",
        help="Undervolt: MHz the memory answer stays below the best memory offset (default: "
        "one --mem-offset-step).",
        rich_help_panel=UNDERVOLT,
    ),
]

MaxOffsetOpt = Annotated[
    float | None,
    typer.Option(
        "--max-offset",
        help="Undervolt: the highest offset to try, MHz (default: the driver's maximum).",
        rich_help_panel=UNDERVOLT,
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

SmClockMinOpt = Annotated[
    float | None,
    typer.Option(
        "--sm-clock-min",
        metavar="MHZ",
        help="Bottom of every SM lock, MHz: a lock is MIN-to-the-clock so an idle card clocks "
        "down (default: the card's lowest SM clock, else 210).",
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

SimVfResetBeyondOpt = Annotated[
    float,
    typer.Option(
        "--sim-vf-reset-beyond-mhz",
        hidden=True,
        help="Simulation: a card under load resets when its SM clock offset is more than MHz "
        "past its stable margin (0: at any instability).",
    ),
]
