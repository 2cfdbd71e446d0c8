"""One operating point, measured by the one protocol every axis and load mode shares.

The reasoning: docs/reference.md, "powersweep.sweep.measurement.point".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from powersweep.analysis.precision import Reading, RunToRun, drift_sensitivity_per_c
from powersweep.clock import Clock
from powersweep.errors import PowersweepError
from powersweep.runformat import REPEAT_REASONS
from powersweep.sweep.gpu import Gpu
from powersweep.sweep.loads.base import Load, LoadRun
from powersweep.sweep.loads.pace import Pace
from powersweep.sweep.locks import ClockLocker, verify
from powersweep.sweep.measurement.ledger import PointLedger
from powersweep.sweep.measurement.quiet import collector_held
from powersweep.sweep.measurement.stability import StabilityCheck, check_step
from powersweep.sweep.measurement.thermal_fit import ThermalFit
from powersweep.sweep.measurement.thermal_wait import ThermalWaiter
from powersweep.sweep.measurement.types import PointProgress, Protocol, Settled
from powersweep.sweep.offsets import ClockOffsetter
from powersweep.sweep.options import KEEP_BUSY_MAX_S
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.records.writer import RunWriter
from powersweep.sweep.sampling.measure import (
    DRIFT_TRAIL_S,
    LOAD_UTIL_PCT,
    cap_row,
    relabel_outside,
)
from powersweep.sweep.sampling.per_token import metric_kind
from powersweep.sweep.sampling.sampler import Sampler
from powersweep.sweep.sampling.settle import SettleDetector, wait_settled
from powersweep.sweep.sampling.thermal import (
    ThermalWait,
    wait_goal_rel,
)
from powersweep.sweep.sampling.windows import (
    STOP_FAILED,
    next_round_s,
    stop_reason,
)
from powersweep.sweep.verdict import FaultLog

# Phase / prompt kind given to a measurement that was discarded and taken again.
DISCARDED = "discarded"
# The reason of the undervolt search's last point: the chosen offset, held under the load for
# the soak before it is measured and checked once more.
SOAK = "soak"


class PointMeasurer:
    """Measures operating points, each the same way.

    Args:
        protocol: How every point is measured.
        gpus: The GPU set (every point is set on each).
        clock: Run clock.
        load: The load mode (prepared before the first point is measured).
        sampler: Reads the GPUs while the load runs.
        writer: The run directory.
        faults: Where the faults met are counted.
        default_cap_w: The limit in force at a point that sets none (a clock point under the
            user's limit).
        pace: The server's pace the load sizes its requests by: aimed at each point from the
            points measured nearest to it, and kept per point once measured.
        locker: The clock locks (None on the power axis).
        offsetter: The SM clock offsets (None but on the undervolt axis).
        mem_offsetter: The memory clock offsets (None but in an undervolt search's memory
            phase).
        stability: Checks each offset step after its windows (None but on the undervolt axis).
        soak_s: Run seconds a :data:`SOAK` point is held under the load before it is measured.
        busy_gpus: The serving GPUs, whose utilization marks a tick as loaded (None: all).
        warn: Where warnings go.
        progress: Called after each point.
        before_change: Called before any setting is changed (the driver checks its journal).
        on_point: Called after each point is written (the driver updates run.json).
    """

    def __init__(
        self,
        protocol: Protocol,
        gpus: Sequence[Gpu],
        clock: Clock,
        load: Load,
        sampler: Sampler,
        writer: RunWriter,
        faults: FaultLog,
        *,
        default_cap_w: float,
        pace: Pace | None = None,
        locker: ClockLocker | None = None,
        offsetter: ClockOffsetter | None = None,
        mem_offsetter: ClockOffsetter | None = None,
        stability: StabilityCheck | None = None,
        soak_s: float = 0.0,
        busy_gpus: frozenset[int] | None = None,
        warn: Callable[[str], None] = lambda _m: None,
        progress: Callable[[PointProgress], None] | None = None,
        before_change: Callable[[], None] = lambda: None,
        on_point: Callable[[SweepPoint, Mapping[str, Any]], None] = lambda _p, _r: None,
    ) -> None:
        self.protocol = protocol
        self.gpus = list(gpus)
        self.clock = clock
        self.load = load
        self.sampler = sampler
        self.writer = writer
        self.faults = faults
        self.default_cap_w = default_cap_w
        self.pace = pace or Pace()
        self.locker = locker
        self.offsetter = offsetter
        self.mem_offsetter = mem_offsetter
        self.stability = stability
        self.soak_s = soak_s
        self.busy_gpus = busy_gpus
        self.warn = warn
        self.progress = progress
        self.before_change = before_change
        self.on_point = on_point
        self.ledger = PointLedger()
        self.touched: set[int] = set()
        self._failed_in_a_row = 0
        self._busy: asyncio.Task[None] | None = None
        # the card's thermal time constant, fitted from every point's readings so far
        self.thermal = ThermalFit()
        self.waiter = ThermalWaiter(sampler, clock, self.thermal)
        # the run-to-run term each row carries until the run measures it (the driver sets a
        # real server's floor)
        self.run_to_run = RunToRun()
        # the finest step the power sensor showed so far in the run (NaN: none): a point whose
        # own readings never change still states it
        self.power_step_w = math.nan

    def cap_of(self, point: SweepPoint) -> float:
        """The limit in force at ``point`` (W per GPU)."""
        return point.cap_w if point.cap_w is not None else self.default_cap_w

    def apply(self, point: SweepPoint) -> str | None:
        """Set the point's limit and locks on every card; the reason if a card refused.

        Raises:
            GpuError: No permission, or the backend failed (the sweep stops and restores).
        """
        if self.protocol.safety.observe_only:
            return None
        self.before_change()
        problems = []
        if point.cap_w is not None:
            for g in self.gpus:
                self.touched.add(g.index)
                result = g.set_power_limit(point.cap_w)
                if not result.accepted:
                    problems.append(f"GPU {g.index}: {result.message or 'not applied'}")
        locked = None
        if point.locks_clocks and self.locker is not None:
            locked = self.locker.apply(point)
            problems.append(locked or "")
        if point.sm_offset_mhz is not None and self.offsetter is not None:
            problems += self._offset(point.sm_offset_mhz, locked)
        if point.mem_offset_mhz is not None and self.mem_offsetter is not None:
            # no lock needed: a memory offset does not move the SM clock's curve
            problems += self.mem_offsetter.apply(point.mem_offset_mhz)
        rejection = "; ".join(p for p in problems if p) or None
        if rejection is None:
            # the ticks from here on are read at this point (nothing is measured until it
            # settles); a point the card refused leaves them labelled with what it holds
            self.sampler.set_locks(point.sm_lock_mhz, point.mem_lock_mhz, point.sm_offset_mhz)
            self.sampler.label(self.cap_of(point), "settle")
        return rejection

    def _offset(self, mhz: float, lock_refused: str | None) -> list[str]:
        """Set the point's offset, unless its lock was refused: a raised curve without its lock
        is an overclock, so the cards go back to offset 0 instead (the refusals, one line each).
        """
        assert self.offsetter is not None
        if lock_refused is None or not mhz:
            return self.offsetter.apply(mhz)
        refused = self.offsetter.apply(0.0)
        return [
            *refused,
            f"the {mhz:+g} MHz offset was not set without its SM lock (offset 0 instead)",
        ]

    async def measure(
        self, point: SweepPoint, reason: str, index: int, total: int
    ) -> dict[str, Any]:
        """Measure ``point`` by the protocol; its ``caps.csv`` row (already written).

        Raises:
            PowersweepError: Too many points in a row failed (the server is likely gone).
        """
        cap = self.cap_of(point)
        read_errors = self.sampler.read_errors
        rejection = self.apply(point)
        if rejection is not None:
            self.warn(f"{_name(point)} rejected: {rejection}")
            row = self._row(
                point, reason, [], LoadRun(), Settled(0.0), status="rejected", error=rejection
            )
            await self._finish(point, index, total, row, [], LoadRun(), reason)
            return row
        self.pace.aim(point.position)
        settled = await self.settle(cap, point)
        if reason == SOAK and self.soak_s > 0:
            self.keep_busy(cap)
            await self.clock.asleep(self.soak_s)
        run, rows, row = await self._checked(point, settled, reason)
        if row["status"] == "ok":
            self.pace.remember(point.position)
        self.faults.requests(run.requests)
        refused = await self._stability(point, row, self.sampler.read_errors - read_errors)
        await self._finish(point, index, total, row, rows, run, reason)
        if refused is not None:
            raise refused
        self._failed_in_a_row = self._failed_in_a_row + 1 if row["status"] == "failed" else 0
        if self._failed_in_a_row >= self.protocol.safety.max_failed_caps:
            what = "points" if point.locks_clocks else "caps"
            raise PowersweepError(
                f"{self._failed_in_a_row} {what} in a row failed (last: {row['error']}); "
                "stopping — is the server still up?"
            )
        return row

    async def _stability(
        self, point: SweepPoint, row: dict[str, Any], read_errors: int
    ) -> PowersweepError | None:
        """Check an undervolt step after its windows (:func:`.stability.check_step`), the
        probes alone on the card; the error that ends the sweep, if any."""
        check = self.stability
        if check is None or point.sm_offset_mhz is None or point.sm_lock_mhz is None:
            return None
        await self.stop_busy()  # the probes run alone, batched as the reference's were
        try:
            return await check_step(check, point, row, read_errors, self.faults, self.warn)
        finally:
            self.keep_busy(self.cap_of(point))

    async def _checked(
        self, point: SweepPoint, settled: Settled, reason: str
    ) -> tuple[LoadRun, list[Any], dict[str, Any]]:
        """The point measured, checked by its load mode, and measured once more if disturbed
        (the doubtful attempt stays on record, marked discarded); ``suspect`` if still so."""
        run, rows, row = await self._once(point, settled, reason)
        doubt = self._doubt(point, run, row)
        if not doubt:
            return run, rows, row
        self.faults.add("remeasured", f"{point.label()}: {doubt}")
        self.warn(f"{_name(point)}: {doubt}; measuring it again")
        self._discard(rows, run, self.cap_of(point), point)
        run, rows, row = await self._once(point, settled, reason)
        again = self._doubt(point, run, row)
        if again:
            self.faults.add("suspect", f"{point.label()}: {again}")
            row.update(status="suspect", error=f"measured twice, still disturbed: {again}")
        return run, rows, row

    def _doubt(self, point: SweepPoint, run: LoadRun, row: Mapping[str, Any]) -> str:
        if row["status"] != "ok":
            return ""
        return self.load.check(run, self.ledger.history(point))

    async def settle(self, cap: float, point: SweepPoint | None = None) -> Settled:
        """Wait, under the point's own load, until the card has adjusted: its draw and clock
        stable, then its temperature no longer drifting (at most ``thermal_wait_max_s``).

        The load that kept the card busy since the last point's windows (:meth:`keep_busy`)
        runs on while the readings are watched, so the card never idles between points and the
        measured windows start on a settled card. Every axis and load mode settles here.
        """
        protocol = self.protocol
        self.sampler.label(cap, "settle")
        set_at_s = self.clock.now()
        measure = protocol.measure
        if protocol.safety.observe_only or (
            measure.settle_s <= 0 and measure.thermal_wait_max_s <= 0
        ):
            await self.stop_busy()
            return Settled(0.0)
        self.keep_busy(cap)
        try:
            settle_s = await self._settle_draw()
            thermal = None
            if protocol.measure.thermal_wait_max_s > 0:
                thermal = await self._thermal_wait(cap, point, set_at_s)
            return Settled(settle_s, thermal)
        finally:
            await self.stop_busy()

    async def _thermal_wait(
        self, cap: float, point: SweepPoint | None, set_at_s: float
    ) -> ThermalWait:
        """Wait, under load and at most ``thermal_wait_max_s`` run seconds, until the temperature
        still to come would bias the point by no more than the goal (:func:`wait_goal_rel`):
        every point, a step or a jump alike.

        How long: :class:`.thermal_wait.ThermalWaiter`. A degree is priced by the curve's slope
        between the points measured nearest to it (0.5% per degree before two are)."""
        measure = self.protocol.measure
        bound = measure.thermal_wait_max_s
        if point is not None and not self.ledger.contends(point):
            # a step further under the best than its drift could close: the bias stays inside
            # its stated precision and changes no pick (the still_heating finding agrees)
            bound = 0.0
        now = self.clock.now()
        # the settled draw: the highest tick since the set (decode-single's gaps between
        # requests dip; the operating point is the loaded draw)
        draw_w = self.sampler.peak_power_w(set_at_s, now)
        if not math.isfinite(draw_w):
            # settled before its first tick: the draw is read at the next one
            await self.clock.asleep(measure.sample_interval_s)
            draw_w = self.sampler.peak_power_w(set_at_s, self.clock.now())
        slope = self.ledger.local_slope(point) if point is not None else math.nan
        # a degree priced the dearer way, the cap binding or not: a draw a hair under its cap
        # may read as binding in the point's row, and a wait that priced it the cheaper way
        # would let through a drift its row names
        sensitivity = max(
            drift_sensitivity_per_c(slope, draw_w, binding, len(self.gpus))
            for binding in (True, False)
        )
        goal = wait_goal_rel(measure.windows.precision_pct / 100.0)
        return await self.waiter.wait(
            draw_w, sensitivity, goal, bound=bound, poll_s=measure.sample_interval_s
        )

    async def _settle_draw(self) -> float:
        """Until draw and clock are stable (``auto``) or ``settle_s`` (``fixed``); run seconds."""
        protocol = self.protocol
        if protocol.measure.settle_s <= 0:
            return 0.0
        if protocol.measure.settle_mode == "fixed":
            await self.clock.asleep(protocol.measure.settle_s)
            return protocol.measure.settle_s
        return await wait_settled(
            self.gpus,
            self.clock,
            interval_s=min(0.1, protocol.measure.sample_interval_s),
            detector_factory=lambda: SettleDetector(
                min_s=min(0.25, protocol.measure.settle_s), max_s=protocol.measure.settle_s
            ),
            busy_util_pct=LOAD_UTIL_PCT,
            busy_gpus=self.busy_gpus,
        )

    def keep_busy(self, cap: float) -> None:
        """Keep the card at the point's load until the next measurement starts (or
        :meth:`stop_busy`): nothing measured runs meanwhile (rows written, the next point
        planned or set, the card settling), and the card must not cool meanwhile."""
        if self._busy is None or self._busy.done():
            self.sampler.label(cap, "settle")
            # its requests' faults (a busy or failing server between the windows) are the
            # run's faults too, counted as the measured ones are
            self._busy = asyncio.create_task(
                self.load.keep_busy(cap, KEEP_BUSY_MAX_S, on_result=self._busy_result)
            )

    def _busy_result(self, result: Any) -> None:
        self.faults.requests([result])

    async def stop_busy(self) -> None:
        """End the load :meth:`keep_busy` started (no-op when none runs)."""
        busy, self._busy = self._busy, None
        if busy is not None:
            busy.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await busy

    async def _once(
        self, point: SweepPoint, settled: Settled, reason: str
    ) -> tuple[LoadRun, list[Any], dict[str, Any]]:
        cap = self.cap_of(point)
        await self.stop_busy()  # nothing but the measured load runs while it is measured
        with collector_held():  # no collection pause inside the windows
            run, stop, rounds = await self._rounds(point, settled, reason)
        self.keep_busy(cap)
        drained = self.sampler.drain()
        self.thermal.add(drained)
        rows = relabel_outside(drained, run.power_windows)
        row = self._row(point, reason, rows, run, settled)
        row.update(rounds=rounds, stop_reason=stop)
        if point.locks_clocks and row["status"] == "ok" and not self.protocol.safety.observe_only:
            rejection = verify(point, row)
            if rejection is not None:
                self.warn(f"{_name(point)} rejected: {rejection}")
                row.update(status="rejected", error=rejection)
        return run, rows, row

    async def _rounds(
        self, point: SweepPoint, settled: Settled, reason: str
    ) -> tuple[LoadRun, str, int]:
        """The point's load, round after round until its precision is what the decision needs
        (:mod:`powersweep.sweep.sampling.windows`); the pooled run, why it stopped and how many
        rounds it took."""
        cap = self.cap_of(point)
        policy = self.protocol.measure.windows
        metric_only = reason in REPEAT_REASONS
        first = policy.first_s(self.load.min_window_s)
        runs = [await self.load.measure(cap, metric_only=metric_only, window_s=first)]
        kind = metric_kind(self.protocol.load_mode)
        while True:
            run = LoadRun.merged(runs)
            if run.errors:
                return run, STOP_FAILED, len(runs)
            rows = relabel_outside(self.sampler.peek(), run.power_windows)
            reading = Reading.of(self._row(point, reason, rows, run, settled))
            measured_s = run.kind_s(kind)
            best = self.ledger.best_other(point)
            stop = stop_reason(policy, measured_s, reading, best, self.load.min_window_s)
            if stop is not None:
                return run, stop, len(runs)
            more = next_round_s(policy, measured_s, reading, self.load.min_window_s)
            runs.append(await self.load.measure(cap, metric_only=True, window_s=more))

    def _row(
        self,
        point: SweepPoint,
        reason: str,
        rows: Sequence[Any],
        run: LoadRun,
        settled: Settled,
        *,
        status: str = "ok",
        error: str = "",
    ) -> dict[str, Any]:
        extra: dict[str, Any] = {"reason": reason, "thermal_wait_s": settled.thermal_wait_s}
        if point.locks_clocks:
            extra.update(sm_lock_mhz=point.sm_lock_mhz, mem_lock_mhz=point.mem_lock_mhz)
        if point.sm_offset_mhz is not None:
            extra.update(sm_offset_mhz=point.sm_offset_mhz)
        if point.mem_offset_mhz is not None:
            extra.update(mem_offset_mhz=point.mem_offset_mhz)
        return cap_row(
            cap_w=self.cap_of(point),
            load_mode=self.protocol.load_mode,
            rows=rows,
            requests=run.requests,
            n_gpus=len(self.gpus),
            settle_s=settled.settle_s,
            window_s=run.window_s,
            tps=run.tps or None,
            windows=run.power_windows or None,
            phase_windows=run.windows,
            busy_gpus=self.busy_gpus,
            thermal=self.thermal.model(),
            earlier=self.thermal.recent(self.clock.now() - 2 * DRIFT_TRAIL_S),
            neighbour=self.ledger.nearest_figures(point),
            run_to_run=self.run_to_run,
            power_step_w=self.power_step_w,
            extra={**extra, **run.extra},
            error=error or "; ".join(run.errors),
            status=status,
        )

    def _discard(self, rows: Sequence[Any], run: LoadRun, cap: float, point: SweepPoint) -> None:
        """Keep a discarded attempt's samples and requests, labelled so no figure uses them."""
        self.writer.append_samples([_relabel(r, phase=DISCARDED) for r in rows])
        self.writer.append_requests(
            cap,
            [_relabel(r, prompt_kind=f"{DISCARDED}-{r.prompt_kind}") for r in run.requests],
            (point.sm_lock_mhz, point.mem_lock_mhz),
            offset_mhz=point.sm_offset_mhz,
        )

    async def _finish(
        self,
        point: SweepPoint,
        index: int,
        total: int,
        row: dict[str, Any],
        rows: Sequence[Any],
        run: LoadRun,
        reason: str,
    ) -> None:
        # a repeat's samples and requests are marked: the analysis pools them with the point's
        confirm = reason in REPEAT_REASONS
        locks = (point.sm_lock_mhz, point.mem_lock_mhz)

        step = row.get("power_step_w", math.nan)
        if isinstance(step, float) and step > 0 and not step >= self.power_step_w:
            self.power_step_w = step

        def write() -> None:
            self.writer.append_samples(rows, confirm=confirm)
            self.writer.append_requests(
                row["cap_w"], run.requests, locks, confirm=confirm, offset_mhz=point.sm_offset_mhz
            )
            self.writer.append_cap(row)
            self.ledger.record(point, row, run)
            self.on_point(point, row)

        # In a thread: the load that keeps the card busy meanwhile must not wait for the disk.
        await asyncio.to_thread(write)
        if self.progress:
            metric = "prefill_tps" if self.protocol.load_mode == "prefill-heavy" else "narr_tps"
            self.progress(
                PointProgress(
                    index + 1,
                    total,
                    row["cap_w"],
                    row["status"],
                    row[metric],
                    row["power_w"],
                    row["tps_per_w"],
                    point.label() if point.locks_clocks else "",
                    reason,
                )
            )


def _name(point: SweepPoint) -> str:
    """``cap 280 W`` or ``SM 1410 MHz / mem 9001 MHz``: a point as warnings name it."""
    return point.label() if point.locks_clocks else f"cap {point.label()}"


def _relabel(item: Any, **changes: str) -> Any:
    # a test double need not be a dataclass: it then keeps its labels
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return dataclasses.replace(item, **changes)
    return item
