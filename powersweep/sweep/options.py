"""Every option of a sweep and its choices, each declared once on its group's field with its
flag (:mod:`powersweep.flags`: default, help, bounds, parser); no I/O, nothing touched; validated
by :mod:`powersweep.sweep.options_check`.

The CLI's flags are made from these fields; ``run.json`` records the groups; ``--resume`` reads
them back. Choices are :class:`~enum.StrEnum` members, so a field compares equal to its string.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from powersweep.errors import UsageError
from powersweep.flags import (
    CARD,
    LOAD,
    MEASUREMENT,
    OUTPUT,
    POINTS,
    SAFETY,
    SERVER,
    SIMULATION,
    UNDERVOLT,
    flag,
    negated,
    read_from,
)
from powersweep.sweep.loads.arrivals import ArrivalProcess, LengthProfile
from powersweep.sweep.planning.caps import parse_caps
from powersweep.sweep.planning.clock_points import parse_clocks
from powersweep.sweep.sampling.windows import WindowPolicy
from powersweep.sweep.server.discovery import strip_credentials


class Cooling(StrEnum):
    """How the card is cooled (labels the run; thermal findings depend on it)."""

    AIR = "air"
    WATER = "water"
    AIO = "aio"
    UNSPECIFIED = "unspecified"


class LoadMode(StrEnum):
    """The load run at each cap (one module each under :mod:`powersweep.sweep.loads`)."""

    DECODE_SINGLE = "decode-single"
    DECODE_CONCURRENT = "decode-concurrent"
    PREFILL_HEAVY = "prefill-heavy"
    SERVING = "serving"


class Strategy(StrEnum):
    """Which caps are measured: every cap, or a coarse pass refined where the answer is."""

    DENSE = "dense"
    ADAPTIVE = "adaptive"


class Axis(StrEnum):
    """What a sweep varies: the power limit, or clock locks under one limit."""

    POWER = "power"
    SM_CLOCK = "sm-clock"
    MEM_CLOCK = "mem-clock"
    GRID = "grid"
    UNDERVOLT = "undervolt"


class SettleMode(StrEnum):
    """When a cap's measurement starts: once readings are stable, or after a fixed wait."""

    AUTO = "auto"
    FIXED = "fixed"


class Backend(StrEnum):
    """Which GPU library drives the cards: NVML (NVIDIA), amdsmi (AMD) or whichever is there."""

    AUTO = "auto"
    NVML = "nvml"
    AMDSMI = "amdsmi"


LOAD_MODES = tuple(m.value for m in LoadMode)
BACKENDS = tuple(b.value for b in Backend)
STRATEGIES = tuple(s.value for s in Strategy)
AXES = tuple(a.value for a in Axis)
# The most run seconds the load keeps the card busy between two measurements (and so the
# longest an undervolt soak can hold it under load).
KEEP_BUSY_MAX_S = 600.0
SETTLE_MODES = tuple(s.value for s in SettleMode)
COOLING = tuple(c.value for c in Cooling)
# Streams one client (one interpreter, one connection pool) can drive and still measure: beyond
# this, scheduling the streams costs more than the server's own time and Ctrl-C waits on them.
MAX_STREAMS = 256
# Default prefill time of a prefill-heavy prompt, as a share of the window; at most
# MAX_PREFILL_SHARE: slower caps take longer, and a prompt must still end inside the window.
PREFILL_SHARE_OF_WINDOW = 0.25
MAX_PREFILL_SHARE = 0.5
# serving: requests in flight at most, by default. Little's law: a server taking 2 requests/s
# whose answers (the conversation profile's p90, 424 tokens) stream at 20 tokens/s holds about
# 2 x 21 = 42 at once; 64 leaves it room, and a server that holds more is saturated anyway.
DEFAULT_MAX_IN_FLIGHT = 64
# Caps one sweep may plan: a few hundred already take hours.
MAX_PLANNED_CAPS = 300


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


def _gpus(text: str | None) -> tuple[int, ...] | None:
    return None if is_all(text) else parse_gpus(text)


