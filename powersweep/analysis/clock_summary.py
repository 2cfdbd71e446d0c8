"""summary.md of a clock-lock sweep, and how a clock run compares with a power-cap run."""

from __future__ import annotations

import math

from powersweep.analysis.clock_analysis import point_label
from powersweep.analysis.clock_result_types import (
    BestCap,
    BestClock,
    ClockAnalysis,
    ClocksVersusPower,
    LockPoint,
    LockRow,
    Locks,
    Tier,
)
from powersweep.analysis.load import Curve
from powersweep.analysis.result_types import Num, PowerAnalysis, known
from powersweep.analysis.serving_summary import energy_section, latency_section
from powersweep.analysis.summary_frame import (
    Column,
    answer_banner,
    apply_line,
    cell,
    escape_md,
    findings_lines,
    heading,
    metric_label,
    row,
    source_line,
    status_cell,
    table,
    table_head,
)
from powersweep.errors import UsageError
from powersweep.runformat import as_float

# A power curve whose TPS/W varies less than this over its caps is flat: no cap binds.
FLAT_CAPS_RATIO = 1.01


def _label(p: LockPoint | Locks | None) -> str:
    """``SM 1410 MHz / mem 9001 MHz`` for a point's locks (``unlocked`` for none)."""
    if p is None:
        return point_label({})
    return point_label({"sm_lock_mhz": p.sm_lock_mhz, "mem_lock_mhz": p.mem_lock_mhz})


def render_clock_summary(curve: Curve, analysis: ClockAnalysis) -> str:
    """Render summary.md of a clock sweep: header, findings, peak, Pareto front, tiers, points.

    Args:
        curve: The curve analysed (its source is named at the end).
        analysis: Its analysis (typed).
    """
    run = analysis.run
    metric = metric_label(analysis.metric)
    lines = heading(
        run, analysis.tool, analysis.metric, "clock sweep", f" ({escape_md(analysis.axis)})"
    )
    answer = known(analysis.answer)
    lines += answer_banner(answer)
    if answer is not None and answer.kind == "answer":
        lines += apply_line(
            curve.source, "the clock locks and the limit; --persist keeps them across reboots"
        )
    binds = analysis.power_cap_binds
    if binds is not None:
        lines.append(f"Power limit in force: {cell(binds.limit_w, 0)} W.")
        lines.append("")
    lines += findings_lines(analysis.findings)
    lines += _operating_points(analysis, metric)
    for section in (
        energy_section(analysis.energy, "the fastest point"),
        latency_section(analysis.latency_target),
    ):
        if section:
            lines += ["", section.rstrip("\n")]
    lines += _pareto_front(analysis, metric) + _tiers(analysis, metric)
    lines += ["", "### Points", "", *table(_point_columns(metric), analysis.rows)]
    lines += source_line(curve.source)
    return "\n".join(lines)


def _point_columns(metric: str) -> list[Column[LockRow]]:
    """The points table: each point's locks, the clocks measured, its figures, its status."""
    return [
        Column("SM lock", lambda r: cell(r.sm_lock_mhz, 0)),
        Column("mem lock", lambda r: cell(r.mem_lock_mhz, 0)),
        Column("SM measured", lambda r: cell(r.figures.sm_clock_mhz, 0)),
        Column("mem measured", lambda r: cell(r.figures.mem_clock_mhz, 0)),
        Column(metric, lambda r: cell(r.figures.tps)),
        Column("W", lambda r: cell(r.figures.power_w, 0)),
        Column("TPS/W", lambda r: cell(r.figures.tps_per_w, 4)),
        Column("status", lambda r: status_cell(r.figures), "l"),
    ]


def _operating_points(analysis: ClockAnalysis, metric: str) -> list[str]:
    """``### Operating points``: the peak, near-peak, the Pareto knee and the fastest point."""
    peak, near = analysis.peak, analysis.near_peak
    if peak is None:
        return []
    titles = ["point", "clocks", "TPS/W", metric, "W", "J/token", "ITL p95 (ms)"]
    lines = ["", "### Operating points", "", *table_head(titles, "llrrrrr")]
    answer = known(analysis.answer)
    if answer is not None and not answer.given:
        lines.append(_row("best measured (not an answer)", peak))
        return lines
    lines.append(_row("efficiency peak", peak))
    if near is not None:
        loss = cell(known(near.max_tps_loss_pct), 0)
        lines.append(_row(f"near-peak (≤{loss}% TPS loss)", near))
    if analysis.pareto_knee is not None:
        lines.append(_row("Pareto knee", analysis.pareto_knee))
    fastest = known(analysis.fastest)
    if fastest is not None:
        lines.append(_row("fastest", fastest))
    return lines


def _pareto_front(analysis: ClockAnalysis, metric: str) -> list[str]:
    """``### Pareto front``: the points no other beats on both TPS and draw."""
    front = analysis.pareto_front
    if not front:
        return []
    columns: list[Column[LockPoint]] = [
        Column("clocks", lambda p: escape_md(_label(p)), "l"),
        Column(metric, lambda p: cell(p.figures.tps)),
        Column("W", lambda p: cell(p.figures.power_w, 0)),
        Column("TPS/W", lambda p: cell(p.figures.tps_per_w, 4)),
    ]
    return ["", "### Pareto front (more TPS for more W)", "", *table(columns, front)]


