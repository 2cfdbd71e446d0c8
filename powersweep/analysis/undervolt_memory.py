"""The undervolt search's memory phase, from its caps.csv rows alone (issue 45): the memory clock
offset at the SM answer, stepped up while TPS rose beyond the readings' own noise.

The rule that stops the phase (:func:`rose_beyond_noise`) is the one the sweep ran by
(:mod:`powersweep.sweep.planning.memory_steps`).

The reasoning: docs/undervolt.md, "powersweep.analysis.undervolt_memory".
"""

from __future__ import annotations

import math

from powersweep.analysis.findings import Finding, finding
from powersweep.analysis.run_record import MemorySearch, RunOptions
from powersweep.analysis.undervolt_result_types import MemoryAnswer, OffsetStep, VersusCap
from powersweep.runformat import as_float

SOAK = "soak"


def rose_beyond_noise(tps: float, u95_pct: float, best: float, best_u95_pct: float) -> bool:
    """Whether ``tps`` is above ``best`` by more than the two readings' stated 95% half-widths
    in quadrature (False where either reading is unknown: nothing says it rose)."""
    if not (tps > 0 and best > 0 and math.isfinite(u95_pct) and math.isfinite(best_u95_pct)):
        return False
    return 100.0 * (tps / best - 1.0) > math.hypot(u95_pct, best_u95_pct)


def memory_answer(
    rows: list[OffsetStep],
    options: RunOptions,
    baseline: OffsetStep | None,
    sm_answer: OffsetStep | None,
    record: MemorySearch | None = None,
) -> MemoryAnswer | None:
    """The phase's answer (None: no memory rows): the best offset (each step's TPS above the
    best before it beyond noise, from offset 0 up to the first that failed or did not rise),
    less the margin, as soaked; compared with the baseline cap and with the SM answer alone."""
    if not rows:
        return None
    steps = _latest([r for r in rows if r.reason != SOAK])
    soaks = [r for r in rows if r.reason == SOAK]
    best, stopped = _recorded_edge(steps, record or MemorySearch()) or _edge(steps)
    step_mhz = as_float(options.mem_offset_step_mhz, None)
    margin = as_float(options.mem_margin_mhz, None)
    margin = margin if margin is not None else step_mhz
    chosen = _chosen(steps, soaks, best, margin or 0.0)
    zero = next((s for s in steps if not as_float(s.mem_offset_mhz)), None)
    return MemoryAnswer(
        step_mhz=step_mhz,
        margin_mhz=margin,
        steps=sorted(rows, key=lambda r: as_float(r.mem_offset_mhz)),
        soaks=soaks,
        best_mhz=best.mem_offset_mhz if best is not None else None,
        stopped_mhz=stopped.mem_offset_mhz if stopped is not None else None,
        stopped_reason=_why(stopped, best),
        chosen=chosen,
        versus_cap=VersusCap.between(chosen, baseline),
        versus_sm=VersusCap.between(chosen, zero or sm_answer),
    )


def memory_findings(memory: MemoryAnswer | None) -> list[Finding]:
    """What the phase found: where it stopped, soaks that failed, an answer that gains nothing."""
    if memory is None:
        return []
    out = []
    if memory.stopped_mhz is not None:
        out.append(
            finding(
                "info", "memory_stopped", f"memory {memory.stopped_reason}: the phase ended there"
            )
        )
    for s in memory.soaks:
        if s.figures.status != "ok":
            out.append(
                finding(
                    "warning",
                    "memory_soak_failed",
                    f"the soak at memory {as_float(s.mem_offset_mhz):+g} MHz was "
                    f"{s.figures.status} ({s.figures.error}): backed off by the margin",
                )
            )
    versus = memory.versus_sm
    if memory.chosen is not None and versus is not None and versus.tied:
        out.append(
            finding(
                "info",
                "memory_tied",
                f"the memory offset's TPS/W is within noise of the SM answer's alone "
                f"({versus.tps_per_w_gain_pct:+.1f}% +-{versus.tps_per_w_gain_u95_pct:.1f}%; "
                f"TPS {versus.tps_change_pct:+.1f}%): it buys speed, not efficiency",
            )
        )
    return out


def _latest(steps: list[OffsetStep]) -> list[OffsetStep]:
    """Each memory offset's latest reading, by offset."""
    latest: dict[float, OffsetStep] = {}
    for s in steps:
        latest[as_float(s.mem_offset_mhz)] = s
    return [latest[o] for o in sorted(latest)]


def _edge(steps: list[OffsetStep]) -> tuple[OffsetStep | None, OffsetStep | None]:
    """The best step (its TPS above every one before it beyond noise) and the step that ended
    the climb (failed, or did not rise; None: none did)."""
    best = None
    for s in steps:
        if s.figures.status != "ok":
            return best, s
        if best is not None and not rose_beyond_noise(
            as_float(s.figures.tps),
            as_float(s.figures.tps_u95_pct),
            as_float(best.figures.tps),
            as_float(best.figures.tps_u95_pct),
        ):
            return best, s
        best = s
    return best, None


def _recorded_edge(
    steps: list[OffsetStep], record: MemorySearch
) -> tuple[OffsetStep | None, OffsetStep | None] | None:
    """The best and stopping steps the run recorded, where its best is a step the rows hold
    measured ok (None: not recorded, or not so)."""
    by_mhz = {as_float(s.mem_offset_mhz): s for s in steps}
    best_mhz, stopped_mhz = as_float(record.best_mhz, None), as_float(record.stopped_mhz, None)
    best = by_mhz.get(best_mhz) if best_mhz is not None else None
    if best is None or best.figures.status != "ok":
        return None
    return best, by_mhz.get(stopped_mhz) if stopped_mhz is not None else None


def _chosen(
    steps: list[OffsetStep], soaks: list[OffsetStep], best: OffsetStep | None, margin: float
) -> OffsetStep | None:
    """The soak that held (the last), else the stable step the margin lands on, else offset 0
    where every soak failed."""
    held = [s for s in soaks if s.figures.status == "ok"]
    if held:
        return held[-1]
    if best is None:
        return None
    want = 0.0 if soaks else max(0.0, as_float(best.mem_offset_mhz) - margin)
    for s in steps:
        if s.figures.status == "ok" and abs(as_float(s.mem_offset_mhz) - want) < 0.5:
            return s
    return None


def _why(stopped: OffsetStep | None, best: OffsetStep | None) -> str | None:
    if stopped is None:
        return None
    where = f"{as_float(stopped.mem_offset_mhz):+g} MHz"
    if stopped.figures.status != "ok":
        return f"{where} was {stopped.figures.status} ({stopped.figures.error})"
    than = f" than at {as_float(best.mem_offset_mhz):+g} MHz" if best is not None else ""
    return f"{where}: TPS no higher beyond noise{than} (past the margin, replays eat bandwidth)"
