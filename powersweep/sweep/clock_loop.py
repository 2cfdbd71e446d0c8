"""The clock-axis loop of a sweep (``--axis sm-clock|mem-clock|grid``): each operating point is
a held power limit and a pair of clock locks; dense, or a coarse pass refined around each tier's
peak and the Pareto front. Run by :class:`~powersweep.sweep.driver.Sweep`, which keeps the shared
machinery (settle, load, rows, restore).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from powersweep.errors import PowersweepError
from powersweep.sweep.loads.base import LoadRun, warmup
from powersweep.sweep.locks import verify
from powersweep.sweep.planning.clocks import (
    SweepPoint,
    coarse_points,
    measure_order,
    refine_points,
)
from powersweep.sweep.sampling.measure import cap_row, relabel_outside

if TYPE_CHECKING:
    from powersweep.sweep.driver import Sweep


class ClockLoop:
    """The clock-point loop of one :class:`~powersweep.sweep.driver.Sweep`.

    Args:
        sweep: The sweep whose GPUs, load, sampler, writer and restore it uses.
    """

    def __init__(self, sweep: Sweep) -> None:
        self.s = sweep

    async def run(self) -> None:
        """The clock-axis loop: every point dense, or a coarse pass refined around the peak and
        the Pareto front (adaptive)."""
        plan = self.s.plan
        points = self._usable_points(list(plan.points))
        first = measure_order(points)[0]
        cap = self._point_cap(first)
        locks = (first.sm_lock_mhz, first.mem_lock_mhz)
        self.s.sampler.set_locks(*locks)
        # warm up and set the load up at the first point even if a card refused its locks: the
        # point is then rejected, but the others still need a prepared load
        self._apply_point(first)
        if plan.warmup_requests > 0:
            results = await warmup(self.s.client, self.s.sampler, cap, plan.warmup_requests)
            self.s.writer.append_requests(cap, results, locks)
            if not any(r.ok for r in results):
                first_error = next((r.error for r in results if r.error), "no request")
                raise PowersweepError(f"the server failed every warm-up request: {first_error}")
        await self.s._prepare(cap)
        done = set(self.s._points_done)
        if plan.strategy != "adaptive":
            order = [p for p in measure_order(points) if p not in done]
            for i, p in enumerate(order):
                await self._measure_point(p, i, len(order), "dense")
            return
        metric = "prefill_tps" if plan.load_mode == "prefill-heavy" else "narr_tps"
        measured: dict[SweepPoint, tuple[float, float]] = {}
        batch = [(p, "coarse pass") for p in measure_order(coarse_points(points))]
        planned, i = len(batch), 0
        while batch:
            for p, reason in batch:
                row = await self._measure_point(p, i, planned, reason)
                done.add(p)
                i += 1
                if row["status"] == "ok":
                    measured[p] = (float(row[metric]), float(row["power_w"]))
            batch = [(p, "refine peak/front") for p in refine_points(points, measured)]
            batch = [(p, r) for p, r in batch if p not in done]
            planned += len(batch)

    def _usable_points(self, points: list[SweepPoint]) -> list[SweepPoint]:
        """Probe memory locks once; a card that refuses them sweeps the SM axis (and says so)."""
        mem = next((p.mem_lock_mhz for p in points if p.mem_lock_mhz is not None), None)
        if mem is None or self.s.plan.observe_only or self.s.locker is None:
            return points
        probe = self.s.locker.probe_mem_locks(mem)
        if probe.ok:
            return points
        if not any(p.sm_lock_mhz is not None for p in points):
            raise PowersweepError(
                f"memory clock locks refused ({probe.message}); --axis mem-clock has nothing "
                "else to sweep"
            )
        self.s.warn(
            f"memory clock locks refused ({probe.message}); the grid falls back to the SM axis "
            "(memory at the clock the card picks)"
        )
        kept = list(dict.fromkeys(SweepPoint(p.cap_w, p.sm_lock_mhz, None) for p in points))
        self.s.meta["axis_fallback"] = "sm-clock"
        self.s.meta["points_planned"] = [p.to_dict() for p in measure_order(kept)]
        return kept

    def _point_cap(self, point: SweepPoint) -> float:
        """The limit in force at a point (W per GPU): the held ``--cap``, else the user's."""
        if point.cap_w is not None:
            return point.cap_w
        return min(self.s._original.values())

    def _apply_point(self, point: SweepPoint) -> str | None:
        """Set the held cap (if any) and the locks; the reason if a card refused either."""
        if self.s.plan.observe_only or self.s.locker is None:
            return None
        problems = [self.s._set_cap(point.cap_w)] if point.cap_w is not None else []
        problems.append(self.s.locker.apply(point))
        return "; ".join(p for p in problems if p) or None

    async def _measure_point(
        self, point: SweepPoint, i: int, total: int, reason: str
    ) -> dict[str, Any]:
        """One clock point: lock, settle, measure, check the card followed, write."""
        cap = self._point_cap(point)
        locks = {"sm_lock_mhz": point.sm_lock_mhz, "mem_lock_mhz": point.mem_lock_mhz}
        self.s.sampler.set_locks(point.sm_lock_mhz, point.mem_lock_mhz)
        rejection = self._apply_point(point)
        rows: list[Any] = []
        run = LoadRun()
        settle_s = 0.0
        if rejection is None:
            settle_s = await self.s._settle(cap)
            run = await self.s.load.measure(cap)
            self.s._faults.requests(run.requests)  # failed requests reach run.json's faults
            self.s.sampler.label(cap, "settle")
            rows = relabel_outside(self.s.sampler.drain(), run.power_windows)
        row = cap_row(
            cap_w=cap,
            load_mode=self.s.plan.load_mode,
            rows=rows,
            requests=run.requests,
            n_gpus=len(self.s.gpus),
            settle_s=settle_s,
            window_s=run.window_s,
            tps=run.tps or None,
            windows=run.power_windows or None,
            busy_gpus=self.s._busy_gpus,
            extra={"reason": reason, **locks, **run.extra},
            error="; ".join(run.errors),
            status="ok" if rejection is None else "rejected",
        )
        if rejection is None and row["status"] == "ok" and not self.s.plan.observe_only:
            rejection = verify(point, row)
            if rejection is not None:
                row.update(status="rejected", error=rejection)
        if rejection is not None:
            self.s.warn(f"{point.label()} rejected: {rejection}")
            row["error"] = row.get("error") or rejection
        self.s._finish_cap(i, total, row, rows, run, label=point.label())
        self.s._points_done.append(point)
        self.s.meta["points_done"] = [p.to_dict() for p in self.s._points_done]
        self.s.writer.write_run_json(self.s.meta)
        self.s._failed_in_a_row = self.s._failed_in_a_row + 1 if row["status"] == "failed" else 0
        if self.s._failed_in_a_row >= self.s.plan.max_failed_caps:
            raise PowersweepError(
                f"{self.s._failed_in_a_row} points in a row failed (last: {row['error']}); "
                "stopping — is the server still up?"
            )
        return row
