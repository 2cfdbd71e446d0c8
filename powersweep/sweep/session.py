"""One sweep session from options: pick the GPUs, find the server, plan the caps, run, restore.

This is what ``powersweep sweep`` does, minus the terminal: the CLI turns flags into
:class:`SweepOptions`, passes a progress callback and prints the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from powersweep import __version__
from powersweep.clock import Clock, ScaledClock, real_clock
from powersweep.errors import PowersweepError, UsageError
from powersweep.sweep.caps import clamp_caps, default_caps, uniform_envelope
from powersweep.sweep.client import ChatClient
from powersweep.sweep.discovery import ServerInfo, discover_server, strip_credentials
from powersweep.sweep.driver import CapProgress, Sweep, SweepOutcome, SweepPlan
from powersweep.sweep.gpu import Gpu, GpuBackend
from powersweep.sweep.outputs import SCHEMA_VERSION, RunWriter

LOAD_MODES = ("decode-single", "decode-concurrent", "prefill-heavy")
SUPPORTED_LOAD_MODES = ("decode-single",)
COOLING = ("air", "water", "aio", "unspecified")
DEFAULT_SIM_TIME_SCALE = 30.0


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

    def recorded(self) -> dict[str, Any]:
        """The options as stored in ``run.json`` (no secrets, URL without credentials)."""
        data = asdict(self)
        data.pop("api_key")
        data["api_key_given"] = self.api_key is not None
        data["url"] = strip_credentials(self.url) if self.url else None
        data["out"] = str(self.out)
        data["sim_state"] = str(self.sim_state) if self.sim_state else None
        return data


@dataclass(frozen=True)
class SessionResult:
    """A finished session: where its run lives and how it ended."""

    run_dir: Path
    outcome: SweepOutcome


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
    if options.load_mode not in SUPPORTED_LOAD_MODES:
        raise UsageError(f"--load-mode {options.load_mode} is not yet supported")
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
    }


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
    from powersweep.sim.profiles import get_profile
    from powersweep.sim.rig import SimRig

    names = [n.strip() for n in options.simulate.split("+") if n.strip()]
    profiles = [get_profile(n) for n in names]
    scale = options.time_scale or (1.0 if options.url else DEFAULT_SIM_TIME_SCALE)
    clock = ScaledClock(scale)
    rig = SimRig(profiles, clock, seed=options.seed, state_file=options.sim_state)
    yield rig, clock, rig, profiles


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
            bad options). Failures during the sweep end up in the outcome instead.
    """
    validate(options)
    if options.cooling == "unspecified":
        warn("--cooling not given: results are labelled 'unspecified' (use air, water or aio)")
    if options.simulate is None:
        require_root()
    with _rig(options) as (backend, clock, rig, profiles):
        gpus = _select(backend, options.gpus, warn)
        caps = plan_caps(options, gpus, warn)
        server = None
        if rig is not None and options.url is None:
            from powersweep.sim.server import SimServer

            server = SimServer(
                rig, flavour=options.sim_server, model="sim-qwen3.6-27b", seed=options.seed
            )
        with server if server is not None else contextlib.nullcontext():
            url = server.url if server is not None else options.url
            info = asyncio.run(
                discover_server(url, model=options.model, api_key=options.api_key, clock=clock)
            )
            simulation = None
            if rig is not None:
                from powersweep.sim.rig import ground_truth

                truth = ground_truth(profiles, options.load_mode, caps)
                simulation = {
                    "profile": options.simulate,
                    "seed": options.seed,
                    "time_scale": clock.scale,
                    "server_flavour": options.sim_server if server is not None else None,
                    "ground_truth": truth.to_dict(),
                }
            meta = _run_meta(options, gpus, info, caps, simulation)
            writer = RunWriter(options.out, [g.identity().name for g in gpus], options.load_mode)
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
            )
            client = ChatClient(info, clock, api_key=options.api_key, max_connections=8)
            sweep = Sweep(plan, gpus, clock, client, writer, meta, progress=progress, warn=warn)
            outcome = sweep.run()
    return SessionResult(writer.path, outcome)


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
    }
