"""Every option of a sweep and its choices (no I/O, nothing touched; validated by
:mod:`powersweep.sweep.options_check`).

The CLI turns flags into :class:`SweepOptions`; ``run.json`` records them; ``--resume`` reads
them back. Choices are :class:`~enum.StrEnum` members, so a field compares equal to its string.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from powersweep.sweep.sampling.thermal import DEFAULT_THERMAL_WAIT_S
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
# Caps one sweep may plan: a few hundred already take hours.
MAX_PLANNED_CAPS = 300


@dataclass(frozen=True)
class MeasureOptions:
    """How every point is measured, whatever the axis or load: how it settles, how long it
    waits for a steady temperature, how often the cards are read and how long it measures.

    The CLI builds it from ``--settle``, ``--settle-seconds``, ``--thermal-wait-seconds``,
    ``--sample-interval``, ``--min-cap-seconds``, ``--target-cap-seconds`` and ``--precision``;
    the measurer takes it as it is.

    Attributes:
        settle_s: The most run seconds a point may take to settle (in ``auto``; ``fixed``
            always waits it).
        settle_mode: ``auto`` measures once draw and clock are stable under load.
        thermal_wait_s: The most run seconds a point waits, after settling, for its
            temperature to stop drifting (0: no wait).
        sample_interval_s: Run seconds between two readings of the cards.
        windows: How long each point measures (its first round, its maximum, its precision
            goal).
    """

    settle_s: float = 3.0
    settle_mode: SettleMode = SettleMode.AUTO
    thermal_wait_s: float = DEFAULT_THERMAL_WAIT_S
    sample_interval_s: float = 0.5
    windows: WindowPolicy = field(default_factory=WindowPolicy)

    def recorded(self) -> dict[str, Any]:
        """The group as ``run.json`` ``options`` has always held it (flat, by flag name)."""
        return {
            "target_cap_seconds": self.windows.max_s,
            "min_cap_seconds": self.windows.min_s,
            "precision_pct": self.windows.precision_pct,
            "settle_seconds": self.settle_s,
            "thermal_wait_seconds": self.thermal_wait_s,
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
            thermal_wait_s=float(data.get("thermal_wait_seconds", base.thermal_wait_s)),
            sample_interval_s=float(data.get("sample_interval_s", base.sample_interval_s)),
            windows=WindowPolicy(
                min_s=float(data.get("min_cap_seconds", windows.min_s)),
                max_s=float(data.get("target_cap_seconds", windows.max_s)),
                precision_pct=float(data.get("precision_pct", windows.precision_pct)),
            ),
        )


@dataclass(frozen=True)
class LoadOptions:
    """The load each point runs (the ``Load`` panel's flags).

    Attributes:
        mode: ``decode-single``, ``decode-concurrent`` or ``prefill-heavy``.
        warmup_requests: At most this many warm-up requests per prompt at the first point.
        concurrency: decode-concurrent: streams (None: the probe picks them).
        bench_runs: decode-concurrent: windows per direction per point (median).
        max_concurrency_probe: decode-concurrent auto: the highest N probed.
        load_target: decode-concurrent auto: stop probing at this fraction of the cap.
        concurrency_stretch: decode-concurrent auto: streams added to the pick.
        target_prefill_s: prefill-heavy: the prefill time each prompt is sized for at the first
            point (None: a share of the window, :attr:`SweepOptions.prefill_seconds`).
    """

    mode: LoadMode = LoadMode.DECODE_SINGLE
    warmup_requests: int = 3
    concurrency: int | None = None
    bench_runs: int = 1
    max_concurrency_probe: int = 16
    load_target: float | None = None
    concurrency_stretch: int = 0
    target_prefill_s: float | None = None

    # run.json's flat key of each field that is not recorded under its own name
    RECORDED_AS: ClassVar[dict[str, str]] = {
        "mode": "load_mode",
        "target_prefill_s": "target_prefill_seconds",
    }

    def recorded(self) -> dict[str, Any]:
        """The group as ``run.json`` ``options`` has always held it (flat, by flag name)."""
        return {self.RECORDED_AS.get(k, k): v for k, v in asdict(self).items()}

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
        return cls(**kwargs)


@dataclass(frozen=True)
class PointOptions:
    """What a sweep varies and where (the ``Caps`` and ``Clock locks`` panels' flags).

    Attributes:
        axis: ``power`` steps the limit; ``sm-clock``, ``mem-clock`` or ``grid`` lock clocks
            under one limit.
        caps: The caps to measure, W per GPU (None: the envelope at ``step_size_w``).
        step_size_w: Step between the default caps (and the adaptive refinement's), W.
        sm_clocks: SM lock set-points, MHz (None: about 11 supported clocks).
        mem_clocks: Memory lock set-points, MHz (None: every supported load tier).
        hold_cap_w: The limit a clock sweep holds, W (None: the limit in force).
        sm_clock_min_mhz: The bottom of every SM lock, MHz (a lock is the range from it to the
            point's clock, so an idle card clocks down); None: each card's idle floor (the
            lowest SM clock it lists, else 210 MHz). A run recorded without it used the floor.
        strategy: ``dense`` measures every point; ``adaptive`` a coarse pass, then refines.
        confirm: At the end, measure the points tied with the best once more.
    """

    axis: Axis = Axis.POWER
    caps: tuple[float, ...] | None = None
    step_size_w: float = 10.0
    sm_clocks: tuple[float, ...] | None = None
    mem_clocks: tuple[float, ...] | None = None
    hold_cap_w: float | None = None
    sm_clock_min_mhz: float | None = None
    strategy: Strategy = Strategy.DENSE
    confirm: bool = True

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
    """Which cards a sweep measures, through which library (``--gpu``, ``--backend``).

    Attributes:
        gpus: GPU indices (None: the cards serving the model).
        all_gpus: Every card (``--gpu all``).
        backend: ``nvml``, ``amdsmi`` or ``auto`` (whichever sees cards).
    """

    gpus: tuple[int, ...] | None = None
    all_gpus: bool = False
    backend: Backend = Backend.AUTO

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
    """The server the load runs against (the ``Server`` panel's flags).

    Attributes:
        url: Its URL (None: probe the local ports).
        model: The model id (None: the server's).
        api_key: Bearer token, never recorded.
    """

    url: str | None = None
    model: str | None = None
    api_key: str | None = None

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
    """What a sweep may change, and where its restore journal lives (the ``Safety`` panel).

    Attributes:
        dry_run: Print the plan, change nothing.
        observe_only: Run the load at the settings in force, change nothing.
        no_reset: Leave the last setting in force instead of putting the user's back.
        force: Accepted for old scripts (a killed sweep's journal is always put back first).
        state_dir: Where the restore journal lives (None: the default for the user).
        max_failed_caps: Stop after this many points in a row failed.
    """

    dry_run: bool = False
    observe_only: bool = False
    no_reset: bool = False
    force: bool = False
    state_dir: Path | None = None
    max_failed_caps: int = 3

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
    """Where a run goes and how it is labelled (the ``Output`` panel).

    Attributes:
        out: The directory run directories are made in.
        resume: An interrupted run directory to continue (None: a new run).
        cooling: How the card is cooled (labels the run; thermal findings depend on it).
        tariff_per_kwh: The price of a kWh the report prices tokens at (None: energy only).
    """

    out: Path = Path("powersweep-runs")
    resume: Path | None = None
    cooling: Cooling = Cooling.UNSPECIFIED
    tariff_per_kwh: float | None = None

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
    """How the undervolt search steps the SM clock offset (the ``Undervolt`` panel).

    Attributes:
        offset_step_mhz: The coarse step between offsets, MHz. 30 by default: two of the 15 MHz
            bins the voltage/frequency curve of Ampere and later cards moves in, so every step
            moves it; the edge it finds is refined in single bins.
        margin_mhz: MHz the answer stays below the last stable offset. 30 by default: two bins.
        soak_s: Run seconds the chosen offset is held under the load, before it is measured and
            checked once more (the card at its hottest). 300 by default (issue 45: 120 was
            shorter than the few minutes peers' stability runs hold); at most 600.
        max_offset_mhz: The highest offset to try (None: the driver's maximum).
        mem_offset_step_mhz: The memory phase's step between memory clock offsets, NVML's unit
            (0: no memory phase).
        max_mem_offset_mhz: The highest memory offset to try (None: the driver's maximum).
        mem_margin_mhz: What the memory answer stays below the best memory offset (None: one
            step).
    """

    offset_step_mhz: float = 30.0
    margin_mhz: float = 30.0
    soak_s: float = 300.0
    max_offset_mhz: float | None = None
    mem_offset_step_mhz: float = 0.0
    max_mem_offset_mhz: float | None = None
    mem_margin_mhz: float | None = None

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

    load: LoadOptions = field(default_factory=LoadOptions)
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    points: PointOptions = field(default_factory=PointOptions)
    cards: CardOptions = field(default_factory=CardOptions)
    server: ServerOptions = field(default_factory=ServerOptions)
    safety: SafetyOptions = field(default_factory=SafetyOptions)
    output: OutputOptions = field(default_factory=OutputOptions)
    undervolt: UndervoltOptions = field(default_factory=UndervoltOptions)
    simulate: str | None = None

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