def _caps(text: str | None) -> tuple[float, ...] | None:
    return tuple(parse_caps(text)) if text is not None else None


def _sm_clocks(text: str | None) -> tuple[float, ...] | None:
    return parse_clocks(text, "--sm-clocks") if text is not None else None


def _mem_clocks(text: str | None) -> tuple[float, ...] | None:
    return parse_clocks(text, "--mem-clocks") if text is not None else None


def _key(text: str | None) -> str | None:
    return text or None  # an empty $OPENAI_API_KEY is none


@dataclass(frozen=True)
class MeasureOptions:
    """How every point is measured, whatever the axis or load: how long it measures, how it
    settles, how long it waits for a steady temperature, how often the cards are read (the
    measurer takes it as it is; each field's meaning is its flag's help and doc).

    ``thermal_wait_max_s`` is the bound; the seconds a point actually waited are its record's
    ``thermal_wait_s`` (caps.csv's column).
    """

    windows: WindowPolicy = field(default_factory=WindowPolicy)
    settle_mode: SettleMode = flag(
        SettleMode.AUTO,
        "--settle",
        help="auto: measure once readings are stable; fixed: wait --settle-seconds.",
        doc="auto: measure once draw and clock are stable under load (at most "
        "--settle-seconds); fixed: always wait --settle-seconds.",
        panel=MEASUREMENT,
    )
    settle_s: float = flag(
        3.0,
        "--settle-seconds",
        metavar="S",
        help="Longest wait to settle, seconds.",
        doc="Seconds to wait after a cap (or clock) change: at most this in auto, always this "
        "in fixed.",
        panel=MEASUREMENT,
        bounds=(0.0, 600.0),
    )
    thermal_wait_max_s: float = flag(
        10.0,
        "--thermal-wait-seconds",
        metavar="S",
        help="Most seconds a point waits for a steady temperature (0: none).",
        doc="Most seconds each point waits, after settling, for the card's temperature to "
        "stop drifting (under 3 C/min; 0: no wait).",
        panel=MEASUREMENT,
        bounds=(0.0, 3600.0),
    )
    sample_interval_s: float = flag(
        0.5,
        "--sample-interval",
        metavar="S",
        help="Seconds between card readings.",
        doc="Seconds between two readings of the cards.",
        panel=MEASUREMENT,
        bounds=(0.01, 60.0),
    )

    def recorded(self) -> dict[str, Any]:
        """The group as ``run.json`` ``options`` has always held it (flat, by flag name)."""
        return {
            "target_cap_seconds": self.windows.max_s,
            "min_cap_seconds": self.windows.min_s,
            "precision_pct": self.windows.precision_pct,
            "settle_seconds": self.settle_s,
            "thermal_wait_seconds": self.thermal_wait_max_s,
            "sample_interval_s": self.sample_interval_s,
            "settle": str(self.settle_mode),
        }

    @classmethod
    def from_recorded(cls, data: Mapping[str, Any]) -> MeasureOptions:
        """The group a ``run.json`` recorded (keys it lacks keep their defaults)."""
        base, windows = cls(), WindowPolicy()
        return cls(
            settle_s=float(data.get("settle_seconds", base.settle_s)),
            settle_mode=SettleMode(data.get("settle", base.settle_mode)),
            thermal_wait_max_s=float(data.get("thermal_wait_seconds", base.thermal_wait_max_s)),
            sample_interval_s=float(data.get("sample_interval_s", base.sample_interval_s)),
            windows=WindowPolicy(
                min_s=float(data.get("min_cap_seconds", windows.min_s)),
                max_s=float(data.get("target_cap_seconds", windows.max_s)),
                precision_pct=float(data.get("precision_pct", windows.precision_pct)),
            ),
        )


