"""The analysis of an undervolt search, from its caps.csv and run.json alone.

The reasoning: docs/undervolt.md, "powersweep.analysis.undervolt".
"""

from __future__ import annotations

import itertools
import math

from msgspec import UNSET

from powersweep import __version__
from powersweep.analysis import claims
from powersweep.analysis.findings import Finding, finding
from powersweep.analysis.load import Curve
from powersweep.analysis.result_types import Answer, PointFigures, ToolInfo
from powersweep.analysis.run_record import RunOptions, RunRecord
from powersweep.analysis.trust import ignored_rows, run_findings
from powersweep.analysis.undervolt_memory import memory_answer, memory_findings
from powersweep.analysis.undervolt_result_types import (
    IdleAtLock,
    OffsetStep,
    UndervoltAnalysis,
    VersusCap,
)
from powersweep.runformat import REFERENCE_REASON, CsvRow, as_float

SOAK = "soak"
RETRY_REASON = "retry"
# The options' defaults where a bare caps.csv has no run.json to say them: the margin (two 15 MHz
# bins), and the back-off in steps that runs before issue 45 recorded instead.
DEFAULT_MARGIN_MHZ = 30.0
DEFAULT_BACKOFF_STEPS = 2
# The grid the answer sits on (the bins an offset moves the voltage/frequency curve in).
GRID_MHZ = 15.0


def is_undervolt_curve(curve: Curve) -> bool:
    """True when the curve has points at a locked SM clock with a clock offset."""
    caps = curve.caps
    if "sm_offset_mhz" not in caps.columns or "sm_lock_mhz" not in caps.columns:
        return False
    both = caps.filter(caps["sm_offset_mhz"].is_not_null() & caps["sm_lock_mhz"].is_not_null())
    return both.height > 0


def analyze_undervolt(curve: Curve) -> UndervoltAnalysis:
    """The search's answer and how it compares with the baseline cap (docs/run-format.md)."""
    from powersweep.analysis.core import run_facts

    rows = [_step(r, curve.metric) for r in curve.caps.iter_rows(named=True)]
    locked = [r for r in rows if r.sm_lock_mhz is not None and r.sm_offset_mhz is not None]
    # the memory phase's rows (a memory offset at the SM answer) are its own
    mem_rows = [r for r in locked if r.mem_offset_mhz is not None]
    locked = [r for r in locked if r.mem_offset_mhz is None]
    # the baseline's own reading (the run's re-read of it, for the run-to-run term, is the
    # reading only where its own did not stand)
    baselines = [r for r in rows if r.sm_lock_mhz is None and r.figures.status == "ok"]
    baselines = [r for r in baselines if r.reason != REFERENCE_REASON] or baselines
    steps = sorted((r for r in locked if r.reason != SOAK), key=lambda r: as_float(r.sm_offset_mhz))
    soaks = [r for r in locked if r.reason == SOAK]
    options = _options(curve.run)
    step_mhz = _step_mhz(options, steps)
    margin = _margin_mhz(options, step_mhz)
    last_stable, first_bad = _search_edges(_latest(steps))
    # a search cut short has no answer: its last steps and the soak never ran
    withheld = claims.status_claim(curve.run, str(curve.source), "steps")
    chosen = None if withheld else _chosen(steps, soaks, last_stable, margin)
    baseline = baselines[-1] if baselines else None
    findings: list[Finding] = ignored_rows(curve) + run_findings(
        curve.run, curve.requests, str(curve.source)
    )
    versus = VersusCap.between(chosen, baseline)
    findings += _findings(steps, soaks, first_bad, chosen, versus, curve.run)
    findings += _retried(steps)
    record = curve.run.undervolt if curve.run else None
    memory = memory_answer(mem_rows, options, baseline, chosen, record.memory if record else None)
    findings += memory_findings(memory)
    return UndervoltAnalysis(
        tool=ToolInfo("powersweep", __version__),
        metric=curve.metric,
        source=str(curve.source),
        run=run_facts(curve),
        sm_lock_mhz=steps[0].sm_lock_mhz if steps else None,
        step_mhz=step_mhz,
        margin_mhz=margin,
        soak_s=as_float(options.soak_s, None),
        baseline=baseline,
        steps=steps,
        soaks=soaks,
        last_stable_mhz=last_stable.sm_offset_mhz if last_stable else None,
        first_unstable_mhz=first_bad.sm_offset_mhz if first_bad else None,
        first_unstable_reason=first_bad.figures.error if first_bad else None,
        chosen=chosen,
        versus_cap=versus,
        memory=memory,
        findings=findings,
        idle=idle_at_lock(curve.run),
        answer=Answer("none", f"{withheld[0]}; {withheld[1]}") if withheld else UNSET,
    )


