"""The clock axes: SM clock locks, memory clock locks, or both on a grid, under one power limit.

The three share their analysis (:func:`~powersweep.analysis.clock_analysis.analyze_clocks` finds
the peak TPS/W, the points tied with it and the Pareto front), summary and charts; they differ in
which locks their points set, which is what run.json's ``axis`` records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from powersweep.analysis.clock_analysis import analyze_clocks
from powersweep.analysis.clock_curve import clock_points, infer_axis, is_clock_curve
from powersweep.analysis.clock_summary import render_clock_summary, write_clock_outputs
from powersweep.analysis.load import Curve
from powersweep.sweep.axes.axis_base import AnalysisSettings, SweepAxis
from powersweep.sweep.planning.points import SweepPoint


class ClockAxis(SweepAxis):
    """Clock locks under one power limit: the peak TPS/W point and the points tied with it."""

    noun: ClassVar[str] = "point"
    locks_clocks: ClassVar[bool] = True

    def matches(self, curve: Curve) -> bool:
        """Rows with clock locks, on this axis as run.json records it (else as the data shows)."""
        if not is_clock_curve(curve.caps):
            return False
        return infer_axis(clock_points(curve.caps, curve.metric), curve.run) == self.name

    def analyze(self, curve: Curve, settings: AnalysisSettings) -> dict[str, Any]:
        """:func:`~powersweep.analysis.clock_analysis.analyze_clocks` (there is no objective:
        the peak is the answer, near-peak the faster alternative)."""
        return analyze_clocks(
            curve,
            max_tps_loss_pct=settings.max_tps_loss_pct,
            bootstrap=settings.bootstrap,
            tariff_per_kwh=settings.serving.tariff_per_kwh,
            max_ttft_ms=settings.serving.max_ttft_ms,
            max_itl_ms=settings.serving.max_itl_ms,
        )

    def answer(self, result: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The peak TPS/W point."""
        peak: Mapping[str, Any] | None = result.get("peak")
        return peak

    def summary(self, curve: Curve, result: dict[str, Any]) -> str:
        """The clock summary (:mod:`powersweep.analysis.clock_summary`)."""
        return render_clock_summary(curve, result)

    def write_outputs(self, curve: Curve, result: dict[str, Any], out_dir: Path) -> list[Path]:
        """``analysis.json`` and ``summary.md``."""
        return write_clock_outputs(curve, result, out_dir)

    def charts(
        self,
        curve: Curve,
        result: dict[str, Any],
        out_dir: Path,
        *,
        formats: Sequence[str],
        title: str | None,
    ) -> list[Path]:
        """``clock-efficiency`` and ``clock-pareto``."""
        from powersweep.plots import render_clock_charts

        return render_clock_charts(result, out_dir, formats=formats, title=title)

    def tied(self, result: Mapping[str, Any], point: SweepPoint) -> bool:
        """The point's locks are among the peak's tied points."""
        peak: Mapping[str, Any] = result.get("peak") or {}
        ties = [
            (t.get("sm_lock_mhz"), t.get("mem_lock_mhz")) for t in peak.get("tied_points") or []
        ]
        return (point.sm_lock_mhz, point.mem_lock_mhz) in ties

    def confirm_record(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """The caps' record and the points tied with the peak after the confirm phase."""
        sweet: Mapping[str, Any] = result.get("sweet_spot") or {}
        return {**super().confirm_record(result), "tied_points_after": sweet.get("tied_points")}


class SmClockAxis(ClockAxis):
    """SM clock locks (``--axis sm-clock``), the memory clock left to the driver or held."""

    name: ClassVar[str] = "sm-clock"


class MemClockAxis(ClockAxis):
    """Memory clock locks (``--axis mem-clock``), on cards whose driver accepts them."""

    name: ClassVar[str] = "mem-clock"


class GridAxis(ClockAxis):
    """Both locks on a grid (``--axis grid``)."""

    name: ClassVar[str] = "grid"
