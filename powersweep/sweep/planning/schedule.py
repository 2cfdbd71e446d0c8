"""Strategies choose the points; one protocol measures them.

A :class:`Schedule` hands the driver batches of ``(point, reason)``: the first batch when asked
with nothing measured, the next from the rows of the points measured ok so far, and nothing once
it is done.

The reasoning: docs/reference.md, "powersweep.sweep.planning.schedule".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from powersweep.sweep.planning.clock_points import coarse_points, measure_order, refine_points
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.planning.strategy import (
    COARSE,
    AdaptivePlanner,
    CapMeasurement,
    coarse_order,
    plan_order,
)

Batch = list[tuple[SweepPoint, str]]
Measured = Mapping[SweepPoint, Mapping[str, Any]]
REFINE_CLOCKS = "refine peak/front"


class Schedule(Protocol):
    """Which points to measure next."""

    def next(self, measured: Measured) -> Batch:
        """The next batch (empty: done), from the rows of the points measured ok so far."""
        ...

    def record(self) -> dict[str, Any] | None:
        """Facts for ``run.json`` once it is done (None: nothing to say)."""
        ...


class DenseSchedule:
    """Every point, in measuring order, once.

    Args:
        points: The planned points, in the order to measure them.
        reason: The ``reason`` each row carries.
    """

    def __init__(self, points: Sequence[SweepPoint], reason: str = "dense") -> None:
        self._points = list(points)
        self._reason = reason
        self._given = False

    def next(self, measured: Measured) -> Batch:
        if self._given:
            return []
        self._given = True
        return [(p, self._reason) for p in self._points]

    def record(self) -> dict[str, Any] | None:
        return None


class AdaptivePowerSchedule:
    """A coarse pass of caps, refined where the answer is decided (at most half the grid).

    Args:
        planner: The adaptive cap planner.
        metric: The caps.csv column the planner judges (``narr_tps`` or ``prefill_tps``).
    """

    def __init__(self, planner: AdaptivePlanner, metric: str) -> None:
        self.planner = planner
        self.metric = metric
        # every cap asked for: one that failed (not in ``measured``) is tried, not unmeasured
        self._asked: set[float] = set()

    def next(self, measured: Measured) -> Batch:
        if not self._asked:
            first = coarse_order(self.planner.initial_caps())
            self._asked.update(first)
            return [(SweepPoint(c), COARSE) for c in first]
        caps = {
            p.cap_w: CapMeasurement.from_row(row, self.metric)
            for p, row in measured.items()
            if p.cap_w is not None
        }
        # a cap asked for that gave no usable row: tried (the planner never asks for it again)
        # and unusable (it takes no part in the answer)
        for cap in self._asked - caps.keys():
            caps[cap] = CapMeasurement(math.nan, math.nan)
        wanted = dict(self.planner.next_caps(caps))
        self._asked.update(wanted)
        return [(SweepPoint(c), wanted[c]) for c in plan_order(wanted)]

    def record(self) -> dict[str, Any] | None:
        return {
            "max_caps": self.planner.max_caps,
            "left_out": [{"cap_w": c, "reason": why} for c, why in self.planner.left_out],
        }


class AdaptiveClockSchedule:
    """Every other SM lock of each tier, then the SM neighbours of each tier's peak and (on a
    grid) of the Pareto front, until no unmeasured neighbour is left.

    Args:
        points: Every point the dense sweep would measure.
        metric: The caps.csv column whose TPS/W decides the peak.
    """

    def __init__(self, points: Sequence[SweepPoint], metric: str) -> None:
        self.points = list(points)
        self.metric = metric
        self._asked: set[SweepPoint] = set()

    def next(self, measured: Measured) -> Batch:
        if not self._asked:
            first = measure_order(coarse_points(self.points))
            self._asked.update(first)
            return [(p, COARSE) for p in first]
        figures = {
            p: (float(row[self.metric]), float(row["power_w"])) for p, row in measured.items()
        }
        batch = [p for p in refine_points(self.points, figures) if p not in self._asked]
        self._asked.update(batch)
        return [(p, REFINE_CLOCKS) for p in batch]

    def record(self) -> dict[str, Any] | None:
        return None
