"""One sweep session from options: pick the GPUs, find the server, plan the caps, run, restore.

This is what ``powersweep sweep`` does, minus the terminal: the CLI turns flags into
:class:`~powersweep.sweep.options.SweepOptions`, builds the rig (its composition root), passes a
progress callback and prints the outcome.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from powersweep import __version__
from powersweep.clock import Clock
from powersweep.errors import PowersweepError, UsageError
from powersweep.runformat import SCHEMA_VERSION
from powersweep.sweep.axes import axis_named
from powersweep.sweep.driver import (
    CapProgress,
    Sweep,
    SweepOutcome,
    SweepPlan,
)
from powersweep.sweep.gpu import Gpu
from powersweep.sweep.gpu_choice import GpuChoice, check_settable, gpu_meta, select_gpus
from powersweep.sweep.loads.arrivals import ScheduleSpec, read_prompts
from powersweep.sweep.loads.base import Load, request_budget_s
from powersweep.sweep.loads.concurrent import DecodeConcurrent
from powersweep.sweep.loads.pace import Pace
from powersweep.sweep.loads.prefill import PrefillHeavy
from powersweep.sweep.loads.serving import Serving
from powersweep.sweep.loads.single import DecodeSingle
from powersweep.sweep.options import Strategy, SweepOptions
from powersweep.sweep.options_check import validate
from powersweep.sweep.plan import journal_for
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.planning.undervolt_steps import UndervoltPlan
from powersweep.sweep.records.cardlock import card_key, locks_for
from powersweep.sweep.records.journal import (
    Journal,
    JournalEntry,
    RestoreResult,
    default_state_dir,
    owner_alive,
    owner_refusal,
    restore_gpus,
)
from powersweep.sweep.records.writer import RunWriter, utc_now_iso
from powersweep.sweep.resume import ResumeState, prepare_resume, resume_options
from powersweep.sweep.rig import Rig, RigFactory
from powersweep.sweep.server.client import ChatClient
from powersweep.sweep.server.discovery import ServerInfo, discover_server, strip_credentials
from powersweep.sweep.server.local import local_server_pids
from powersweep.sweep.signals import raise_on_signals, run_interruptible, signals_ignored


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


def run_session(
    options: SweepOptions,
    rigs: RigFactory,
    *,
    progress: Callable[[CapProgress], None] | None = None,
    warn: Callable[[str], None] = lambda _m: None,
    on_plan: Callable[[Path, list[float]], None] | None = None,
    on_points: Callable[[Path, list[SweepPoint], int | None], None] | None = None,
    on_restored: Callable[[Sequence[Mapping[str, Any]], bool], None] | None = None,
) -> SessionResult:
    """Run one sweep from options to a finished run directory.

    Args:
        options: The sweep's options.
        rigs: Builds the rig for the options (the composition root's
            :func:`powersweep.cli.rigs.build_rig`, or a test's).
        progress: Called after each cap.
        warn: Where warnings go (one line each).
        on_plan: Called with the run directory and the caps once they are known.
        on_points: On a clock axis, called instead with the clock-lock points and, for an
            undervolt search (whose steps come as it goes), the points it likely measures.
        on_restored: Called with what was restored the moment it is back (signals ignored),
            and whether the sweep's loop ran to its end.

    Raises:
        PowersweepError: Anything that stops the sweep before it starts (no root, no server,
            bad options, a journal left by a killed sweep). Failures during the sweep end up in
            the outcome instead.
    """
    with raise_on_signals():
        return _run_session(
            options,
            rigs,
            progress=progress,
            warn=warn,
            on_plan=on_plan,
            on_points=on_points,
            on_restored=on_restored,
        )


def needs_journal(options: SweepOptions, rig: Rig) -> bool:
    """True when a limit this sweep sets would outlive the process (real GPUs, or a simulated
    rig whose settings persist in a file)."""
    return options.safety.changes_limits and rig.limits_outlive_process


def _open_journal(
    options: SweepOptions, rig: Rig, warn: Callable[[str], None]
) -> tuple[Journal | None, JournalEntry | None]:
    """The restore journal (None when no limit outlives the process) and the journal a dead
    sweep left, if any (its limits are put back before this sweep starts).

    Raises:
        UsageError: Another sweep that still runs owns the journal (``--force`` or not), or the
            dead sweep's journal holds clock locks (``powersweep restore`` first).
    """
    if not needs_journal(options, rig):
        return None, None
    journal = journal_for(options)
    old = journal.read()
    if old is None:
        return journal, None
    if old.outcome is not None and all(r.get("ok") for r in old.outcome.get("restored", [])):
        # The last sweep restored everything but could not write its run.json: say so once.
        warn(
            f"the last sweep ({old.run_dir or 'run directory unknown'}) ended "
            f"{old.outcome.get('status')} and restored its limits, but could not record it: "
            f"{old.outcome.get('record_error')}"
        )
        journal.remove()
        return journal, None
    if owner_alive(old):
        raise UsageError(owner_refusal(old, journal.path))
    journal.refuse_if_locked()
    # Its owner is dead (SIGKILL, a crash): nobody else will put its limits back, and a sweep
    # that started over them would take a sweep cap for the user's own limit.
    warn(
        f"a journal of an unfinished sweep (PID {old.pid}, no longer running) exists "
        f"({journal.path}); its original limits are put back first"
    )
    return journal, old


def _restore_dead_owner(
    entry: JournalEntry, journal: Journal | None, rig: Rig, warn: Callable[[str], None]
) -> dict[str, float]:
    """Put back what a dead sweep's journal holds; the original limits by UUID to keep.

    The journal goes once every limit is back (this sweep writes its own before its first
    change); otherwise it stays, and this sweep restores the limits it names.
    """
    originals = {g.uuid: g.original_limit_w for g in entry.gpus}
    if dict(entry.backend).get("kind") != dict(rig.journal_backend).get("kind"):
        return originals  # another backend's journal: `powersweep restore` handles it
    with signals_ignored():
        results = restore_gpus(entry, rig.backend, warn)
        if journal is not None and results and all(r.ok for r in results):
            journal.remove()
        for r in results:
            _say_restored(r, entry.pid, warn)
    return originals


def _say_restored(r: RestoreResult, pid: int, warn: Callable[[str], None]) -> None:
    if r.offset:
        warn(f"GPU {r.index}: {r.offset} (left by PID {pid})")
    if r.ok:
        warn(f"GPU {r.index}: power limit restored to {r.limit_w:g} W (left by PID {pid})")
    else:
        warn(f"GPU {r.index}: could not restore {r.limit_w:g} W: {r.message}")


def _run_session(
    options: SweepOptions,
    rigs: RigFactory,
    *,
    progress: Callable[[CapProgress], None] | None,
    warn: Callable[[str], None],
    on_plan: Callable[[Path, list[float]], None] | None,
    on_points: Callable[[Path, list[SweepPoint], int | None], None] | None = None,
    on_restored: Callable[[Sequence[Mapping[str, Any]], bool], None] | None = None,
) -> SessionResult:
    resume_meta: dict[str, Any] | None = None
    if options.output.resume is not None:
        options, resume_meta = resume_options(options.output.resume, options)
    validate(options)
    if options.output.cooling == "unspecified" and resume_meta is None:
        warn("--cooling not given: results are labelled 'unspecified' (use air, water or aio)")
    if options.simulate is None and options.safety.changes_limits:
        require_root()
    out_created = not options.output.out.exists()
    with (
        rigs(options) as rig,
        locks_for("sweep", options.safety.state_dir or default_state_dir()) as locks,
    ):
        journal, stale = _open_journal(options, rig, warn)
        backend = rig.backend
        if stale is not None:
            locks.take(
                (card_key(rig.journal_backend, g.uuid), f"GPU {g.index}") for g in stale.gpus
            )
        originals_by_uuid = _restore_dead_owner(stale, journal, rig, warn) if stale else {}
        with rig.serve() as served_url:
            url = served_url or options.server.url
            info = run_interruptible(
                discover_server(
                    url,
                    model=options.server.model,
                    api_key=options.server.api_key,
                    clock=rig.clock,
                    transport=rig.transport(),
                ),
                loop_factory=rig.clock.loop_factory,
            )
            # the server first: its process tells which GPUs serve the model
            choice = select_gpus(
                backend,
                options.cards.gpus,
                warn,
                all_gpus=options.cards.all_gpus,
                server_pids=local_server_pids(info.base_url),
            )
            gpus = choice.gpus
            # before any change, whatever the state directory: one sweep per card
            locks.take(
                (card_key(rig.journal_backend, g.identity().uuid), f"GPU {g.index}") for g in gpus
            )
            resume = prepare_resume(options, resume_meta, gpus) if resume_meta else None
            for name in resume.writer.dropped_partial if resume else ():
                warn(f"{name}: dropped a half-written last row (the run was cut mid-write)")
            axis = axis_named(options.points.axis)
            planned = (
                axis.resumed(options, gpus, resume)
                if resume
                else axis.plan(options, gpus, warn, rig.clock)
            )
            caps, points = planned.caps_w, planned.points
            if options.safety.changes_limits and axis.sets_limit(options):
                check_settable(gpus)
            meta, writer = _open_run(options, rig, gpus, info, caps, resume, choice, points)
            if points and on_points:
                likely = planned.undervolt.likely_points if planned.undervolt else None
                on_points(writer.path, points, likely)
            elif on_plan:
                on_plan(writer.path, caps)
            streams = options.load.concurrency or options.load.max_concurrency_probe
            connections = max(8, streams + 2) if options.load.mode == "decode-concurrent" else 8
            if options.load.mode == "serving":
                connections = max(8, options.load.max_in_flight + 2)
            client = rig.wrap_client(
                ChatClient(
                    info,
                    rig.clock,
                    api_key=options.server.api_key,
                    max_connections=connections,
                    request_budget_s=_request_budget_s(options),
                    connector=rig.connector,
                )
            )
            truth_caps = list(caps) if resume is None else list(meta.get("caps_planned", caps))

            all_points = [
                SweepPoint.from_dict(p) for p in meta.get("points_planned") or []
            ] or points

            def on_prepared(prep: dict[str, Any]) -> Mapping[str, Any]:
                sim = meta.get("simulation")
                if not isinstance(sim, dict) or rig.truth is None:
                    return {}
                # serving: the simulator states no truth of open-loop arrivals yet
                if options.load.mode in ("decode-single", "serving"):
                    return {}
                if axis.locks_clocks:
                    truth = _clock_truth(rig, all_points, caps[0], prep)
                    return {"simulation": {**sim, "ground_truth": truth}}
                return {"simulation": {**sim, "ground_truth": rig.truth(truth_caps, prep)}}

            sweep = Sweep(
                _sweep_plan(options, caps, resume, points, planned.undervolt),
                gpus,
                rig.clock,
                client,
                writer,
                meta,
                progress=progress,
                warn=warn,
                journal=journal,
                journal_backend=rig.journal_backend,
                originals={
                    g.index: originals_by_uuid[g.identity().uuid]
                    for g in gpus
                    if g.identity().uuid in originals_by_uuid
                },
                caps_already_done=resume.caps_done if resume else (),
                earlier_status=resume.cap_status if resume else None,
                load_factory=_load_factory(
                    options, client, rig.clock, info, warn, seed=rig.load_seed
                ),
                prepared=resume.meta.get("load") if resume else None,
                on_prepared=on_prepared,
                points_already_done=resume.points_done if resume else (),
                watch=[
                    backend.gpu(i)
                    for i in range(backend.device_count())
                    if i not in {g.index for g in gpus}
                ],
                busy_gpus=choice.busy_gpus,
                on_restored=on_restored,
                context_tokens=info.context_tokens,
                tps_follows_card=rig.tps_follows_card,
                # the floor was measured where the server, not a card, sets the rate: a
                # CPU llama.cpp server beside a simulated card; a real card's runs carry the
                # run-to-run term they measure themselves
                server_sets_rate=served_url is None and not rig.tps_follows_card,
            )
            outcome = sweep.run()
    return SessionResult(writer.path, outcome, out_created)


def _open_run(
    options: SweepOptions,
    rig: Rig,
    gpus: list[Gpu],
    info: ServerInfo,
    caps: list[float],
    resume: ResumeState | None,
    choice: GpuChoice,
    points: list[SweepPoint] | None = None,
) -> tuple[dict[str, Any], RunWriter]:
    """The run's ``run.json`` content and its writer: a new run directory, or the resumed one."""
    if resume is not None:
        meta = dict(resume.meta)
        meta["resumed_at"] = [*meta.get("resumed_at", []), utc_now_iso()]
        return meta, resume.writer
    simulation = None
    if rig.simulation is not None:
        single = options.load.mode == "decode-single"
        truth = None
        if single and points:
            truth = _clock_truth(rig, points, caps[0], {})
        elif single and rig.truth is not None:
            truth = rig.truth(caps, {})
        # modes that probe or calibrate get theirs once the load is set up
        simulation = {**rig.simulation, "ground_truth": truth}
    meta = _run_meta(options, gpus, info, caps, simulation)
    meta["options"].update(rig.recorded_options)
    meta["gpu_selection"] = choice.meta()
    if points:
        meta["axis"] = options.points.axis
        meta["points_planned"] = [p.to_dict() for p in points]
    writer = RunWriter(
        options.output.out,
        [g.identity().name for g in gpus],
        options.load.mode,
        initial_meta={**meta, "status": "running", "caps_done": []},
        axis=options.points.axis,
        cooling=options.output.cooling,
    )
    return meta, writer


def _clock_truth(
    rig: Rig, points: list[SweepPoint], cap_w: float, prep: Mapping[str, Any]
) -> dict[str, Any] | None:
    if rig.clock_truth is None:
        return None
    pairs = [(p.sm_lock_mhz, p.mem_lock_mhz) for p in points]
    return rig.clock_truth(pairs, cap_w, prep)


def _request_budget_s(options: SweepOptions) -> float:
    """Run seconds any request without its own deadline may take (probes, calibration): the
    longest window the options ask for, twice, plus the margin every measured request gets."""
    longest = max(options.measure.windows.max_s, options.prefill_seconds)
    return request_budget_s(2 * longest)


def _sweep_plan(
    options: SweepOptions,
    caps: list[float],
    resume: ResumeState | None,
    points: list[SweepPoint] | None = None,
    undervolt: UndervoltPlan | None = None,
) -> SweepPlan:
    dense = options.safety.observe_only or resume is not None
    return SweepPlan(
        caps_w=tuple(caps),
        clock_points=tuple(points or ()),
        load=options.load,
        measure=options.measure,
        # a resumed or observe-only sweep measures what is left, every point
        points=replace(options.points, strategy=Strategy.DENSE) if dense else options.points,
        safety=options.safety,
        undervolt=undervolt,
    )


def _load_factory(
    options: SweepOptions,
    client: Any,
    clock: Clock,
    info: ServerInfo,
    warn: Callable[[str], None],
    seed: int = 0,
) -> Callable[[Any, Pace], Load]:
    """Builds the load of ``options.load.mode`` once the driver has its sampler (``seed``: of
    the generated prompt bodies)."""

    def make(sampler: Any, pace: Pace) -> Load:
        if options.load.mode == "decode-concurrent":
            return DecodeConcurrent(
                client,
                clock,
                sampler,
                options.measure.windows.max_s,
                concurrency=options.load.concurrency,
                bench_runs=options.load.bench_runs,
                max_probe=options.load.max_concurrency_probe,
                load_target=options.load.load_target,
                stretch=options.load.concurrency_stretch,
                engine=info.engine,
                total_slots=info.total_slots,
                context_tokens=info.context_tokens,
                warn=warn,
                pace=pace,
            )
        if options.load.mode == "prefill-heavy":
            return PrefillHeavy(
                client,
                clock,
                sampler,
                options.measure.windows.max_s,
                target_prefill_s=options.prefill_seconds,
                context_tokens=info.context_tokens,
                engine=info.engine,
                seed=seed,
                warn=warn,
            )
        if options.load.mode == "serving":
            return _serving(options, client, clock, sampler, info, seed)
        return DecodeSingle(client, clock, sampler, options.measure.windows.max_s, pace)

    return make


def _serving(
    options: SweepOptions, client: Any, clock: Clock, sampler: Any, info: ServerInfo, seed: int
) -> Serving:
    """The serving load of the options (its prompts file read here, checked before)."""
    load = options.load
    spec = ScheduleSpec(
        rate_rps=load.request_rate_rps,
        process=load.arrivals,
        burstiness=load.burstiness,
        seed=seed,
        profile=load.lengths,
        prompts=read_prompts(load.prompts_file) if load.prompts_file is not None else (),
        max_prompt_tokens=info.context_tokens,
    )
    return Serving(
        client,
        clock,
        sampler,
        options.measure.windows.max_s,
        spec,
        max_in_flight=load.max_in_flight,
        max_ttft_ms=load.max_ttft_ms,
        max_itl_ms=load.max_itl_ms,
        seed=seed,
    )


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
        "gpus": [gpu_meta(g) for g in gpus],
        "cooling": options.output.cooling,
        "load_mode": options.load.mode,
        "options": options.recorded(),
        "server": {
            "url": strip_credentials(info.base_url),
            "model": info.model,
            "engine": info.engine,
            "context_tokens": info.context_tokens,
        },
        "simulation": simulation,
        "caps_planned": sorted(caps, reverse=True),
        "observe_only": options.safety.observe_only,
        # a fleet report names each card by the node it ran on
        "host": socket.gethostname(),
    }
