"""The axes a sweep can vary, registered by their ``--axis`` name.

Adding an axis is a module here with a :class:`~.axis_base.SweepAxis` subclass, and its
registration: its name in :class:`powersweep.sweep.options.Axis` (the CLI's choices) and its
instance in :data:`AXES`. The report, ``analyze``, ``plot`` and the confirm phase then read its
curves through it (docs/architecture.md shows the steps).
"""

from __future__ import annotations

from collections.abc import Mapping

from powersweep.analysis.load import Curve
from powersweep.errors import UsageError
from powersweep.sweep.axes.axis_base import AnalysisSettings, SweepAxis
from powersweep.sweep.axes.clock_axes import GridAxis, MemClockAxis, SmClockAxis
from powersweep.sweep.axes.power_axis import PowerAxis
from powersweep.sweep.axes.undervolt_axis import UndervoltAxis

AXES: Mapping[str, SweepAxis] = {
    axis.name: axis
    for axis in (PowerAxis(), SmClockAxis(), MemClockAxis(), GridAxis(), UndervoltAxis())
}


def axis_named(name: str) -> SweepAxis:
    """The axis ``--axis NAME`` sweeps.

    Raises:
        UsageError: No axis has that name.
    """
    try:
        return AXES[str(name)]
    except KeyError:
        raise UsageError(f"unknown axis {name!r}; use one of {', '.join(AXES)}") from None


def axis_of(curve: Curve) -> SweepAxis:
    """The axis a saved curve was measured on: the one its run.json records (a grid that fell
    back to the SM axis says so), else the first whose columns it has (a bare CSV).

    Raises:
        UsageError: No registered axis reads it (a programming error: power reads any curve
            without clock locks).
    """
    recorded = AXES.get((curve.run.swept_axis if curve.run else None) or "")
    if recorded is not None and recorded.matches(curve):
        return recorded
    for axis in AXES.values():
        if axis.matches(curve):
            return axis
    raise UsageError(f"{curve.source}: no axis reads this curve")


__all__ = ["AXES", "AnalysisSettings", "SweepAxis", "axis_named", "axis_of"]