def idle_at_lock(run: RunRecord | None) -> IdleAtLock | None:
    """run.json's ``idle`` (None: a run before issue 45, or none was measured)."""
    idle = run.idle if run else None
    if idle is None:
        return None
    span = idle.sm_lock_range_mhz
    low, top = span if span is not None and len(span) == 2 else (None, None)
    return IdleAtLock(
        sm_lock_min_mhz=as_float(low, None),
        sm_lock_mhz=as_float(top if top is not None else idle.sm_lock_mhz, None),
        power_w=as_float(idle.power_w, None),
        sm_clock_mhz=as_float(idle.sm_clock_mhz, None),
        seconds=as_float(idle.seconds, None),
    )


def _step(row: CsvRow, metric: str) -> OffsetStep:
    def num(key: str) -> float | None:
        return as_float(row.get(key), None)

    def text(key: str) -> str | None:
        value = row.get(key)
        return str(value) if value not in (None, "") else None

    figures = PointFigures(
        status=text("status"),
        error=text("error"),
        tps=num(metric),
        power_w=num("power_w"),
        tps_per_w=num("tps_per_w"),
        j_per_token=num("j_per_token"),
        tps_u95_pct=num("tps_u95_pct"),
        tps_per_w_u95_pct=num("tps_per_w_u95_pct"),
        sm_clock_mhz=num("sm_clock_mhz"),
        temp_max_c=num("temp_max_c"),
        mem_clock_mhz=num("mem_clock_mhz"),
        # written where the run states it, so an older analysis reads back whole
        power_u95_pct=num("power_u95_pct") if "power_u95_pct" in row else UNSET,
    )
    return OffsetStep(
        sm_offset_mhz=num("sm_offset_mhz"),
        sm_lock_mhz=num("sm_lock_mhz"),
        cap_w=num("cap_w"),
        reason=text("reason"),
        figures=figures,
        answers_checked=num("answers_checked"),
        answers_differ=num("answers_differ"),
        mem_offset_mhz=num("mem_offset_mhz"),
    )


def _options(run: RunRecord | None) -> RunOptions:
    return (run.options if run else None) or RunOptions()


def _margin_mhz(options: RunOptions, step_mhz: float | None) -> float:
    """The margin as run.json records it; a run before issue 45 recorded steps to back off."""
    margin = as_float(options.margin_mhz, None)
    if margin is not None:
        return margin
    steps = as_float(options.backoff_steps, None)
    return (DEFAULT_BACKOFF_STEPS if steps is None else steps) * (step_mhz or GRID_MHZ)


def answer_mhz(last_stable_mhz: float, margin_mhz: float) -> float:
    """Where the margin below the last stable offset lands: on the grid, never below 0."""
    return max(0.0, math.floor((last_stable_mhz - margin_mhz) / GRID_MHZ + 1e-9) * GRID_MHZ)


def _step_mhz(options: RunOptions, steps: list[OffsetStep]) -> float | None:
    """The search's step: as run.json records it, else the smallest gap between offsets."""
    recorded = as_float(options.offset_step_mhz, None)
    if recorded is not None and recorded > 0:
        return recorded
    offsets = sorted({as_float(s.sm_offset_mhz) for s in steps})
    gaps = [b - a for a, b in itertools.pairwise(offsets) if b > a]
    return min(gaps) if gaps else None


