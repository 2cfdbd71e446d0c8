"""The sweep driver: one loop over operating points, then always restore and record.

A sweep is a plan of operating points (a power limit, and optionally an SM and a memory lock,
on one or several GPUs).

The reasoning: docs/architecture.md, "powersweep.sweep.driver".
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from powersweep.analysis.precision import REAL_SERVER_FLOOR_REL, RunToRun
from powersweep.clock import Clock
from powersweep.errors import PowersweepError
from powersweep.sweep.gpu import Gpu
from powersweep.sweep.loads.base import ChatApi, Load
from powersweep.sweep.loads.pace import Pace
from powersweep.sweep.loads.single import DecodeSingle
from powersweep.sweep.locks import ClockLocker, usable_points
from powersweep.sweep.measurement.confirm_phase import ConfirmPhase
from powersweep.sweep.measurement.idle_draw import measure_idle
from powersweep.sweep.measurement.point import SOAK, PointMeasurer, PointProgress, Protocol
from powersweep.sweep.measurement.restorer import Restorer
from powersweep.sweep.measurement.run_to_run import RunToRunPhase, best_reference
from powersweep.sweep.measurement.setup import LoadSetup
from powersweep.sweep.measurement.stability import GreedyApi, StabilityCheck
from powersweep.sweep.offsets import ClockOffsetter
from powersweep.sweep.planning.memory_steps import MemorySearch, tps_from
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.planning.schedule import (
    AdaptiveClockSchedule,
    AdaptivePowerSchedule,
    DenseSchedule,
    Schedule,
)
from powersweep.sweep.planning.strategy import AdaptivePlanner
from powersweep.sweep.planning.undervolt_steps import REBASE, RETRY, UndervoltSchedule
from powersweep.sweep.records.journal import Journal
from powersweep.sweep.records.writer import RunWriter, utc_now_iso
from powersweep.sweep.sampling.consistency import ratio_outliers
from powersweep.sweep.sampling.sampler import Sampler
from powersweep.sweep.signals import (
    SweepInterrupted,
    raise_on_signals,
    run_interruptible,
    signals_ignored,
)
from powersweep.sweep.sweep_plan import SweepOutcome, SweepPlan
from powersweep.sweep.verdict import FaultLog, judge

# Kept for callers of the old name: one progress record per point.
CapProgress = PointProgress


LoadFactory = Callable[[Sampler, Pace], Load]


class Sweep:
    """One sweep over a GPU set.

    Args:
        plan: What to measure.
        gpus: The GPU set (every point is set on each).
        clock: Run clock.
        client: The server client (one per sweep).
        writer: The run directory.
        run_meta: ``run.json`` content known before the sweep; status fields are added.
        progress: Called after each point.
        warn: Where warnings go (one line each).
        journal: Where the original settings are written before the first change (None: no
            journal, e.g. a simulated rig whose limits die with the process).
        journal_backend: How ``powersweep restore`` rebuilds the backend.
        originals: Limits to restore per GPU index instead of the ones in force now (a sweep
            over a journal left by a killed one restores the user's limits).
        caps_already_done: Caps a resumed run finished before (they stay in ``caps_done``).
        load_factory: Builds the load from the sampler and the pace (default: decode-single).
        prepared: The load's set-up from an earlier run (``--resume``).
        on_prepared: Called with the load's set-up once it is known; returns keys to merge into
            ``run.json`` (the simulator's ground truth for that load).
        points_already_done: Clock points a resumed run finished before.
        watch: GPUs outside the set, only read during the warm-up.
        busy_gpus: Indices of the set's GPUs that serve the model (None: every GPU of the set).
        on_restored: Called with what was restored as soon as it is back, while signals are
            still ignored (so a second Ctrl-C cannot hide it), and whether the sweep's loop
            ran to its end (no signal, no error: the progress bar ends full).
        earlier_status: Status of each cap a resumed run finished before (default ``ok``).
        context_tokens: The server's context (requests ask for no more than fits).
        before_change: Called before any setting is changed, after the check that the journal
            is still this sweep's.
        tps_follows_card: The server's token rate follows the cards' clocks (False: an
            undervolt search cannot see clock stretching in it).
        server_sets_rate: A real server sets the rate, not the cards the sweep drives (a
            simulated card beside a real server): every point's stated interval carries the
            between-run floor measured for such a server
            (:data:`~powersweep.analysis.precision.REAL_SERVER_FLOOR_REL`); a real card's runs
            carry only the run-to-run term they measure themselves.
    """

    def __init__(
        self,
        plan: SweepPlan,
        gpus: Sequence[Gpu],
        clock: Clock,
        client: ChatApi,
        writer: RunWriter,
        run_meta: dict[str, Any],
        *,
        progress: Callable[[PointProgress], None] | None = None,
        warn: Callable[[str], None] = lambda _m: None,
        journal: Journal | None = None,
        journal_backend: Mapping[str, Any] | None = None,
        originals: Mapping[int, float] | None = None,
        caps_already_done: Sequence[float] = (),
        load_factory: LoadFactory | None = None,
        prepared: Mapping[str, Any] | None = None,
        on_prepared: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None,
        points_already_done: Sequence[SweepPoint] = (),
        watch: Sequence[Gpu] = (),
        busy_gpus: Sequence[int] | None = None,
        on_restored: Callable[[Sequence[Mapping[str, Any]], bool], None] | None = None,
        earlier_status: Mapping[float, str] | None = None,
        context_tokens: int | None = None,
        before_change: Callable[[], None] = lambda: None,
        tps_follows_card: bool = True,
        server_sets_rate: bool = False,
    ) -> None:
        self.plan = plan
        self.gpus = list(gpus)
        self.clock = clock
        self.client = client
        self.writer = writer
        self.meta = dict(run_meta)
        self.warn = warn
        self.sampler = Sampler(self.gpus, clock, plan.measure.sample_interval_s)
        self.pace = Pace(context_tokens)
        if load_factory is None:
            self.load: Load = DecodeSingle(
                client, clock, self.sampler, plan.measure.windows.max_s, self.pace
            )
        else:
            self.load = load_factory(self.sampler, self.pace)
        if self.load.mode != plan.load.mode:
            raise PowersweepError(f"load {self.load.mode} does not match {plan.load.mode}")
        self._prepared = dict(prepared) if prepared else None
        self._on_prepared = on_prepared
        self._on_restored = on_restored
        original = {g.index: g.envelope().current_w for g in self.gpus}
        original.update({i: w for i, w in (originals or {}).items() if i in original})
        self._caps_done: list[float] = list(caps_already_done)
        self._points_done = list(points_already_done)
        self._signum: int | None = None
        self._faults = FaultLog()
        locker = (
            ClockLocker(self.gpus, warn, plan.points.sm_clock_min_mhz)
            if plan.clock_points
            else None
        )
        offsetter = ClockOffsetter(self.gpus, warn) if plan.undervolt else None
        mem_offsetter = (
            ClockOffsetter(self.gpus, warn, clock="mem")
            if plan.undervolt and plan.undervolt.memory
            else None
        )
        self.restorer = Restorer(
            self.gpus,
            original,
            journal=None if plan.safety.observe_only else journal,
            backend=journal_backend or {"kind": "nvml"},
            locker=locker,
            offsetter=offsetter,
            mem_offsetter=mem_offsetter,
            no_reset=plan.safety.no_reset,
            warn=warn,
        )
        self.measurer = PointMeasurer(
            Protocol(load_mode=plan.load.mode, measure=plan.measure, safety=plan.safety),
            self.gpus,
            clock,
            self.load,
            self.sampler,
            writer,
            self._faults,
            default_cap_w=min(original.values()),
            pace=self.pace,
            locker=locker,
            offsetter=offsetter,
            mem_offsetter=mem_offsetter,
            stability=self._stability_check(context_tokens, tps_follows_card),
            soak_s=plan.undervolt.soak_s if plan.undervolt else 0.0,
            busy_gpus=frozenset(busy_gpus) if busy_gpus else None,
            warn=warn,
            progress=progress,
            before_change=self._before_change,
            on_point=self._point_done,
        )
        floor = REAL_SERVER_FLOOR_REL if server_sets_rate else 0.0
        self.measurer.run_to_run = RunToRun(floor_rel=floor)
        for c in caps_already_done:
            done = SweepPoint(c)
            self.measurer.ledger.points[done.key] = done
            self.measurer.ledger.status[done.key] = (earlier_status or {}).get(c, "ok")
        self.setup = LoadSetup(
            client=client,
            clock=clock,
            load=self.load,
            pace=self.pace,
            sampler=self.sampler,
            writer=writer,
            faults=self._faults,
            gpus=self.gpus,
            watch=watch,
            meta=self.meta,
            window_s=plan.measure.windows.max_s,
            warmup_requests=plan.load.warmup_requests,
            warn=warn,
            thermal=self.measurer.thermal,
        )
        # TPS/W of each point measured ok (the confirm phase keeps the card warm at the best)
        self._best: dict[SweepPoint, float] = {}
        self._n_measured = 0
        # the points measured ok, in the order they first were: the first whose reading still
        # stands is read again at the end (the run-to-run term)
        self._measured_ok: list[SweepPoint] = []
        # each point's latest row as the schedule measured it (a search reads why one failed)
        self._last_rows: dict[SweepPoint, Mapping[str, Any]] = {}
        self._extra_check = before_change

    def _stability_check(
        self, context_tokens: int | None, tps_follows_card: bool = True
    ) -> StabilityCheck | None:
        """The undervolt search's check of each step (None on every other axis)."""
        if self.plan.undervolt is None:
            return None
        metric = "prefill_tps" if self.plan.load.mode == "prefill-heavy" else "narr_tps"
        if not callable(getattr(self.client, "greedy", None)):
            raise PowersweepError("this client cannot send greedy probes: no undervolt search")
        check = StabilityCheck(
            cast(GreedyApi, self.client),
            self.gpus,
            self.clock,
            metric=metric,
            context_tokens=context_tokens,
            check_stretch=tps_follows_card,
        )
        if not tps_follows_card:
            what = "the TPS comes from a server the simulated card does not drive"
            self._faults.add("stretch_unchecked", what)
            self.warn(f"{what}: no step is judged by its TPS (clock stretching)")
        blind = [g.index for g, ok in zip(self.gpus, check.xids_readable, strict=True) if not ok]
        if blind:
            what = f"GPU {', '.join(map(str, blind))} cannot report Xid errors"
            self._faults.add("xid_unreadable", what)
            self.warn(f"{what}: each step is checked by its answers, the card's state and TPS")
        return check

    def _stale_bytes(self) -> None:
        """Connections the server sent unasked-for bytes on (the transport closed them unread):
        a fault, and said, since the server misbehaved."""
        stale = int(getattr(self.client, "stale_connections", 0) or 0)
        if stale:
            what = (
                f"{stale} kept connection(s) got bytes no request asked for (a second response "
                "from the server): closed unread; later requests went on new connections"
            )
            for _ in range(stale):
                self._faults.add("stale_bytes", what)
            self.warn(what)

    def _before_change(self) -> None:
        """Every change goes through the restore journal: it must still be this sweep's."""
        self.restorer.ensure_owned()
        self._extra_check()

    # --- public -------------------------------------------------------------------------------

    def run(self) -> SweepOutcome:
        """Run the sweep to the end, an error or a signal; always restore and record."""
        status, error = "complete", None
        self.meta.update(status="running", started_at=utc_now_iso(), caps_done=[], restored=[])
        started_s = self.clock.now()
        for g in self.meta.get("gpus", []):
            g["original_limit_w"] = self.restorer.originals.get(
                g.get("index"), g.get("original_limit_w")
            )
        self.writer.write_run_json(self.meta)
        try:
            with raise_on_signals():
                self.restorer.write_journal(str(self.writer.path.resolve()))
                run_interruptible(self._main(), loop_factory=self.clock.loop_factory)
        except SweepInterrupted as exc:
            status, error, self._signum = "interrupted", str(exc), exc.signum
        except (KeyboardInterrupt, asyncio.CancelledError):
            status = "interrupted"
            self._signum = self._signum or signal.SIGINT
            error = f"interrupted by {signal.Signals(self._signum).name}"
        except PowersweepError as exc:
            status, error = "failed", str(exc)
        except Exception as exc:  # the run must still restore and record; the CLI reports it
            status, error = "failed", f"internal error: {type(exc).__name__}: {exc}"
        finally:
            with signals_ignored():
                self.sampler.stop()
                self._flush_samples()
                restored = self.restorer.restore(self.measurer.touched)
                if self._on_restored is not None:
                    with contextlib.suppress(Exception):
                        self._on_restored(restored, status == "complete")
                self._stale_bytes()
                if status == "complete":
                    status, error = judge(self.measurer.ledger.status.values())
                self.meta.update(
                    status=status,
                    error=error,
                    ended_at=utc_now_iso(),
                    caps_done=list(self._caps_done),
                    restored=list(restored),
                    read_errors=self.sampler.read_errors,
                    faults=self._faults.to_list(),
                    timing={
                        "started_s": started_s,
                        "ended_s": self.clock.now(),
                        "points_measured": self._n_measured,
                    },
                )
                record_error = self._write_final_record()
                outcome = {k: self.meta.get(k) for k in ("status", "error", "ended_at")}
                self.restorer.close_journal(restored, outcome, record_error)
        if record_error:
            status = "failed" if status == "complete" else status
            error = "; ".join(e for e in (error, record_error) if e)
        return SweepOutcome(status, error, self._signum, tuple(self._caps_done), tuple(restored))

    # --- the loop -----------------------------------------------------------------------------

    async def _main(self) -> None:
        main = asyncio.current_task()
        assert main is not None
        watch = asyncio.get_running_loop().create_task(self.restorer.watch(self.clock, main))
        try:
            async with self.sampler.running():
                await self._measure_all()
        except asyncio.CancelledError:
            if self.restorer.lost is None:
                raise
            main.uncancel()  # the stop is the lost journal's, not a signal's
            raise self.restorer.lost from None
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            await self.measurer.stop_busy()
            aclose = getattr(self.client, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    async def _measure_all(self) -> None:
        plan = self.plan
        done = {p for p in self._points_done}
        points = [p for p in self._usable(plan.all_points()) if p not in done]
        first = points[0]
        # The first point is set before the warm-up, so the load is set up where it is
        # measured; a card that refuses it still gets a prepared load for the other points.
        self.sampler.set_locks(first.sm_lock_mhz, first.mem_lock_mhz, first.sm_offset_mhz)
        self.measurer.apply(first)
        await self.setup.run(
            self.measurer.cap_of(first),
            (first.sm_lock_mhz, first.mem_lock_mhz),
            self._prepared,
            self._on_prepared,
        )
        schedule = self._schedule(points)
        if isinstance(schedule, UndervoltSchedule):
            try:
                await self._run_schedule(schedule)
                await self._soak(schedule)
                await self._memory(schedule)
            finally:  # how far the search got, however it ended (run.json is written last)
                self.meta["undervolt"] = schedule.record()
            await self._run_to_run()
            chosen, lock = schedule.chosen_mhz, schedule.lock_mhz
            if chosen is not None and lock is not None:
                await self._idle_at(schedule.at(chosen))
            return
        await self._run_schedule(schedule)
        record = schedule.record()
        if record is not None:
            self.meta["adaptive"] = record
            if record.get("left_out"):
                left = ", ".join(f"{c['cap_w']:g} W ({c['reason']})" for c in record["left_out"])
                self.warn(
                    f"adaptive sweep stopped at its budget of {record['max_caps']} caps: {left}"
                )
        await self._measure("recheck", self._ratio_outliers())
        failed = sorted(self.measurer.ledger.failed(), key=lambda p: -p.position)
        for p in failed:
            self._faults.add("cap_retried", f"{p.label()} failed and was measured again at the end")
        await self._measure("retry", failed)
        if plan.points.confirm and not plan.safety.observe_only:
            confirm = ConfirmPhase(
                self.measurer,
                self.writer,
                self.meta,
                plan.all_points(),
                warn=self.warn,
            )
            await confirm.run(self._best_so_far())
        elif len(plan.all_points()) > 1:
            self.meta["confirm"] = {"caps_w": [], "reason": None, "skipped": "--no-confirm"}
            self.writer.write_run_json(self.meta)
        await self._run_to_run()
        best = self._best_so_far()
        if plan.clock_points and best is not None and best.sm_lock_mhz is not None:
            await self._idle_at(best)

    async def _idle_at(self, point: SweepPoint) -> None:
        """The cards left idle a few seconds at the answer's lock (:mod:`.measurement.idle_draw`):
        run.json's ``idle``. A card that refuses the point, or fails, costs the reading only (a
        warning): the search is over and stands."""
        locker = self.restorer.locker
        if self.plan.safety.observe_only or locker is None or point.sm_lock_mhz is None:
            return
        try:
            rejection = self.measurer.apply(point)
            if rejection is not None:
                self.warn(f"idle draw not measured: {point.label()} rejected: {rejection}")
                return
            self.sampler.label(self.measurer.cap_of(point), "idle")
            span = locker.sm_range(self.gpus[0], point.sm_lock_mhz)
            idle = await measure_idle(self.gpus, self.clock, span)
        except PowersweepError as exc:
            self.warn(f"idle draw not measured: {exc}")
            return
        self.meta["idle"] = {"sm_lock_mhz": point.sm_lock_mhz, **idle.record()}

    async def _run_to_run(self) -> None:
        """A point measured ok early, read again last: every point's stated interval carries
        how far the two readings (and the confirm phase's) differ beyond their own widths, and
        the drift over the seconds between them."""
        phase = RunToRunPhase(self.measurer, self.writer, self.meta, warn=self.warn)
        await phase.run(self._reference())

    def _reference(self) -> SweepPoint | None:
        """The point to read again at the end (:func:`best_reference`)."""
        ledger = self.measurer.ledger
        ok = [p for p in self._measured_ok if ledger.status.get(p.key) == "ok"]
        return best_reference([(p, ledger.readings.get(p.key)) for p in ok])

    async def _soak(self, schedule: UndervoltSchedule) -> None:
        """The undervolt search's end: the chosen offset soaked and checked (backed off by the
        margin per failed soak: the plan's ``max_soaks`` at most). No recheck, retry or
        confirm phase: each would set an offset again outside the search's order."""
        while (point := schedule.soak()) is not None:
            self._record_in_flight(schedule)
            row = await self.measurer.measure(point, SOAK, 0, 1)
            schedule.soaked(str(row["status"]))

    async def _memory(self, schedule: UndervoltSchedule) -> None:
        """The memory phase at the SM answer (:mod:`.planning.memory_steps`), where the search
        asks for one and found an answer: each memory offset's step, then its soak."""
        plan = schedule.plan.memory
        if plan is None or schedule.chosen_mhz is None:
            return
        resume = schedule.plan.resume
        if resume is not None and resume.mem_killed_at_mhz is not None:
            # the memory offset set when the run died is never set again
            plan = replace(plan, max_mhz=min(plan.max_mhz, resume.mem_killed_at_mhz - 1.0))
        ledger = self.measurer.ledger
        metric = "prefill_tps" if self.plan.load.mode == "prefill-heavy" else "narr_tps"
        rows = self._last_rows
        memory = MemorySearch(
            plan,
            schedule.at(schedule.chosen_mhz),
            lambda p: ledger.status.get(p.key),
            lambda p: tps_from(rows.get(p), metric),
            schedule.plan.soak_s,
        )
        schedule.memory = memory
        while batch := memory.next():
            for point, reason in batch:
                await self._measure_step(schedule, point, reason)
        while (soak := memory.soak()) is not None:
            row = await self._measure_step(schedule, soak, SOAK)
            memory.soaked(str(row["status"]))
        schedule.set_in_flight(None, "")
        if self.measurer.mem_offsetter is not None:
            # what is measured after (the re-read, the idle draw) runs at the card's own memory
            self.measurer.mem_offsetter.put_back()

    async def _measure_step(
        self, schedule: UndervoltSchedule, point: SweepPoint, reason: str
    ) -> Mapping[str, Any]:
        """One point of the search measured, recorded in flight before it is set."""
        schedule.set_in_flight(point, reason)
        self._record_in_flight(schedule)
        row = await self.measurer.measure(point, reason, 0, 1)
        self._last_rows[point] = row
        return row

    def _record_in_flight(self, schedule: Schedule) -> None:
        """An undervolt search's record, with the offset about to be set, in run.json before
        it is set: a run that dies under it (a reset, a hang, a kill) leaves it on record, and
        ``--resume`` never tries it again."""
        if isinstance(schedule, UndervoltSchedule):
            self.meta["undervolt"] = schedule.record()
            self.writer.write_run_json(self.meta)

    def _schedule(self, points: list[SweepPoint]) -> Schedule:
        plan = self.plan
        metric = "prefill_tps" if plan.load.mode == "prefill-heavy" else "narr_tps"
        if plan.undervolt is not None:
            ledger, last = self.measurer.ledger, self._last_rows
            return UndervoltSchedule(
                plan.undervolt,
                lambda p: ledger.status.get(p.key),
                lambda p: str(last.get(p, {}).get("retry_kind") or ""),
            )
        if plan.points.strategy != "adaptive" or plan.safety.observe_only:
            return DenseSchedule(points)
        if plan.clock_points:
            return AdaptiveClockSchedule(points, metric)
        slowdown = [g.slowdown_temp_c() for g in self.gpus]
        planner = AdaptivePlanner(
            list(plan.caps_w),
            plan.points.step_size_w,
            slowdown_temp_c=min((t for t in slowdown if math.isfinite(t)), default=math.nan),
        )
        return AdaptivePowerSchedule(planner, metric)

    async def _run_schedule(self, schedule: Schedule) -> None:
        """The strategy's batches until it asks for nothing new. Each point is measured once
        here (the protocol already measures a disturbed one twice): a point the planner asks for
        again after it failed or stayed suspect is not measured again, so no planner can keep a
        sweep going (failed points get their one retry at the end)."""
        measured: dict[SweepPoint, Mapping[str, Any]] = {}
        tried: set[SweepPoint] = set()
        batch = self._new(schedule.next(measured), tried)
        planned, done = len(batch), 0
        while batch:
            self._record_in_flight(schedule)
            for point, reason in batch:
                tried.add(point)
                row = await self.measurer.measure(point, reason, done, planned)
                self._last_rows[point] = row
                done += 1
                if row["status"] == "ok":
                    measured[point] = row
            batch = self._new(schedule.next(measured), tried)
            planned += len(batch)
            if batch and not self.plan.clock_points:
                self.meta["caps_planned"] = sorted(
                    {*self.meta.get("caps_planned", []), *(p.cap_w for p, _ in batch)},
                    reverse=True,
                )

    def _new(
        self, batch: Sequence[tuple[SweepPoint, str]], tried: set[SweepPoint]
    ) -> list[tuple[SweepPoint, str]]:
        """The batch less the points already measured (each asked-for repeat is a fault)."""
        fresh = []
        for point, reason in batch:
            # a search's bounded retries (its schedule counts them) measure a point again
            if point in tried and reason not in (REBASE, RETRY):
                self._faults.add("planner_repeat", f"{point.label()} ({reason})")
            else:
                fresh.append((point, reason))
        return fresh

    async def _measure(self, reason: str, points: Sequence[SweepPoint]) -> None:
        for i, point in enumerate(points):
            await self.measurer.measure(point, reason, i, len(points))

    def _ratio_outliers(self) -> list[SweepPoint]:
        """Points whose narrative/code ratio stands out from all the others: a point measured
        before enough others were known was judged against too few."""
        ledger = self.measurer.ledger
        keys = ratio_outliers(ledger.ratios)
        return sorted((ledger.points[k] for k in keys), key=lambda p: -p.position)

    def _usable(self, points: list[SweepPoint]) -> list[SweepPoint]:
        """The points the cards can take: memory locks probed once (after the journal); a card
        that refuses them sweeps the SM axis, and says so."""
        locker = self.restorer.locker
        if self.plan.safety.observe_only or locker is None:
            return points
        kept = usable_points(points, locker, self.measurer.before_change, self.warn)
        if kept is not points:
            self.meta["axis_fallback"] = "sm-clock"
            self.meta["points_planned"] = [p.to_dict() for p in kept]
        return kept

    def _best_so_far(self) -> SweepPoint | None:
        """The point with the best TPS/W measured ok so far (None: none)."""
        best = max(self._best.items(), key=lambda kv: kv[1], default=None)
        return best[0] if best else None

    # --- records ------------------------------------------------------------------------------

    def _point_done(self, point: SweepPoint, row: Mapping[str, Any]) -> None:
        self._n_measured += 1
        tpw = row.get("tps_per_w", math.nan)
        if row["status"] == "ok" and isinstance(tpw, float) and math.isfinite(tpw):
            self._best[point] = tpw
            if point not in self._measured_ok:
                self._measured_ok.append(point)
        if row["cap_w"] not in self._caps_done:
            self._caps_done.append(row["cap_w"])
        self.meta["caps_done"] = list(self._caps_done)
        if self.plan.clock_points and point not in self._points_done:
            self._points_done.append(point)
            self.meta["points_done"] = [p.to_dict() for p in self._points_done]
        self.writer.write_run_json(self.meta)

    def _write_final_record(self) -> str | None:
        """Write the final run.json; the reason when it cannot be written (never raises)."""
        try:
            self.writer.write_run_json(self.meta)
        except PowersweepError as exc:
            return str(exc)
        except Exception as exc:  # the outcome must still reach the user
            return f"cannot write run.json: {type(exc).__name__}: {exc}"
        return None

    def _flush_samples(self) -> None:
        rows = self.sampler.drain()
        if rows:
            with contextlib.suppress(PowersweepError):
                self.writer.append_samples(rows)
