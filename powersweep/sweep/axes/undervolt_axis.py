"""The undervolt axis (``--axis undervolt``, issue 36): one locked SM clock, the clock offset
stepped up from 0 until the first unstable step, the answer backed off and soaked, beside the
best power cap measured in the same run.

The steps are chosen as the search goes
(:class:`~powersweep.sweep.planning.undervolt_steps.UndervoltSchedule`); what is planned here is
the baseline cap and the bounds of the search.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from powersweep.analysis.load import Curve
from powersweep.analysis.result_types import known
from powersweep.analysis.undervolt import analyze_undervolt, is_undervolt_curve
from powersweep.analysis.undervolt_result_types import OffsetStep, UndervoltAnalysis
from powersweep.analysis.undervolt_summary import headline, render_undervolt_summary
from powersweep.clock import Clock
from powersweep.errors import GpuError, UsageError
from powersweep.sweep.axes.axis_base import AnalysisSettings, PlannedPoints, SweepAxis
from powersweep.sweep.gpu import Gpu
from powersweep.sweep.gpu.vm_guest import vm_guest
from powersweep.sweep.offsets import ClockOffsetter
from powersweep.sweep.options import SweepOptions, UndervoltOptions
from powersweep.sweep.planning.caps import clamp_caps, uniform_envelope
from powersweep.sweep.planning.memory_steps import MemoryPlan
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.planning.undervolt_steps import UndervoltPlan, resume_from
from powersweep.sweep.resume import ResumeState

# Said before the first step (and by --dry-run): what an unstable offset does.
RISK_WARNING = (
    "an undervolt search raises the SM clock offset until a step fails its stability check: an "
    "unstable offset can corrupt answers, raise GPU errors or reset the GPU, which interrupts "
    "the server (it may need a restart). Offsets and locks are journalled and put back on every "
    "exit; after a reset the card comes back at offset 0"
)


class UndervoltAxis(SweepAxis[UndervoltAnalysis]):
    """A locked SM clock with its voltage/frequency offset stepped up, checked for stability."""

    name: ClassVar[str] = "undervolt"
    noun: ClassVar[str] = "step"
    locks_clocks: ClassVar[bool] = True
    result_type: ClassVar[type[UndervoltAnalysis]] = UndervoltAnalysis
    fewer_flags: ClassVar[str] = "--offset-step / --max-offset"

    def plan(
        self,
        options: SweepOptions,
        gpus: list[Gpu],
        warn: Callable[[str], None],
        clock: Clock | None = None,
    ) -> PlannedPoints:
        """The baseline cap and the search's bounds, after the refusals: a VM guest, a card
        without a settable, readable offset.

        Raises:
            UsageError: A VM guest, no offset support, or a search longer than a day.
        """
        if options.simulate is None:
            guest = vm_guest()
            if guest is not None:
                raise UsageError(
                    f"--axis undervolt is refused in a virtual machine ({guest}): a GPU reset "
                    "can take the passthrough with it, and a guest's offset may be ignored"
                )
        offsets = ClockOffsetter(gpus, warn)
        offsets.check_supported()
        low_high = offsets.range_mhz()
        uv = options.undervolt
        top = low_high[1] if low_high is not None else uv.max_offset_mhz
        if top is None:
            raise UsageError("the card does not say its clock offset range: give --max-offset MHz")
        if uv.max_offset_mhz is not None:
            top = min(top, uv.max_offset_mhz)
        if top < uv.offset_step_mhz:
            raise UsageError(
                f"the card takes offsets up to {top:+g} MHz: less than one --offset-step"
            )
        memory = _memory_plan(gpus, warn, uv)
        cap = options.points.hold_cap_w
        envelope = uniform_envelope([g.envelope() for g in gpus])
        if cap is None and abs(envelope.current_w - envelope.default_w) < 0.5:
            warn(
                f"the baseline is the limit in force, {envelope.current_w:g} W, the card's "
                "default: give --cap W (your best cap, from a power sweep) to set the undervolt "
                "beside it"
            )
        cap = clamp_caps([cap], envelope, warn)[0] if cap is not None else envelope.current_w
        plan = UndervoltPlan(
            cap_w=cap,
            lock_mhz=options.points.sm_clocks[0] if options.points.sm_clocks else None,
            sm_clocks_mhz=_sm_clocks(gpus[0]),
            step_mhz=uv.offset_step_mhz,
            max_mhz=top,
            margin_mhz=uv.margin_mhz,
            soak_s=uv.soak_s,
            memory=memory,
        )
        self.check_time(options, plan.max_points, clock)
        warn(RISK_WARNING)
        return PlannedPoints([cap], [SweepPoint(cap, sm_offset_mhz=0.0)], undervolt=plan)

    def resumed(self, options: SweepOptions, gpus: list[Gpu], left: ResumeState) -> PlannedPoints:
        """The search on from where it stood (:func:`~..planning.undervolt_steps.resume_from`):
        its baseline stands, offset 0's answers are taken again (the server may have restarted),
        and the offset set when the run died counts as unstable. A run that died before its lock
        was known starts again from its baseline.

        Raises:
            UsageError: The run's rows cannot be read.
        """
        planned = self.plan(options, gpus, lambda _m: None)
        plan = planned.undervolt
        assert plan is not None
        record = left.meta.get("undervolt") or {}
        resume = resume_from(record, _rows(left.writer.path / "caps.csv"))
        if resume is None:
            return planned
        # the baseline point stays the first set (the warm-up runs there), not measured again
        return dataclasses.replace(planned, undervolt=dataclasses.replace(plan, resume=resume))

    def sets_limit(self, options: SweepOptions) -> bool:
        """Always: the baseline cap is held at every step."""
        return True

    def matches(self, curve: Curve) -> bool:
        """Rows at a locked SM clock with a clock offset."""
        return is_undervolt_curve(curve)

    def analyze(self, curve: Curve, settings: AnalysisSettings) -> UndervoltAnalysis:
        """:func:`~powersweep.analysis.undervolt.analyze_undervolt` (the answer is the search's:
        no objective chooses among the steps).

        Raises:
            UsageError: A tariff, a latency target or an objective was asked of it: the answer
                would read as though they had chosen it.
        """
        asked = [
            name
            for name, given in (
                ("--tariff", settings.serving.tariff_per_kwh is not None),
                ("--max-ttft-ms", settings.serving.max_ttft_ms is not None),
                ("--max-itl-ms", settings.serving.max_itl_ms is not None),
                ("--objective", settings.objective != AnalysisSettings.objective),
            )
            if given
        ]
        if asked:
            raise UsageError(
                f"{', '.join(asked)} cannot choose an undervolt search's answer: it is the "
                "highest offset that held, less its margin (each step's J/token is in its table)"
            )
        return analyze_undervolt(curve)

    def answer(self, result: UndervoltAnalysis) -> OffsetStep | None:
        """The chosen (soaked) offset; a search cut short, whose answer is withheld, stands on
        its baseline cap's reading (it is shown, with why there is no answer)."""
        if result.chosen is None and known(result.answer) is not None:
            return result.baseline
        return result.chosen

    def summary(self, curve: Curve, result: UndervoltAnalysis) -> str:
        """The undervolt summary (:mod:`powersweep.analysis.undervolt_summary`)."""
        return render_undervolt_summary(curve, result)

    def headline(self, result: UndervoltAnalysis) -> str | None:
        """``undervolt: SM 1695 MHz +120 MHz offset, 0.1650 TPS/W (+8.1% ...), 36.0 TPS``."""
        return headline(result)

    def charts(
        self,
        curve: Curve,
        result: UndervoltAnalysis,
        out_dir: Path,
        *,
        formats: Sequence[str],
        title: str | None,
    ) -> list[Path]:
        """``undervolt``: TPS/W and draw against the offset."""
        from powersweep.plots.undervolt_chart import render_undervolt_chart

        return render_undervolt_chart(result, out_dir, formats=formats, title=title)

    def tied(self, result: UndervoltAnalysis, point: SweepPoint) -> bool:
        """Never: the search has no confirm phase (its soak is its confirmation)."""
        return False

    def confirm_record(self, result: UndervoltAnalysis) -> dict[str, Any]:
        """Nothing is confirmed on this axis."""
        return {"best_after_w": None, "tied_after": None}