def _latest(steps: list[OffsetStep]) -> list[OffsetStep]:
    """Each offset's latest reading (a step measured again, after a failure the world may have
    caused, is judged by its second reading), by offset."""
    latest: dict[float, OffsetStep] = {}
    for s in steps:
        latest[as_float(s.sm_offset_mhz)] = s
    return [latest[o] for o in sorted(latest)]


def _retried(steps: list[OffsetStep]) -> list[Finding]:
    """The steps measured again, and how the second reading came out."""
    out = []
    for s in steps:
        if s.reason != RETRY_REASON:
            continue
        first = next(
            (f for f in steps if f.sm_offset_mhz == s.sm_offset_mhz and f.figures.status != "ok"),
            None,
        )
        why = f" ({first.figures.error})" if first is not None and first.figures.error else ""
        outcome = "held" if s.figures.status == "ok" else f"was {s.figures.status} again"
        out.append(
            finding(
                "info",
                "step_retried",
                f"{as_float(s.sm_offset_mhz):+g} MHz failed{why}, a failure the server or the "
                f"world may cause: measured once more, it {outcome}",
            )
        )
    return out


def _search_edges(steps: list[OffsetStep]) -> tuple[OffsetStep | None, OffsetStep | None]:
    """The last step that held, counting up from offset 0, and the first that did not."""
    last_stable = None
    for s in steps:
        if s.figures.status != "ok":
            return last_stable, s
        last_stable = s
    return last_stable, None


def _chosen(
    steps: list[OffsetStep],
    soaks: list[OffsetStep],
    last_stable: OffsetStep | None,
    margin_mhz: float,
) -> OffsetStep | None:
    """The answer: the soak that held (the last one: each failed soak backs off by the margin
    again), else a stable step where the margin lands (offset 0 needs no soak; a search without
    soaks reports the step as measured), else offset 0 where every soak failed."""
    held = [s for s in soaks if s.figures.status == "ok"]
    if held:
        return held[-1]
    if last_stable is None:
        return None
    want = 0.0 if soaks else answer_mhz(as_float(last_stable.sm_offset_mhz), margin_mhz)
    for s in steps:
        if s.figures.status == "ok" and abs(as_float(s.sm_offset_mhz) - want) < 0.5:
            return s
    return None


def _findings(
    steps: list[OffsetStep],
    soaks: list[OffsetStep],
    first_bad: OffsetStep | None,
    chosen: OffsetStep | None,
    versus: VersusCap | None,
    run: RunRecord | None,
) -> list[Finding]:
    out = []
    if first_bad is not None:
        out.append(
            finding(
                "info",
                "undervolt_unstable",
                f"{first_bad.sm_offset_mhz:+g} MHz was {first_bad.figures.status}: "
                f"{first_bad.figures.error}; the search ended there",
            )
        )
    resets = [f for f in (run.faults if run else None) or [] if f.kind == "gpu_reset"]
    if resets:
        out.append(
            finding(
                "warning",
                "gpu_reset",
                f"the card was reset during the search ({resets[0].count} time(s)): "
                f"{(resets[0].examples or [''])[0]}",
                "a reset interrupts whatever runs on the card, the server included; the offsets "
                "and locks were put back",
            )
        )
    for s in soaks:
        if s.figures.status != "ok":
            out.append(
                finding(
                    "warning",
                    "soak_failed",
                    f"the soak at {s.sm_offset_mhz:+g} MHz was {s.figures.status} "
                    f"({s.figures.error}): backed off one step more",
                )
            )
    if chosen is not None and not as_float(chosen.sm_offset_mhz) > 0:
        out.append(
            finding(
                "info",
                "no_undervolt",
                "no offset above 0 held with the margin: the card's own curve is the "
                "answer at this clock",
            )
        )
    if versus is not None and versus.tied:
        out.append(
            finding(
                "info",
                "undervolt_tied",
                f"the undervolt point's TPS/W is within noise of the {versus.cap_w:g} W cap's "
                f"({versus.tps_per_w_gain_pct:+.1f}% +-{versus.tps_per_w_gain_u95_pct:.1f}%): "
                "the power cap alone does as well",
            )
        )
    if not steps:
        out.append(finding("warning", "no_steps", "no offset step was measured"))
    return out
