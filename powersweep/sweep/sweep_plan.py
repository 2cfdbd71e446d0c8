"""What a sweep is asked to measure, and how it ended: the driver's input and output."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from powersweep.sweep.options import LoadOptions, MeasureOptions, PointOptions, SafetyOptions
from powersweep.sweep.planning.clock_points import measure_order
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.planning.undervolt_steps import UndervoltPlan


@dataclass(frozen=True)
class SweepPlan:
    """What to measure, and the option groups as the CLI built them (taken as they are).

    Attributes:
        caps_w: Caps to measure (power axis), or the one limit a clock sweep runs under.
        clock_points: Clock-lock points (``--axis sm-clock|mem-clock|grid``); empty on the power
            axis, where ``caps_w`` are the points.
        load: The load each point runs.
        measure: How every point is measured (settling, the thermal wait, the sampler's
            interval, the windows).
        points: The axis, strategy, refinement step and confirm phase (for a resumed or
            observe-only sweep, the session sets the strategy to ``dense``).
        safety: Observe-only, no reset, failed points in a row before the sweep stops.
        undervolt: The undervolt search (``--axis undervolt``; ``clock_points`` then holds its
            baseline cap, the steps are chosen as it goes).
    """

    caps_w: tuple[float, ...]
    clock_points: tuple[SweepPoint, ...] = ()
    load: LoadOptions = field(default_factory=LoadOptions)
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    points: PointOptions = field(default_factory=PointOptions)
    safety: SafetyOptions = field(default_factory=SafetyOptions)
    undervolt: UndervoltPlan | None = None

    def all_points(self) -> list[SweepPoint]:
        """Every planned point, in measuring order (caps from the highest down)."""
        if self.clock_points:
            return measure_order(self.clock_points)
        if self.safety.observe_only:
            return [SweepPoint(None) for _ in self.caps_w[:1]]
        return [SweepPoint(c) for c in sorted(self.caps_w, reverse=True)]


@dataclass(frozen=True)
class SweepOutcome:
    """How a sweep ended.

    Attributes:
        status: ``complete``, ``partial`` (too few points succeeded to answer),
            ``interrupted`` or ``failed``.
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
