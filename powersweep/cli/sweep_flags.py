"""The flags of ``powersweep sweep``: one annotated alias per option, in its help panel, and
the parsers of the flags typer takes as text (``--concurrency``, ``--gpu``).

Each option has a short ``help`` (one line, two at most at 80 columns: ``--help``) and, where
there is more to say, its full explanation in ``doc`` (docs/options.md, made by
scripts/gen_options_doc.py).

The reasoning: docs/architecture.md, "powersweep.cli.sweep_flags".
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from powersweep.cli._common import backend_option, state_dir_option
from powersweep.cli.analyze import tariff_option
from powersweep.cli.help_layout import option
from powersweep.errors import UsageError
from powersweep.sim.sim_options import SimServerFlavour
from powersweep.sweep.options import (
    Axis,
    Backend,
    Cooling,
    LoadMode,
    SettleMode,
    Strategy,
)

# The help panels, by concern (powersweep.cli.help_layout.PANEL_ORDER orders them)
LOAD = "Load"
MEASUREMENT = "Measurement"
POINTS = "Points"
UNDERVOLT = "Undervolt (--axis undervolt)"
CARD = "Card"
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
CoolingOpt = Annotated[
    Cooling,
    option(
        help="How the card is cooled.",
        doc="How the card is cooled: labels the run (its summary and run.json); the thermal "
        "findings depend on it.",
        panel=CARD,
    ),
]

GpuOpt = Annotated[
    str | None,
    option(
        "--gpu",
        "--gpus",
        metavar="LIST",
        help="GPUs: 0,1 or all (default: the model's).",
        doc="GPU index or list (0 or 0,1), or all (default: the GPUs serving the model, found "
        "from the server's processes).",
        panel=CARD,
    ),
]

BackendOpt = Annotated[Backend, backend_option(CARD)]

LoadModeOpt = Annotated[
    LoadMode,
    option(
        help="Load at each point.",
        doc="The load run at each point: decode-single (one stream, the rate a chat user "
        "sees), decode-concurrent (many streams, a busy server's throughput) or prefill-heavy "
        "(long prompts, few tokens out).",
        panel=LOAD,
    ),
]

WarmupRequestsOpt = Annotated[
    int,
    option(
        metavar="N",
        help="Most warm-up requests per prompt.",
        doc="At most this many warm-up requests per prompt; the warm-up ends sooner once rate "
        "and draw are steady, and after 3 windows at most (0: none).",
        panel=LOAD,
    ),
]

ConcurrencyOpt = Annotated[
    str | None,
    option(
        metavar="N|auto",
        help="decode-concurrent: streams, or auto (probe).",
        doc="decode-concurrent: streams, or auto (probe; the default).",
        panel=LOAD,
    ),
]

BenchRunsOpt = Annotated[
    int,
    option(
        metavar="N",
        help="decode-concurrent: windows per direction per point (median).",
        panel=LOAD,
    ),
]

MaxConcurrencyProbeOpt = Annotated[
    int,
    option(metavar="N", help="decode-concurrent auto: highest N probed.", panel=LOAD),
]

LoadTargetOpt = Annotated[
    float | None,
    option(
        metavar="SHARE",
        help="decode-concurrent auto: stop probing at this share of the cap.",
        panel=LOAD,
    ),
]

ConcurrencyStretchOpt = Annotated[
    int,
    option(metavar="N", help="decode-concurrent auto: streams added to the pick.", panel=LOAD),
]

TargetPrefillSecondsOpt = Annotated[
    float | None,
    option(
        metavar="S",
        help="prefill-heavy: prefill time of each prompt.",
        doc="prefill-heavy: prefill time each prompt is sized for at the first point (default: "
        "a quarter of --target-cap-seconds; at most half).",
        panel=LOAD,
    ),
]

TargetCapSecondsOpt = Annotated[
    float,
    option(
        metavar="S",
        help="Most seconds each point measures.",
        doc="The most run seconds of each point's metric window (all its rounds together; a "
        "request may run on for a margin of at most 10% of a window, 1.5 s per point in all, "
        "then it is cut).",
        panel=MEASUREMENT,
    ),
]

MinCapSecondsOpt = Annotated[
    float,
    option(
        metavar="S",
        help="Seconds of a point's first window.",
        doc="Run seconds of each prompt's first window per point; the point measures on "
        "(its metric's prompt only) until its TPS/W is known to --precision, is clearly apart "
        "from the best point so far, or --target-cap-seconds is reached.",
        panel=MEASUREMENT,
    ),
]

PrecisionOpt = Annotated[
    float,
    option(
        metavar="PCT",
        help="Goal: TPS/W to ± this % (95%).",
        doc="Precision goal of each point: the 95% half-width of its TPS/W, in percent, from "
        "its own measurements (0.5: a neighbour 10 W away near the sweet spot is told apart).",
        panel=MEASUREMENT,
    ),
]

SettleOpt = Annotated[
    SettleMode,
    option(
        help="auto: measure once readings are stable; fixed: wait --settle-seconds.",
        doc="auto: measure once draw and clock are stable under load (at most "
        "--settle-seconds); fixed: always wait --settle-seconds.",
        panel=MEASUREMENT,
    ),
]

SettleSecondsOpt = Annotated[
    float,
    option(
        metavar="S",
        help="Longest wait to settle, seconds.",
        doc="Seconds to wait after a cap (or clock) change: at most this in auto, always this "
        "in fixed.",
        panel=MEASUREMENT,
    ),
]

ThermalWaitSecondsOpt = Annotated[
    float,
    option(
        metavar="S",
        help="Most seconds a point waits for a steady temperature (0: none).",
        doc="Most seconds each point waits, after settling, for the card's temperature to "
        "stop drifting (under 3 C/min; 0: no wait).",
        panel=MEASUREMENT,
    ),
]

SampleIntervalOpt = Annotated[
    float,
    option(
        metavar="S",
        help="Seconds between card readings.",
        doc="Seconds between two readings of the cards.",
        panel=MEASUREMENT,
    ),
]

AxisOpt = Annotated[
    Axis,
    option(
        help="What each point varies.",
        doc="What to sweep: the power limit, the SM clock lock, the memory clock lock, a "
        "grid of both (under one power limit), or the SM clock offset at one locked clock "
        "(undervolt: checked for stability, beside the --cap it starts from).",
        panel=POINTS,
    ),
]

CapsOpt = Annotated[
    str | None,
    option(
        metavar="W,W,...",
        help="Caps to measure, W (default: the envelope).",
        doc="Caps to measure, W per GPU, e.g. 260,280,300 (default: the card's envelope, "
        "from its maximum down in --step-size steps).",
        panel=POINTS,
    ),
]

StepSizeOpt = Annotated[
    float,
    option(
        metavar="W",
        help="Step between the default caps.",
        doc="Step between the default caps, W.",
        panel=POINTS,
    ),
]

StrategyOpt = Annotated[
    Strategy,
    option(
        help="dense: every cap; adaptive: a coarse pass, then refine.",
        doc="dense measures every cap; adaptive measures a coarse pass, then refines where the "
        "answer is.",
        panel=POINTS,
    ),
]

NoConfirmOpt = Annotated[
    bool,
    option(
        "--no-confirm",
        help="Skip re-measuring the best's ties at the end.",
        doc="Skip re-measuring, at the end, the points tied with the best within noise.",
        panel=POINTS,
    ),
]

SmClocksOpt = Annotated[
    str | None,
    option(
        metavar="MHZ,...",
        help="SM locks to measure (default: about 11).",
        doc="SM lock set-points, MHz, e.g. 900,1200 (default: about 11 supported clocks).",
        panel=POINTS,
    ),
]

MemClocksOpt = Annotated[
    str | None,
    option(
        metavar="MHZ,...",
        help="Memory locks to measure (default: all tiers).",
        doc="Memory lock set-points, MHz (default: every supported load tier).",
        panel=POINTS,
    ),
]

HoldCapOpt = Annotated[
    float | None,
    option(
        "--cap",
        metavar="W",
        help="Power limit held by a clock or undervolt run.",
        doc="Power limit held during a clock sweep or an undervolt search, W (default: the "
        "limit in force).",
        panel=POINTS,
    ),
]

SmClockMinOpt = Annotated[
    float | None,
    option(
        "--sm-clock-min",
        metavar="MHZ",
        help="Bottom of every SM lock (default: lowest).",
        doc="Bottom of every SM lock, MHz: a lock is MIN-to-the-clock so an idle card clocks "
        "down (default: the card's lowest SM clock, else 210).",
        panel=POINTS,
    ),
]

OffsetStepOpt = Annotated[
    float,
    option(
        "--offset-step",
        metavar="MHZ",
        help="Coarse step between SM offsets.",
        doc="Undervolt: coarse step between SM clock offsets, MHz (the edge it finds is then "
        "refined in 15 MHz steps). 30 by default: two of the 15 MHz bins the voltage/frequency "
        "curve of Ampere and later cards moves in, so every step moves it.",
        panel=UNDERVOLT,
    ),
]

OffsetMarginOpt = Annotated[
    float,
    option(
        "--offset-margin",
        metavar="MHZ",
        help="How far the answer stays below the last stable offset.",
        doc="Undervolt: MHz the answer stays below the last stable offset (on the 15 MHz grid).",
        panel=UNDERVOLT,
    ),
]

SoakSecondsOpt = Annotated[
    float,
    option(
        "--soak-seconds",
        metavar="S",
        help="Seconds the chosen offset runs under load before its last check.",
        doc="Undervolt: run seconds the chosen offset is held under the load before it is "
        "measured and checked once more, the card at its hottest (at most 600).",
        panel=UNDERVOLT,
    ),
]

MaxOffsetOpt = Annotated[
    float | None,
    option(
        "--max-offset",
        metavar="MHZ",
        help="Highest SM offset to try (default: driver's).",
        doc="Undervolt: the highest offset to try, MHz (default: the driver's maximum).",
        panel=UNDERVOLT,
    ),
]

MemOffsetStepOpt = Annotated[
    float,
    option(
        "--mem-offset-step",
        metavar="MHZ",
        help="Then step the memory clock offset by this (0: leave it).",
        doc="Undervolt: then step the memory clock offset by MHz at the answer's SM settings "
        "(NVML's unit, twice what Afterburner shows on GDDR6X/GDDR7) while TPS rises beyond "
        "noise; 0: leave the memory alone.",
        panel=UNDERVOLT,
    ),
]

MaxMemOffsetOpt = Annotated[
    float | None,
    option(
        "--max-mem-offset",
        metavar="MHZ",
        help="Highest memory offset (default: the driver's).",
        doc="Undervolt: the highest memory clock offset to try, MHz (default: the driver's).",
        panel=UNDERVOLT,
    ),
]

MemOffsetMarginOpt = Annotated[
    float | None,
    option(
        "--mem-offset-margin",
        metavar="MHZ",
        help="Memory answer's margin (default: one step).",
        doc="Undervolt: MHz the memory answer stays below the best memory offset (default: "
        "one --mem-offset-step).",
        panel=UNDERVOLT,
    ),
]

UrlOpt = Annotated[
    str | None,
    option(metavar="URL", help="Server URL (default: probe the local ports).", panel=SERVER),
]

ModelOpt = Annotated[
    str | None, option(metavar="ID", help="Model id (default: the server's).", panel=SERVER)
]

ApiKeyOpt = Annotated[
    str | None,
    option(
        metavar="KEY",
        envvar="OPENAI_API_KEY",
        show_envvar=True,
        help="Bearer token, never stored.",
        panel=SERVER,
    ),
]

DryRunOpt = Annotated[
    bool,
    option(
        "--dry-run",
        help="Print the plan and its time; change nothing.",
        doc="Print the plan (GPUs, envelope, points, time); change nothing.",
        panel=SAFETY,
    ),
]

ObserveOnlyOpt = Annotated[
    bool,
    option(
        "--observe-only",
        help="Measure at the settings in force; change none.",
        doc="Run the load at the settings in force; change nothing.",
        panel=SAFETY,
    ),
]

NoResetOpt = Annotated[
    bool,
    option(
        "--no-reset",
        help="Leave the last setting in force at the end.",
        doc="Leave the last setting in force instead of restoring.",
        panel=SAFETY,
    ),
]

MaxFailedCapsOpt = Annotated[
    int,
    option(
        metavar="N",
        help="Stop after N failures in a row.",
        doc="Stop after this many failed points in a row.",
        panel=SAFETY,
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

ResumeOpt = Annotated[
    Path | None,
    option(
        metavar="RUN_DIR",
        help="Continue an interrupted run where it stopped.",
        doc="Continue an interrupted run directory from its first unfinished point, with the "
        "options it recorded (a simulated run on the rig it recorded).",
        panel=OUTPUT,
    ),
]

OutOpt = Annotated[
    Path,
    option(
        metavar="DIR",
        help="Folder for the runs.",
        doc="Where run directories are made.",
        panel=OUTPUT,
    ),
]

TariffOpt = Annotated[float | None, tariff_option(OUTPUT)]

NoChartsOpt = Annotated[bool, option("--no-charts", help="Skip the charts.", panel=OUTPUT)]

QuietOpt = Annotated[bool, option("--quiet", "-q", help="No progress bar.", panel=OUTPUT)]

JsonOpt = Annotated[
    bool,
    option(
        "--json",
        help="Print the analysis as JSON, not the table.",
        doc="Print the run's analysis.json on stdout instead of the table of points, the answer "
        "and the paths (progress and logs stay on stderr).",
        panel=OUTPUT,
    ),
]

SimulateOpt = Annotated[
    str | None,
    option(
        metavar="PROFILE",
        help="Simulate this GPU (see --list-profiles).",
        doc="Simulate the GPU with a profile (see --list-profiles): a+b for two cards, "
        "replay:caps.csv replays a measured curve, rtx4090-air~0.03 one card of a fleet with "
        "±3% silicon and cooling spread; with --url, a real server and a simulated GPU.",
        panel=SIMULATION,
    ),
]

ListProfilesOpt = Annotated[
    bool,
    option("--list-profiles", help="List simulation profiles and exit.", panel=SIMULATION),
]

SimServerOpt = Annotated[
    SimServerFlavour,
    option(
        help="Simulated server's engine.",
        doc="Simulated server flavour, with its engine's quirks.",
        panel=SIMULATION,
    ),
]

TimeScaleOpt = Annotated[
    float | None,
    option(
        metavar="X",
        help="Real time X times faster (default: virtual).",
        doc="Run on scaled real time, this many times faster than the wall (default: virtual "
        "time, as fast as the CPU allows, the same figures on any machine).",
        panel=SIMULATION,
    ),
]

SimPaceOpt = Annotated[
    float | None,
    option(
        metavar="X",
        help="At most X run seconds per wall second.",
        doc="Virtual time passes at most this many run seconds per wall second (a watchable "
        "run; the figures are those of the unpaced run).",
        panel=SIMULATION,
    ),
]

SeedOpt = Annotated[
    int | None,
    option(
        metavar="N",
        help="Seed of every noise of the simulated rig.",
        doc="Seed of every noise source of the simulated rig (the same seed, the same run files).",
        panel=SIMULATION,
    ),
]

SimStateOpt = Annotated[
    Path | None,
    option(metavar="FILE", help="File where simulated settings persist.", panel=SIMULATION),
]

SimWorldOpt = Annotated[
    list[str] | None,
    option(
        "--sim-world",
        metavar="NAME[=PARAM]",
        help="Add a real-world noise (repeatable).",
        doc="Simulation: give the rig a noise of the real world, NAME[=PARAM], repeatable: "
        "bursty-draw[=DUTY] (0.7), sensor-lag[=STEP_W] (5), ar-jitter[=SD_PCT] (2), "
        "context-slowdown[=PCT_PER_1K_TOKENS] (0.6), hiccups[=PERIOD_S] (6), "
        "drift[=AMPLITUDE_PCT] (3), outlier-window[=FACTOR] (1.36). Off by default; see "
        "docs/world-noise.md.",
        panel=SIMULATION,
    ),
]

SimNodeOpt = Annotated[
    str | None,
    option(
        metavar="NAME",
        help="Node name seeding a fleet card's spread.",
        doc="Simulation: node name that seeds a fleet card's spread (PROFILE~0.03); "
        "default $POWERSWEEP_SIM_NODE or the host name.",
        panel=SIMULATION,
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