@dataclass(frozen=True)
class LoadOptions:
    """The load each point runs (each field's meaning is its flag's help and doc;
    ``target_prefill_s`` None: :attr:`SweepOptions.prefill_seconds`)."""

    mode: LoadMode = flag(
        LoadMode.DECODE_SINGLE,
        "--load-mode",
        help="Load at each point.",
        doc="The load run at each point: decode-single (one stream, the rate a chat user "
        "sees), decode-concurrent (many streams, a busy server's throughput), prefill-heavy "
        "(long prompts, few tokens out) or serving (requests arriving at --request-rate).",
        panel=LOAD,
    )
    warmup_requests: int = flag(
        3,
        "--warmup-requests",
        metavar="N",
        help="Most warm-up requests per prompt.",
        doc="At most this many warm-up requests per prompt; the warm-up ends sooner once rate "
        "and draw are steady, and after 3 windows at most (0: none).",
        panel=LOAD,
        bounds=(0, 100),
    )
    concurrency: int | None = flag(
        None,
        "--concurrency",
        metavar="N|auto",
        help="decode-concurrent: streams, or auto (probe).",
        doc="decode-concurrent: streams, or auto (probe; the default).",
        panel=LOAD,
        takes=str | None,
        parse=parse_concurrency,
    )
    bench_runs: int = flag(
        1,
        "--bench-runs",
        metavar="N",
        help="decode-concurrent: windows per direction per point (median).",
        panel=LOAD,
        bounds=(1, 50),
    )
    max_concurrency_probe: int = flag(
        16,
        "--max-concurrency-probe",
        metavar="N",
        help="decode-concurrent auto: highest N probed.",
        panel=LOAD,
        bounds=(1, MAX_STREAMS),
    )
    load_target: float | None = flag(
        None,
        "--load-target",
        metavar="SHARE",
        help="decode-concurrent auto: stop probing at this share of the cap.",
        panel=LOAD,
    )
    concurrency_stretch: int = flag(
        0,
        "--concurrency-stretch",
        metavar="N",
        help="decode-concurrent auto: streams added to the pick.",
        panel=LOAD,
        bounds=(0, MAX_STREAMS),
    )
    # a prompt whose prefill takes under 0.1 s is a handful of tokens: no prefill figure
    target_prefill_s: float | None = flag(
        None,
        "--target-prefill-seconds",
        metavar="S",
        help="prefill-heavy: prefill time of each prompt.",
        doc="prefill-heavy: prefill time each prompt is sized for at the first point (default: "
        "a quarter of --target-cap-seconds; at most half).",
        panel=LOAD,
        bounds=(0.1, 600.0),
    )

    request_rate_rps: float = flag(
        1.0,
        "--request-rate",
        metavar="R",
        help="serving: requests per second offered.",
        doc="serving: mean requests per second the open-loop arrivals offer at every point.",
        panel=LOAD,
        bounds=(0.001, 1000.0),
    )
    arrivals: ArrivalProcess = flag(
        ArrivalProcess.POISSON,
        "--arrivals",
        help="serving: gaps between requests.",
        doc="serving: poisson (exponential gaps), constant (1/R apart) or gamma (shape "
        "--burstiness, as vLLM bench serve).",
        panel=LOAD,
    )
    burstiness: float = flag(
        1.0,
        "--burstiness",
        metavar="B",
        help="serving gamma: shape of the gaps (1: Poisson, <1 burstier).",
        doc="serving with --arrivals gamma: the gaps are Gamma(shape=B, scale=1/(R*B)); 1 is "
        "Poisson, under 1 burstier, over 1 more regular.",
        panel=LOAD,
        bounds=(0.01, 100.0),
    )
    lengths: LengthProfile = flag(
        LengthProfile.CONVERSATION,
        "--lengths",
        help="serving: prompt and answer lengths shaped like a trace.",
        doc="serving: prompt and answer lengths drawn from the Azure LLM inference trace "
        "2023's conversation or code requests (docs/serving.md).",
        panel=LOAD,
    )
    prompts_file: Path | None = flag(
        None,
        "--prompts-file",
        metavar="JSONL",
        help="serving: prompts to send (JSONL, ShareGPT-like).",
        doc='serving: a JSONL file of prompts, one {"prompt": ..., "output_tokens": N} or '
        "ShareGPT record a line; answers it does not size are drawn from --lengths.",
        panel=LOAD,
    )
    max_in_flight: int = flag(
        DEFAULT_MAX_IN_FLIGHT,
        "--max-in-flight",
        metavar="N",
        help="serving: most requests in flight; more are counted refused.",
        doc="serving: the most requests in flight at once; an arrival over it is counted "
        "refused, never queued (default 64: docs/serving.md).",
        panel=LOAD,
        bounds=(1, MAX_STREAMS),
    )
    max_ttft_ms: float | None = flag(
        None,
        "--max-ttft-ms",
        metavar="MS",
        help="serving: time-to-first-token target.",
        doc="serving: the time-to-first-token target, ms: the share over it and goodput.",
        panel=LOAD,
        bounds=(0.001, 3.6e6),
    )
    max_itl_ms: float | None = flag(
        None,
        "--max-itl-ms",
        metavar="MS",
        help="serving: inter-token latency target.",
        doc="serving: the target of a request's mean inter-token latency, ms: the share over "
        "it and goodput.",
        panel=LOAD,
        bounds=(0.001, 3.6e6),
    )

    # run.json's flat key of each field that is not recorded under its own name
    RECORDED_AS: ClassVar[dict[str, str]] = {
        "mode": "load_mode",
        "target_prefill_s": "target_prefill_seconds",
    }
    # the serving load's fields: recorded only by a serving run (the other modes' run.json
    # stays as it was)
    SERVING_FIELDS: ClassVar[tuple[str, ...]] = (
        "request_rate_rps",
        "arrivals",
        "burstiness",
        "lengths",
        "prompts_file",
        "max_in_flight",
        "max_ttft_ms",
        "max_itl_ms",
    )

    def recorded(self) -> dict[str, Any]:
        """The group as ``run.json`` ``options`` has always held it (flat, by flag name)."""
        serving = self.mode == LoadMode.SERVING
        out = {
            self.RECORDED_AS.get(k, k): v
            for k, v in asdict(self).items()
            if serving or k not in self.SERVING_FIELDS
        }
        if serving and self.prompts_file is not None:
            out["prompts_file"] = str(self.prompts_file)
        return out

    @classmethod
    def from_recorded(cls, data: Mapping[str, Any]) -> LoadOptions:
        """The group a ``run.json`` recorded (keys it lacks keep their defaults)."""
        kwargs = {
            f.name: data[cls.RECORDED_AS.get(f.name, f.name)]
            for f in fields(cls)
            if cls.RECORDED_AS.get(f.name, f.name) in data
        }
        if "mode" in kwargs:
            kwargs["mode"] = LoadMode(kwargs["mode"])
        if "arrivals" in kwargs:
            kwargs["arrivals"] = ArrivalProcess(kwargs["arrivals"])
        if "lengths" in kwargs:
            kwargs["lengths"] = LengthProfile(kwargs["lengths"])
        if kwargs.get("prompts_file") is not None:
            kwargs["prompts_file"] = Path(kwargs["prompts_file"])
        return cls(**kwargs)