def _tiers(analysis: ClockAnalysis, metric: str) -> list[str]:
    """``### Memory tiers``, where the memory clock was locked."""
    tiers = analysis.tiers
    if not (len(tiers) > 1 or (tiers and tiers[0].mem_lock_mhz is not None)):
        return []
    titles = ["memory", "peak at", "peak TPS/W", f"top {metric}", "vs fastest tier"]
    lines = ["", "### Memory tiers", "", *table_head([*titles, "TPS stops rising at SM"], "llrrrl")]
    return lines + [_tier_row(t) for t in tiers]


def _tier_row(t: Tier) -> str:
    mem = t.mem_lock_mhz
    capped = " (caps TPS)" if t.caps_tps else ""
    stop = t.tps_stops_rising_at_sm_mhz
    if stop is not None:
        rising = f"{cell(stop, 0)} MHz"
    else:
        rising = "still rising" if t.n_points >= 3 else "—"
    below = t.below_fastest_tier_pct or 0.0
    gap = f"-{cell(below, 0)}%" if below >= 0.5 else "0%"
    peak_tpw = t.peak.figures.tps_per_w if t.peak is not None else None
    memory = f"{cell(mem, 0) + ' MHz' if mem is not None else 'unlocked'}{capped}"
    return row([memory, escape_md(_label(t.peak)), cell(peak_tpw, 4), cell(t.top_tps), gap, rising])


def _row(name: str, p: LockPoint) -> str:
    f = p.figures
    return row(
        [
            name,
            escape_md(_label(p)),
            cell(f.tps_per_w, 4),
            cell(f.tps),
            cell(f.power_w, 0),
            cell(f.j_per_token, 3),
            cell(f.itl_p95_ms, 1),
        ]
    )


def _change_pct(new: Num, old: Num) -> float:
    """``100 * (new / old - 1)``; NaN where the old value is unknown or zero."""
    if not old or new is None:
        return math.nan
    return 100.0 * (new / old - 1.0)


def clocks_versus_power(power: PowerAnalysis, clocks: ClockAnalysis) -> ClocksVersusPower:
    """How the best clock point compares with the best power cap (two runs of one GPU).

    Args:
        power: analysis of the power-axis run (its ``sweet_spot`` is the best cap).
        clocks: analysis of the clock run (its ``peak``).

    Returns:
        The best cap and clock point, the changes between them (null where unknown), whether
        the caps bind, the comparison in words and its warnings.

    Raises:
        UsageError: Either run has no usable best point.
    """
    cap, peak = power.sweet_spot, clocks.peak
    if cap is None or cap.tps_per_w is None:
        raise UsageError("the power-cap run has no sweet spot (no cap measured ok)")
    if peak is None or peak.figures.tps_per_w is None:
        raise UsageError("the clock run has no efficiency peak (no point measured ok)")
    gain = 100.0 * (peak.figures.tps_per_w / cap.tps_per_w - 1.0)
    tps_change = _change_pct(peak.figures.tps, cap.tps)
    watts = _change_pct(peak.figures.power_w, cap.power_w)
    more = "more" if gain >= 0 else "less"
    statement = (
        f"{_label(peak)} gives {peak.figures.tps_per_w:.3g} TPS/W, {abs(gain):.0f}% {more} than "
        f"the best cap ({cap.tps_per_w:.3g} at {cap.cap_w:g} W); it runs at "
        f"{peak.figures.tps:.1f} TPS ({tps_change:+.0f}%) and {peak.figures.power_w:.0f} W, "
        f"where the best cap runs at {cap.tps:.1f} TPS and {cap.power_w or math.nan:.0f} W"
    )
    tpw = [
        float(c.figures.tps_per_w)
        for c in power.caps
        if c.figures.status == "ok" and c.figures.tps_per_w is not None
    ]
    # one cap (or none) cannot show a flat curve: the caps are not said to be idle
    caps_bind = len(tpw) < 2 or max(tpw) > FLAT_CAPS_RATIO * min(tpw)
    if not caps_bind:
        statement += (
            f"; every cap measured ({min(c.cap_w for c in power.caps):g}-"
            f"{max(c.cap_w for c in power.caps):g} W) gives the same TPS/W within "
            f"{100 * (FLAT_CAPS_RATIO - 1):.0f}%: power caps do not bind here"
        )
    warnings = []
    if len({power.run.gpu_name, clocks.run.gpu_name} - {None}) > 1:
        warnings.append("the runs come from different GPUs: the comparison may not mean much")
    if len({power.run.load_mode, clocks.run.load_mode} - {None}) > 1:
        warnings.append("the runs ran different load modes: compare like with like")
    return ClocksVersusPower(
        best_cap=BestCap(cap.cap_w, cap.tps, cap.power_w, cap.tps_per_w),
        best_clock=BestClock(
            peak.sm_lock_mhz,
            peak.mem_lock_mhz,
            peak.figures.tps,
            peak.figures.power_w,
            peak.figures.tps_per_w,
        ),
        tps_per_w_gain_pct=as_float(gain, None),
        tps_change_pct=as_float(tps_change, None),
        power_change_pct=as_float(watts, None),
        caps_bind=caps_bind,
        statement=statement,
        warnings=warnings,
    )


def render_clocks_versus_power(result: ClocksVersusPower) -> str:
    """Markdown for :func:`clocks_versus_power`."""
    lines = ["## Clock locks against power caps", "", f"- {escape_md(result.statement)}"]
    lines += [f"- **warning**: {escape_md(w)}" for w in result.warnings]
    return "\n".join(lines) + "\n"
