"""The power axis: one power limit per point (``--axis power``, the default)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from powersweep.analysis.clock_curve import is_clock_curve
from powersweep.analysis.context import with_card_facts
from powersweep.analysis.core import analyze
from powersweep.analysis.load import Curve
from powersweep.analysis.summary import render_summary, write_outputs
from powersweep.sweep.axes.axis_base import AnalysisSettings, SweepAxis
from powersweep.sweep.planning.points import SweepPoint


class PowerAxis(SweepAxis):
    """Power caps: the sweet spot, near-peak, the plateaus and ceilings of the draw."""

    name: ClassVar[str] = "power"
    noun: ClassVar[str] = "cap"
    locks_clocks: ClassVar[bool] = False

    def matches(self, curve: Curve) -> bool:
        """Rows without clock locks."""
        return not is_clock_curve(curve.caps)

    def analyze(self, curve: Curve, settings: AnalysisSettings) -> dict[str, Any]:
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

    def answer(self, result: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The sweet spot."""
        sweet: Mapping[str, Any] | None = result.get("sweet_spot")
        return sweet

    def summary(self, curve: Curve, result: dict[str, Any]) -> str:
        """The power summary (:mod:`powersweep.analysis.summary`)."""
        return render_summary(curve, result)

    def write_outputs(self, curve: Curve, result: dict[str, Any], out_dir: Path) -> list[Path]:
        """``analysis.json``, ``summary.md`` and a caps.csv where the input was another table."""
        return write_outputs(curve, result, out_dir)

    def charts(
        self,
        curve: Curve,
        result: dict[str, Any],
        out_dir: Path,
        *,
        formats: Sequence[str],
        title: str | None,
    ) -> list[Path]:
        """``efficiency``, ``power``, ``clocks`` and the samples' ``timeline``."""
        from powersweep.plots import render_charts

        return render_charts(result, out_dir, samples=curve.samples, formats=formats, title=title)

    def tied(self, result: Mapping[str, Any], point: SweepPoint) -> bool:
        """The cap is among the sweet spot's tied caps."""
        sweet: Mapping[str, Any] = result.get("sweet_spot") or {}
        return point.cap_w in [float(c) for c in sweet.get("tied_caps") or []]