@dataclass(frozen=True)
class PointOptions:
    """What a sweep varies and where (each field's meaning is its flag's help and doc).

    ``sm_clock_min_mhz`` None is each card's idle floor (the lowest SM clock it lists, else
    210 MHz); a run recorded without it used the floor.
    """

    axis: Axis = flag(
        Axis.POWER,
        "--axis",
        help="What each point varies.",
        doc="What to sweep: the power limit, the SM clock lock, the memory clock lock, a "
        "grid of both (under one power limit), or the SM clock offset at one locked clock "
        "(undervolt: checked for stability, beside the --cap it starts from).",
        panel=POINTS,
    )
    caps: tuple[float, ...] | None = flag(
        None,
        "--caps",
        metavar="W,W,...",
        help="Caps to measure, W (default: the envelope).",
        doc="Caps to measure, W per GPU, e.g. 260,280,300 (default: the card's envelope, "
        "from its maximum down in --step-size steps).",
        panel=POINTS,
        takes=str | None,
        parse=_caps,
    )
    step_size_w: float = flag(
        10.0,
        "--step-size",
        metavar="W",
        help="Step between the default caps.",
        doc="Step between the default caps, W.",
        panel=POINTS,
        bounds=(0.1, 1000.0),
    )
    sm_clocks: tuple[float, ...] | None = flag(
        None,
        "--sm-clocks",
        metavar="MHZ,...",
        help="SM locks to measure (default: about 11).",
        doc="SM lock set-points, MHz, e.g. 900,1200 (default: about 11 supported clocks).",
        panel=POINTS,
        takes=str | None,
        parse=_sm_clocks,
    )
    mem_clocks: tuple[float, ...] | None = flag(
        None,
        "--mem-clocks",
        metavar="MHZ,...",
        help="Memory locks to measure (default: all tiers).",
        doc="Memory lock set-points, MHz (default: every supported load tier).",
        panel=POINTS,
        takes=str | None,
        parse=_mem_clocks,
    )
    hold_cap_w: float | None = flag(
        None,
        "--cap",
        metavar="W",
        help="Power limit held by a clock or undervolt run.",
        doc="Power limit held during a clock sweep or an undervolt search, W (default: the "
        "limit in force).",
        panel=POINTS,
    )
    sm_clock_min_mhz: float | None = flag(
        None,
        "--sm-clock-min",
        metavar="MHZ",
        help="Bottom of every SM lock (default: lowest).",
        doc="Bottom of every SM lock, MHz: a lock is MIN-to-the-clock so an idle card clocks "
        "down (default: the card's lowest SM clock, else 210).",
        panel=POINTS,
    )
    strategy: Strategy = flag(
        Strategy.DENSE,
        "--strategy",
        help="dense: every cap; adaptive: a coarse pass, then refine.",
        doc="dense measures every cap; adaptive measures a coarse pass, then refines where the "
        "answer is.",
        panel=POINTS,
    )
    confirm: bool = flag(
        True,
        "--no-confirm",
        help="Skip re-measuring the best's ties at the end.",
        doc="Skip re-measuring, at the end, the points tied with the best within noise.",
        panel=POINTS,
        takes=bool,
        given_default=False,
        parse=negated,
    )

    @property
    def clock_axis(self) -> bool:
        """True when the sweep locks clocks instead of stepping the power limit."""
        return self.axis != Axis.POWER

    @classmethod
    def from_recorded(cls, data: Mapping[str, Any]) -> PointOptions:
        """The group a ``run.json`` recorded (keys it lacks keep their defaults)."""
        kwargs = _recorded_fields(cls, data)
        for key in ("caps", "sm_clocks", "mem_clocks"):
            if kwargs.get(key) is not None:
                kwargs[key] = tuple(kwargs[key])
        for key, kind in (("axis", Axis), ("strategy", Strategy)):
            if key in kwargs:
                kwargs[key] = kind(kwargs[key])
        return cls(**kwargs)


