"""A fleet of runs: one answer per GPU model, load mode, served model and axis, and the cards
that do not fit it.

The reasoning: docs/fleets.md, "powersweep.analysis.fleet_answer".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from powersweep import __version__
from powersweep.analysis import serving
from powersweep.analysis.core import sanitize
from powersweep.analysis.fleet_axis import AXES, POWER, FleetAxis
from powersweep.analysis.fleet_cards import (
    SAME,
    CardCurve,
    card_of,
    common_root,
    discover_runs,
    unique_labels,
    unreadable,
)
from powersweep.analysis.fleet_grid import Grid, fleet_setting, group_grid, within_noise
from powersweep.analysis.fleet_load import load_curves
from powersweep.analysis.fleet_outliers import THROTTLE_PCT, find_outliers
from powersweep.analysis.fleet_result_types import FleetGroup, FleetReport
from powersweep.analysis.load import Curve
from powersweep.analysis.undervolt import is_undervolt_curve
from powersweep.errors import UsageError
from powersweep.runformat import as_float

__all__ = ["FleetOptions", "check_options", "discover_runs", "fleet_report", "summarise"]

NAN = math.nan
HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True)
class FleetOptions:
    """What a fleet report is asked.

    Attributes:
        tariff_per_kwh: Price of a kWh for the cost per 1M tokens (None: no cost lines).
        duty: Share of the year the cards serve at the measured load (savings scale with it).
        max_tps_loss_pct: TPS loss the per-card near-peak setting may cost.
        reanalyze: Analyse every caps.csv even where a fresh analysis.json is there.
    """

    tariff_per_kwh: float | None = None
    duty: float = 1.0
    max_tps_loss_pct: float = 5.0
    reanalyze: bool = False


def check_options(opts: FleetOptions) -> None:
    """Every number of a fleet report finite and in range (``--tariff inf`` prices nothing).

    Raises:
        UsageError: One line naming the option and its range.
    """
    serving.check_options(opts.tariff_per_kwh, None, None)
    if not (math.isfinite(opts.duty) and 0.0 < opts.duty <= 1.0):
        raise UsageError(f"--duty must be more than 0 and at most 1, not {opts.duty:g}")
    if not (math.isfinite(opts.max_tps_loss_pct) and 0.0 <= opts.max_tps_loss_pct < 100.0):
        raise UsageError(
            f"--max-tps-loss must be between 0 and 100 %, not {opts.max_tps_loss_pct:g}"
        )


def fleet_report(paths: Sequence[Path], options: FleetOptions | None = None) -> FleetReport:
    """Load, analyse and summarise every run under ``paths``.

    Args:
        paths: Run directories or folders holding them (searched recursively).
        options: Tariff, duty and near-peak tolerance.

    Returns:
        The fleet report (``fleet.json`` is its ``to_json()``), NaN as None.

    Raises:
        UsageError: A path holds no run, an option is out of range, or no run could be read.
    """
    opts = options or FleetOptions()
    check_options(opts)
    run_dirs = discover_runs(paths)
    curves, failed = load_curves(run_dirs)
    if not curves:
        detail = f": {failed[0][1]}" if failed else ""
        raise UsageError(f"no run could be read ({len(failed)} failed){detail}")
    return summarise(curves, failed, opts)


def summarise(
    curves: Sequence[Curve], failed: Sequence[tuple[Path, str]], opts: FleetOptions
) -> FleetReport:
    """The fleet report of loaded curves (see :func:`fleet_report`)."""
    root = common_root([c.source for c in curves])
    cards: list[CardCurve] = []
    unusable: list[dict[str, Any]] = [unreadable(p, e) for p, e in failed]
    for curve in curves:
        if is_undervolt_curve(curve):
            # one offset search per card set, with its own answer: not a curve to pool
            why = "an undervolt search: not pooled across a fleet (see its own summary.md)"
            unusable.append(unreadable(curve.source, why))
            continue
        card = card_of(curve, root, opts.max_tps_loss_pct, opts.reanalyze)
        if card is None:
            unusable.append(unreadable(curve.source, "no usable cap or clock point"))
        else:
            cards.append(card)
    cards = unique_labels(cards, root)
    groups: dict[tuple[str, int, str, str, str], list[CardCurve]] = {}
    for card in cards:
        groups.setdefault(card.key, []).append(card)
    # power first, then the clock axes of the same cards beside it
    order = sorted(groups, key=lambda k: (k[:4], k[4] != POWER, k[4]))
    out_groups = [_group(groups[k], opts) for k in order]
    _beside_power(out_groups)
    counted = _counted_once(out_groups)
    incomplete = [
        {"label": c.label, "run_dir": c.run_dir, "status": c.status, "error": c.error}
        for c in cards
        if c.status not in ("complete", "unknown")
    ]
    doc = sanitize(
        {
            "schema_version": 1,
            "tool": {"name": "powersweep", "version": __version__},
            "n_runs": len(cards) + len(unusable),
            "n_cards": len(cards),
            "options": {
                "tariff_per_kwh": opts.tariff_per_kwh,
                "duty": opts.duty,
                "max_tps_loss_pct": opts.max_tps_loss_pct,
            },
            "unreadable": unusable,
            "incomplete": incomplete,
            "groups": out_groups,
            # cards swept on several axes count once (see _counted_once)
            "totals": {
                "kw_saved": float(
                    sum(as_float(g["savings"].get("kw_saved"), 0.0) for g in counted)
                ),
                "mwh_per_year_saved": float(
                    sum(as_float(g["savings"].get("mwh_per_year_saved"), 0.0) for g in counted)
                ),
            },
        }
    )
    return FleetReport.from_json(doc)


def _dist(values: Sequence[float]) -> dict[str, Any]:
    v = np.array([x for x in values if math.isfinite(x)], dtype=float)
    if not len(v):
        return {"n": 0, "median": None, "q1": None, "q3": None, "min": None, "max": None}
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return {
        "n": len(v),
        "median": float(med),
        "q1": float(q1),
        "q3": float(q3),
        "min": float(v.min()),
        "max": float(v.max()),
    }


def _matrix(cards: Sequence[CardCurve], grid: Grid) -> tuple[np.ndarray, ...]:
    """(TPS, draw, temperature, thermal-throttle %) of each card at each grid setting (NaN
    outside the card's measured range, and in a tier it did not measure)."""
    shape = (len(cards), len(grid))
    tps, power, temp, thr = (np.full(shape, NAN) for _ in range(4))
    for i, c in enumerate(cards):
        for tier in {float(t) if math.isfinite(t) else NAN for t in c.tier}:
            own = c._in_tier(tier)
            xs = c.x[own]
            inside = grid.in_tier(tier) & (grid.x >= xs[0] - SAME) & (grid.x <= xs[-1] + SAME)
            g = grid.x[inside]
            tps[i, inside] = np.interp(g, xs, c.tps[own])
            power[i, inside] = np.interp(g, xs, c.power_w[own])
            t_own = c.temp_c[own]
            if np.isfinite(t_own).any():
                ok = np.isfinite(t_own)
                temp[i, inside] = np.interp(g, xs[ok], t_own[ok])
            # throttling is a per-setting fact: the nearest measured setting's
            near = np.abs(xs[None, :] - g[:, None]).argmin(axis=1)
            thr[i, inside] = c.thermal_pct[own][near]
    return tps, power, temp, thr


def _band(values: np.ndarray, grid: Grid, axis: FleetAxis, tier: float) -> dict[str, Any]:
    """Median, IQR and min-max over cards at each setting of one tier (settings no card
    measured are left out)."""
    keep = grid.in_tier(tier) & (np.isfinite(values).sum(axis=0) >= 1)
    v = values[:, keep]
    with np.errstate(all="ignore"):
        q = np.nanpercentile(v, [0, 25, 50, 75, 100], axis=0) if v.size else np.empty((5, 0))
    return {
        axis.setting_key: grid.x[keep].tolist(),
        "tier": tier,
        "min": q[0].tolist(),
        "q1": q[1].tolist(),
        "median": q[2].tolist(),
        "q3": q[3].tolist(),
        "max": q[4].tolist(),
        "n": np.isfinite(v).sum(axis=0).tolist(),
    }


def _group(cards: list[CardCurve], opts: FleetOptions) -> dict[str, Any]:
    gpu_name, n_gpus, load_mode, model, axis_name = cards[0].key
    axis = AXES[axis_name]
    grid = group_grid(cards)
    tps, power, temp, thr = _matrix(cards, grid)
    with np.errstate(all="ignore"):
        tpw = tps / power
    envelope = Counter(c.envelope_w for c in cards).most_common(1)[0][0]
    outliers = find_outliers(
        [c.label for c in cards],
        [c.envelope_w for c in cards],
        [_throttle_from(c) for c in cards],
        grid.x,
        tps,
        power,
        temp,
        thr,
        unit=axis.unit,
    )
    inlier = np.array([c.label not in outliers for c in cards])
    pick = fleet_setting(cards, grid, tps[inlier], power[inlier], inlier)
    fleet = (float(grid.x[pick]), float(grid.tier[pick]))
    steps = np.diff(grid.x[grid.in_tier(fleet[1])])
    per_card = [_versus_own(c, fleet) for c in cards]
    band_cards = tpw[inlier] if inlier.any() else tpw
    head = {
        "gpu_name": gpu_name,
        "n_gpus": n_gpus,
        "load_mode": load_mode,
        "model": model,
        "axis": axis.to_dict(),
        "metric": cards[0].metric,
        "n_cards": len(cards),
        "envelope_w": {"min": envelope[0], "default": envelope[1], "max": envelope[2]},
        axis.key("step"): float(np.median(steps)) if len(steps) else NAN,
        axis.key("sweet_spot"): _dist([c.best[0] for c in cards]),
        axis.key("near_peak"): _dist([c.near_peak[0] for c in cards]),
    }
    if axis.tier_key:
        head["sweet_spot_tier_mhz"] = _dist([c.best[1] for c in cards])
    noise = within_noise(grid, tps[inlier], power[inlier], pick)
    return {
        **head,
        axis.answer_key: _answer(cards, inlier, axis, fleet, envelope, per_card, noise),
        "savings": {**_savings(cards, fleet, opts), "reference": axis.reference},
        "band": _band(band_cards, grid, axis, fleet[1]),
        "outliers": [_outlier(c, outliers[c.label], axis) for c in cards if c.label in outliers],
        "cards": [
            {
                "label": c.label,
                "run_dir": c.run_dir,
                "status": c.status,
                "host": c.host,
                "gpus": [{"uuid": u, "name": n} for u, n in c.gpus],
                axis.key("sweet_spot"): c.best[0],
                axis.key("near_peak"): c.near_peak[0],
                "own_best": _setting(axis, c.best),
                "outlier": c.label in outliers,
                **p,
            }
            for c, p in zip(cards, per_card, strict=True)
        ],
    }


def _setting(axis: FleetAxis, setting: tuple[float, float]) -> dict[str, Any]:
    """``{"cap_w": 280}`` or ``{"sm_lock_mhz": 1425}`` (a grid: with ``mem_lock_mhz``)."""
    out: dict[str, Any] = {axis.setting_key: setting[0]}
    if axis.tier_key:
        out[axis.tier_key] = setting[1]
    return out


def _answer(
    cards: Sequence[CardCurve],
    inlier: np.ndarray,
    axis: FleetAxis,
    fleet: tuple[float, float],
    envelope: tuple[float, float, float],
    per_card: Sequence[Mapping[str, Any]],
    noise: Mapping[str, Any],
) -> dict[str, Any]:
    """The group's fleet cap (or lock): the setting, its noise, what it costs or gains."""
    default_w = envelope[1]
    by_gpu = Counter(c.defaults_w for c in cards).most_common(1)[0][0]
    out: dict[str, Any] = {
        **_setting(axis, fleet),
        "within_noise": noise,
        "fleet_tps_per_w": _pooled(cards, inlier, lambda c: fleet),
        "tps_per_card": _pooled(cards, inlier, lambda c: fleet, per_card=True),
        "fleet_tps_per_w_at_reference": _pooled(cards, inlier, lambda c: c.reference),
        "tps_per_w_vs_own_best_pct": _dist([p["tps_per_w_vs_own_best_pct"] for p in per_card]),
        "tps_vs_own_best_pct": _dist([p["tps_vs_own_best_pct"] for p in per_card]),
        "excluded_outliers": int((~inlier).sum()),
    }
    if axis.is_clock:
        held = Counter(c.held_cap_w for c in cards).most_common(1)[0][0]
        return {**out, "held_cap_w": held}
    cap_w = fleet[0]
    return {
        **out,
        # a rig of different cards has no one default: the cap is a share of each card's
        "pct_of_default": (cap_w / default_w * 100.0 if default_w > 0 and not by_gpu else None),
        "pct_of_default_by_gpu": [
            {"gpu_name": n, "default_w": d, "pct_of_default": cap_w / d * 100.0}
            for n, d in by_gpu
            if d > 0
        ]
        or None,
        "fleet_tps_per_w_at_default": _pooled(cards, inlier, lambda c: (default_w, NAN)),
    }


def _outlier(card: CardCurve, causes: Any, axis: FleetAxis) -> dict[str, Any]:
    """An outlier: its causes, and its own best, which ``fleet apply`` sets on it instead of
    the fleet's answer (the answer was chosen without it, so says nothing about it)."""
    with np.errstate(all="ignore"):
        tpw = card.tps / card.power_w
    in_tier = card._in_tier(card.best[1])
    return {
        "label": card.label,
        "run_dir": card.run_dir,
        "host": card.host,
        "gpus": [{"uuid": u, "name": n} for u, n in card.gpus],
        "causes": causes,
        axis.key("sweet_spot"): card.best[0],
        "own_best": _setting(axis, card.best),
        "apply": "own_best",
        "curve": {axis.setting_key: card.x[in_tier].tolist(), "tps_per_w": tpw[in_tier].tolist()},
    }


def _pooled(
    cards: Sequence[CardCurve],
    use: np.ndarray,
    setting: Any,
    per_card: bool = False,
) -> float:
    """Fleet TPS/W at a setting (``setting(card)`` gives each card's): all the group's tokens
    over all its watts, each card at the setting it can run; ``per_card``: TPS per card."""
    tps = power = 0.0
    n = 0
    for c, u in zip(cards, use, strict=True):
        x, tier = setting(c)
        if not u or not math.isfinite(x):
            continue
        t, p = c.at(c.clamped(x, tier), tier)
        if math.isfinite(t) and math.isfinite(p):
            tps, power, n = tps + t, power + p, n + 1
    if per_card:
        return tps / n if n else NAN
    return tps / power if power > 0 else NAN


def _versus_own(card: CardCurve, fleet: tuple[float, float]) -> dict[str, Any]:
    """What the fleet's answer costs or gains this card against its own best."""
    axis = card.axis
    short = axis.answer_key.removeprefix("fleet_")
    x = card.clamped(*fleet)
    t, p = card.at(x, fleet[1])
    t0, p0 = card.at(*card.best)
    return {
        axis.key(f"{short}_at_{axis.answer_key}"): x,
        f"tps_at_{axis.answer_key}": t,
        f"tps_per_w_at_{axis.answer_key}": t / p,
        "tps_per_w_vs_own_best_pct": ((t / p) / (t0 / p0) - 1.0) * 100.0,
        "tps_vs_own_best_pct": (t / t0 - 1.0) * 100.0,
    }


def _savings(
    cards: Sequence[CardCurve], fleet: tuple[float, float], opts: FleetOptions
) -> dict[str, Any]:
    """Every card of the group at the fleet's answer against its reference (the default limit,
    or the highest lock it measured), at measured TPS.

    A card whose sweep did not measure its reference (an unknown default, or ``--caps`` that
    stop short of it) cannot be priced and is counted in ``n_cards_unpriced``.
    """
    p_def = p_cap = t_def = t_cap = 0.0
    n = unpriced = 0
    for c in cards:
        ref = c.reference
        td, pd = c.at(*ref) if math.isfinite(ref[0]) else (NAN, NAN)
        tc, pc = c.at(c.clamped(*fleet), fleet[1])
        if not all(math.isfinite(v) for v in (td, pd, tc, pc)):
            unpriced += 1
            continue
        n += 1
        p_def, p_cap, t_def, t_cap = p_def + pd, p_cap + pc, t_def + td, t_cap + tc
    if n == 0:
        return {"n_cards": 0, "n_cards_unpriced": unpriced}
    kw = (p_def - p_cap) / 1000.0
    kwh_mtok_def = p_def / t_def * 1e6 / 3.6e6
    kwh_mtok_cap = p_cap / t_cap * 1e6 / 3.6e6
    tariff = opts.tariff_per_kwh
    return {
        "n_cards": n,
        "n_cards_unpriced": unpriced,
        "kw_default": p_def / 1000.0,
        "kw_fleet_cap": p_cap / 1000.0,
        "kw_saved": kw,
        "mwh_per_year_saved": kw * HOURS_PER_YEAR * opts.duty / 1000.0,
        "tps_default": t_def,
        "tps_fleet_cap": t_cap,
        "tps_change_pct": (t_cap / t_def - 1.0) * 100.0,
        "kwh_per_mtok_default": kwh_mtok_def,
        "kwh_per_mtok_fleet_cap": kwh_mtok_cap,
        "cost_per_mtok_default": kwh_mtok_def * tariff if tariff is not None else None,
        "cost_per_mtok_fleet_cap": kwh_mtok_cap * tariff if tariff is not None else None,
    }


def _throttle_from(card: CardCurve) -> float | None:
    hit = card.x[card.thermal_pct >= THROTTLE_PCT]
    return float(hit.min()) if len(hit) else None


def _beside_power(groups: list[dict[str, Any]]) -> None:
    """A clock group whose cards (GPU, count, load mode, model) also have a power group gets
    ``versus_power``: the fleet lock's pooled TPS/W and TPS per card against the fleet cap's."""
    power = {_cards_key(g): g for g in groups if (g.get("axis") or {}).get("name", POWER) == POWER}
    for g in groups:
        axis = g.get("axis") or {}
        other = power.get(_cards_key(g))
        if axis.get("name", POWER) == POWER or other is None:
            continue
        lock, cap = g[axis["answer_key"]], other["fleet_cap"]
        g["versus_power"] = {
            "fleet_cap_w": cap.get("cap_w"),
            "fleet_cap_tps_per_w": cap.get("fleet_tps_per_w"),
            "fleet_cap_tps_per_card": cap.get("tps_per_card"),
            "tps_per_w_vs_fleet_cap_pct": _pct(
                lock.get("fleet_tps_per_w"), cap.get("fleet_tps_per_w")
            ),
            "tps_per_card_vs_fleet_cap_pct": _pct(
                lock.get("tps_per_card"), cap.get("tps_per_card")
            ),
        }


def _counted_once(groups: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The groups the totals add up: one per set of cards (GPU, count, load mode, model), since
    cards swept on several axes are set to one answer and save once: on the power axis where
    they have one, else on the clock axis with the most tokens per joule (the one ``fleet
    apply`` sets)."""

    def rank(g: Mapping[str, Any]) -> tuple[bool, float]:
        axis = g.get("axis") or {}
        answer = g.get(axis.get("answer_key", "fleet_cap")) or {}
        return axis.get("name", POWER) == POWER, as_float(answer.get("fleet_tps_per_w"), 0.0)

    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    for g in groups:
        key = _cards_key(g)
        if key not in best or rank(g) > rank(best[key]):
            best[key] = g
    return list(best.values())


def _cards_key(g: Mapping[str, Any]) -> tuple[Any, ...]:
    return (g.get("gpu_name"), g.get("n_gpus"), g.get("load_mode"), g.get("model"))


def _pct(a: Any, b: Any) -> float:
    try:
        return (float(a) / float(b) - 1.0) * 100.0
    except (TypeError, ValueError, ZeroDivisionError):
        return NAN


def group_title(group: FleetGroup) -> str:
    """A group's name in headings and charts: GPU (times count), load mode, model, and the
    axis when it is not the power cap."""
    gpu = str(group.gpu_name or "unknown GPU")
    n = int(group.n_gpus or 1)
    if n > 1:
        gpu = f"{n} x {gpu}"
    axis = group.axis_name
    tail = "" if axis == POWER else f" · {axis}"
    return f"{gpu} · {group.load_mode} · {group.model}{tail}"
