"""Cross-mode: one cap for a mixed workload, from sweeps of several load modes on one GPU."""

from __future__ import annotations

import math
from dataclasses import replace

from powersweep.analysis.cross_result_types import CrossModeResult, ModeAtCap, SharedCap
from powersweep.analysis.load import Curve
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.analysis.summary import escape_md
from powersweep.errors import UsageError
from powersweep.runformat import as_float


def cross_mode(curves: list[tuple[Curve, PowerAnalysis]]) -> CrossModeResult:
    """Find the cap that serves every load mode best: the minimax TPS/W loss.

    For each cap measured (status ok) in every run, each mode loses
    ``1 - tps_per_w(cap) / tps_per_w(own sweet spot)``; the mixed-workload cap minimises the worst
    of these losses (ties go to the lower cap).

    Args:
        curves: ``(curve, analysis)`` pairs, one per load mode, of the same GPU model.

    Returns:
        The shared cap and its worst loss, each mode at it against its own sweet spot, every
        shared cap's worst loss, and warnings (``cross-mode.json`` is its ``to_json()``; a
        non-finite number is None).

    Raises:
        UsageError: Fewer than two runs, a run without a sweet spot, or no cap common to all runs.
    """
    if len(curves) < 2:
        raise UsageError("cross-mode needs at least two runs (one per load mode)")
    tables: list[dict[float, tuple[float, float]]] = []
    modes: list[ModeAtCap] = []
    sweet_tpw: list[float] = []
    warnings: list[str] = []
    gpu_names = set()
    for curve, analysis in curves:
        sweet = analysis.sweet_spot
        if sweet is None or sweet.tps_per_w is None:
            raise UsageError(f"{curve.source}: no sweet spot (no cap measured ok)")
        table = {
            round(float(row.cap_w), 1): (float(row.figures.tps_per_w), float(row.figures.tps))
            for row in analysis.caps
            if row.figures.status == "ok"
            and row.figures.tps_per_w is not None
            and row.figures.tps is not None
        }
        tables.append(table)
        run = analysis.run
        gpu_names.add(run.gpu_name)
        sweet_tpw.append(sweet.tps_per_w)
        modes.append(
            ModeAtCap(
                label=run.load_mode or curve.source.name,
                load_mode=run.load_mode,
                metric=analysis.metric,
                source=str(curve.source),
                sweet_spot_cap_w=as_float(sweet.cap_w, None),
                sweet_spot_tps_per_w=as_float(sweet.tps_per_w, None),
                sweet_spot_tps=as_float(sweet.tps, None),
            )
        )
    if len(gpu_names - {None}) > 1:
        warnings.append(
            "the runs come from different GPUs ("
            + ", ".join(sorted(str(n) for n in gpu_names - {None}))
            + "): a shared cap may not mean much"
        )
    common = sorted(set.intersection(*(set(t) for t in tables)))
    if not common:
        raise UsageError("the runs share no measured cap; sweep the same caps in every mode")

    def losses(cap: float) -> list[float]:
        return [1.0 - table[cap][0] / tpw for table, tpw in zip(tables, sweet_tpw, strict=True)]

    scored = [(max(losses(cap)), cap) for cap in common]
    worst, best_cap = min(scored)
    at_cap: list[ModeAtCap] = []
    for table, mode, own_tpw in zip(tables, modes, sweet_tpw, strict=True):
        tpw, tps = table[best_cap]
        sweet_tps = mode.sweet_spot_tps
        at_cap.append(
            replace(
                mode,
                tps_per_w=as_float(tpw, None),
                tps_per_w_loss_pct=as_float((1.0 - tpw / own_tpw) * 100.0, None),
                tps=as_float(tps, None),
                tps_change_vs_sweet_pct=(
                    as_float((tps / sweet_tps - 1.0) * 100.0, None) if sweet_tps else None
                ),
            )
        )
    return CrossModeResult(
        cap_w=as_float(best_cap, None),
        worst_loss_pct=as_float(worst * 100.0, None),
        modes=at_cap,
        caps=[
            SharedCap(cap_w=as_float(cap, None), worst_loss_pct=as_float(loss * 100.0, None))
            for loss, cap in scored
        ],
        warnings=warnings,
    )


def render_cross_mode(result: CrossModeResult) -> str:
    """Render a :func:`cross_mode` result as a paste-ready markdown section.

    Args:
        result: The result of :func:`cross_mode`.

    Returns:
        GitHub markdown: the mixed-workload cap, what it costs each mode against that mode's own
        sweet spot, the next-best shared caps and any warnings.
    """
    cap = result.cap_w
    worst = result.worst_loss_pct
    modes = result.modes
    lines = ["## Mixed workload: one cap for every load mode", ""]
    if cap is None:
        return "\n".join([*lines, "No cap was measured in every run.", ""])
    costly = max(modes, key=lambda m: m.tps_per_w_loss_pct or 0.0) if modes else None
    who = f" ({escape_md(costly.label)})" if costly and (worst or 0.0) > 0.05 else ""
    lines += [
        f"**Set {_num(cap, 0)} W.** Across the {len(modes)} load modes it gives up at most "
        f"**{_num(worst, 1)}%** of a mode's best TPS/W{who}.",
        "",
        "| Load mode | Metric | Own sweet spot (W) | TPS/W there | TPS/W at "
        f"{_num(cap, 0)} W | TPS/W loss (%) | TPS at {_num(cap, 0)} W "
        "| TPS vs own sweet spot (%) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m in modes:
        lines.append(
            f"| {escape_md(m.label)} "
            f"| {escape_md(_METRIC_NAMES.get(str(m.metric), m.metric))} "
            f"| {_num(m.sweet_spot_cap_w, 0)} | {_num(m.sweet_spot_tps_per_w, 4)} "
            f"| {_num(m.tps_per_w, 4)} | {_num(m.tps_per_w_loss_pct, 1)} "
            f"| {_num(m.tps, 2)} | {_signed(m.tps_change_vs_sweet_pct)} |"
        )
    ranked = sorted(
        (c for c in result.caps if c.worst_loss_pct is not None),
        key=lambda c: (c.worst_loss_pct, c.cap_w),
    )[:5]
    if len(ranked) > 1:
        lines += ["", "Shared caps by worst TPS/W loss over the modes (lower is better):", ""]
        lines.append(
            ", ".join(f"{_num(c.cap_w, 0)} W: {_num(c.worst_loss_pct, 1)}%" for c in ranked)
        )
    for warning in result.warnings:
        lines += ["", f"- **warning**: {escape_md(warning)}"]
    lines += [
        "",
        "_TPS/W loss: 1 - TPS/W at the shared cap / TPS/W at the mode's own sweet spot; the "
        "shared cap minimises the largest loss._",
        "",
    ]
    return "\n".join(lines)


_METRIC_NAMES = {"narr_tps": "decode TPS", "prefill_tps": "prefill TPS"}


def _num(value: float | None, digits: int) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return "—"
    return f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return "—"
    return f"{value:+.1f}"
