"""The summary's energy, cost and latency-target sections (power and clock runs alike), from the
analysis dict's ``energy`` and ``latency_target`` (:mod:`powersweep.analysis.serving`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from powersweep.analysis.summary import escape_md


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _g(value: Any, digits: int = 4) -> str:
    v = _num(value)
    return "—" if v is None else f"{v:.{digits}g}"


def _money(value: Any) -> str:
    v = _num(value)
    return "—" if v is None else f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"


def energy_section(analysis: Mapping[str, Any], reference_kind: str) -> str:
    """``### Energy and cost``: the chosen point's J/token and kWh (and cost) per 1M tokens, and
    what it saves against the reference (the default limit; a clock run's fastest point).

    Args:
        analysis: The analysis dict.
        reference_kind: How the reference is called (``the default limit``).
    """
    energy = analysis.get("energy")
    if not isinstance(energy, Mapping):
        return ""
    tariff = _num(energy.get("tariff_per_kwh"))
    chosen = energy.get("chosen") or {}
    name = escape_md(energy.get("chosen_name") or "the recommendation")
    lines = ["### Energy and cost", ""]
    cost = (
        f" ({_money(chosen.get('cost_per_mtok'))} per 1M tokens at {tariff:g}/kWh)"
        if tariff is not None
        else ""
    )
    lines.append(
        f"- At the recommendation ({name}): **{_g(chosen.get('j_per_token'))} J/token**, "
        f"{_g(chosen.get('kwh_per_mtok'))} kWh per 1M tokens{cost} (energy counter over the "
        "measured windows)."
    )
    ref = energy.get("reference")
    ref_name = escape_md(energy.get("reference_name") or "")
    if not isinstance(ref, Mapping):
        lines.append(f"- {reference_kind.capitalize()} was not measured: no savings figure.")
        return "\n".join(lines) + "\n\n"
    saved = _num(energy.get("kwh_saved_per_mtok"))
    year = _num(energy.get("kwh_saved_per_year"))
    verb = "saves" if saved is None or saved >= 0 else "costs"
    money = ""
    if tariff is not None:
        money = (
            f" ({_money(abs(energy.get('cost_saved_per_mtok') or 0.0))} per 1M tokens, "
            f"{_money(abs(energy.get('cost_saved_per_year') or 0.0))} a year)"
        )
    lines.append(
        f"- Against {reference_kind} ({ref_name}: {_g(ref.get('j_per_token'))} J/token, "
        f"{_g(ref.get('kwh_per_mtok'))} kWh per 1M tokens) it {verb} "
        f"{_g(abs(saved) if saved is not None else None, 3)} kWh per 1M tokens and "
        f"{_g(abs(year) if year is not None else None, 3)} kWh a year{money}, serving the "
        f"measured load around the clock at its {_g(chosen.get('tps'))} TPS."
    )
    return "\n".join(lines) + "\n\n"


def latency_section(analysis: Mapping[str, Any]) -> str:
    """``### Latency target``: the most efficient point meeting the targets, or the closest."""
    target = analysis.get("latency_target")
    if not isinstance(target, Mapping):
        return ""
    goals = [
        f"{what} p95 ≤ {value:g} ms"
        for what, value in (
            ("time to first token", _num(target.get("max_ttft_ms"))),
            ("inter-token latency", _num(target.get("max_itl_ms"))),
        )
        if value is not None
    ]
    lines = ["### Latency target", "", f"Target: {' and '.join(goals)} (each point's own p95)."]
    point = target.get("point") or {}
    name = escape_md(target.get("name") or "")
    figures = (
        f"{_g(point.get('tps_per_w'))} TPS/W, {_g(point.get('j_per_token'))} J/token, "
        f"TTFT p95 {_g(point.get('ttft_p95_ms'))} ms, inter-token p95 "
        f"{_g(point.get('itl_p95_ms'))} ms"
    )
    if target.get("met"):
        tied = [escape_md(t) for t in target.get("tied") or []]
        lines.append("")
        margin = target.get("margin", True)
        how = "with a margin (its p95s' own 95% bounds meet it too)" if margin else "meets it"
        lines.append(f"- Most efficient point that meets it {how}: **{name}** ({figures}).")
        unsure = "; ".join(escape_md(u) for u in target.get("unsure") or [])
        if target.get("within_noise"):
            lines.append(
                f"- {escape_md(target['within_noise'])} is more efficient and its p95 meets the "
                f"target, but only within its own noise: {unsure}."
            )
        elif not margin:
            lines.append(
                f"- **It meets the target only within its own noise**: {unsure}; no point meets "
                "it with a margin (longer windows sharpen a p95)."
            )
        lines.append(
            f"- Tied with it within noise (TPS/W, {escape_md(str(target.get('noise_source')))}): "
            + (", ".join(t for t in tied if t != name) or "none")
            + "."
        )
    elif point:
        misses = "; ".join(escape_md(m) for m in target.get("misses") or [])
        lines += ["", f"- **No measured point meets it.** Closest: {name} ({figures}): {misses}."]
    else:
        lines += ["", "- **No point has the latency columns** (a run older than them)."]
    return "\n".join(lines) + "\n\n"
