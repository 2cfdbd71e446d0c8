"""summary.md of a clock-lock sweep, and how a clock run compares with a power-cap run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from powersweep.analysis.clock_analysis import point_label
from powersweep.analysis.load import Curve
from powersweep.analysis.serving_summary import energy_section, latency_section
from powersweep.analysis.summary import escape_md
from powersweep.errors import PowersweepError, UsageError

_METRIC_LABEL = {"narr_tps": "Decode TPS", "prefill_tps": "Prefill TPS"}
# A power curve whose TPS/W varies less than this over its caps is flat: no cap binds.
FLAT_CAPS_RATIO = 1.01


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return escape_md(value)


def render_clock_summary(curve: Curve, analysis: dict[str, Any]) -> str:
    """Render summary.md of a clock sweep: header, findings, peak, Pareto front, tiers, points."""
    run = analysis.get("run") or {}
    metric = _METRIC_LABEL.get(analysis.get("metric", ""), "TPS")
    gpu = escape_md(run.get("gpu_name") or "unknown GPU")
    mode = escape_md(run.get("load_mode") or "unknown load")
    lines = [f"## powersweep clock sweep: {gpu}, {mode} ({escape_md(analysis.get('axis'))})", ""]
    binds = analysis.get("power_cap_binds")
    if binds:
        lines.append(f"Power limit in force: {_fmt(binds.get('limit_w'), 0)} W.")
        lines.append("")
    lines.append("### Findings")
    lines.append("")
    for f in analysis.get("findings", []):
        hint = f" — {escape_md(f['hint'])}" if f.get("hint") else ""
        lines.append(f"- **{escape_md(f['severity'])}**: {escape_md(f['message'])}{hint}")
    peak, near = analysis.get("peak"), analysis.get("near_peak")
    if peak:
        lines += [
            "",
            "### Operating points",
            "",
            "| point | clocks | TPS/W | " + metric + " | W | J/token | ITL p95 (ms) |",
            "|---|---|---:|---:|---:|---:|---:|",
            _row("efficiency peak", peak),
        ]
        if near:
            loss = _fmt(near.get("max_tps_loss_pct"), 0)
            lines.append(_row(f"near-peak (≤{loss}% TPS loss)", near))
        if analysis.get("pareto_knee"):
            lines.append(_row("Pareto knee", analysis["pareto_knee"]))
        if analysis.get("fastest"):
            lines.append(_row("fastest", analysis["fastest"]))
    for section in (energy_section(analysis, "the fastest point"), latency_section(analysis)):
        if section:
            lines += ["", section.rstrip("\n")]
    front = analysis.get("pareto_front") or []
    if front:
        lines += ["", "### Pareto front (more TPS for more W)", ""]
        lines += ["| clocks | " + metric + " | W | TPS/W |", "|---|---:|---:|---:|"]
        for p in front:
            lines.append(
                f"| {escape_md(point_label(p))} | {_fmt(p['tps'])} | {_fmt(p['power_w'], 0)} | "
                f"{_fmt(p['tps_per_w'], 4)} |"
            )
    tiers = analysis.get("tiers") or []
    if len(tiers) > 1 or (tiers and tiers[0].get("mem_lock_mhz") is not None):
        lines += ["", "### Memory tiers", ""]
        lines.append(
            "| memory | peak at | peak TPS/W | top " + metric + " | vs fastest tier | "
            "TPS stops rising at SM |"
        )
        lines.append("|---|---|---:|---:|---:|---|")
        for t in tiers:
            mem = t.get("mem_lock_mhz")
            capped = " (caps TPS)" if t.get("caps_tps") else ""
            stop = t.get("tps_stops_rising_at_sm_mhz")
            if stop is not None:
                rising = f"{_fmt(stop, 0)} MHz"
            else:
                rising = "still rising" if t.get("n_points", 0) >= 3 else "—"
            below = t.get("below_fastest_tier_pct") or 0.0
            gap = f"-{_fmt(below, 0)}%" if below >= 0.5 else "0%"
            lines.append(
                f"| {_fmt(mem, 0) + ' MHz' if mem is not None else 'unlocked'}{capped} | "
                f"{escape_md(point_label(t['peak']))} | {_fmt(t['peak']['tps_per_w'], 4)} | "
                f"{_fmt(t['top_tps'])} | {gap} | {rising} |"
            )
    lines += ["", "### Points", ""]
    lines.append(
        "| SM lock | mem lock | SM measured | mem measured | " + metric + " | W | TPS/W | status |"
    )
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in analysis.get("rows", []):
        status = escape_md(r.get("status") or "ok")
        if r.get("error") and status != "ok":
            status += f": {escape_md(r['error'])}"
        lines.append(
            f"| {_fmt(r.get('sm_lock_mhz'), 0)} | {_fmt(r.get('mem_lock_mhz'), 0)} | "
            f"{_fmt(r.get('sm_clock_mhz'), 0)} | {_fmt(r.get('mem_clock_mhz'), 0)} | "
            f"{_fmt(r.get('tps'))} | {_fmt(r.get('power_w'), 0)} | "
            f"{_fmt(r.get('tps_per_w'), 4)} | {status} |"
        )
    lines += ["", f"<sub>source: {escape_md(curve.source)}</sub>", ""]
    return "\n".join(lines)


def _row(name: str, p: dict[str, Any]) -> str:
    return (
        f"| {name} | {escape_md(point_label(p))} | {_fmt(p['tps_per_w'], 4)} | {_fmt(p['tps'])} | "
        f"{_fmt(p['power_w'], 0)} | {_fmt(p.get('j_per_token'), 3)} | "
        f"{_fmt(p.get('itl_p95_ms'), 1)} |"
    )


def write_clock_outputs(curve: Curve, analysis: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write analysis.json and summary.md of a clock sweep into ``out_dir``.

    Raises:
        PowersweepError: A file cannot be written.
    """
    json_path, md_path = out_dir / "analysis.json", out_dir / "summary.md"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        json_path.write_text(
            json.dumps(analysis, indent=2, allow_nan=False) + "\n", encoding="utf-8"
        )
        md_path.write_text(render_clock_summary(curve, analysis), encoding="utf-8")
    except OSError as exc:
        raise PowersweepError(
            f"cannot write the analysis into {out_dir}: {exc.strerror or exc}"
        ) from exc
    return [json_path, md_path]