@dataclass(frozen=True)
class CardOptions:
    """Which cards a sweep measures, through which library (``all_gpus``: ``--gpu all``)."""

    gpus: tuple[int, ...] | None = flag(
        None,
        "--gpu",
        "--gpus",
        metavar="LIST",
        help="GPUs: 0,1 or all (default: the model's).",
        doc="GPU index or list (0 or 0,1), or all (default: the GPUs serving the model, found "
        "from the server's processes).",
        panel=CARD,
        takes=str | None,
        parse=_gpus,
    )
    all_gpus: bool = read_from("gpus", is_all, False)
    backend: Backend = flag(
        Backend.AUTO,
        "--backend",
        help="GPU library: auto, nvml or amdsmi (AMD: pip install 'powersweep[amd]').",
        doc="GPU library: auto (the NVIDIA and AMD cards there are), nvml (NVIDIA) or amdsmi "
        "(AMD; pip install 'powersweep[amd]', and ROCm's amd-smi library).",
        panel=CARD,
        case_sensitive=False,
    )

    @classmethod
    def from_recorded(cls, data: Mapping[str, Any]) -> CardOptions:
        """The group a ``run.json`` recorded (keys it lacks keep their defaults)."""
        kwargs = _recorded_fields(cls, data)
        if kwargs.get("gpus") is not None:
            kwargs["gpus"] = tuple(kwargs["gpus"])
        if "backend" in kwargs:
            kwargs["backend"] = Backend(kwargs["backend"])
        return cls(**kwargs)


