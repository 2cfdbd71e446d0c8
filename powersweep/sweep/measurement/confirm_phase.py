"""The confirm phase: the points statistically tied with the best, measured once more on a warm
card, their readings pooled by the analysis.

The reasoning: docs/reference.md, "powersweep.sweep.measurement.confirm_phase".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from powersweep.analysis.result_types import JsonRecord
from powersweep.errors import PowersweepError
from powersweep.runformat import CONFIRM_REASON
from powersweep.sweep.axes import AnalysisSettings, SweepAxis, axis_of
from powersweep.sweep.measurement.point import PointMeasurer
from powersweep.sweep.planning.confirm_plan import plan_confirm
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.records.writer import RunWriter


class ConfirmPhase:
    """The confirm phase of one sweep.

    Args:
        measurer: The protocol every point is measured by.
        writer: The run directory (analysed so far, and where the record goes).
        meta: ``run.json`` content (``confirm`` is set).
        planned: The sweep's planned points (a clock sweep's ties are matched to them).
        warn: Where warnings go.

    The curve's axis (:func:`powersweep.sweep.axes.axis_of`) analyses it and says which points
    are still tied.
    """

    def __init__(
        self,
        measurer: PointMeasurer,
        writer: RunWriter,
        meta: dict[str, Any],
        planned: Sequence[SweepPoint],
        *,
        warn: Callable[[str], None],
    ) -> None:
        self.measurer = measurer
        self.writer = writer
        self.meta = meta
        self.planned = list(planned)
        self.axis: SweepAxis | None = None  # the curve's, once analysed
        self.warn = warn

    async def run(self, best: SweepPoint | None) -> None:
        """Confirm the points tied with the best (``best``: the best TPS/W measured so far, where
        the card is kept warm while the next points are chosen)."""
        analysis = await self._keeping_warm(best, lambda: self._analysis("so far"))
        plan = plan_confirm(analysis, planned=self.planned)
        self.meta["confirm"] = plan.record
        self.writer.write_run_json(self.meta)
        if not plan.points:
            return
        after: JsonRecord | None = None
        for i, point in enumerate(plan.points):
            await self.measurer.measure(point, CONFIRM_REASON, i, len(plan.points))
            after = await asyncio.to_thread(self._analysis, "pooled")
            rest = plan.points[i + 1 :]
            if rest and not any(self._still_tied(after, p) for p in rest):
                # the readings pooled so far separate the rest from the best: stop there
                plan.record.update(stopped=f"separated after {i + 1} of {len(plan.points)}")
                break
        await self.measurer.stop_busy()  # nothing is measured after it
        if self.axis is not None and after is not None:
            plan.record.update(self.axis.confirm_record(after))
        else:
            plan.record.update(best_after_w=None, tied_after=None)
        self.meta["confirm"] = plan.record
        self.writer.write_run_json(self.meta)

    def _analysis(self, when: str) -> JsonRecord | None:
        # Imported here: the analysis is only needed at the end of a sweep.
        from powersweep.analysis import load_curve

        try:
            curve = load_curve(self.writer.path)
            self.axis = axis_of(curve)
            return self.axis.analyze(curve, AnalysisSettings())
        except PowersweepError as exc:  # nothing usable measured: nothing to confirm
            self.warn(f"confirm phase: cannot analyse the readings {when}: {exc}")
            return None

    def _still_tied(self, analysis: JsonRecord | None, point: SweepPoint) -> bool:
        """True when the analysis still ties ``point`` with the best (or cannot tell)."""
        if analysis is None or self.axis is None:
            return True
        return self.axis.tied(analysis, point)

    async def _keeping_warm(
        self, point: SweepPoint | None, work: Callable[[], JsonRecord | None]
    ) -> JsonRecord | None:
        """Run ``work`` in a thread while the load keeps the card busy at ``point``."""
        if point is not None and self.measurer.apply(point) is None:
            self.measurer.keep_busy(self.measurer.cap_of(point))
        return await asyncio.to_thread(work)