def clocks_versus_power(power: dict[str, Any], clocks: dict[str, Any]) -> dict[str, Any]:
    """How the best clock point compares with the best power cap (two runs of one GPU).

    Args:
        power: analysis of the power-axis run (its ``sweet_spot`` is the best cap).
        clocks: analysis of the clock run (its ``peak``).

    Returns:
        ``{best_cap, best_clock, tps_per_w_gain_pct, tps_change_pct, power_change_pct,
        caps_bind, statement, warnings}``.

    Raises:
        UsageError: Either run has no usable best point.
    """
    cap, peak = power.get("sweet_spot"), clocks.get("peak")
    if not cap or cap.get("tps_per_w") is None:
        raise UsageError("the power-cap run has no sweet spot (no cap measured ok)")
    if not peak or peak.get("tps_per_w") is None:
        raise UsageError("the clock run has no efficiency peak (no point measured ok)")
    gain = 100.0 * (peak["tps_per_w"] / cap["tps_per_w"] - 1.0)
    tps_change = 100.0 * (peak["tps"] / cap["tps"] - 1.0) if cap.get("tps") else math.nan
    watts = 100.0 * (peak["power_w"] / cap["power_w"] - 1.0) if cap.get("power_w") else math.nan
    more = "more" if gain >= 0 else "less"
    statement = (
        f"{point_label(peak)} gives {peak['tps_per_w']:.3g} TPS/W, {abs(gain):.0f}% {more} than "
        f"the best cap ({cap['tps_per_w']:.3g} at {cap['cap_w']:g} W); it runs at "
        f"{peak['tps']:.1f} TPS ({tps_change:+.0f}%) and {peak['power_w']:.0f} W, where the best "
        f"cap runs at {cap['tps']:.1f} TPS and {cap.get('power_w') or math.nan:.0f} W"
    )
    tpw = [
        float(c["tps_per_w"])
        for c in power.get("caps") or []
        if c.get("status") == "ok" and c.get("tps_per_w") is not None
    ]
    caps_bind = not tpw or max(tpw) > FLAT_CAPS_RATIO * min(tpw)
    if not caps_bind:
        statement += (
            f"; every cap measured ({min(c['cap_w'] for c in power['caps']):g}-"
            f"{max(c['cap_w'] for c in power['caps']):g} W) gives the same TPS/W within "
            f"{100 * (FLAT_CAPS_RATIO - 1):.0f}%: power caps do not bind here"
        )
    warnings = []
    names = {(power.get("run") or {}).get("gpu_name"), (clocks.get("run") or {}).get("gpu_name")}
    if len(names - {None}) > 1:
        warnings.append("the runs come from different GPUs: the comparison may not mean much")
    modes = {(power.get("run") or {}).get("load_mode"), (clocks.get("run") or {}).get("load_mode")}
    if len(modes - {None}) > 1:
        warnings.append("the runs ran different load modes: compare like with like")
    return {
        "best_cap": {k: cap.get(k) for k in ("cap_w", "tps", "power_w", "tps_per_w")},
        "best_clock": {
            k: peak.get(k) for k in ("sm_lock_mhz", "mem_lock_mhz", "tps", "power_w", "tps_per_w")
        },
        "tps_per_w_gain_pct": gain,
        "tps_change_pct": tps_change,
        "power_change_pct": watts,
        "caps_bind": caps_bind,
        "statement": statement,
        "warnings": warnings,
    }


def render_clocks_versus_power(result: dict[str, Any]) -> str:
    """Markdown for :func:`clocks_versus_power`."""
    lines = ["## Clock locks against power caps", "", f"- {escape_md(result['statement'])}"]
    lines += [f"- **warning**: {escape_md(w)}" for w in result.get("warnings", [])]
    return "\n".join(lines) + "\n"
