"""One sweep session from options: pick the GPUs, find the server, plan the caps, run, restore.

This is what ``powersweep sweep`` does, minus the terminal: the CLI turns flags into
:class:`SweepOptions`, passes a progress callback and prints the outcome.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from powersweep import __version__
from powersweep.clock import Clock, ScaledClock, real_clock
from powersweep.errors import PowersweepError, UsageError
from powersweep.runformat import SCHEMA_VERSION
from powersweep.sweep.caps import clamp_caps, default_caps, uniform_envelope
from powersweep.sweep.client import ChatClient
from powersweep.sweep.concurrent import DecodeConcurrent
from powersweep.sweep.discovery import ServerInfo, discover_server, strip_credentials
from powersweep.sweep.driver import (
    CapProgress,
    Sweep,
    SweepOutcome,
    SweepPlan,
    raise_on_signals,
    run_interruptible,
)
from powersweep.sweep.gpu import Gpu, GpuBackend, PowerEnvelope
from powersweep.sweep.journal import Journal, default_state_dir
from powersweep.sweep.loads import DecodeSingle, Load
from powersweep.sweep.outputs import RunWriter, utc_now_iso
from powersweep.sweep.prefill import PrefillHeavy

LOAD_MODES = ("decode-single", "decode-concurrent", "prefill-heavy")
SUPPORTED_LOAD_MODES = LOAD_MODES
STRATEGIES = ("dense", "adaptive")
SETTLE_MODES = ("auto", "fixed")
SIM_SERVER_FLAVOURS = ("llamacpp", "vllm", "sglang", "ollama", "plain")
COOLING = ("air", "water", "aio", "unspecified")
DEFAULT_SIM_TIME_SCALE = 30.0
# Many streams cost the one interpreter more CPU per run second, and a prefill's single long
# wait weighs every millisecond of wall latency `scale` times: both run slower by default.
SIM_TIME_SCALE_BY_MODE = {"decode-single": 30.0, "decode-concurrent": 15.0, "prefill-heavy": 15.0}


@dataclass(frozen=True)
class SweepOptions:
    """Every option of a sweep (what ``run.json`` records under ``options``).

    Attributes mirror the CLI flags; ``api_key`` is never recorded.
    """

    cooling: str = "unspecified"
    load_mode: str = "decode-single"
    gpus: tuple[int, ...] | None = None
    caps: tuple[float, ...] | None = None
    step_size_w: float = 10.0
    target_cap_seconds: float = 10.0
    settle_seconds: float = 3.0
    url: str | None = None
    model: str | None = None
    api_key: str | None = None
    out: Path = Path("powersweep-runs")
    no_reset: bool = False
    sample_interval_s: float = 0.5
    warmup_requests: int = 3
    max_failed_caps: int = 3
    simulate: str | None = None
    time_scale: float | None = None
    seed: int = 0
    sim_server: str = "llamacpp"
    sim_state: Path | None = None
    force: bool = False
    dry_run: bool = False
    observe_only: bool = False
    resume: Path | None = None
    state_dir: Path | None = None
    sim_rejects_below_w: float | None = None
    sim_http_error: int | None = None
    concurrency: int | None = None
    bench_runs: int = 1
    max_concurrency_probe: int = 16
    load_target: float | None = None
    concurrency_stretch: int = 0
    target_prefill_seconds: float = 10.0
    strategy: str = "dense"
    settle: str = "auto"
    sim_slots: int | None = None
    sim_context: int | None = None
    sim_hide_num_ctx: bool = False
    sim_reasoning_tokens: int = 0

    def recorded(self) -> dict[str, Any]:
        """The options as stored in ``run.json`` (no secrets, URL without credentials)."""
        data = asdict(self)
        data.pop("api_key")
        data["api_key_given"] = self.api_key is not None
        data["url"] = strip_credentials(self.url) if self.url else None
        for key in ("out", "sim_state", "resume", "state_dir"):
            value = getattr(self, key)
            data[key] = str(value) if value is not None else None
        return data

    @property
    def changes_limits(self) -> bool:
        """True when this sweep sets power limits (not a dry run, not observe-only)."""
        return not (self.dry_run or self.observe_only)

    @property
    def needs_journal(self) -> bool:
        """True when a limit this sweep sets would outlive the process (real GPUs, or a
        simulated rig whose limits persist in ``--sim-state``)."""
        return self.changes_limits and (self.simulate is None or self.sim_state is not None)


@dataclass(frozen=True)
class SessionResult:
    """A finished session: where its run lives and how it ended.

    Attributes:
        run_dir: The run directory.
        outcome: How the sweep ended.
        out_created: The ``--out`` directory did not exist before (so it is ours to hand over).
    """

    run_dir: Path
    outcome: SweepOutcome
    out_created: bool = False


@dataclass(frozen=True)
class DryRun:
    """What a sweep would do (``--dry-run``): nothing was changed to find it out.

    Attributes:
        gpus: ``run.json``-style facts of each GPU (envelope and limit in force).
        envelope: The envelope every GPU shares.
        caps_w: Caps in the order they would be measured.
        estimated_wall_s: Rough wall time of the sweep.
        journal_path: Where the restore journal would go (None: not needed).
    """

    gpus: tuple[dict[str, Any], ...]
    envelope: PowerEnvelope
    caps_w: tuple[float, ...]
    estimated_wall_s: float
    journal_path: Path | None

    def lines(self) -> list[str]:
        """The plan as the CLI prints it."""
        out = ["dry run: nothing will be changed"]
        for g in self.gpus:
            out.append(
                f"GPU {g['index']}: {g['name']} ({g['uuid']}), limits {g['min_limit_w']:g}-"
                f"{g['max_limit_w']:g} W, default {g['default_limit_w']:g} W, "
                f"now {g['original_limit_w']:g} W"
            )
        e = self.envelope
        out.append(f"envelope (all GPUs): {e.min_w:g}-{e.max_w:g} W")
        caps = ", ".join(f"{c:g}" for c in self.caps_w)
        out.append(f"caps ({len(self.caps_w)}, W per GPU): {caps}")
        out.append(f"estimated wall time: {_duration(self.estimated_wall_s)}")
        if self.journal_path is not None:
            out.append(f"restore journal: {self.journal_path}")
        return out


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


# Per-cap run seconds beyond the measured windows (request tails, sampler flush, writes).
_CAP_OVERHEAD_S = 2.0
# Run seconds one warm-up request takes (a short completion).
_WARMUP_REQUEST_S = 3.0
PROMPTS_PER_CAP = {"decode-single": 2, "decode-concurrent": 2, "prefill-heavy": 1}


def estimate_wall_s(options: SweepOptions, n_caps: int, time_scale: float = 1.0) -> float:
    """Rough wall time of a sweep: settle + measured windows + overhead per cap, plus warm-up."""
    per_cap = (
        options.settle_seconds
        + PROMPTS_PER_CAP.get(options.load_mode, 1) * options.target_cap_seconds
        + _CAP_OVERHEAD_S
    )
    warm = options.warmup_requests * PROMPTS_PER_CAP.get(options.load_mode, 1) * _WARMUP_REQUEST_S
    return (n_caps * per_cap + warm) / max(time_scale, 1e-9)


def validate(options: SweepOptions) -> None:
    """Reject option combinations that cannot work, before touching anything.

    Raises:
        UsageError: One line naming the bad option.
    """
    if options.cooling not in COOLING:
        raise UsageError(f"--cooling must be one of {', '.join(COOLING)}, not {options.cooling!r}")
    if options.load_mode not in LOAD_MODES:
        raise UsageError(
            f"--load-mode must be one of {', '.join(LOAD_MODES)}, not {options.load_mode!r}"
        )
    if options.strategy not in STRATEGIES:
        raise UsageError(f"--strategy must be dense or adaptive, not {options.strategy!r}")
    if options.settle not in SETTLE_MODES:
        raise UsageError(f"--settle must be auto or fixed, not {options.settle!r}")
    if options.sim_server not in SIM_SERVER_FLAVOURS:
        raise UsageError(
            f"--sim-server must be one of {', '.join(SIM_SERVER_FLAVOURS)}, "
            f"not {options.sim_server!r}"
        )
    if options.concurrency is not None and options.concurrency < 1:
        raise UsageError("--concurrency takes a number of streams (1 or more) or auto")
    if options.bench_runs < 1:
        raise UsageError("--bench-runs must be at least 1")
    if options.max_concurrency_probe < 1:
        raise UsageError("--max-concurrency-probe must be at least 1")
    if options.load_target is not None and not 0 < options.load_target <= 1:
        raise UsageError("--load-target is a fraction of the cap, between 0 and 1")
    if options.concurrency_stretch < 0:
        raise UsageError("--concurrency-stretch must be 0 or more")
    if not options.target_prefill_seconds > 0:
        raise UsageError("--target-prefill-seconds must be positive")
    if options.sim_slots is not None and options.sim_slots < 1:
        raise UsageError("--sim-slots must be at least 1")
    if options.sim_reasoning_tokens < 0:
        raise UsageError("--sim-reasoning-tokens must be 0 or more")
    if options.sim_context is not None and options.sim_context < 256:
        raise UsageError("--sim-context must be at least 256 tokens")
    if options.load_mode != "decode-concurrent" and (
        options.concurrency is not None
        or options.bench_runs != 1
        or options.load_target is not None
        or options.concurrency_stretch
    ):
        raise UsageError(
            "--concurrency, --bench-runs, --load-target and --concurrency-stretch need "
            "--load-mode decode-concurrent"
        )
    positive = {
        "--step-size": options.step_size_w,
        "--target-cap-seconds": options.target_cap_seconds,
        "--sample-interval": options.sample_interval_s,
    }
    for flag, value in positive.items():
        if not value > 0:
            raise UsageError(f"{flag} must be positive, got {value:g}")
    if options.settle_seconds < 0:
        raise UsageError(f"--settle-seconds must be 0 or more, got {options.settle_seconds:g}")
    if options.max_failed_caps < 1:
        raise UsageError("--max-failed-caps must be at least 1")
    if options.warmup_requests < 0:
        raise UsageError("--warmup-requests must be 0 or more")
    if options.simulate is None:
        if options.time_scale is not None:
            raise UsageError("--time-scale works only with --simulate")
        if options.sim_state is not None:
            raise UsageError("--sim-state works only with --simulate")
    elif options.time_scale is not None:
        if not options.time_scale > 0:
            raise UsageError(f"--time-scale must be positive, got {options.time_scale:g}")
        if options.url and options.time_scale != 1:
            raise UsageError(
                "--time-scale needs the simulated server: with --url a real server answers "
                "in real time (drop --time-scale or --url)"
            )
    if options.gpus is not None and any(i < 0 for i in options.gpus):
        raise UsageError("--gpu takes GPU indices 0, 1, ...")
    if options.observe_only and options.caps:
        raise UsageError("--observe-only measures at the limit in force: drop --caps")
    if options.observe_only and options.dry_run:
        raise UsageError("--dry-run and --observe-only exclude each other")
    if options.simulate is None and (
        options.sim_rejects_below_w is not None or options.sim_http_error is not None
    ):
        raise UsageError("--sim-* options work only with --simulate")
    if options.sim_http_error is not None and not 400 <= options.sim_http_error <= 599:
        raise UsageError("--sim-http-error takes an HTTP error status (400-599)")
    if options.simulate is not None and options.url and options.sim_http_error is not None:
        raise UsageError("--sim-http-error needs the simulated server: drop --url")


def require_root() -> None:
    """Refuse a real sweep without root, before any change.

    Raises:
        PowersweepError: Not root (exit 2, with how to re-run).
    """
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise PowersweepError(
            "changing GPU power limits needs root: re-run with sudo, e.g. "
            'sudo "$(command -v powersweep)" --cooling air --load-mode decode-single',
            exit_code=2,
        )


def plan_caps(options: SweepOptions, gpus: list[Gpu], warn: Callable[[str], None]) -> list[float]:
    """The caps to measure for this GPU set (ascending)."""
    envelope = uniform_envelope([g.envelope() for g in gpus])
    if options.observe_only:
        currents = sorted({g.envelope().current_w for g in gpus})
        if len(currents) > 1:
            warn(
                "the GPUs run at different limits ("
                + ", ".join(f"{c:g}" for c in currents)
                + f" W); the run is labelled with the lowest, {currents[0]:g} W"
            )
        return [currents[0]]
    if options.caps:
        return clamp_caps(options.caps, envelope, warn)
    return default_caps(envelope, options.step_size_w)


def _gpu_meta(gpu: Gpu) -> dict[str, Any]:
    ident = gpu.identity()
    env = gpu.envelope()
    return {
        "index": ident.index,
        "name": ident.name,
        "uuid": ident.uuid,
        "vram_mib": ident.vram_mib,
        "driver_version": ident.driver_version,
        "min_limit_w": env.min_w,
        "default_limit_w": env.default_w,
        "max_limit_w": env.max_w,
        "original_limit_w": env.current_w,
        "slowdown_temp_c": gpu.slowdown_temp_c(),
        "power_source": getattr(gpu, "power_source", "simulated"),
    }


def check_settable(gpus: list[Gpu]) -> None:
    """Fail before any change when a GPU's limit cannot be set at all.

    Reading the envelope already refuses GPUs without power management (laptops, some VMs).
    Permission (root, or a container without CAP_SYS_ADMIN) shows only when setting, so each
    GPU is set to the limit already in force: that changes nothing, whatever happens.

    Raises:
        GpuError: One line naming the GPU and the cause.
    """
    for g in gpus:
        current = g.envelope().current_w
        g.set_power_limit(current)


def _select(
    backend: GpuBackend, wanted: tuple[int, ...] | None, warn: Callable[[str], None]
) -> list[Gpu]:
    count = backend.device_count()
    if count == 0:
        raise PowersweepError("no NVIDIA GPU found")
    if wanted is None:
        gpus = [backend.gpu(i) for i in range(count)]
        if count > 1:
            names = ", ".join(f"{g.index}: {g.identity().name}" for g in gpus)
            warn(f"sweeping all {count} GPUs together ({names}); use --gpu N to pick one")
        return gpus
    for i in wanted:
        if i >= count:
            raise UsageError(f"there is no GPU {i}: found {count} (0-{count - 1})")
    return [backend.gpu(i) for i in dict.fromkeys(wanted)]


@contextlib.contextmanager
def _rig(options: SweepOptions) -> Iterator[tuple[GpuBackend, Clock, Any, list[Any]]]:
    """The GPU backend, clock, simulated rig (or None) and profiles for these options."""
    if options.simulate is None:
        from powersweep.sweep.nvml import NvmlBackend

        backend = NvmlBackend()
        try:
            yield backend, real_clock(), None, []
        finally:
            backend.close()
        return
    scale = options.time_scale or (
        1.0
        if options.url
        else SIM_TIME_SCALE_BY_MODE.get(options.load_mode, DEFAULT_SIM_TIME_SCALE)
    )
    if scale > 1:
        # The simulated server, the client and the sampler share one interpreter: at the default
        # 5 ms GIL switch interval a token's arrival can be stamped up to 5 ms late, which is
        # `scale` times more in run time. Finer switching keeps the stamps within 0.1%.
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.0002))
    if options.simulate.startswith("replay:"):
        from powersweep.sim.replay import ReplayRig, replay_profile

        curve = replay_profile(Path(options.simulate.removeprefix("replay:")))
        clock = ScaledClock(scale)
        replay = ReplayRig(curve, clock, seed=options.seed)
        yield replay, clock, replay, [curve]
        return
    from powersweep.sim.profiles import get_profile
    from powersweep.sim.rig import SimRig

    names = [n.strip() for n in options.simulate.split("+") if n.strip()]
    profiles = [get_profile(n) for n in names]
    if options.sim_rejects_below_w is not None:
        profiles = [
            dataclasses.replace(p, rejects_below_w=options.sim_rejects_below_w) for p in profiles
        ]
    if options.sim_context is not None:
        profiles = [dataclasses.replace(p, context_tokens=options.sim_context) for p in profiles]
    clock = ScaledClock(scale)
    rig = SimRig(profiles, clock, seed=options.seed, state_file=options.sim_state)
    yield rig, clock, rig, profiles


def journal_for(options: SweepOptions) -> Journal:
    """The restore journal these options use (``--state-dir``, env, or the default)."""
    return Journal(options.state_dir or default_state_dir())


def dry_run(options: SweepOptions, warn: Callable[[str], None] = lambda _m: None) -> DryRun:
    """Plan a sweep without changing anything (no root needed: it only reads).

    Raises:
        PowersweepError: Bad options, no GPU, or a GPU without power management.
    """
    validate(options)
    with _rig(options) as (backend, clock, _rig_obj, _profiles):
        gpus = _select(backend, options.gpus, warn)
        envelope = uniform_envelope([g.envelope() for g in gpus])
        caps = plan_caps(options, gpus, warn)
        return DryRun(
            gpus=tuple(_gpu_meta(g) for g in gpus),
            envelope=envelope,
            caps_w=tuple(sorted(caps, reverse=True)),
            estimated_wall_s=estimate_wall_s(options, len(caps), clock.scale),
            journal_path=journal_for(options).path if options.needs_journal else None,
        )


@dataclass(frozen=True)
class _Resume:
    meta: dict[str, Any]
    writer: RunWriter
    caps_left: list[float]
    caps_done: list[float]


def resume_options(run_dir: Path, given: SweepOptions) -> tuple[SweepOptions, dict[str, Any]]:
    """The options of an interrupted run (from its ``run.json``) for ``--resume``.

    The URL and API key given now win (the run never stored credentials); so do
    ``--state-dir``, ``--force`` and ``--out`` is the run's parent.

    Raises:
        UsageError: Not a run directory, a newer schema, or a run that is complete.
    """
    path = run_dir / "run.json"
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"--resume: {run_dir} is not a run directory (no run.json)") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--resume: cannot read {path}: {exc}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("options"), dict):
        raise UsageError(f"--resume: {path} is not a powersweep run.json")
    version = meta.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise UsageError(
            f"--resume: {path} has schema_version {version!r}; this powersweep knows "
            f"{SCHEMA_VERSION} (upgrade powersweep)"
        )
    if meta.get("status") == "complete":
        raise UsageError(f"--resume: {run_dir} is complete; nothing to resume")
    recorded = dict(meta["options"])
    known = {f.name for f in dataclasses.fields(SweepOptions)}
    kwargs = {k: v for k, v in recorded.items() if k in known}
    for key in ("out", "sim_state", "resume", "state_dir"):
        kwargs[key] = Path(kwargs[key]) if kwargs.get(key) else None
    for key in ("gpus", "caps"):
        kwargs[key] = tuple(kwargs[key]) if kwargs.get(key) is not None else None
    try:
        options = SweepOptions(**kwargs)
    except TypeError as exc:
        raise UsageError(f"--resume: {path} has unusable options ({exc})") from None
    options = dataclasses.replace(
        options,
        out=run_dir.parent,
        url=given.url or options.url,
        api_key=given.api_key,
        model=given.model or options.model,
        state_dir=given.state_dir,
        force=given.force,
        resume=run_dir,
        dry_run=False,
    )
    return options, meta


def _prepare_resume(options: SweepOptions, meta: dict[str, Any], gpus: list[Gpu]) -> _Resume:
    assert options.resume is not None
    want = [g.get("uuid") for g in meta.get("gpus", []) if isinstance(g, dict)]
    have = [g.identity().uuid for g in gpus]
    if want != have:
        raise UsageError(
            f"--resume: the run was on GPUs {', '.join(map(str, want))}, this sweep would use "
            f"{', '.join(have)}; resume needs the same GPU set"
        )
    planned = [float(c) for c in meta.get("caps_planned", [])]
    done = [float(c) for c in meta.get("caps_done", [])]
    left = [c for c in planned if c not in done]
    if not left:
        raise UsageError(f"--resume: every planned cap of {options.resume} is done")
    return _Resume(meta, RunWriter.reopen(options.resume), left, done)


def run_session(
    options: SweepOptions,
    *,
    progress: Callable[[CapProgress], None] | None = None,
    warn: Callable[[str], None] = lambda _m: None,
    on_plan: Callable[[Path, list[float]], None] | None = None,
) -> SessionResult:
    """Run one sweep from options to a finished run directory.

    Raises:
        PowersweepError: Anything that stops the sweep before it starts (no root, no server,
            bad options, a journal left by a killed sweep). Failures during the sweep end up in
            the outcome instead.
    """
    with raise_on_signals():
        return _run_session(options, progress=progress, warn=warn, on_plan=on_plan)


def _run_session(
    options: SweepOptions,
    *,
    progress: Callable[[CapProgress], None] | None,
    warn: Callable[[str], None],
    on_plan: Callable[[Path, list[float]], None] | None,
) -> SessionResult:
    resume_meta: dict[str, Any] | None = None
    if options.resume is not None:
        options, resume_meta = resume_options(options.resume, options)
    validate(options)
    if options.cooling == "unspecified" and resume_meta is None:
        warn("--cooling not given: results are labelled 'unspecified' (use air, water or aio)")
    journal = journal_for(options) if options.needs_journal else None
    originals_by_uuid: dict[str, float] = {}
    if journal is not None:
        if not options.force:
            journal.refuse_if_present()
        else:
            old = journal.read()
            if old is not None:
                originals_by_uuid = {g.uuid: g.original_limit_w for g in old.gpus}
                warn(
                    f"--force: a journal of an unfinished sweep exists ({journal.path}); its "
                    "original limits are the ones this sweep restores"
                )
    if options.simulate is None and options.changes_limits:
        require_root()
    out_created = not options.out.exists()
    with _rig(options) as (backend, clock, rig, profiles):
        gpus = _select(backend, options.gpus, warn)
        resume = _prepare_resume(options, resume_meta, gpus) if resume_meta else None
        caps = resume.caps_left if resume else plan_caps(options, gpus, warn)
        if options.changes_limits:
            check_settable(gpus)
        server = None
        if rig is not None and options.url is None:
            from powersweep.sim.server import SimServer

            server = SimServer(
                rig,
                flavour=options.sim_server,
                model="sim-qwen3.6-27b",
                seed=options.seed,
                http_error=options.sim_http_error,
                total_slots=options.sim_slots,
                hide_num_ctx=options.sim_hide_num_ctx,
                reasoning_tokens=options.sim_reasoning_tokens,
            )
        with server if server is not None else contextlib.nullcontext():
            url = server.url if server is not None else options.url
            info = run_interruptible(
                discover_server(url, model=options.model, api_key=options.api_key, clock=clock)
            )
            if resume is not None:
                meta = dict(resume.meta)
                meta["resumed_at"] = [*meta.get("resumed_at", []), utc_now_iso()]
                writer = resume.writer
            else:
                simulation = None
                if rig is not None:
                    simulation = {
                        "profile": options.simulate,
                        "seed": options.seed,
                        "time_scale": clock.scale,
                        "server_flavour": options.sim_server if server is not None else None,
                        # modes that probe or calibrate get theirs once the load is set up
                        "ground_truth": _truth(options, profiles, caps, {})
                        if options.load_mode == "decode-single"
                        else None,
                    }
                meta = _run_meta(options, gpus, info, caps, simulation)
                writer = RunWriter(
                    options.out,
                    [g.identity().name for g in gpus],
                    options.load_mode,
                    initial_meta={**meta, "status": "running", "caps_done": []},
                )
            if on_plan:
                on_plan(writer.path, caps)
            plan = SweepPlan(
                load_mode=options.load_mode,
                caps_w=tuple(caps),
                target_cap_s=options.target_cap_seconds,
                settle_s=options.settle_seconds,
                sample_interval_s=options.sample_interval_s,
                warmup_requests=options.warmup_requests,
                no_reset=options.no_reset,
                max_failed_caps=options.max_failed_caps,
                observe_only=options.observe_only,
                strategy="dense" if options.observe_only or resume else options.strategy,
                step_w=options.step_size_w,
                settle_mode=options.settle,
            )
            streams = options.concurrency or options.max_concurrency_probe
            connections = max(8, streams + 2) if options.load_mode == "decode-concurrent" else 8
            client: Any = ChatClient(
                info, clock, api_key=options.api_key, max_connections=connections
            )
            if rig is not None and server is None:
                client = _RigDrivingClient(client, rig)
            truth_caps = (
                list(caps) if resume is None else list(resume.meta.get("caps_planned", caps))
            )

            def on_prepared(prep: dict[str, Any]) -> Mapping[str, Any]:
                sim = meta.get("simulation")
                if not isinstance(sim, dict) or options.load_mode == "decode-single":
                    return {}
                return {
                    "simulation": {
                        **sim,
                        "ground_truth": _truth(options, profiles, truth_caps, prep),
                    }
                }

            originals = {
                g.index: originals_by_uuid[g.identity().uuid]
                for g in gpus
                if g.identity().uuid in originals_by_uuid
            }
            sweep = Sweep(
                plan,
                gpus,
                clock,
                client,
                writer,
                meta,
                progress=progress,
                warn=warn,
                journal=journal,
                journal_backend=_journal_backend(options),
                originals=originals,
                caps_already_done=resume.caps_done if resume else (),
                load_factory=_load_factory(options, client, clock, info, warn),
                prepared=resume.meta.get("load") if resume else None,
                on_prepared=on_prepared,
            )
            outcome = sweep.run()
    return SessionResult(writer.path, outcome, out_created)


class _RigDrivingClient:
    """A client for ``--simulate`` with ``--url``: a real server does the work, so the simulated
    GPU is told of each request and draws power as if it served it (its clocks do not change
    the real server's speed, so TPS is the server's own and power is the simulator's).
    """

    def __init__(self, client: ChatClient, rig: Any) -> None:
        self._client = client
        self._rig = rig

    @property
    def info(self) -> ServerInfo:
        return self._client.info

    async def chat(self, prompt: str, **kwargs: Any) -> Any:
        kind = "prefill" if kwargs.get("prompt_kind") == "prefill" else "decode"
        self._rig.work_started(kind)
        if kind == "prefill":
            self._rig.prefill_rate_tps(len(prompt) // 4)  # marks a long prompt's prefill
        try:
            return await self._client.chat(prompt, **kwargs)
        finally:
            self._rig.work_finished(kind)

    async def queued_requests(self) -> int | None:
        return await self._client.queued_requests()

    async def count_tokens(self, text: str) -> int | None:
        return await self._client.count_tokens(text)

    async def aclose(self) -> None:
        await self._client.aclose()


def _load_factory(
    options: SweepOptions,
    client: Any,
    clock: Clock,
    info: ServerInfo,
    warn: Callable[[str], None],
) -> Callable[[Any], Load]:
    """Builds the load of ``options.load_mode`` once the driver has its sampler."""

    def make(sampler: Any) -> Load:
        if options.load_mode == "decode-concurrent":
            return DecodeConcurrent(
                client,
                clock,
                sampler,
                options.target_cap_seconds,
                concurrency=options.concurrency,
                bench_runs=options.bench_runs,
                max_probe=options.max_concurrency_probe,
                load_target=options.load_target,
                stretch=options.concurrency_stretch,
                engine=info.engine,
                total_slots=info.total_slots,
                context_tokens=info.context_tokens,
                warn=warn,
            )
        if options.load_mode == "prefill-heavy":
            return PrefillHeavy(
                client,
                clock,
                sampler,
                options.target_cap_seconds,
                target_prefill_s=options.target_prefill_seconds,
                context_tokens=info.context_tokens,
                engine=info.engine,
                seed=options.seed,
                warn=warn,
            )
        return DecodeSingle(client, clock, sampler, options.target_cap_seconds)

    return make


def _truth(
    options: SweepOptions, profiles: list[Any], caps: list[float], prep: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The simulator's noise-free answer for this load (None on real hardware)."""
    if not profiles:
        return None
    from powersweep.sim.replay import ReplayCurve, replay_truth

    if isinstance(profiles[0], ReplayCurve):
        return replay_truth(profiles[0], caps)
    from powersweep.sim.rig import ground_truth

    kwargs: dict[str, Any] = {}
    if prep.get("effective_concurrency"):
        kwargs["concurrency"] = int(prep["effective_concurrency"])
    if prep.get("prompt_tokens"):
        kwargs["prompt_tokens"] = int(prep["prompt_tokens"])
    return ground_truth(profiles, options.load_mode, caps, **kwargs).to_dict()


def _journal_backend(options: SweepOptions) -> Mapping[str, Any]:
    """How ``powersweep restore`` rebuilds the backend that changed the limits."""
    if options.simulate is None:
        return {"kind": "nvml"}
    names = [n.strip() for n in options.simulate.split("+") if n.strip()]
    state = options.sim_state.resolve() if options.sim_state else None
    return {
        "kind": "sim",
        "profiles": names,
        "sim_state": str(state) if state else None,
        "seed": options.seed,
    }


def restore_backend(backend_spec: Mapping[str, Any]) -> contextlib.AbstractContextManager[Any]:
    """Rebuild the GPU backend a journal names (for ``powersweep restore``).

    Raises:
        PowersweepError: NVML cannot start, or an unknown simulation profile.
    """
    if backend_spec.get("kind") == "sim":
        from powersweep.sim.profiles import get_profile
        from powersweep.sim.rig import SimRig

        profiles = [get_profile(str(n)) for n in backend_spec.get("profiles", [])]
        state = backend_spec.get("sim_state")
        rig = SimRig(
            profiles,
            ScaledClock(1.0),
            seed=int(backend_spec.get("seed", 0)),
            state_file=Path(state) if state else None,
        )
        return contextlib.nullcontext(rig)
    require_root()
    from powersweep.sweep.nvml import NvmlBackend

    return NvmlBackend()


def _run_meta(
    options: SweepOptions,
    gpus: list[Gpu],
    info: ServerInfo,
    caps: list[float],
    simulation: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "powersweep", "version": __version__},
        "gpus": [_gpu_meta(g) for g in gpus],
        "cooling": options.cooling,
        "load_mode": options.load_mode,
        "options": options.recorded(),
        "server": {
            "url": strip_credentials(info.base_url),
            "model": info.model,
            "engine": info.engine,
            "context_tokens": info.context_tokens,
        },
        "simulation": simulation,
        "caps_planned": sorted(caps, reverse=True),
        "observe_only": options.observe_only,
    }