def _sm_clocks(gpu: Gpu) -> tuple[float, ...]:
    """The SM clocks the card supports at its highest memory clock (empty: it does not say)."""
    try:
        supported = gpu.supported_clocks()
    except GpuError:
        return ()
    if not supported.mem_mhz:
        return ()
    return tuple(supported.sm_mhz_by_mem.get(max(supported.mem_mhz), ()))


def _rows(path: Path) -> list[dict[str, str]]:
    """An interrupted run's caps.csv rows (its writer dropped a half-written last one).

    Raises:
        UsageError: It cannot be read.
    """
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        return []
    except (OSError, csv.Error, UnicodeDecodeError) as exc:
        raise UsageError(f"--resume: cannot read {path}: {exc}") from None


def _memory_plan(
    gpus: list[Gpu], warn: Callable[[str], None], uv: UndervoltOptions
) -> MemoryPlan | None:
    """The memory phase's bounds (None: ``--mem-offset-step 0``).

    Raises:
        UsageError: A card without a memory offset it can read and set, or a range below one
            step.
    """
    if uv.mem_offset_step_mhz <= 0:
        return None
    offsets = ClockOffsetter(gpus, warn, clock="mem")
    offsets.check_supported()
    low_high = offsets.range_mhz()
    top = low_high[1] if low_high is not None else uv.max_mem_offset_mhz
    if top is None:
        raise UsageError(
            "the card does not say its memory clock offset range: give --max-mem-offset MHz"
        )
    if uv.max_mem_offset_mhz is not None:
        top = min(top, uv.max_mem_offset_mhz)
    if top < uv.mem_offset_step_mhz:
        raise UsageError(
            f"the card takes memory offsets up to {top:+g} MHz: less than one --mem-offset-step"
        )
    margin = uv.mem_margin_mhz if uv.mem_margin_mhz is not None else uv.mem_offset_step_mhz
    return MemoryPlan(uv.mem_offset_step_mhz, top, margin)
