"""The composition root: builds the rig a sweep runs on (real NVML or amdsmi, simulated,
replayed).

This (with the backends it builds on, :mod:`powersweep.cli.gpu_backends`) is the one place
outside the tests that imports :mod:`powersweep.sim`: the sweep receives a
:class:`~powersweep.sweep.rig.Rig` and never knows whether its GPUs are real.

The reasoning: docs/architecture.md, "powersweep.cli.rigs".
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powersweep.cli._common import is_root, warn
from powersweep.cli.gpu_backends import check_sim_backend, open_backend, vendor_backend
from powersweep.clock import Clock, ScaledClock, real_clock
from powersweep.errors import UsageError
from powersweep.sim.faults import parse_fault
from powersweep.sim.memory_net import MemoryNetwork
from powersweep.sim.profiles import GpuProfile, fleet_card, parse_card_spec
from powersweep.sim.replay import ReplayCurve, ReplayRig, replay_profile, replay_truth
from powersweep.sim.server import SimServer
from powersweep.sim.sim_options import SimOptions
from powersweep.sim.sim_rig import SimRig, clock_ground_truth, ground_truth
from powersweep.sim.virtual_time import VirtualClock
from powersweep.sim.world import World
from powersweep.sweep.gpu import GpuBackend
from powersweep.sweep.options import SweepOptions
from powersweep.sweep.records.ownership import hand_over, invoking_user
from powersweep.sweep.rig import Rig
from powersweep.sweep.server.client import ChatClient
from powersweep.sweep.server.discovery import ServerInfo
from powersweep.sweep.session import require_root

SIM_MODEL = "sim-qwen3.6-27b"


@contextlib.contextmanager
def build_rig(options: SweepOptions, sim: SimOptions | None = None) -> Iterator[Rig]:
    """The rig for these options: real GPUs without ``--simulate``, else a simulated or replay
    rig set up by ``sim`` (None: the defaults; a resumed run's are those it recorded, at the
    pace ``sim`` gives).

    Raises:
        PowersweepError: No GPU library can start, or an unknown simulation profile.
    """
    if options.simulate is None:
        backend, kind = open_backend(options.cards.backend)
        try:
            yield Rig(backend, real_clock(), journal_backend={"kind": kind})
        finally:
            backend.close()
        return
    given = sim or SimOptions()
    recorded = _recorded_sim(options)
    if recorded is not None:
        # a resumed run's rig is the one it recorded; only the pace (which changes no figure)
        # is the one given now
        given = dataclasses.replace(recorded, pace=given.pace)
    with _simulated_rig(options, given) as rig:
        yield rig


def _recorded_sim(options: SweepOptions) -> SimOptions | None:
    """A resumed run's simulated rig, as its ``run.json`` recorded it (as its other options
    are); None when not resuming or there is none to read (the session names what is wrong)."""
    if options.output.resume is None:
        return None
    try:
        recorded = json.loads((options.output.resume / "run.json").read_text())["options"]
        return SimOptions.from_recorded(recorded)
    except (OSError, ValueError, TypeError, KeyError):
        return None


@contextlib.contextmanager
def _simulated_rig(options: SweepOptions, sim: SimOptions) -> Iterator[Rig]:
    assert options.simulate is not None
    clock = sim_clock(sim, options.server.url)
    network = MemoryNetwork(seed=sim.seed) if clock.runs_on_loop else None
    # the world's noise models, shared by the cards and the server (one burst, one gap)
    world = World.build(sim.world, sim.seed)
    engine: Any
    profiles: list[Any]
    if options.simulate.startswith("replay:"):
        if world is not None:
            raise UsageError(
                "--sim-world models a simulated card, not a replayed curve (replay:...)"
            )
        curve = replay_profile(Path(options.simulate.removeprefix("replay:")))
        engine = ReplayRig(curve, clock, seed=sim.seed)
        profiles = [curve]
    else:
        profiles = _profiles(options.simulate, sim)
        check_sim_backend(options.cards.backend, profiles)
        engine = SimRig(
            profiles,
            clock,
            seed=sim.seed,
            state_file=sim.state,
            serving=sim.serving_gpus,
            vf_reset_beyond_mhz=sim.vf_reset_beyond_mhz,
            world=world,
        )
    backend = vendor_backend(engine, clock) if isinstance(engine, SimRig) else engine
    served = options.server.url is None
    fault = parse_fault(sim.fault) if sim.fault else None

    @contextlib.contextmanager
    def serve() -> Iterator[str | None]:
        if not served:
            yield None
            return
        with SimServer(
            engine,
            flavour=sim.server,
            model=SIM_MODEL,
            seed=sim.seed,
            http_error=sim.http_error,
            total_slots=sim.slots,
            hide_num_ctx=sim.hide_num_ctx,
            reasoning_tokens=sim.reasoning_tokens,
            tokens_per_chunk=sim.tokens_per_chunk,
            ignore_max_tokens=sim.ignore_max_tokens,
            fault=fault,
            current_cap_w=lambda: engine.gpu(0).envelope().current_w,
            network=network,
            world=world,
        ) as server:
            yield server.url

    # the model's cards: what a sweep of the serving GPUs measures
    serving = [profiles[i] for i in sim.serving_gpus or range(len(profiles))]

    def truth(caps: Sequence[float], prep: Mapping[str, Any]) -> dict[str, Any] | None:
        return _truth(options, serving, list(caps), prep, world)

    def clock_truth(
        points: Sequence[tuple[float | None, float | None]], cap_w: float, prep: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        if isinstance(profiles[0], ReplayCurve):
            return None
        return clock_ground_truth(
            profiles, options.load.mode, list(points), cap_w, world=world, **_kw(prep)
        )

    with _user_keeps(sim.state):
        yield Rig(
            backend=backend,
            clock=clock,
            journal_backend=_journal_backend(options.simulate, sim),
            serve=serve,
            wrap_client=(lambda c: c) if served else (lambda c: _RigDrivingClient(c, engine)),
            simulation={
                "profile": options.simulate,
                "seed": sim.seed,
                "time_scale": clock.scale if clock.kind == "scaled" else None,
                "clock": clock.kind,
                "pace_run_s_per_s": sim.pace,
                "server_flavour": sim.server if served else None,
                "node": sim_node(sim),
                "world": world.record() if world is not None else None,
                **_offset_truth(engine, sim),
            },
            truth=truth,
            clock_truth=clock_truth,
            connector=network.connect if network is not None else None,
            limits_outlive_process=sim.state is not None,
            load_seed=sim.seed,
            recorded_options=sim.recorded(),
            tps_follows_card=served,
        )


def _offset_truth(engine: Any, sim: SimOptions) -> dict[str, Any]:
    """``run.json``'s truth of an undervolt search: each serving card's stable SM clock offset
    margin (by card index, as JSON keys are text), how far past it a card resets under load,
    and its stable memory clock offset (NVML's unit); None for a replayed curve, which has no
    offset."""
    if not isinstance(engine, SimRig):
        return {
            "stable_offset_mhz": None,
            "vf_reset_beyond_mhz": None,
            "stable_mem_offset_mhz": None,
        }
    margins = engine.truth_stable_offsets_mhz()
    mem_margins = engine.truth_stable_mem_offsets_mhz()
    return {
        "stable_offset_mhz": {str(i): mhz for i, mhz in margins.items()},
        "vf_reset_beyond_mhz": sim.vf_reset_beyond_mhz,
        "stable_mem_offset_mhz": {str(i): mhz for i, mhz in mem_margins.items()},
    }


def sim_clock(sim: SimOptions, url: str | None = None) -> Clock:
    """The simulated rig's clock: virtual time (paced with ``--sim-pace``) by default; scaled
    real time with ``--time-scale``; real time with ``--url`` (a real server answers in real
    time, the simulated GPU follows it)."""
    if url is not None or sim.time_scale is not None:
        scale = sim.time_scale or 1.0
        if scale > 1:
            # The simulated server, the client and the sampler share one interpreter: at the
            # default 5 ms GIL switch interval a token's arrival can be stamped up to 5 ms late,
            # which is `scale` times more in run time. Finer switching keeps the stamps within
            # 0.1%.
            sys.setswitchinterval(min(sys.getswitchinterval(), 0.0002))
        return ScaledClock(scale)
    return VirtualClock(pace_run_s_per_s=sim.pace)


@contextlib.contextmanager
def _user_keeps(state_file: Path | None) -> Iterator[None]:
    """Under sudo, a ``--sim-state`` file the command wrote (replaced, so root-owned and mode
    0600) goes back to the user who typed sudo, who reads it later without sudo."""
    try:
        yield
    finally:
        if state_file is not None and is_root():
            hand_over([state_file], invoking_user(), warn=warn)


def sim_node(sim: SimOptions) -> str:
    """The simulated node's name, which seeds its cards' spread: ``--sim-node``, else
    ``POWERSWEEP_SIM_NODE``, else the host name (so every node of a fleet gets its own cards)."""
    return sim.node or os.environ.get("POWERSWEEP_SIM_NODE") or socket.gethostname()


def _card_profiles(specs: Sequence[str], node: str) -> list[GpuProfile]:
    """One profile per ``+``-separated card spec (``rtx4090-air~0.03``), spread by node."""
    return [fleet_card(parse_card_spec(s), node, i) for i, s in enumerate(specs)]


def _profiles(spec: str, sim: SimOptions) -> list[GpuProfile]:
    names = [n.strip() for n in spec.split("+") if n.strip()]
    profiles = _card_profiles(names, sim_node(sim))
    changes: dict[str, Any] = {}
    if sim.rejects_below_w is not None:
        changes["rejects_below_w"] = sim.rejects_below_w
    if sim.context is not None:
        changes["context_tokens"] = sim.context
    if sim.mem_locks_refused:
        changes["mem_locks_supported"] = False
    if sim.sm_lock_ignored_below_mhz is not None:
        changes["sm_lock_ignored_below_mhz"] = sim.sm_lock_ignored_below_mhz
    return [dataclasses.replace(p, **changes) for p in profiles] if changes else profiles


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

    async def greedy(self, prompt: str, **kwargs: Any) -> Any:
        self._rig.work_started("decode")
        try:
            return await self._client.greedy(prompt, **kwargs)
        finally:
            self._rig.work_finished("decode")

    async def queued_requests(self) -> int | None:
        return await self._client.queued_requests()

    async def count_tokens(self, text: str) -> int | None:
        return await self._client.count_tokens(text)

    async def aclose(self) -> None:
        await self._client.aclose()


def _truth(
    options: SweepOptions,
    profiles: list[Any],
    caps: list[float],
    prep: Mapping[str, Any],
    world: World | None,
) -> dict[str, Any] | None:
    """The simulator's noise-free answer for this load (with the world's noise, its long-run
    steady value: docs/world-noise.md)."""
    if isinstance(profiles[0], ReplayCurve):
        return replay_truth(profiles[0], caps)
    return ground_truth(profiles, options.load.mode, caps, world=world, **_kw(prep)).to_dict()


def _kw(prep: Mapping[str, Any]) -> dict[str, Any]:
    """The ground truth's load parameters from the load's set-up (probe, calibration)."""
    kwargs: dict[str, Any] = {}
    if prep.get("effective_concurrency"):
        kwargs["concurrency"] = int(prep["effective_concurrency"])
    if prep.get("prompt_tokens"):
        kwargs["prompt_tokens"] = int(prep["prompt_tokens"])
    return kwargs


def _journal_backend(spec: str, sim: SimOptions) -> Mapping[str, Any]:
    """How ``powersweep restore`` rebuilds a simulated rig (a real one records its backend's
    kind in :func:`build_rig`)."""
    names = [n.strip() for n in spec.split("+") if n.strip()]
    state = sim.state.resolve() if sim.state else None
    return {
        "kind": "sim",
        "profiles": names,
        "node": sim_node(sim),
        "sim_state": str(state) if state else None,
        "seed": sim.seed,
    }


def restore_backend(
    backend_spec: Mapping[str, Any], override: str | None = None
) -> contextlib.AbstractContextManager[Any]:
    """Rebuild the GPU backend a journal names (for ``powersweep restore``).

    Args:
        backend_spec: The journal's ``backend``.
        override: ``--backend``: the library to use instead of the journal's (real GPUs only).

    Raises:
        PowersweepError: The library cannot start, or an unknown simulation profile.
    """
    if backend_spec.get("kind") == "sim":
        if override is not None:
            raise UsageError("--backend does not apply to a simulated rig's journal")
        profiles = _card_profiles(
            [str(n) for n in backend_spec.get("profiles", [])], str(backend_spec.get("node") or "")
        )
        state = backend_spec.get("sim_state")
        state_file = Path(state) if state else None
        clock = VirtualClock()  # nothing is measured: run time stands still
        rig = SimRig(
            profiles,
            clock,
            seed=int(backend_spec.get("seed", 0)),
            state_file=state_file,
        )
        return _with_user_keeps(vendor_backend(rig, clock), state_file)
    require_root()
    backend, _ = open_backend(override or str(backend_spec.get("kind") or "nvml"))
    return contextlib.closing(backend)


@contextlib.contextmanager
def _with_user_keeps(rig: Any, state_file: Path | None) -> Iterator[Any]:
    with _user_keeps(state_file):
        yield rig


@dataclass(frozen=True)
class SettingsRig:
    """The GPUs ``powersweep status`` reads and ``powersweep apply`` sets.

    Attributes:
        backend: The GPUs.
        simulated: True for ``--simulate`` (no root needed, settings live in ``--sim-state``).
        rig_args: The ``powersweep`` options that rebuild this rig (for the boot unit).
        journal_backend: How ``powersweep restore`` rebuilds it (the restore journal's
            ``backend``).
    """

    backend: GpuBackend
    simulated: bool
    rig_args: tuple[str, ...] = ()
    journal_backend: Mapping[str, Any] = dataclasses.field(default_factory=lambda: {"kind": "nvml"})


@contextlib.contextmanager
def build_settings_rig(
    simulate: str | None,
    sim_state: Path | None,
    backend: str = "auto",
    sim_node: str | None = None,
) -> Iterator[SettingsRig]:
    """Real GPUs (``backend``: auto, nvml, amdsmi) without ``simulate``, else simulated cards
    whose settings live in ``sim_state`` (a fleet card's spread seeded by ``sim_node``, else
    ``POWERSWEEP_SIM_NODE``, else the host name).

    Raises:
        PowersweepError: No GPU library can start, or an unknown or replayed simulation profile.
    """
    if simulate is None:
        gpus, kind = open_backend(backend)
        try:
            again = ("--backend", kind) if kind != "auto" else ()
            yield SettingsRig(gpus, simulated=False, rig_args=again, journal_backend={"kind": kind})
        finally:
            gpus.close()
        return
    if simulate.startswith("replay:"):
        raise UsageError("status and apply simulate profiles, not replayed curves (replay:...)")
    names = [n.strip() for n in simulate.split("+") if n.strip()]
    # fleet cards (NAME~SPREAD) are the same cards the sweep on this node simulated
    node = sim_node or os.environ.get("POWERSWEEP_SIM_NODE") or socket.gethostname()
    profiles = _card_profiles(names, node)
    check_sim_backend(backend, profiles)
    clock = VirtualClock()  # nothing is measured: run time stands still
    rig = SimRig(profiles, clock, state_file=sim_state)
    args: tuple[str, ...] = ("--simulate", "+".join(names))
    if sim_state is not None:
        args += ("--sim-state", str(sim_state.resolve()))
    journal = {
        "kind": "sim",
        "profiles": names,
        "node": node,
        "sim_state": str(sim_state.resolve()) if sim_state is not None else None,
        "seed": 0,
    }
    with _user_keeps(sim_state):
        yield SettingsRig(
            vendor_backend(rig, clock), simulated=True, rig_args=args, journal_backend=journal
        )
