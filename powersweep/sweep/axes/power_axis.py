"""The power axis: one power limit per point (``--axis power``, the default)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from powersweep.analysis.clock_curve import is_clock_curve
from powersweep.analysis.context import with_card_facts
from powersweep.analysis.core import analyze
from powersweep.analysis.load import Curve
from powersweep.analysis.result_types import Pick, PowerAnalysis, known
from powersweep.analysis.summary import render_summary
from powersweep.clock import Clock
from powersweep.errors import UsageError
from powersweep.runformat import as_float
from powersweep.sweep.axes.axis_base import AnalysisSettings, PlannedPoints, SweepAxis
from powersweep.sweep.gpu import Gpu
from powersweep.sweep.options import MAX_PLANNED_CAPS, SweepOptions
from powersweep.sweep.planning.caps import clamp_caps, default_caps, uniform_envelope
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.resume import ResumeState


class PowerAxis(SweepAxis[PowerAnalysis]):
    """Power caps: the sweet spot, near-peak, the plateaus and ceilings of the draw."""

    name: ClassVar[str] = "power"
    noun: ClassVar[str] = "cap"
    locks_clocks: ClassVar[bool] = False
    result_type: ClassVar[type[PowerAnalysis]] = PowerAnalysis
    fewer_flags: ClassVar[str] = "--caps, a larger --step-size"

    def plan(
        self,
        options: SweepOptions,
        gpus: list[Gpu],
        warn: Callable[[str], None],
        clock: Clock | None = None,
    ) -> PlannedPoints:
        """The caps (ascending): ``--caps`` clamped into the envelope, else the envelope in
        ``--step-size`` steps; ``--observe-only`` measures the limit in force.

        Raises:
            UsageError: More than :data:`MAX_PLANNED_CAPS` caps, or a plan longer than a day.
        """
        envelope = uniform_envelope([g.envelope() for g in gpus])
        if options.safety.observe_only:
            currents = sorted({g.envelope().current_w for g in gpus})
            if len(currents) > 1:
                warn(
                    "the GPUs run at different limits ("
                    + ", ".join(f"{c:g}" for c in currents)
                    + f" W); the run is labelled with the lowest, {currents[0]:g} W"
                )
            return PlannedPoints([currents[0]])
        caps = (
            clamp_caps(options.points.caps, envelope, warn)
            if options.points.caps
            else default_caps(envelope, options.points.step_size_w)
        )
        if len(caps) > MAX_PLANNED_CAPS:
            raise UsageError(
                f"--step-size {options.points.step_size_w:g} W plans {len(caps)} caps from "
                f"{envelope.min_w:g} to {envelope.max_w:g} W; at most {MAX_PLANNED_CAPS} "
                "(use a larger --step-size or --caps)"
            )
        self.check_time(options, len(caps), clock)
        return PlannedPoints(caps)

    def resumed(self, options: SweepOptions, gpus: list[Gpu], left: ResumeState) -> PlannedPoints:
        """The caps not yet done."""
        return PlannedPoints(list(left.caps_left))

    def sets_limit(self, options: SweepOptions) -> bool:
        """Always: the caps are the points."""
        return True

    def matches(self, curve: Curve) -> bool:
        """Rows without clock locks."""
        return not is_clock_curve(curve.caps)

    def analyze(self, curve: Curve, settings: AnalysisSettings) -> PowerAnalysis:
        """:func:`powersweep.analysis.analyze`, with the card's facts where the CSV lacks them."""
        if settings.card is not None:
            curve = with_card_facts(curve, settings.card)
        return analyze(
            curve,
            max_tps_loss_pct=settings.max_tps_loss_pct,
            bootstrap=settings.bootstrap,
            objective=settings.objective,
            eta=settings.eta,
            tariff_per_kwh=settings.serving.tariff_per_kwh,
            max_ttft_ms=settings.serving.max_ttft_ms,
            max_itl_ms=settings.serving.max_itl_ms,
        )

    def answer(self, result: PowerAnalysis) -> Pick | None:
        """The sweet spot."""
        return result.sweet_spot

    def summary(self, curve: Curve, result: PowerAnalysis) -> str:
        """The power summary (:mod:`powersweep.analysis.summary`)."""
        return render_summary(curve, result)

    def headline(self, result: PowerAnalysis) -> str | None:
        """``sweet spot: 250 W, 0.4500 TPS/W, 108.0 TPS``; a boundary or no answer says so
        first, with the best cap measured named as such."""
        spot = result.sweet_spot
        if spot is None:
            return None
        tpw, tps = as_float(spot.tps_per_w), as_float(spot.tps)
        best = f"{spot.cap_w:g} W, {tpw:.4f} TPS/W, {tps:.1f} TPS"
        answer = known(result.answer)
        if answer is None or answer.kind == "answer":
            return f"sweet spot: {best}"
        if answer.kind == "boundary":
            return f"best cap: {best} (a boundary: {answer.why})"
        binds = known(result.power_cap_binds)
        if binds is not None and binds.binds is False:
            return f"no answer: {answer.why}; lock clocks instead: powersweep --axis sm-clock"
        return f"no answer: {answer.why}\nbest of the caps measured: {best} (not an answer)"

    def charts(
        self,
        curve: Curve,
        result: PowerAnalysis,
        out_dir: Path,
        *,
        formats: Sequence[str],
        title: str | None,
    ) -> list[Path]:
        """``efficiency``, ``power``, ``clocks`` and the samples' ``timeline``."""
        from powersweep.plots import render_charts

        return render_charts(result, out_dir, samples=curve.samples, formats=formats, title=title)

    def tied(self, result: PowerAnalysis, point: SweepPoint) -> bool:
        """The cap is among the sweet spot's tied caps."""
        sweet = result.sweet_spot
        return sweet is not None and point.cap_w in (known(sweet.tied_caps) or [])

    def confirm_record(self, result: PowerAnalysis) -> dict[str, Any]:
        """The best cap after the confirm phase and the caps still tied with it."""
        sweet = result.sweet_spot
        return {
            "best_after_w": sweet.cap_w if sweet else None,
            "tied_after": known(sweet.tied_caps) if sweet else None,
        }
