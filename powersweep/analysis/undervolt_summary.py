"""summary.md of an undervolt search: the answer beside the best cap, then every step."""

from __future__ import annotations

from powersweep.analysis.load import Curve
from powersweep.analysis.result_types import known
from powersweep.analysis.summary_frame import (
    Column,
    answer_banner,
    apply_line,
    escape_md,
    findings_lines,
    heading,
    metric_label,
    row,
    source_line,
    status_cell,
    table,
)
from powersweep.analysis.summary_frame import number as _fmt
from powersweep.analysis.undervolt_result_types import (
    IdleAtLock,
    MemoryAnswer,
    OffsetStep,
    UndervoltAnalysis,
    VersusCap,
)


def point_name(step: OffsetStep) -> str:
    """``SM 1695 MHz +120 MHz offset`` (``280 W cap`` for the baseline)."""
    if step.sm_lock_mhz is None:
        return f"{_fmt(step.cap_w, 0)} W cap"
    name = f"SM {step.sm_lock_mhz:g} MHz {_fmt(step.sm_offset_mhz, 0, sign=True)} MHz offset"
    if step.mem_offset_mhz is not None:
        name += f", memory {_fmt(step.mem_offset_mhz, 0, sign=True)} MHz"
    return name


def headline(result: UndervoltAnalysis) -> str | None:
    """``undervolt: SM 1695 MHz +120 MHz offset, 0.1650 TPS/W (+8.1% +-1.2% vs the 280 W cap),
    36.0 TPS`` (None: no answer)."""
    chosen = result.chosen
    if chosen is None:
        return None
    versus = result.versus_cap
    against = ""
    if versus is not None and versus.tps_per_w_gain_pct is not None:
        against = (
            f" ({versus.tps_per_w_gain_pct:+.1f}% +-{_fmt(versus.tps_per_w_gain_u95_pct)}% vs "
            f"the {_fmt(versus.cap_w, 0)} W cap)"
        )
    return (
        f"undervolt: {point_name(chosen)}, {_fmt(chosen.figures.tps_per_w, 4)} TPS/W{against}, "
        f"{_fmt(chosen.figures.tps)} TPS, {_fmt(chosen.figures.power_w, 0)} W{_memory_note(result)}"
        f"{_idle_note(result.idle)}"
    )


def _memory_note(result: UndervoltAnalysis) -> str:
    """``; with memory +1000 MHz: 47.8 TPS (+2.2% +-0.4% TPS/W ...)`` (empty: no phase)."""
    memory = result.memory
    if memory is None or memory.chosen is None or not memory.chosen.mem_offset_mhz:
        return ""
    c, v = memory.chosen, memory.versus_sm
    change = (
        f" ({_fmt(v.tps_change_pct, 1, True)}% TPS, {_fmt(v.tps_per_w_gain_pct, 1, True)}% "
        f"+-{_fmt(v.tps_per_w_gain_u95_pct)}% TPS/W)"
        if v is not None
        else ""
    )
    return (
        f"; with memory {_fmt(c.mem_offset_mhz, 0, True)} MHz: {_fmt(c.figures.tps)} TPS, "
        f"{_fmt(c.figures.tps_per_w, 4)} TPS/W{change}"
    )


def _idle_note(idle: IdleAtLock | None) -> str:
    """``; idle at the lock: 34 W, SM 210 MHz`` (empty when not measured)."""
    if idle is None or idle.power_w is None:
        return ""
    return f"; idle at the lock: {_fmt(idle.power_w, 0)} W, SM {_fmt(idle.sm_clock_mhz, 0)} MHz"


def idle_line(idle: IdleAtLock | None) -> list[str]:
    """The summary's line on the idle draw at the answer's lock (none when not measured)."""
    if idle is None or idle.power_w is None:
        return []
    return [
        "",
        f"Idle at the lock ({idle.range_text}, {_fmt(idle.seconds, 0)} s with no requests): "
        f"{_fmt(idle.power_w, 0)} W per card, SM {_fmt(idle.sm_clock_mhz, 0)} MHz. A lock's "
        "minimum is what an idle card clocks down to: a high one keeps the idle draw up.",
    ]


