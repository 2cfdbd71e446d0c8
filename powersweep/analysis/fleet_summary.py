"""fleet.md (paste-ready GitHub markdown) and writing a fleet report's files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from powersweep.analysis.fleet_answer import group_title
from powersweep.analysis.fleet_axis import FleetAxis
from powersweep.analysis.fleet_result_types import (
    Dist,
    Envelope,
    FleetAnswer,
    FleetCard,
    FleetGroup,
    FleetReport,
    Savings,
    Setting,
    WithinNoise,
)
from powersweep.analysis.result_types import known
from powersweep.analysis.summary_frame import GITHUB_COMMENT_LIMIT, escape_md
from powersweep.errors import PowersweepError
from powersweep.safe_files import write_atomic

_BUDGET = GITHUB_COMMENT_LIMIT - 1_024
# Outliers listed per group before "and N more"; the rest are in fleet.json.
MAX_OUTLIER_ROWS = 25
# Groups up to this size list every card; larger ones the cards the fleet cap costs most.
MAX_CARD_ROWS = 30
MOST_AFFECTED_ROWS = 10
MAX_PROBLEM_ROWS = 15


def _n(value: float | None, fmt: str = ".0f", unit: str = "") -> str:
    if value is None:
        return "—"
    try:
        return f"{float(value):{fmt}}{unit}"
    except (TypeError, ValueError):
        return "—"


def _plural(n: int | None, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _dist_row(name: str, d: Dist | None, unit: str = "W") -> str:
    d = d or Dist()
    return (
        f"| {name} | {_n(d.median, '.0f', f' {unit}')} | "
        f"{_n(d.q1)}-{_n(d.q3, '.0f', f' {unit}')} | "
        f"{_n(d.min)}-{_n(d.max, '.0f', f' {unit}')} |\n"
    )


def _pct_row(name: str, d: Dist | None) -> str:
    d = d or Dist()
    return (
        f"| {name} | {_n(d.median, '+.1f', '%')} | "
        f"{_n(d.q1, '+.1f')} to {_n(d.q3, '+.1f', '%')} | "
        f"{_n(d.min, '+.1f')} to {_n(d.max, '+.1f', '%')} |\n"
    )


def setting_text(axis: FleetAxis, setting: Setting | FleetAnswer | None) -> str:
    """``280 W`` or ``SM 1425 MHz`` (a grid: ``SM 1425 MHz / mem 2619 MHz``)."""
    setting = setting or Setting()
    if axis.name == "power":
        return _n(known(setting.cap_w), "g", " W")
    parts = []
    for value, name in ((known(setting.sm_lock_mhz), "SM"), (known(setting.mem_lock_mhz), "mem")):
        if value is not None:
            parts.append(f"{name} {_n(value, '.0f', ' MHz')}")
    return " / ".join(parts) or "unlocked"


def _noise_text(fc: FleetAnswer, unit: str) -> str:
    """``270-290 W within noise`` from the resampled cards (or why no noise is known)."""
    noise = fc.within_noise or WithinNoise()
    xs = [float(x) for x in noise.x if x is not None]
    if not noise.resamples:
        return "fewer than 3 cards: the median of their own best, no noise known"
    if len(xs) <= 1:
        return "no other setting within noise, resampling the cards"
    return f"{min(xs):.0f}-{max(xs):.0f} {unit} within noise, resampling the cards"


def _answer_md(g: FleetGroup, axis: FleetAxis, unit: str) -> str:
    """The fleet cap (or lock) line: the setting, its noise, fleet TPS/W against the reference."""
    fc = g.answer or FleetAnswer()
    if axis.name == "power":
        by_gpu = known(fc.pct_of_default_by_gpu) or []
        share = (
            ", ".join(
                f"{_n(b.pct_of_default, '.0f', '%')} of the "
                f"{escape_md(str(b.gpu_name))}'s {_n(b.default_w, '.0f', ' W')} "
                "default"
                for b in by_gpu
            )
            if by_gpu
            else f"{_n(known(fc.pct_of_default), '.0f', '%')} of the default limit"
        )
        against = "at the default limit"
    else:
        held = known(fc.held_cap_w)
        share = (
            f"under the {_n(held, 'g', ' W')} limit the runs held"
            if held
            else ("under the limit in force")
        )
        against = "at the highest lock measured"
    return (
        f"**Fleet {axis.noun if axis.name != 'power' else 'cap'}: "
        f"{setting_text(axis, fc)}** ({share}; {_noise_text(fc, axis.unit)}): fleet "
        f"{_n(fc.fleet_tps_per_w, '.4f')} {unit}/W against "
        f"{_n(fc.fleet_tps_per_w_at_reference, '.4f')} {against} "
        f"(outliers left out of the choice: {fc.excluded_outliers}).\n\n"
    )


def _versus_power_md(g: FleetGroup, axis: FleetAxis, unit: str) -> str:
    vp = known(g.versus_power)
    if vp is None:
        return ""
    return (
        f"Beside the power axis (the same GPU, load and model): the fleet "
        f"{axis.noun} gives {_n(vp.tps_per_w_vs_fleet_cap_pct, '+.1f', '%')} {unit}/W "
        f"and {_n(vp.tps_per_card_vs_fleet_cap_pct, '+.1f', '%')} {unit} per card "
        f"against the fleet cap of {_n(vp.fleet_cap_w, 'g', ' W')} "
        f"({_n(vp.fleet_cap_tps_per_w, '.4f')} {unit}/W).\n\n"
    )


def _group_md(g: FleetGroup, tariff: float | None, duty: float) -> str:
    axis = g.fleet_axis
    sv = g.savings or Savings()
    env = g.envelope_w or Envelope()
    unit = "prefill TPS" if g.metric == "prefill_tps" else "TPS"
    out = [f"### {escape_md(group_title(g))}\n\n"]
    out.append(
        f"{_plural(g.n_cards, 'card')}; envelope "
        f"{_n(env.min)}/{_n(env.default)}/"
        f"{_n(env.max, '.0f', ' W')} (min/default/max, most cards); "
        f"step {_n(g.step, '.0f', ' ' + axis.unit)}.\n\n"
    )
    out.append(_answer_md(g, axis, unit))
    out.append(_versus_power_md(g, axis, unit))
    fc = g.answer or FleetAnswer()
    near = "near-peak cap" if axis.name == "power" else "near-peak lock"
    best = "sweet spot" if axis.name == "power" else "efficiency peak"
    out.append("| per card | median | IQR | min-max |\n|---|---|---|---|\n")
    out.append(_dist_row(best, g.sweet_spot, axis.unit))
    out.append(_dist_row(near, g.near_peak, axis.unit))
    if axis.tier_key:
        out.append(_dist_row("its memory lock", g.sweet_spot_tier, "MHz"))
    what = axis.answer()
    out.append(_pct_row(f"{unit}/W at the {what} vs own best", fc.tps_per_w_vs_own_best_pct))
    out.append(_pct_row(f"{unit} at the {what} vs own best", fc.tps_vs_own_best_pct))
    out.append("\n")
    out.append(_savings_md(sv, axis, unit, tariff, duty))
    out.append(_cards_md(g, unit))
    out.append(_outliers_md(g, axis))
    return "".join(out)


def _savings_md(sv: Savings, axis: FleetAxis, unit: str, tariff: float | None, duty: float) -> str:
    if not sv.n_cards:
        return f"No savings: no card's sweep measured {axis.reference}.\n\n"
    ref = "its default limit" if axis.name == "power" else axis.reference
    out = [
        f"Every card at the {axis.answer()} instead of {ref} "
        f"({_plural(sv.n_cards, 'card')}, "
        f"measured {unit}, {duty * 100:.0f}% duty): "
        f"**{_n(known(sv.kw_saved), '.2f', ' kW')}** "
        f"less ({_n(known(sv.kw_default), '.2f')} → "
        f"{_n(known(sv.kw_fleet_cap), '.2f', ' kW')}), "
        f"**{_n(known(sv.mwh_per_year_saved), '.1f', ' MWh/year')}**, "
        f"{_n(known(sv.tps_change_pct), '+.1f', '%')} {unit}. Energy per 1M tokens: "
        f"{_n(known(sv.kwh_per_mtok_default), '.3f')} → "
        f"{_n(known(sv.kwh_per_mtok_fleet_cap), '.3f', ' kWh')}"
    ]
    if tariff is not None:
        out.append(
            f"; cost per 1M tokens at {tariff:g}/kWh: "
            f"{_n(known(sv.cost_per_mtok_default), '.4f')} → "
            f"{_n(known(sv.cost_per_mtok_fleet_cap), '.4f')}"
        )
    out.append(".")
    if sv.n_cards_unpriced:
        out.append(
            f" {_plural(sv.n_cards_unpriced, 'card')} left out: the sweep did not "
            f"measure {axis.reference}."
        )
    out.append("\n\n")
    return "".join(out)


def _outliers_md(g: FleetGroup, axis: FleetAxis) -> str:
    outliers = g.outliers
    if int(g.n_cards or 0) < 5:
        return "_Outliers need at least 5 cards in a group._\n\n"
    if not outliers:
        return "No outliers: every card's curve, draw and temperature fit the group.\n\n"
    best = "sweet spot" if axis.name == "power" else "efficiency peak"
    out = [
        f"**Outliers ({len(outliers)})** (`fleet apply` sets each its own {best})\n\n"
        f"| card | {best} | likely cause |\n|---|---|---|\n"
    ]
    for o in outliers[:MAX_OUTLIER_ROWS]:
        causes = "; ".join(str(c.message) for c in o.causes)
        out.append(
            f"| {escape_md(o.label)} | {setting_text(axis, o.own_best)} | {escape_md(causes)} |\n"
        )
    if len(outliers) > MAX_OUTLIER_ROWS:
        out.append(f"| … and {len(outliers) - MAX_OUTLIER_ROWS} more (see fleet.json) | | |\n")
    out.append("\n")
    return "".join(out)


def _cards_md(g: FleetGroup, unit: str) -> str:
    """Per card: its own best and what the fleet cap (or lock) costs or gains it."""
    axis = g.fleet_axis
    cards: Sequence[FleetCard] = g.cards
    if not cards:
        return ""
    what = axis.answer()
    if len(cards) <= MAX_CARD_ROWS:
        title, rows = f"Every card at the {what}", list(cards)
    else:
        title = f"The {MOST_AFFECTED_ROWS} cards the {what} costs most {unit}/W"
        rows = sorted(cards, key=lambda c: _key(c.tps_per_w_vs_own_best_pct))
        rows = rows[:MOST_AFFECTED_ROWS]
    best = "own sweet spot" if axis.name == "power" else "own peak"
    u = f" {axis.unit}"
    out = [
        f"<details><summary>{title}</summary>\n\n"
        f"| card | {best} | near-peak | runs at | {unit}/W vs own best | "
        f"{unit} vs own best |\n|---|--:|--:|--:|--:|--:|\n"
    ]
    for c in rows:
        notes = [str(c.status)] if c.status not in ("complete", "unknown") else []
        notes += ["outlier"] if c.outlier else []
        flag = f" ({', '.join(notes)})" if notes else ""
        out.append(
            f"| {escape_md(c.label)}{flag} | "
            f"{_n(c.sweet_spot, '.0f', u)} | "
            f"{_n(c.near_peak, '.0f', u)} | "
            f"{_n(c.runs_at, '.0f', u)} | "
            f"{_n(c.tps_per_w_vs_own_best_pct, '+.1f', '%')} | "
            f"{_n(c.tps_vs_own_best_pct, '+.1f', '%')} |\n"
        )
    out.append("\n</details>\n\n")
    return "".join(out)


def _key(value: float | None) -> float:
    """A sort key: unknown (None or NaN) last."""
    if value is None or value != value:
        return float("inf")
    return float(value)


def render_fleet_summary(fleet: FleetReport) -> str:
    """Render fleet.md: totals, then one section per group, then the runs that were left out.

    Returns:
        GitHub-flavoured markdown, always shorter than 65,536 characters.
    """
    opts = fleet.options
    tariff = opts.tariff_per_kwh
    duty = float(opts.duty or 1.0)
    groups = fleet.groups
    totals = fleet.totals
    clocks = any(g.axis_name != "power" for g in groups)
    what = (
        "fleet cap (or lock) instead of the default limit (or its highest lock)"
        if clocks
        else "fleet cap instead of the default limit"
    )
    head = (
        f"## Fleet report: {_plural(fleet.n_cards, 'run')} in "
        f"{_plural(len(groups), 'group')}\n\n"
        f"Every card at its group's {what} saves "
        f"**{_n(totals.kw_saved, '.2f', ' kW')}**, "
        f"**{_n(totals.mwh_per_year_saved, '.1f', ' MWh/year')}** at {duty * 100:.0f}% "
        "duty.\n\n"
    )
    tail = "\n_Generated by powersweep fleet report; fleet.json holds every card._\n"
    problems = _problems(fleet)
    body = "".join(_group_md(g, tariff, duty) for g in groups)
    budget = _BUDGET - len(head) - len(tail) - len(problems)
    if len(body) > budget:
        cut = body[:budget].rsplit("\n", 1)[0]
        body = cut + "\n\n_… truncated to fit a GitHub comment; see fleet.json._\n"
    text = head + body + problems + tail
    if len(text) >= GITHUB_COMMENT_LIMIT:
        text = text[:_BUDGET].rsplit("\n", 1)[0] + "\n\n_… truncated; see fleet.json._\n"
    return text


def _problems(fleet: FleetReport) -> str:
    rows: list[str] = []
    for r in fleet.incomplete:
        rows.append(
            f"| {escape_md(r.label)} | {escape_md(r.status)} | {escape_md(r.error or '')} |\n"
        )
    for u in fleet.unreadable:
        rows.append(
            f"| {escape_md(u.run_dir)} | {escape_md(known(u.status) or 'left out')} | "
            f"{escape_md(u.error)} |\n"
        )
    if not rows:
        return ""
    more = len(rows) - MAX_PROBLEM_ROWS
    shown = rows[:MAX_PROBLEM_ROWS]
    if more > 0:
        shown.append(f"| … and {more} more (see fleet.json) | | |\n")
    return (
        f"### Runs that did not complete ({len(rows)})\n\n"
        "Incomplete runs count with the caps they finished; runs without a usable curve are "
        "left out.\n\n"
        "| run | status | error |\n|---|---|---|\n" + "".join(shown) + "\n"
    )


def write_fleet_outputs(fleet: FleetReport, out_dir: Path) -> list[Path]:
    """Write fleet.json and fleet.md into ``out_dir``.

    Raises:
        PowersweepError: A file cannot be written.
    """
    out_dir = Path(out_dir)
    json_path, md_path = out_dir / "fleet.json", out_dir / "fleet.md"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(
            json_path, json.dumps(fleet.to_json(), indent=1, allow_nan=False) + "\n", sync=False
        )
        write_atomic(md_path, render_fleet_summary(fleet), sync=False)
    except OSError as exc:
        raise PowersweepError(
            f"cannot write the fleet report into {out_dir}: {exc.strerror or exc}"
        ) from exc
    return [json_path, md_path]
