"""The summary's energy, cost and latency-target sections (power and clock runs alike), from the
analysis' ``energy`` and ``latency_target`` (:mod:`powersweep.analysis.serving`)."""

from __future__ import annotations

from msgspec import UnsetType

from powersweep.analysis.result_types import (
    Energy,
    EnergyFigures,
    LatencyTarget,
    PointFigures,
    known,
)
from powersweep.analysis.summary_frame import escape_md
from powersweep.runformat import as_float


def _g(value: object, digits: int = 4) -> str:
    v = as_float(value, None)
    return "—" if v is None else f"{v:.{digits}g}"


def _money(value: object) -> str:
    v = as_float(value, None)
    return "—" if v is None else f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"


# Which seconds J/token describes: those TPS/W describes, so the two agree.
ENERGY_SECONDS = (
    "energy counter over the seconds the TPS counts, as TPS/W: a request's time to first token "
    "and the gaps between requests are not in a decode figure; ± its own 95% precision"
)


def _pm(figures: EnergyFigures) -> str:
    """`` ±x.x%``: a J/token's own 95% half-width (empty where it has none)."""
    u95 = as_float(known(figures.j_per_token_u95_pct), None)
    return f" ±{u95:.2g}%" if u95 is not None else ""


def energy_section(energy: Energy | None, reference_kind: str) -> str:
    """``### Energy and cost``: the chosen point's J/token and kWh (and cost) per 1M tokens, and
    what it saves against the reference (the default limit; a clock run's fastest point).

    Args:
        energy: The analysis' ``energy`` (None: no section).
        reference_kind: How the reference is called (``the default limit``).
    """
    if energy is None:
        return ""
    tariff = as_float(energy.tariff_per_kwh, None)
    chosen = energy.chosen or EnergyFigures()
    name = escape_md(known(energy.chosen_name) or "the recommendation")
    lines = ["### Energy and cost", ""]
    cost = (
        f" ({_money(chosen.cost_per_mtok)} per 1M tokens at {tariff:g}/kWh)"
        if tariff is not None
        else ""
    )
    lines.append(
        f"- At the recommendation ({name}): **{_g(chosen.j_per_token)} J/token**"
        f"{_pm(chosen)}, {_g(chosen.kwh_per_mtok)} kWh per 1M tokens{cost} ({ENERGY_SECONDS})."
    )
    ref = energy.reference
    ref_name = escape_md(known(energy.reference_name) or "")
    if ref is None:
        lines.append(f"- {reference_kind.capitalize()} was not measured: no savings figure.")
        return "\n".join(lines) + "\n\n"
    saved = as_float(known(energy.kwh_saved_per_mtok), None)
    year = as_float(known(energy.kwh_saved_per_year), None)
    verb = "saves" if saved is None or saved >= 0 else "costs"
    money = ""
    if tariff is not None:
        money = (
            f" ({_money(abs(known(energy.cost_saved_per_mtok) or 0.0))} per 1M tokens, "
            f"{_money(abs(known(energy.cost_saved_per_year) or 0.0))} a year)"
        )
    lines.append(
        f"- Against {reference_kind} ({ref_name}: {_g(ref.j_per_token)} J/token{_pm(ref)}, "
        f"{_g(ref.kwh_per_mtok)} kWh per 1M tokens) it {verb} "
        f"{_g(abs(saved) if saved is not None else None, 3)} kWh per 1M tokens and "
        f"{_g(abs(year) if year is not None else None, 3)} kWh a year{money}, serving the "
        f"measured load around the clock at its {_g(chosen.tps)} TPS."
    )
    return "\n".join(lines) + "\n\n"


def latency_section(target: LatencyTarget | None) -> str:
    """``### Latency target``: the most efficient point meeting the targets, or the closest.

    Args:
        target: The analysis' ``latency_target`` (None: no section).
    """
    if target is None:
        return ""
    goals = [
        f"{what} p95 ≤ {value:g} ms"
        for what, value in (
            ("time to first token", as_float(target.max_ttft_ms, None)),
            ("inter-token latency", as_float(target.max_itl_ms, None)),
        )
        if value is not None
    ]
    lines = ["### Latency target", "", f"Target: {' and '.join(goals)} (each point's own p95)."]
    point = target.point.figures if target.point is not None else PointFigures()
    name = escape_md(known(target.name) or "")
    figures = (
        f"{_g(point.tps_per_w)} TPS/W, {_g(point.j_per_token)} J/token, "
        f"TTFT p95 {_g(point.ttft_p95_ms)} ms, inter-token p95 {_g(point.itl_p95_ms)} ms"
    )
    if target.met:
        lines += ["", *_met_lines(target, name, figures)]
    elif target.point is not None:
        misses = "; ".join(escape_md(m) for m in target.misses or [])
        lines += ["", f"- **No measured point meets it.** Closest: {name} ({figures}): {misses}."]
    else:
        lines += ["", "- **No point has the latency columns** (a run older than them)."]
    return "\n".join(lines) + "\n\n"


def _met_lines(target: LatencyTarget, name: str, figures: str) -> list[str]:
    """The lines of a target met: the point, how surely it meets it, the points tied with it."""
    tied = [escape_md(t) for t in target.tied or []]
    # a target met without a word on its margin (a run older than the bounds) has one
    margin = True if isinstance(target.margin, UnsetType) else target.margin
    how = "with a margin (its p95s' own 95% bounds meet it too)" if margin else "meets it"
    lines = [f"- Most efficient point that meets it {how}: **{name}** ({figures})."]
    unsure = "; ".join(escape_md(u) for u in known(target.unsure) or [])
    within_noise = known(target.within_noise)
    if within_noise:
        lines.append(
            f"- {escape_md(within_noise)} is more efficient and its p95 meets the "
            f"target, but only within its own noise: {unsure}."
        )
    elif not margin:
        lines.append(
            f"- **It meets the target only within its own noise**: {unsure}; no point meets "
            "it with a margin (longer windows sharpen a p95)."
        )
    lines.append(
        f"- Tied with it within noise (TPS/W, {escape_md(str(known(target.noise_source)))}): "
        + (", ".join(t for t in tied if t != name) or "none")
        + "."
    )
    return lines