def render_undervolt_summary(curve: Curve, analysis: UndervoltAnalysis) -> str:
    """Render summary.md: header, findings, the answer against the best cap, the steps."""
    run = analysis.run
    metric = metric_label(analysis.metric)
    lines = heading(run, analysis.tool, analysis.metric, "undervolt search")
    # a search cut short says so first, as every axis's summary does
    lines += answer_banner(known(analysis.answer))
    if analysis.chosen is not None:
        lines += apply_line(
            curve.source,
            "the cap, the SM lock and offset, and any memory offset; --persist --trust-offset "
            "keeps them across reboots",
        )
    lines.append(
        f"SM clock locked at {_fmt(analysis.sm_lock_mhz, 0)} MHz, offset stepped by "
        f"{_fmt(analysis.step_mhz, 0)} MHz from 0{_refined(analysis)}; {what_ran(analysis)}. "
        "Each step's greedy answers were compared token for token with offset 0's."
    )
    lines += ["", *findings_lines(analysis.findings, empty="none")]
    lines += ["", "### Answer beside the best cap", ""]
    lines += _versus_table(analysis, metric)
    lines += memory_lines(analysis.memory)
    lines += idle_line(analysis.idle)
    ordered = ([analysis.baseline] if analysis.baseline else []) + analysis.steps + analysis.soaks
    if analysis.memory is not None:
        ordered += analysis.memory.steps
    lines += ["", "### Steps", "", *table(_step_columns(metric), ordered)]
    lines += source_line(curve.source)
    return "\n".join(lines)


def _step_columns(metric: str) -> list[Column[OffsetStep]]:
    """The steps table: each step's point, why it ran, its status, figures and answers."""
    return [
        Column("point", lambda s: escape_md(point_name(s)), "l"),
        Column("reason", lambda s: escape_md(s.reason or ""), "l"),
        Column("status", lambda s: status_cell(s.figures, missing="—"), "l"),
        Column(metric, lambda s: _fmt(s.figures.tps)),
        Column("W", lambda s: _fmt(s.figures.power_w, 0)),
        Column("TPS/W (±95%)", _tps_per_w),
        Column("J/token", lambda s: _fmt(s.figures.j_per_token, 3)),
        Column("SM MHz", lambda s: _fmt(s.figures.sm_clock_mhz, 0)),
        Column("answers differ", _differ),
    ]


def _tps_per_w(s: OffsetStep) -> str:
    figs = s.figures
    return f"{_fmt(figs.tps_per_w, 4)} (±{_fmt(known(figs.tps_per_w_u95_pct))}%)"


def _differ(s: OffsetStep) -> str:
    """``1 of 4``: the greedy answers that differed from offset 0's."""
    if s.answers_checked is None or s.answers_differ is None:
        return "—"
    return f"{s.answers_differ:.0f} of {s.answers_checked:.0f}"


def _refined(analysis: UndervoltAnalysis) -> str:
    """``, then by 15 MHz from +240 to +285 MHz`` where grid steps refined the edge."""
    grid = [
        s.sm_offset_mhz
        for s in analysis.steps
        if s.reason == "refine" and s.sm_offset_mhz is not None
    ]
    if not grid:
        return ""
    if len(grid) == 1:
        return f", then by 15 MHz ({_fmt(grid[0], 0, True)} MHz)"
    return f", then by 15 MHz from {_fmt(min(grid), 0, True)} to {_fmt(max(grid), 0, True)} MHz"


