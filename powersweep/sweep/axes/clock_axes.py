"""The clock axes: SM clock locks, memory clock locks, or both on a grid, under one power limit.

The three share their analysis (:func:`~powersweep.analysis.clock_analysis.analyze_clocks` finds
the peak TPS/W, the points tied with it and the Pareto front), summary and charts; they differ in
which locks their points set, which is what run.json's ``axis`` records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from powersweep.analysis.clock_analysis import analyze_clocks, point_label
from powersweep.analysis.clock_curve import clock_points, infer_axis, is_clock_curve
from powersweep.analysis.clock_result_types import ClockAnalysis, LockPoint
from powersweep.analysis.clock_summary import render_clock_summary
from powersweep.analysis.load import Curve
from powersweep.analysis.result_types import known
from powersweep.analysis.undervolt import is_undervolt_curve
from powersweep.clock import Clock
from powersweep.errors import GpuError
from powersweep.runformat import as_float
from powersweep.sweep.axes.axis_base import AnalysisSettings, PlannedPoints, SweepAxis
from powersweep.sweep.gpu import Gpu, SupportedClocks
from powersweep.sweep.options import SweepOptions
from powersweep.sweep.planning.caps import clamp_caps, uniform_envelope
from powersweep.sweep.planning.clock_points import measure_order, plan_clock_points
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.resume import ResumeState


class ClockAxis(SweepAxis[ClockAnalysis]):
    """Clock locks under one power limit: the peak TPS/W point and the points tied with it."""

    noun: ClassVar[str] = "point"
    locks_clocks: ClassVar[bool] = True
    result_type: ClassVar[type[ClockAnalysis]] = ClockAnalysis
    fewer_flags: ClassVar[str] = "--sm-clocks / --mem-clocks"

    def plan(
        self,
        options: SweepOptions,
        gpus: list[Gpu],
        warn: Callable[[str], None],
        clock: Clock | None = None,
    ) -> PlannedPoints:
        """The clock-lock points, in measuring order, and the limit they run under.

        Set-points come from ``--sm-clocks`` / ``--mem-clocks`` or the first GPU's supported
        clocks; ``--cap`` is clamped into the envelope (else the limit in force is kept).
        ``--observe-only`` measures one point: the locks in force (unknown on NVML, so unlocked
        as far as the run says).

        Raises:
            GpuError: The card cannot list its clocks and none were given.
            UsageError: No clock to sweep, or a plan longer than a day.
        """
        if options.safety.observe_only:
            locks = gpus[0].locked_clocks()
            return self._under_limit([SweepPoint(None, locks.sm_mhz, locks.mem_mhz)], gpus)
        need_sm = options.points.axis != "mem-clock" and not options.points.sm_clocks
        need_mem = options.points.axis != "sm-clock" and not options.points.mem_clocks
        supported: SupportedClocks | None = None
        if need_sm or need_mem:
            try:
                supported = gpus[0].supported_clocks()
            except GpuError as exc:
                raise GpuError(f"cannot plan --axis {options.points.axis}: {exc}") from exc
        cap = options.points.hold_cap_w
        if cap is not None:
            cap = clamp_caps([cap], uniform_envelope([g.envelope() for g in gpus]), warn)[0]
        points = measure_order(
            plan_clock_points(
                options.points.axis,
                supported,
                sm_clocks=options.points.sm_clocks,
                mem_clocks=options.points.mem_clocks,
                cap_w=cap,
            )
        )
        self.check_time(options, len(points), clock)
        return self._under_limit(points, gpus)

    def resumed(self, options: SweepOptions, gpus: list[Gpu], left: ResumeState) -> PlannedPoints:
        """The points not yet done, under the limit the run held."""
        return self._under_limit(list(left.points_left), gpus)

    def sets_limit(self, options: SweepOptions) -> bool:
        """Only with ``--cap``: otherwise the limit in force is kept."""
        return options.points.hold_cap_w is not None

    @staticmethod
    def _under_limit(points: list[SweepPoint], gpus: list[Gpu]) -> PlannedPoints:
        """The points with the one-entry cap list the rest of a sweep uses: the held limit, else
        the lowest limit in force."""
        if points and points[0].cap_w is not None:
            return PlannedPoints([points[0].cap_w], points)
        return PlannedPoints([min(g.envelope().current_w for g in gpus)], points)

    def matches(self, curve: Curve) -> bool:
        """Rows with clock locks, on this axis as run.json records it (else as the data shows);
        not an undervolt search's (its rows hold an offset)."""
        if not is_clock_curve(curve.caps) or is_undervolt_curve(curve):
            return False
        return infer_axis(clock_points(curve.caps, curve.metric), curve.run) == self.name

    def analyze(self, curve: Curve, settings: AnalysisSettings) -> ClockAnalysis:
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

    def answer(self, result: ClockAnalysis) -> LockPoint | None:
        """The peak TPS/W point."""
        return result.peak

    def summary(self, curve: Curve, result: ClockAnalysis) -> str:
        """The clock summary (:mod:`powersweep.analysis.clock_summary`)."""
        return render_clock_summary(curve, result)

    def headline(self, result: ClockAnalysis) -> str | None:
        """``efficiency peak: SM 1500 MHz, 0.1500 TPS/W, 36.0 TPS, 240 W``."""
        peak = result.peak
        if peak is None:
            return None
        locks = {"sm_lock_mhz": peak.sm_lock_mhz, "mem_lock_mhz": peak.mem_lock_mhz}
        best = (
            f"{point_label(locks)}, {as_float(peak.figures.tps_per_w):.4f} TPS/W, "
            f"{as_float(peak.figures.tps):.1f} TPS, {as_float(peak.figures.power_w):.0f} W"
        )
        answer = known(result.answer)
        if answer is None or answer.kind == "answer":
            return f"efficiency peak: {best}"
        if answer.kind == "boundary":
            return f"best point: {best} (a boundary: {answer.why})"
        return f"no answer: {answer.why}\nbest of the points measured: {best} (not an answer)"

    def charts(
        self,
        curve: Curve,
        result: ClockAnalysis,
        out_dir: Path,
        *,
        formats: Sequence[str],
        title: str | None,
    ) -> list[Path]:
        """``clock-efficiency`` and ``clock-pareto``."""
        from powersweep.plots import render_clock_charts

        return render_clock_charts(result, out_dir, formats=formats, title=title)

    def tied(self, result: ClockAnalysis, point: SweepPoint) -> bool:
        """The point's locks are among the peak's tied points."""
        peak = result.peak
        ties = known(peak.tied_points) if peak else None
        return (point.sm_lock_mhz, point.mem_lock_mhz) in [
            (t.sm_lock_mhz, t.mem_lock_mhz) for t in ties or []
        ]

    def confirm_record(self, result: ClockAnalysis) -> dict[str, Any]:
        """The best point's cap after the confirm phase and the points still tied with it."""
        sweet = result.sweet_spot
        ties = known(sweet.tied_points) if sweet else None
        return {
            "best_after_w": sweet.cap_w if sweet else None,
            "tied_after": None,  # a clock sweep ties points, not caps
            "tied_points_after": [t.to_json() for t in ties] if ties is not None else None,
        }


class SmClockAxis(ClockAxis):
    """SM clock locks (``--axis sm-clock``), the memory clock left to the driver or held."""

    name: ClassVar[str] = "sm-clock"


class MemClockAxis(ClockAxis):
    """Memory clock locks (``--axis mem-clock``), on cards whose driver accepts them."""

    name: ClassVar[str] = "mem-clock"


class GridAxis(ClockAxis):
    """Both locks on a grid (``--axis grid``)."""

    name: ClassVar[str] = "grid"
