"""run.json, typed: the parts its readers (the analyses, ``apply``'s recommendation, a fleet)
take from it.

The sweep writes run.json as a dict (``sweep.session``, ``sweep.driver``); a reader converts it
once, through :meth:`RunRecord.from_json`, which names a key of the wrong type. Keys no reader
takes are not modelled (msgspec skips them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from msgspec import UNSET, UnsetType

from powersweep.analysis.result_types import ConfirmRecord, JsonRecord, RawNum


class RunJsonRecord(JsonRecord):
    """A part of run.json (its schema errors name that file)."""

    FILE: ClassVar[str] = "run.json"


@dataclass(frozen=True)
class RunGpu(RunJsonRecord):
    """A card the run measured (run.json ``gpus``): its limits as the card reported them."""

    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    default_limit_w: RawNum = None
    min_limit_w: RawNum = None
    max_limit_w: RawNum = None
    slowdown_temp_c: RawNum = None


@dataclass(frozen=True)
class RunOptions(RunJsonRecord):
    """The options of the sweep as run.json records them (by flag name), those read back."""

    axis: str | None = None
    hold_cap_w: float | None = None
    sm_clock_min_mhz: float | None = None
    tariff_per_kwh: float | None = None
    soak_s: float | None = None
    offset_step_mhz: float | None = None
    margin_mhz: float | None = None
    backoff_steps: float | None = None  # a run before issue 45: the steps to back off
    mem_offset_step_mhz: float | None = None
    mem_margin_mhz: float | None = None


@dataclass(frozen=True)
class RunSimulation(RunJsonRecord):
    """The simulated rig a run was measured on (run.json ``simulation``)."""

    profile: str | None = None
    node: str | None = None


@dataclass(frozen=True)
class MemorySearch(RunJsonRecord):
    """An undervolt search's memory phase as it recorded its edge (run.json
    ``undervolt.memory``)."""

    best_mhz: float | None = None
    stopped_mhz: float | None = None


@dataclass(frozen=True)
class UndervoltRecord(RunJsonRecord):
    """An undervolt search's own record of its answer (run.json ``undervolt``)."""

    cap_w: float | None = None
    sm_lock_mhz: float | None = None
    chosen_mhz: float | None = None
    memory: MemorySearch | None = None


@dataclass(frozen=True)
class RunServer(RunJsonRecord):
    """The server measured (run.json ``server``)."""

    model: str | None = None
    engine: str | None = None


@dataclass(frozen=True)
class RunTool(RunJsonRecord):
    """The powersweep that wrote the run (run.json ``tool``)."""

    name: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class GpuSelection(RunJsonRecord):
    """Which GPUs were swept and why (run.json ``gpu_selection``); ``serving``: the GPUs whose
    utilization marks a load tick."""

    picked: list[int] | None = None
    reason: str | None = None
    serving: list[int] | None = None


@dataclass(frozen=True)
class RunFault(RunJsonRecord):
    """A kind of fault the run met, how often, and examples in words (run.json ``faults``)."""

    kind: str | None = None
    count: int | None = None
    examples: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RunStalls(RunJsonRecord):
    """The share of the decode time the server's streams stalled (run.json ``stalls``)."""

    share_pct: float | None = None
    sd_pct: float | None = None
    requests: int | None = None


@dataclass(frozen=True)
class LeftOut(RunJsonRecord):
    """A cap an adaptive sweep was asked for but left out at its budget."""

    cap_w: float | None = None
    reason: str | None = None


@dataclass(frozen=True)
class RunAdaptive(RunJsonRecord):
    """An adaptive sweep's budget and the caps it left out (run.json ``adaptive``)."""

    max_caps: int | None = None
    left_out: list[LeftOut] = field(default_factory=list)


@dataclass(frozen=True)
class RunIdle(RunJsonRecord):
    """The card left idle at the answer's lock after an undervolt search (run.json ``idle``)."""

    sm_lock_range_mhz: list[float] | None = None
    sm_lock_mhz: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class ProbeStep(RunJsonRecord):
    """One step of the auto-concurrency probe (run.json ``load.probe``), as written."""

    concurrency: int | None = None
    tps: RawNum = None
    power_w: RawNum = None
    failures: int | None = None
    queued: int | None = None


@dataclass(frozen=True)
class RunLoad(RunJsonRecord):
    """How the load was set up (run.json ``load``), the parts its summary shows: a concurrent
    load's streams (``concurrency`` written) and its probe, a prefill load's prompt size
    (``prompt_tokens`` written); a single stream's is empty."""

    concurrency: int | UnsetType | None = UNSET
    concurrency_auto: bool | None = None
    concurrency_stretch: int | None = None
    pick_reason: str | None = None
    effective_concurrency: int | None = None
    probe: list[ProbeStep] | None = None
    prompt_tokens: int | UnsetType | None = UNSET
    target_prefill_s: RawNum = None
    clamped_to_context: bool | None = None
    context_tokens: int | None = None


@dataclass(frozen=True)
class RunRecord(RunJsonRecord):
    """A run's run.json, typed (the parts read).

    Attributes:
        status: ``complete``, ``interrupted``, ``partial``, ``failed`` or ``running``.
        error: Why it ended, where it failed.
        axis: The axis swept, where recorded outside the options.
        axis_fallback: The axis a grid fell back to (the SM axis).
        observe_only: One point at the limit in force (nothing to recommend).
        gpus: The cards measured (None: not recorded).
        options: The sweep's options (None: not recorded).
        undervolt: An undervolt search's record (None: not an undervolt run).
        simulation: The simulated rig (None: a real card).
        caps_done: The caps measured (their count is what an unfinished run says).
        caps_planned: The caps planned.
        points_done: The points measured (clock and undervolt runs).
        points_planned: The points planned.
        confirm: What the confirm phase measured again (caps, or clock points).
        load: The load's set-up as the sweep reported it (its probe, its prompt).
        rows_written: Each CSV's whole rows, as counted after each point.
    """

    status: str | None = None
    error: str | None = None
    axis: str | None = None
    axis_fallback: str | None = None
    observe_only: bool | None = None
    gpus: list[RunGpu] | None = None
    options: RunOptions | None = None
    undervolt: UndervoltRecord | None = None
    simulation: RunSimulation | None = None
    caps_done: list[object] | None = None
    caps_planned: list[object] | None = None
    points_done: list[object] | None = None
    points_planned: list[object] | None = None
    server: RunServer | None = None
    tool: RunTool | None = None
    host: str | None = None
    cooling: str | None = None
    load_mode: str | None = None
    started_at: str | None = None
    gpu_selection: GpuSelection | None = None
    confirm: ConfirmRecord | None = None
    faults: list[RunFault] | None = None
    stalls: RunStalls | None = None
    adaptive: RunAdaptive | None = None
    idle: RunIdle | None = None
    load: RunLoad | None = None
    rows_written: dict[str, int] | None = None

    @property
    def swept_axis(self) -> str | None:
        """The axis the sweep ended up sweeping: a grid's fallback, else the one asked."""
        return self.axis_fallback or (self.options.axis if self.options else None)
