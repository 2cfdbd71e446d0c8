"""summary.md of a clock-lock sweep, and how a clock run compares with a power-cap run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from powersweep.analysis.clock_analysis import point_label
from powersweep.analysis.clock_result_types import (
    BestCap,
    BestClock,
    ClockAnalysis,
    ClocksVersusPower,
    LockPoint,
    Locks,
    Tier,
)
from powersweep.analysis.load import Curve
from powersweep.analysis.result_files import write_analysis
from powersweep.analysis.result_types import Num, PowerAnalysis, known
from powersweep.analysis.serving_summary import energy_section, latency_section
from powersweep.analysis.summary import apply_line, escape_md, facts_table
from powersweep.errors import UsageError
from powersweep.runformat import as_float

_METRIC_LABEL = {"narr_tps": "Decode TPS", "prefill_tps": "Prefill TPS"}
# A power curve whose TPS/W varies less than this over its caps is flat: no cap binds.
FLAT_CAPS_RATIO = 1.01


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return escape_md(value)


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
    metric = _METRIC_LABEL.get(analysis.metric, "TPS")
    gpu = escape_md(run.gpu_name or "unknown GPU")
    mode = escape_md(run.load_mode or "unknown load")
    lines = [f"## powersweep clock sweep: {gpu}, {mode} ({escape_md(analysis.axis)})", ""]
    version = run.tool_version or (analysis.tool.version if analysis.tool else None)
    lines += facts_table(run, version, analysis.metric)
    answer = known(analysis.answer)
    if answer is not None and answer.kind != "answer":
        what = "No answer" if answer.kind == "none" else "Boundary"
        lines += [f"**{what}: {escape_md(answer.why)}.**", ""]
    elif answer is not None:
        lines += apply_line(
            curve.source, "the clock locks and the limit; --persist keeps them across reboots"
        )
    binds = analysis.power_cap_binds
    if binds is not None:
        lines.append(f"Power limit in force: {_fmt(binds.limit_w, 0)} W.")
        lines.append("")
    lines.append("### Findings")
    lines.append("")
    for f in analysis.findings:
        hint = f" — {escape_md(f.hint)}" if f.hint else ""
        lines.append(f"- **{escape_md(f.severity)}**: {escape_md(f.message)}{hint}")
    lines += _operating_points(analysis, metric)
    for section in (
        energy_section(analysis.energy, "the fastest point"),
        latency_section(analysis.latency_target),
    ):
        if section:
            lines += ["", section.rstrip("\n")]
    lines += _pareto_front(analysis, metric) + _tiers(analysis, metric)
    lines += ["", "### Points", ""]
    lines.append(
        "| SM lock | mem lock | SM measured | mem measured | " + metric + " | W | TPS/W | status |"
    )
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in analysis.rows:
        status = escape_md(r.figures.status or "ok")
        if r.figures.error and status != "ok":
            status += f": {escape_md(r.figures.error)}"
        lines.append(
            f"| {_fmt(r.sm_lock_mhz, 0)} | {_fmt(r.mem_lock_mhz, 0)} | "
            f"{_fmt(r.figures.sm_clock_mhz, 0)} | {_fmt(r.figures.mem_clock_mhz, 0)} | "
            f"{_fmt(r.figures.tps)} | {_fmt(r.figures.power_w, 0)} | "
            f"{_fmt(r.figures.tps_per_w, 4)} | {status} |"
        )
    lines += ["", f"<sub>source: {escape_md(curve.source)}</sub>", ""]
    return "\n".join(lines)


def _operating_points(analysis: ClockAnalysis, metric: str) -> list[str]:
    """``### Operating points``: the peak, near-peak, the Pareto knee and the fastest point."""
    peak, near = analysis.peak, analysis.near_peak
    if peak is None:
        return []
    lines = [
        "",
        "### Operating points",
        "",
        "| point | clocks | TPS/W | " + metric + " | W | J/token | ITL p95 (ms) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    answer = known(analysis.answer)
    if answer is not None and not answer.given:
        lines.append(_row("best measured (not an answer)", peak))
        return lines
    lines.append(_row("efficiency peak", peak))
    if near is not None:
        loss = _fmt(known(near.max_tps_loss_pct), 0)
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
    lines = ["", "### Pareto front (more TPS for more W)", ""]
    lines += ["| clocks | " + metric + " | W | TPS/W |", "|---|---:|---:|---:|"]
    for p in front:
        lines.append(
            f"| {escape_md(_label(p))} | {_fmt(p.figures.tps)} | {_fmt(p.figures.power_w, 0)} | "
            f"{_fmt(p.figures.tps_per_w, 4)} |"
        )
    return lines


def _tiers(analysis: ClockAnalysis, metric: str) -> list[str]:
    """``### Memory tiers``, where the memory clock was locked."""
    tiers = analysis.tiers
    if not (len(tiers) > 1 or (tiers and tiers[0].mem_lock_mhz is not None)):
        return []
    lines = ["", "### Memory tiers", ""]
    lines.append(
        "| memory | peak at | peak TPS/W | top " + metric + " | vs fastest tier | "
        "TPS stops rising at SM |"
    )
    lines.append("|---|---|---:|---:|---:|---|")
    lines += [_tier_row(t) for t in tiers]
    return lines


def _tier_row(t: Tier) -> str:
    mem = t.mem_lock_mhz
    capped = " (caps TPS)" if t.caps_tps else ""
    stop = t.tps_stops_rising_at_sm_mhz
    if stop is not None:
        rising = f"{_fmt(stop, 0)} MHz"
    else:
        rising = "still rising" if t.n_points >= 3 else "—"
    below = t.below_fastest_tier_pct or 0.0
    gap = f"-{_fmt(below, 0)}%" if below >= 0.5 else "0%"
    peak_tpw = t.peak.figures.tps_per_w if t.peak is not None else None
    return (
        f"| {_fmt(mem, 0) + ' MHz' if mem is not None else 'unlocked'}{capped} | "
        f"{escape_md(_label(t.peak))} | {_fmt(peak_tpw, 4)} | "
        f"{_fmt(t.top_tps)} | {gap} | {rising} |"
    )


def _row(name: str, p: LockPoint) -> str:
    f = p.figures
    return (
        f"| {name} | {escape_md(_label(p))} | {_fmt(f.tps_per_w, 4)} | {_fmt(f.tps)} | "
        f"{_fmt(f.power_w, 0)} | {_fmt(f.j_per_token, 3)} | "
        f"{_fmt(f.itl_p95_ms, 1)} |"
    )


def write_clock_outputs(curve: Curve, analysis: ClockAnalysis, out_dir: Path) -> list[Path]:
    """Write analysis.json and summary.md of a clock sweep into ``out_dir``.

    Raises:
        PowersweepError: A file cannot be written.
    """
    return write_analysis(analysis, render_clock_summary(curve, analysis), out_dir)


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
