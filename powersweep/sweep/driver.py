"""The sweep driver: set each cap, settle, sample while the load runs, write, restore.

Whatever happens (an error, SIGINT, SIGTERM, SIGHUP), every GPU that was touched gets its
*original* limit back — the user's own setting, not the default TDP — unless ``--no-reset``.
Against what no handler survives (SIGKILL, a power cut), the original limits are written to a
restore journal before the first change and the journal is removed only once they are back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from powersweep.clock import Clock
from powersweep.errors import PowersweepError
from powersweep.runformat import CONFIRM_REASON
from powersweep.sweep.clock_loop import ClockLoop
from powersweep.sweep.gpu import Gpu
from powersweep.sweep.loads.base import (
    ChatApi,
    Load,
    LoadRun,
    request_budget_s,
    warmup,
)
from powersweep.sweep.loads.prefill import PrefillCalibrationError
from powersweep.sweep.loads.prompts import NARRATIVE_MAX_TOKENS, NARRATIVE_PROMPT
from powersweep.sweep.loads.single import DecodeSingle
from powersweep.sweep.locks import ClockLocker
from powersweep.sweep.plan import confirm_serving, not_swept_busy
from powersweep.sweep.planning.clocks import SweepPoint
from powersweep.sweep.planning.confirm import plan_confirm
from powersweep.sweep.planning.strategy import (
    AdaptivePlanner,
    CapMeasurement,
    coarse_order,
    plan_order,
)
from powersweep.sweep.records.journal import Journal, JournalEntry, JournalGpu, process_start
from powersweep.sweep.records.writer import RunWriter, utc_now_iso
from powersweep.sweep.sampling.consistency import (
    min_gap_s,
    ratio_reason,
    stall_reason,
    tps_ratio,
)
from powersweep.sweep.sampling.measure import LOAD_UTIL_PCT, cap_row, relabel_outside
from powersweep.sweep.sampling.sampler import Sampler
from powersweep.sweep.sampling.settle import SettleDetector, wait_settled
from powersweep.sweep.signals import (
    SweepInterrupted,
    raise_on_signals,
    run_interruptible,
    signals_ignored,
)
from powersweep.sweep.verdict import FaultLog, judge

# Phase / prompt kind given to a measurement that was discarded and taken again.
DISCARDED = "discarded"


@dataclass(frozen=True)
class SweepPlan:
    """What to measure and how.

    Attributes:
        load_mode: ``decode-single``, ``decode-concurrent`` or ``prefill-heavy``.
        caps_w: Caps to measure, ascending; measured from the highest down.
        target_cap_s: Run seconds each prompt must cover per cap.
        settle_s: Run seconds to wait after setting a cap before measuring.
        sample_interval_s: Sampler interval, run seconds.
        warmup_requests: Warm-up requests per prompt at the highest cap.
        no_reset: Leave the last cap in force instead of restoring.
        max_failed_caps: Stop after this many consecutive failed caps.
        observe_only: Never set a limit: measure at the limit in force (``caps_w`` holds it).
        strategy: ``dense`` measures every cap of ``caps_w``; ``adaptive`` a coarse pass, then
            refinement where the answer is decided (:mod:`powersweep.sweep.planning.strategy`).
        step_w: Finest step between caps (adaptive refinement).
        settle_mode: ``auto`` measures as soon as readings are stable under load (at most
            ``settle_s``); ``fixed`` always waits ``settle_s``.
        points: Clock-lock points (``--axis sm-clock|mem-clock|grid``); empty on the power axis,
            where ``caps_w`` are the points.
        axis: ``power``, ``sm-clock``, ``mem-clock`` or ``grid``.
        confirm: At the end, measure the caps statistically tied with the best once more
            (at most three) and pool their readings (:meth:`Sweep._confirm`).
    """

    load_mode: str
    caps_w: tuple[float, ...]
    target_cap_s: float = 10.0
    settle_s: float = 3.0
    sample_interval_s: float = 0.5
    warmup_requests: int = 3
    no_reset: bool = False
    max_failed_caps: int = 3
    observe_only: bool = False
    strategy: str = "dense"
    step_w: float = 10.0
    settle_mode: str = "auto"
    points: tuple[SweepPoint, ...] = ()
    axis: str = "power"
    confirm: bool = True


@dataclass(frozen=True)
class CapProgress:
    """Reported to the progress callback after each cap (``label`` names a clock point)."""

    index: int
    total: int
    cap_w: float
    status: str
    tps: float
    power_w: float
    tps_per_w: float
    label: str = ""


@dataclass(frozen=True)
class SweepOutcome:
    """How a sweep ended.

    Attributes:
        status: ``complete``, ``partial`` (too few caps succeeded to answer), ``interrupted`` or
            ``failed``.
        error: One-line reason when not complete.
        signum: The signal that interrupted it, if any.
        caps_done: Caps that finished (any status).
        restored: What was put back.
    """

    status: str
    error: str | None
    signum: int | None
    caps_done: tuple[float, ...]
    restored: tuple[dict[str, Any], ...] = field(default_factory=tuple)


LoadFactory = Callable[[Sampler], Load]


class Sweep:
    """One sweep over a GPU set (a clock-axis sweep's loop is :class:`ClockLoop`).

    Args:
        plan: What to measure.
        gpus: The GPU set (every cap is set on each).
        clock: Run clock.
        client: The server client (one per sweep).
        writer: The run directory.
        run_meta: ``run.json`` content known before the sweep; status fields are added.
        progress: Called after each cap.
        warn: Where warnings go (one line each).
        journal: Where the original limits are written before the first change (None: no
            journal, e.g. a simulated rig whose limits die with the process).
        journal_backend: How ``powersweep restore`` rebuilds the backend (see
            :class:`~powersweep.sweep.records.journal.JournalEntry`).
        originals: Limits to restore per GPU index instead of the ones in force now (a forced
            sweep over a journal left by a killed one restores the user's limits, not that
            sweep's last cap).
        caps_already_done: Caps a resumed run finished before (they stay in ``caps_done``).
        load_factory: Builds the load from the sampler (default: decode-single).
        prepared: The load's set-up from an earlier run (``--resume``): applied instead of
            probing or calibrating again, so the resumed caps measure the same load.
        on_prepared: Called with the load's set-up once it is known; returns keys to merge into
            ``run.json`` (the simulator's ground truth for that load).
        watch: GPUs outside the set, only read during the warm-up: one that gets busy there
            may serve the model too (a warning says so).
        busy_gpus: Indices of the set's GPUs that serve the model: their utilization marks a
            tick as loaded (None: every GPU of the set).
        on_restored: Called with what was restored as soon as it is back, while signals are
            still ignored (so a second Ctrl-C cannot hide it).
        earlier_status: Status of each cap a resumed run finished before (default ``ok``).
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
        progress: Callable[[CapProgress], None] | None = None,
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
        on_restored: Callable[[Sequence[Mapping[str, Any]]], None] | None = None,
        earlier_status: Mapping[float, str] | None = None,
    ) -> None:
        self.plan = plan
        self._watch = list(watch)
        self._busy_gpus = frozenset(busy_gpus) if busy_gpus else None
        self.gpus = list(gpus)
        self.clock = clock
        self.client = client
        self.writer = writer
        self.meta = dict(run_meta)
        self.progress = progress
        self.warn = warn
        self.sampler = Sampler(self.gpus, clock, plan.sample_interval_s)
        if load_factory is None:
            self.load: Load = DecodeSingle(client, clock, self.sampler, plan.target_cap_s)
        else:
            self.load = load_factory(self.sampler)
        if self.load.mode != plan.load_mode:
            raise PowersweepError(f"load {self.load.mode} does not match {plan.load_mode}")
        self._prepared = dict(prepared) if prepared else None
        self._on_prepared = on_prepared
        self._original = {g.index: g.envelope().current_w for g in self.gpus}
        self._original.update({i: w for i, w in (originals or {}).items() if i in self._original})
        self._touched: set[int] = set()
        self._caps_done: list[float] = list(caps_already_done)
        self._failed_in_a_row = 0
        self._signum: int | None = None
        self.journal = None if plan.observe_only else journal
        self._journal_backend = dict(journal_backend or {"kind": "nvml"})
        self._journal_written = False
        self._points_done = list(points_already_done)
        self.locker = ClockLocker(self.gpus, warn) if plan.points else None
        self._on_restored = on_restored
        # Final status of each cap this run knows (a re-try replaces a failure).
        # keyed by (cap, SM lock, memory lock): the points of a clock sweep share one cap
        self._cap_status: dict[tuple[float, Any, Any], str] = {
            (c, None, None): (earlier_status or {}).get(c, "ok") for c in caps_already_done
        }
        # code/narrative rate ratio of each cap measured ok: a disturbed cap stands out
        self._ratio_by_cap: dict[float, float] = {}
        self._faults = FaultLog(cuts_expected=plan.load_mode == "decode-concurrent")
        self._confirming = False
        self._n_measured = 0

    # --- public -------------------------------------------------------------------------------

    def run(self) -> SweepOutcome:
        """Run the sweep to the end, an error or a signal; always restore and record."""
        status, error = "complete", None
        self.meta.update(status="running", started_at=utc_now_iso(), caps_done=[], restored=[])
        for g in self.meta.get("gpus", []):
            g["original_limit_w"] = self._original.get(g.get("index"), g.get("original_limit_w"))
        self.writer.write_run_json(self.meta)
        try:
            with raise_on_signals():
                self._write_journal()
                self.sampler.start()
                run_interruptible(self._main())
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
                restored = self._restore()
                if self._on_restored is not None:
                    with contextlib.suppress(Exception):
                        self._on_restored(restored)
                if status == "complete":
                    status, error = judge(self._cap_status.values())
                self.meta.update(
                    status=status,
                    error=error,
                    ended_at=utc_now_iso(),
                    caps_done=list(self._caps_done),
                    restored=list(restored),
                    read_errors=self.sampler.read_errors,
                    faults=self._faults.to_list(),
                )
                record_error = self._write_final_record()
                self._close_journal(restored, record_error)
        if record_error:
            status = "failed" if status == "complete" else status
            error = "; ".join(e for e in (error, record_error) if e)
        return SweepOutcome(status, error, self._signum, tuple(self._caps_done), tuple(restored))

    def _write_final_record(self) -> str | None:
        """Write the final run.json; the reason when it cannot be written (never raises)."""
        try:
            self.writer.write_run_json(self.meta)
        except PowersweepError as exc:
            return str(exc)
        except Exception as exc:  # the outcome must still reach the user
            return f"cannot write run.json: {type(exc).__name__}: {exc}"
        return None

    # --- internals ----------------------------------------------------------------------------

    def _write_journal(self) -> None:
        """Record the original limits before the first change (raises: then nothing changes)."""
        if self.journal is None:
            return
        entry = JournalEntry(
            backend=self._journal_backend,
            gpus=tuple(
                JournalGpu(
                    uuid=g.identity().uuid,
                    index=g.index,
                    name=g.identity().name,
                    original_limit_w=self._original[g.index],
                    **self._journal_locks(g.index),
                )
                for g in self.gpus
            ),
            pid=os.getpid(),
            pid_start=process_start(os.getpid()),
            created_at=utc_now_iso(),
            run_dir=str(self.writer.path.resolve()),
        )
        self.journal.claim(entry)
        self._journal_written = True

    def _journal_locks(self, index: int) -> dict[str, Any]:
        if self.locker is None:
            return {}
        orig = self.locker.originals[index]
        return {
            "clocks_locked": True,
            "original_sm_lock_mhz": orig.sm_mhz,
            "original_mem_lock_mhz": orig.mem_mhz,
            "locks_known": orig.known,
        }

    def _close_journal(
        self, restored: Sequence[Mapping[str, Any]], record_error: str | None = None
    ) -> None:
        """Remove the journal once nothing is left to restore; keep it when a restore failed.

        When the final run.json could not be written, the journal stays with the outcome in it:
        it is then the only record that the limits came back.
        """
        if self.journal is None or not self._journal_written:
            return
        failed = [r for r in restored if not r["ok"]]
        if record_error and not failed:
            try:
                self.journal.record_outcome(
                    {
                        "status": self.meta.get("status"),
                        "error": self.meta.get("error"),
                        "ended_at": self.meta.get("ended_at"),
                        "restored": list(restored),
                        "record_error": record_error,
                    }
                )
                self.warn(
                    f"{record_error}; the outcome is kept in {self.journal.path} (the limits "
                    "were restored)"
                )
                return
            except PowersweepError as exc:
                self.warn(str(exc))
        if failed:
            self.warn(
                f"the original limits stay in {self.journal.path}: `powersweep restore` "
                "retries putting them back"
            )
            return
        try:
            self.journal.remove()
        except PowersweepError as exc:
            self.warn(str(exc))

    async def _main(self) -> None:
        try:
            await self._measure_all()
        finally:
            aclose = getattr(self.client, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    async def _measure_all(self) -> None:
        plan = self.plan
        if plan.points:
            await ClockLoop(self).run()
            return
        top = max(plan.caps_w)
        if self._set_cap(top) is None:
            if plan.warmup_requests > 0:
                await self._warmup(top)
            await self._prepare(top)
        if plan.strategy == "adaptive":
            await self._measure_adaptive()
        else:
            order = sorted(plan.caps_w, reverse=True)
            for i, cap in enumerate(order):
                await self._measure_cap(cap, i, len(order), "dense" if len(order) > 1 else "")
        await self._recheck_outliers()
        await self._retry_failed_caps()
        if plan.confirm and not plan.observe_only:
            await self._confirm()
        elif len(plan.caps_w) > 1:
            self.meta["confirm"] = {"caps_w": [], "reason": None, "skipped": "--no-confirm"}
            self.writer.write_run_json(self.meta)

    async def _warmup(self, cap: float) -> None:
        """Warm up with time-bounded requests; a server too slow for the window is said so."""
        budget = request_budget_s(self.plan.target_cap_s)
        results = await self._warmup_watched(cap)
        self.writer.append_requests(cap, results)
        self._faults.requests(results)
        if not any(r.ok for r in results):
            first = next((r.error for r in results if r.error), "no request completed")
            raise PowersweepError(f"the server failed every warm-up request: {first}")
        if any(r.finish_reason == "deadline" for r in results):
            self._faults.add(
                "slow_requests", f"warm-up requests ran past {budget:g} s and were cut"
            )
            self.warn(
                f"a warm-up request ran past {budget:g} s and was cut: the server is slow for a "
                f"{self.plan.target_cap_s:g} s window; a longer --target-cap-seconds gives "
                "steadier figures"
            )

    async def _retry_failed_caps(self) -> None:
        """Measure each cap that failed once more, at the end of the sweep, before it is reported
        failed (a server hiccup should not cost a cap)."""
        failed = [
            cap
            for (cap, sm, mem), st in self._cap_status.items()
            if st == "failed" and sm is None and mem is None
        ]
        for i, cap in enumerate(sorted(failed, reverse=True)):
            self._faults.add("cap_retried", f"{cap:g} W failed and was measured again at the end")
            await self._measure_cap(cap, i, len(failed), "retry")

    async def _confirm(self) -> None:
        """Re-measure the caps statistically tied with the best once more; readings are pooled.

        One reading per cap cannot tell caps a fraction of a percent apart: when the analysis of
        the sweep so far finds other caps within noise of the best, the best few of them
        (:func:`~powersweep.sweep.planning.confirm.plan_confirm`) are measured again. Their
        rows are appended to the run's CSVs marked as a re-measurement (``reason`` ``confirm``
        in caps.csv, ``confirm`` true in samples.csv and requests.csv), and the analysis pools
        them, so nothing measured is lost and the reported best is the pooled one.
        ``run.json`` ``confirm`` records which caps and why.
        """
        # Imported here: the analysis is only needed once, at the end of a sweep.
        from powersweep.analysis import analyze, load_curve

        def analysis_so_far(when: str) -> dict[str, Any]:
            try:
                return analyze(load_curve(self.writer.path))
            except PowersweepError as exc:  # nothing usable measured: nothing to confirm
                self.warn(f"confirm phase: cannot analyse the readings {when}: {exc}")
                return {}

        plan = plan_confirm(analysis_so_far("so far"))
        record = plan.record
        self.meta["confirm"] = record
        self.writer.write_run_json(self.meta)
        if not plan.caps_w:
            return
        self._confirming = True
        try:
            base = self._n_measured
            for j, cap in enumerate(plan.caps_w):
                await self._measure_cap(cap, base + j, base + len(plan.caps_w), CONFIRM_REASON)
        finally:
            self._confirming = False
        after = analysis_so_far("pooled").get("sweet_spot") or {}
        record.update(best_after_w=after.get("cap_w"), tied_after=after.get("tied_caps"))
        self.meta["confirm"] = record
        self.writer.write_run_json(self.meta)

    async def _prepare(self, cap: float) -> None:
        """Probe or calibrate the load once, at the highest cap (or re-apply a resumed set-up)."""
        try:
            if self._prepared is not None:
                prep = self.load.apply(self._prepared)
            else:
                prep = await self.load.prepare(cap)
        except PrefillCalibrationError as exc:
            raise PowersweepError(str(exc)) from exc
        # warm-up, probe and calibration readings belong to no cap, but the timeline keeps them
        rows = self.sampler.drain()
        self._confirm_serving(rows)
        self.writer.append_samples(rows)
        self.meta["load"] = prep
        if self._on_prepared is not None:
            self.meta.update(self._on_prepared(prep))
        self.writer.write_run_json(self.meta)

    async def _warmup_watched(self, top: float) -> list[Any]:
        """The warm-up, while the GPUs outside the set are read for a utilization rise."""
        if not self._watch:
            return await warmup(
                self.client,
                self.sampler,
                top,
                self.plan.warmup_requests,
                clock=self.clock,
                budget_s=request_budget_s(self.plan.target_cap_s),
            )
        before = {g.index: g.read_sample().util_pct for g in self._watch}
        peaks = {i: math.nan for i in before}

        async def watch() -> None:
            while True:
                for g in self._watch:
                    u = g.read_sample().util_pct
                    if math.isfinite(u) and not peaks[g.index] >= u:
                        peaks[g.index] = u
                await self.clock.asleep(self.plan.sample_interval_s)

        watcher = asyncio.create_task(watch())
        try:
            return await warmup(
                self.client,
                self.sampler,
                top,
                self.plan.warmup_requests,
                clock=self.clock,
                budget_s=request_budget_s(self.plan.target_cap_s),
            )
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            self.meta.setdefault("gpu_selection", {}).update(
                not_swept_busy(before, peaks, self.warn)
            )

    def _confirm_serving(self, rows: Sequence[Any]) -> None:
        """The swept GPUs must have got busy in the warm-up; record each one's peak utilization."""
        peaks: dict[int, float] = {g.index: math.nan for g in self.gpus}
        seen = False
        for r in rows:
            if r.phase != "warmup":
                continue
            seen = True
            u = r.sample.util_pct
            if math.isfinite(u) and not peaks.get(r.sample.gpu_index, 0.0) >= u:
                peaks[r.sample.gpu_index] = u
        if seen:
            selection = self.meta.setdefault("gpu_selection", {})
            selection.update(confirm_serving(peaks, self.warn))

    async def _measure_adaptive(self) -> None:
        slowdown = [g.slowdown_temp_c() for g in self.gpus]
        planner = AdaptivePlanner(
            list(self.plan.caps_w),
            self.plan.step_w,
            slowdown_temp_c=min((t for t in slowdown if math.isfinite(t)), default=math.nan),
        )
        metric = "prefill_tps" if self.plan.load_mode == "prefill-heavy" else "narr_tps"
        measured: dict[float, CapMeasurement] = {}
        batch = [(c, "coarse pass") for c in coarse_order(planner.initial_caps())]
        planned = len(batch)
        done = 0
        while batch:
            for cap, reason in batch:
                row = await self._measure_cap(cap, done, planned, reason)
                done += 1
                if row["status"] == "ok":
                    measured[cap] = CapMeasurement.from_row(row, metric)
            nxt = dict(planner.next_caps(measured))
            batch = [(c, nxt[c]) for c in plan_order(nxt, last_cap_w=batch[-1][0])]
            planned += len(batch)
            self.meta["caps_planned"] = sorted(
                {*self.meta.get("caps_planned", []), *(c for c, _ in batch)}, reverse=True
            )
        # The answer stands on what was measured; the analysis says where it is coarser.
        self.meta["adaptive"] = {
            "max_caps": planner.max_caps,
            "left_out": [{"cap_w": c, "reason": why} for c, why in planner.left_out],
        }
        if planner.left_out:
            left = ", ".join(f"{c:g} W ({why})" for c, why in planner.left_out)
            self.warn(f"adaptive sweep stopped at its budget of {planner.max_caps} caps: {left}")

    async def _measure_cap(self, cap: float, i: int, total: int, reason: str) -> dict[str, Any]:
        plan = self.plan
        rejection = self._set_cap(cap)
        if rejection is not None:
            self.warn(f"cap {cap:g} W rejected: {rejection}")
            row = cap_row(
                cap_w=cap,
                load_mode=plan.load_mode,
                rows=[],
                requests=[],
                n_gpus=len(self.gpus),
                settle_s=0.0,
                window_s=0.0,
                status="rejected",
                error=rejection,
                extra={"reason": reason},
            )
            self._finish_cap(i, total, row, [], LoadRun())
            return row
        settle_s = await self._settle(cap)
        run, rows, row = await self._measure_once(cap, settle_s, reason)
        doubt = self._inconsistency(row, run)
        if doubt:
            # Measure once more; the doubtful attempt stays on record, marked discarded.
            self._faults.add("remeasured", f"{cap:g} W: {doubt}")
            self.warn(f"cap {cap:g} W: {doubt}; measuring it again")
            self._discard(cap, rows, run)
            run, rows, row = await self._measure_once(cap, settle_s, reason)
            again = self._inconsistency(row, run)
            if again:
                self._faults.add("suspect", f"{cap:g} W: {again}")
                row.update(status="suspect", error=f"measured twice, still inconsistent: {again}")
        ratio = tps_ratio(row.get("narr_tps", math.nan), row.get("code_tps", math.nan))
        self._ratio_by_cap.pop(cap, None)
        if row["status"] == "ok" and math.isfinite(ratio):
            self._ratio_by_cap[cap] = ratio
        self._faults.requests(run.requests)
        self._finish_cap(i, total, row, rows, run)
        self._failed_in_a_row = self._failed_in_a_row + 1 if row["status"] == "failed" else 0
        if self._failed_in_a_row >= plan.max_failed_caps:
            raise PowersweepError(
                f"{self._failed_in_a_row} caps in a row failed (last: {row['error']}); "
                "stopping — is the server still up?"
            )
        return row

    async def _measure_once(
        self, cap: float, settle_s: float, reason: str
    ) -> tuple[LoadRun, list[Any], dict[str, Any]]:
        plan = self.plan
        run = await self.load.measure(cap)
        self.sampler.label(cap, "settle")
        rows = relabel_outside(self.sampler.drain(), run.power_windows)
        row = cap_row(
            cap_w=cap,
            load_mode=plan.load_mode,
            rows=rows,
            requests=run.requests,
            n_gpus=len(self.gpus),
            settle_s=settle_s,
            window_s=run.window_s,
            tps=run.tps or None,
            windows=run.power_windows or None,
            busy_gpus=self._busy_gpus,
            extra={"reason": reason, **run.extra},
            error="; ".join(run.errors),
        )
        return run, rows, row

    def _inconsistency(self, row: Mapping[str, Any], run: LoadRun) -> str:
        """Why a measured cap cannot be trusted as it is (empty when it can)."""
        if row["status"] != "ok":
            return ""
        shortest = min_gap_s(getattr(self.clock, "scale", 1.0))
        others = [r for c, r in self._ratio_by_cap.items() if c != row["cap_w"]]
        return stall_reason(run.requests, shortest) or ratio_reason(
            row.get("narr_tps", math.nan), row.get("code_tps", math.nan), others
        )

    async def _recheck_outliers(self) -> None:
        """Measure again each cap whose narrative/code ratio stands out from all the others:
        a cap measured before enough others were known was judged against too few."""
        outliers = [
            c
            for c, r in self._ratio_by_cap.items()
            if ratio_reason(1.0, r, [x for k, x in self._ratio_by_cap.items() if k != c])
        ]
        for i, cap in enumerate(sorted(outliers, reverse=True)):
            await self._measure_cap(cap, i, len(outliers), "recheck")

    def _discard(self, cap: float, rows: Sequence[Any], run: LoadRun) -> None:
        """Keep a discarded attempt's samples and requests, labelled so no figure uses them."""
        self.writer.append_samples([_relabel(r, phase=DISCARDED) for r in rows])
        self.writer.append_requests(
            cap, [_relabel(r, prompt_kind=f"{DISCARDED}-{r.prompt_kind}") for r in run.requests]
        )

    async def _settle(self, cap: float) -> float:
        """Wait until the card has adjusted to the new cap; return the run seconds waited."""
        plan = self.plan
        self.sampler.label(cap, "settle")
        if plan.observe_only or plan.settle_s <= 0:
            return 0.0
        if plan.settle_mode == "fixed":
            await self.clock.asleep(plan.settle_s)
            return plan.settle_s
        # The card adjusts to a cap under load, so a throwaway request runs while the readings
        # are watched; the measured load starts on a settled card.
        t0 = self.clock.now()
        busy = asyncio.create_task(
            self.client.chat(
                NARRATIVE_PROMPT, max_tokens=NARRATIVE_MAX_TOKENS, prompt_kind="settle"
            )
        )
        try:
            await wait_settled(
                self.gpus,
                self.clock,
                interval_s=min(0.1, plan.sample_interval_s),
                detector_factory=lambda: SettleDetector(
                    min_s=min(0.25, plan.settle_s), max_s=plan.settle_s
                ),
                busy_util_pct=LOAD_UTIL_PCT,
                busy_gpus=self._busy_gpus,
            )
        finally:
            busy.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await busy
        return self.clock.now() - t0

    def _set_cap(self, cap: float) -> str | None:
        """Set the cap on every GPU; the reason if any card did not take it."""
        if self.plan.observe_only:
            return None
        if self.journal is not None:  # its journal gone or taken over: stop, restore, say so
            self.journal.ensure_owned()
        problems = []
        for g in self.gpus:
            self._touched.add(g.index)
            result = g.set_power_limit(cap)
            if not result.accepted:
                problems.append(f"GPU {g.index}: {result.message or 'not applied'}")
        return "; ".join(problems) or None

    def _finish_cap(
        self,
        i: int,
        total: int,
        row: dict[str, Any],
        rows: Sequence[Any],
        run: LoadRun,
        label: str = "",
    ) -> None:
        self.writer.append_samples(rows, confirm=self._confirming)
        locks = (row.get("sm_lock_mhz"), row.get("mem_lock_mhz"))
        self.writer.append_requests(row["cap_w"], run.requests, locks, confirm=self._confirming)
        self.writer.append_cap(row)
        key = (row["cap_w"], row.get("sm_lock_mhz"), row.get("mem_lock_mhz"))
        self._cap_status[key] = row["status"]
        self._n_measured += 1
        if row["cap_w"] not in self._caps_done:
            self._caps_done.append(row["cap_w"])
        self.meta["caps_done"] = list(self._caps_done)
        self.writer.write_run_json(self.meta)
        if self.progress:
            tps = row["prefill_tps"] if self.plan.load_mode == "prefill-heavy" else row["narr_tps"]
            self.progress(
                CapProgress(
                    i + 1,
                    total,
                    row["cap_w"],
                    row["status"],
                    tps,
                    row["power_w"],
                    row["tps_per_w"],
                    label,
                )
            )

    def _flush_samples(self) -> None:
        rows = self.sampler.drain()
        if rows:
            with contextlib.suppress(PowersweepError):
                self.writer.append_samples(rows)

    def _restore(self) -> list[dict[str, Any]]:
        if self.plan.no_reset:
            return []
        clocks = self.locker.put_back() if self.locker is not None else {}
        restored: list[dict[str, Any]] = [
            {"gpu_index": i, "limit_w": None, "ok": ok, "message": "", "clocks": note}
            for i, (ok, note) in clocks.items()
            if i not in self._touched
        ]
        for g in self.gpus:
            if g.index not in self._touched:
                continue
            limit = self._original[g.index]
            try:
                result = g.set_power_limit(limit)
                ok, message = result.accepted, result.message
            except Exception as exc:  # keep restoring the other cards
                ok, message = False, str(exc)
            if not ok:
                self.warn(
                    f"could not restore GPU {g.index} to {limit:g} W: {message}; "
                    f"run: sudo nvidia-smi -i {g.index} -pl {limit:g}"
                )
            entry = {"gpu_index": g.index, "limit_w": limit, "ok": ok, "message": message}
            if g.index in clocks:
                entry.update(ok=ok and clocks[g.index][0], clocks=clocks[g.index][1])
            restored.append(entry)
        return restored


def _relabel(item: Any, **changes: str) -> Any:
    # a test double need not be a dataclass: it then keeps its labels
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return dataclasses.replace(item, **changes)
    return item