def what_ran(analysis: UndervoltAnalysis) -> str:
    """How the answer was reached, as it ran: the margin, and the soak or why there was none."""
    chosen, margin = analysis.chosen, analysis.margin_mhz
    if chosen is None:
        return "no answer"
    last = analysis.last_stable_mhz
    start = (
        f"the answer stays {_fmt(margin, 0)} MHz below the last stable offset "
        f"({_fmt(last, 0, True)} MHz)"
        if margin is not None and last is not None
        else "the answer"
    )
    offset = _fmt(chosen.sm_offset_mhz, 0, True)
    soaks = analysis.soaks
    failed = sum(1 for s in soaks if s.figures.status != "ok")
    backed = f" after {failed} failed soak(s), each backing off by the margin" if failed else ""
    if chosen.reason == "soak":
        held = analysis.soak_s
        how = (
            f"held {_fmt(held, 0)} s under the load, then measured and checked"
            if held
            else "measured and checked once more, not soaked (--soak-seconds 0)"
        )
        return f"{start}: {offset} MHz, {how}{backed}"
    if not (chosen.sm_offset_mhz or 0) > 0:
        return f"{start}: offset 0, the card's own curve{backed} (no soak needed)"
    return f"{start}: {offset} MHz, a measured step, not soaked (--soak-seconds 0)"


def _versus_table(analysis: UndervoltAnalysis, metric: str) -> list[str]:
    chosen, base, versus = analysis.chosen, analysis.baseline, analysis.versus_cap
    if chosen is None and known(analysis.answer) is not None:
        return ["No answer: the search did not finish (see above)."]
    if chosen is None:
        return ["No stable offset was found (see the findings)."]
    memory = analysis.memory
    with_memory = memory.chosen if memory is not None and memory.chosen is not None else None
    points = [s for s in (base, chosen, with_memory) if s is not None]
    columns: list[Column[OffsetStep]] = [
        Column("", lambda s: escape_md(point_name(s)), "l"),
        Column(metric, lambda s: _fmt(s.figures.tps)),
        Column("W", lambda s: _fmt(s.figures.power_w, 0)),
        Column("TPS/W", lambda s: _fmt(s.figures.tps_per_w, 4)),
        Column("J/token", lambda s: _fmt(s.figures.j_per_token, 3)),
    ]
    out = table(columns, points)
    if versus is not None:
        out.append(_change_row("change", versus))
        if versus.tied:
            out += ["", "The gain is within the two points' noise: a tie with the cap."]
    if memory is not None and memory.versus_cap is not None:
        out.insert(
            len(out) - (2 if versus is not None and versus.tied else 0),
            _change_row("change with memory", memory.versus_cap),
        )
    return out


def _change_row(label: str, v: VersusCap) -> str:
    gain = f"{_fmt(v.tps_per_w_gain_pct, 1, True)}% (±{_fmt(v.tps_per_w_gain_u95_pct)}%)"
    return row(
        [
            label,
            f"{_fmt(v.tps_change_pct, 1, True)}%",
            f"{_fmt(v.power_change_pct, 1, True)}%",
            gain,
            f"{_fmt(v.j_per_token_change_pct, 1, True)}%",
        ]
    )


def memory_lines(memory: MemoryAnswer | None) -> list[str]:
    """What the memory phase ran and found, in words (none: no phase)."""
    if memory is None:
        return []
    chosen = memory.chosen
    stop = f"; it stopped at {memory.stopped_reason}" if memory.stopped_reason else ""
    if chosen is None:
        answer = "no memory offset held"
    elif chosen.reason == "soak":
        answer = (
            f"the answer stays {_fmt(memory.margin_mhz, 0)} MHz below the best "
            f"({_fmt(memory.best_mhz, 0, True)} MHz): {_fmt(chosen.mem_offset_mhz, 0, True)} MHz, "
            "held under the load, then measured and checked"
        )
    else:
        answer = f"the answer is memory {_fmt(chosen.mem_offset_mhz, 0, True)} MHz, not soaked"
    return [
        "",
        f"Memory phase, at the SM answer: the memory clock offset stepped by "
        f"{_fmt(memory.step_mhz, 0)} MHz (NVML's unit: twice what Afterburner shows on GDDR6X "
        f"and GDDR7) from 0 while TPS rose beyond both readings' noise{stop}; {answer}.",
    ]