def _recorded_fields(cls: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a group recorded under their own names."""
    return {f.name: data[f.name] for f in fields(cls) if f.name in data}


@dataclass(frozen=True)
class ServerOptions:
    """The server the load runs against (``api_key`` is never recorded)."""

    url: str | None = flag(
        None,
        "--url",
        metavar="URL",
        help="Server URL (default: probe the local ports).",
        panel=SERVER,
    )
    model: str | None = flag(
        None, "--model", metavar="ID", help="Model id (default: the server's).", panel=SERVER
    )
    api_key: str | None = flag(
        None,
        "--api-key",
        metavar="KEY",
        envvar="OPENAI_API_KEY",
        help="Bearer token, never stored.",
        panel=SERVER,
        parse=_key,
    )

    def recorded(self) -> dict[str, Any]:
        """The group as ``run.json`` holds it: no secret, the URL without credentials."""
        return {
            "url": strip_credentials(self.url) if self.url else None,
            "model": self.model,
            "api_key_given": self.api_key is not None,
        }

    @classmethod
    def from_recorded(cls, data: Mapping[str, Any]) -> ServerOptions:
        """The group a ``run.json`` recorded (never a key: the one given now is used)."""
        return cls(url=data.get("url"), model=data.get("model"))


@dataclass(frozen=True)
class SafetyOptions:
    """What a sweep may change, and where its restore journal lives (``state_dir`` None: the
    default for the user)."""

    dry_run: bool = flag(
        False,
        "--dry-run",
        help="Print the plan and its time; change nothing.",
        doc="Print the plan (GPUs, envelope, points, time); change nothing.",
        panel=SAFETY,
    )
    observe_only: bool = flag(
        False,
        "--observe-only",
        help="Measure at the settings in force; change none.",
        doc="Run the load at the settings in force; change nothing.",
        panel=SAFETY,
    )
    no_reset: bool = flag(
        False,
        "--no-reset",
        help="Leave the last setting in force at the end.",
        doc="Leave the last setting in force instead of restoring.",
        panel=SAFETY,
    )
    force: bool = flag(
        False,
        "--force",
        hidden=True,
        help="Accepted for old scripts: a killed sweep's journal is always put back first, and a "
        "running sweep's card is never taken.",
    )
    state_dir: Path | None = flag(
        None,
        "--state-dir",
        metavar="DIR",
        envvar="POWERSWEEP_STATE_DIR",
        help="Restore journal (root: /var/lib/powersweep).",
        doc="Where the restore journal lives: what a sweep or `apply` changed on the cards, put "
        "back by `powersweep restore` or the next run after a kill. Default "
        "/var/lib/powersweep as root; the directory must be private (0700, owned by this user "
        "or root).",
        panel=SAFETY,
    )
    max_failed_caps: int = flag(
        3,
        "--max-failed-caps",
        metavar="N",
        help="Stop after N failures in a row.",
        doc="Stop after this many failed points in a row.",
        panel=SAFETY,
        bounds=(1, 1000),
    )

    @property
    def changes_limits(self) -> bool:
        """True when this sweep sets power limits (not a dry run, not observe-only)."""
        return not (self.dry_run or self.observe_only)

    @classmethod
    def from_recorded(cls, data: Mapping[str, Any]) -> SafetyOptions:
        """The group a ``run.json`` recorded (keys it lacks keep their defaults)."""
        kwargs = _recorded_fields(cls, data)
        if "state_dir" in kwargs:
            kwargs["state_dir"] = Path(kwargs["state_dir"]) if kwargs["state_dir"] else None
        return cls(**kwargs)


@dataclass(frozen=True)
class OutputOptions:
    """Where a run goes and how it is labelled (``resume`` None: a new run; ``tariff_per_kwh``
    None: energy only)."""

    out: Path = flag(
        Path("powersweep-runs"),
        "--out",
        metavar="DIR",
        help="Folder for the runs.",
        doc="Where run directories are made.",
        panel=OUTPUT,
    )
    resume: Path | None = flag(
        None,
        "--resume",
        metavar="RUN_DIR",
        help="Continue an interrupted run where it stopped.",
        doc="Continue an interrupted run directory from its first unfinished point, with the "
        "options it recorded (a simulated run on the rig it recorded).",
        panel=OUTPUT,
    )
    cooling: Cooling = flag(
        Cooling.UNSPECIFIED,
        "--cooling",
        help="How the card is cooled.",
        doc="How the card is cooled: labels the run (its summary and run.json); the thermal "
        "findings depend on it.",
        panel=CARD,
    )
    tariff_per_kwh: float | None = flag(
        None,
        "--tariff",
        metavar="PRICE",
        help="Price of a kWh: adds cost per 1M tokens.",
        doc="Price of a kWh: adds cost per 1M tokens and what the recommendation saves "
        "against the default limit, per 1M tokens and per year.",
        panel=OUTPUT,
    )

    @classmethod
    def from_recorded(cls, data: Mapping[str, Any]) -> OutputOptions:
        """The group a ``run.json`` recorded (keys it lacks keep their defaults)."""
        kwargs = _recorded_fields(cls, data)
        if kwargs.get("out"):
            kwargs["out"] = Path(kwargs["out"])
        else:
            kwargs.pop("out", None)
        if "resume" in kwargs:
            kwargs["resume"] = Path(kwargs["resume"]) if kwargs["resume"] else None
        if "cooling" in kwargs:
            kwargs["cooling"] = Cooling(kwargs["cooling"])
        return cls(**kwargs)


@dataclass(frozen=True)
class UndervoltOptions:
    """How the undervolt search steps the SM clock offset (None: the driver's maximum; a
    memory margin of None: one step)."""

    # 30 MHz: two of the 15 MHz bins the voltage/frequency curve of Ampere and later cards
    # moves in, so every step moves it; the edge it finds is refined in single bins
    offset_step_mhz: float = flag(
        30.0,
        "--offset-step",
        metavar="MHZ",
        help="Coarse step between SM offsets.",
        doc="Undervolt: coarse step between SM clock offsets, MHz (the edge it finds is then "
        "refined in 15 MHz steps). 30 by default: two of the 15 MHz bins the voltage/frequency "
        "curve of Ampere and later cards moves in, so every step moves it.",
        panel=UNDERVOLT,
    )
    # 30 MHz: two bins
    margin_mhz: float = flag(
        30.0,
        "--offset-margin",
        metavar="MHZ",
        help="How far the answer stays below the last stable offset.",
        doc="Undervolt: MHz the answer stays below the last stable offset (on the 15 MHz grid).",
        panel=UNDERVOLT,
    )
    # 300 s (issue 45: 120 was shorter than the few minutes peers' stability runs hold)
    soak_s: float = flag(
        300.0,
        "--soak-seconds",
        metavar="S",
        help="Seconds the chosen offset runs under load before its last check.",
        doc="Undervolt: run seconds the chosen offset is held under the load before it is "
        "measured and checked once more, the card at its hottest (at most 600).",
        panel=UNDERVOLT,
    )
    max_offset_mhz: float | None = flag(
        None,
        "--max-offset",
        metavar="MHZ",
        help="Highest SM offset to try (default: driver's).",
        doc="Undervolt: the highest offset to try, MHz (default: the driver's maximum).",
        panel=UNDERVOLT,
    )
    mem_offset_step_mhz: float = flag(
        0.0,
        "--mem-offset-step",
        metavar="MHZ",
        help="Then step the memory clock offset by this (0: leave it).",
        doc="Undervolt: then step the memory clock offset by MHz at the answer's SM settings "
        "(NVML's unit, twice what Afterburner shows on GDDR6X/GDDR7) while TPS rises beyond "
        "noise; 0: leave the memory alone.",
        panel=UNDERVOLT,
    )
    max_mem_offset_mhz: float | None = flag(
        None,
        "--max-mem-offset",
        metavar="MHZ",
        help="Highest memory offset (default: the driver's).",
        doc="Undervolt: the highest memory clock offset to try, MHz (default: the driver's).",
        panel=UNDERVOLT,
    )
    mem_margin_mhz: float | None = flag(
        None,
        "--mem-offset-margin",
        metavar="MHZ",
        help="Memory answer's margin (default: one step).",
        doc="Undervolt: MHz the memory answer stays below the best memory offset (default: "
        "one --mem-offset-step).",
        panel=UNDERVOLT,
    )

    @classmethod
    def from_recorded(cls, data: Mapping[str, Any]) -> UndervoltOptions:
        """The group a ``run.json`` recorded (keys it lacks keep their defaults)."""
        return cls(**_recorded_fields(cls, data))


@dataclass(frozen=True)
class SweepOptions:
    """Every option of a sweep, by concern (what ``run.json`` records under ``options``).

    Each group is built by the CLI and taken as it is by what uses it; ``simulate`` names the
    simulated profile (the sweep skips the root check for it); how the simulated rig behaves is
    :class:`powersweep.sim.sim_options.SimOptions`, which only the composition root reads.
    """

    # in the order their flags come in each --help panel (--cooling, an output field, first
    # in the Card panel)
    load: LoadOptions = field(default_factory=LoadOptions)
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    points: PointOptions = field(default_factory=PointOptions)
    undervolt: UndervoltOptions = field(default_factory=UndervoltOptions)
    output: OutputOptions = field(default_factory=OutputOptions)
    cards: CardOptions = field(default_factory=CardOptions)
    server: ServerOptions = field(default_factory=ServerOptions)
    safety: SafetyOptions = field(default_factory=SafetyOptions)
    simulate: str | None = flag(
        None,
        "--simulate",
        metavar="PROFILE",
        help="Simulate this GPU (see --list-profiles).",
        doc="Simulate the GPU with a profile (see --list-profiles): a+b for two cards, "
        "replay:caps.csv replays a measured curve, rtx4090-air~0.03 one card of a fleet with "
        "±3% silicon and cooling spread; with --url, a real server and a simulated GPU.",
        panel=SIMULATION,
    )

    @property
    def prefill_seconds(self) -> float:
        """Prefill time each prefill-heavy prompt is sized for: ``--target-prefill-seconds``,
        else a quarter of the window (a few prompts per point, so each is judged by its peers)."""
        if self.load.target_prefill_s is not None:
            return self.load.target_prefill_s
        return PREFILL_SHARE_OF_WINDOW * self.measure.windows.max_s

    def recorded(self) -> dict[str, Any]:
        """The options as stored in ``run.json``: flat, by flag name, as every run has held
        them (no secrets, the URL without credentials, paths as text)."""
        data: dict[str, Any] = {"simulate": self.simulate}
        data.update(self.load.recorded())
        data.update(self.measure.recorded())
        data.update(asdict(self.points))
        data.update(asdict(self.cards))
        data.update(self.server.recorded())
        data.update(asdict(self.safety))
        data.update(asdict(self.output))
        data.update(asdict(self.undervolt))
        for key in ("out", "resume", "state_dir"):
            data[key] = str(data[key]) if data[key] is not None else None
        return data

    @classmethod
    def from_recorded(cls, recorded: Mapping[str, Any]) -> SweepOptions:
        """The options a ``run.json`` recorded (:meth:`recorded`; keys this version does not
        know are left out, keys it lacks keep their defaults).

        Raises:
            TypeError: A recorded value this version cannot take.
        """
        try:
            return cls(
                load=LoadOptions.from_recorded(recorded),
                measure=MeasureOptions.from_recorded(recorded),
                points=PointOptions.from_recorded(recorded),
                cards=CardOptions.from_recorded(recorded),
                server=ServerOptions.from_recorded(recorded),
                safety=SafetyOptions.from_recorded(recorded),
                output=OutputOptions.from_recorded(recorded),
                undervolt=UndervoltOptions.from_recorded(recorded),
                simulate=recorded.get("simulate"),
            )
        except ValueError as exc:
            raise TypeError(str(exc)) from None
