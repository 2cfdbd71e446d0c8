"""A fleet of runs: one answer per GPU model, load mode and served model, and the cards that do
not fit it.

Every run is analysed by :func:`powersweep.analysis.analyze` (sweet spot, near-peak cap); this
module groups the runs, describes the spread of those answers, picks one cap for the whole group,
prices it against the default limit and names the cards whose curve, draw or temperature departs
from their group. The result is the JSON-ready dict written as ``fleet.json``; the markdown and
the charts are drawn from it alone.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from powersweep import __version__
from powersweep.analysis.clocks import is_clock_curve
from powersweep.analysis.core import analyze, sanitize
from powersweep.analysis.fleet_outliers import THROTTLE_PCT, find_outliers
from powersweep.analysis.load import Curve, load_curves
from powersweep.errors import UsageError

NAN = math.nan
HOURS_PER_YEAR = 8760.0
# The fleet cap is chosen among caps that at least this share of the group measured.
MIN_COVERAGE = 0.75


@dataclass(frozen=True)
class FleetOptions:
    """What a fleet report is asked.

    Attributes:
        tariff_per_kwh: Price of a kWh for the cost per 1M tokens (None: no cost lines).
        duty: Share of the year the cards serve at the measured load (savings scale with it).
        max_tps_loss_pct: TPS loss the per-card near-peak cap may cost.
        reanalyze: Analyse every caps.csv even where a fresh analysis.json is there.
    """

    tariff_per_kwh: float | None = None
    duty: float = 1.0
    max_tps_loss_pct: float = 5.0
    reanalyze: bool = False


@dataclass(frozen=True)
class _Card:
    """One run, analysed: its usable curve and its own answers."""

    label: str
    run_dir: str
    key: tuple[str, int, str, str]
    metric: str
    caps_w: np.ndarray
    tps: np.ndarray
    power_w: np.ndarray
    temp_c: np.ndarray
    thermal_pct: np.ndarray
    sweet_w: float
    near_peak_w: float
    envelope_w: tuple[float, float, float]
    status: str
    error: str | None
    # a rig of different cards: each card's name and default (empty otherwise)
    defaults_w: tuple[tuple[str, float], ...] = ()

    def at(self, cap_w: float) -> tuple[float, float]:
        """(TPS, draw) at a cap, interpolated inside the measured range, NaN outside."""
        c = self.caps_w
        if not len(c) or cap_w < c[0] - 1e-6 or cap_w > c[-1] + 1e-6:
            return NAN, NAN
        return float(np.interp(cap_w, c, self.tps)), float(np.interp(cap_w, c, self.power_w))

    def clamped(self, cap_w: float) -> float:
        """The cap this card really runs when the fleet asks for ``cap_w`` (its range bounds)."""
        return float(min(max(cap_w, self.caps_w[0]), self.caps_w[-1]))


def discover_runs(paths: Iterable[Path]) -> list[Path]:
    """Run directories under the given paths: a run itself, or any folder holding runs.

    Raises:
        UsageError: A path does not exist or holds no run.
    """
    found: list[Path] = []
    for path in paths:
        path = Path(path)
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory")
        if path.is_file():
            if path.name != "caps.csv":
                raise UsageError(f"{path}: give run directories or folders holding them")
            found.append(path.parent)
            continue
        if (path / "caps.csv").is_file():
            found.append(path)
            continue
        runs = []
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d != "charts" and not d.startswith("."))
            if "caps.csv" in files:
                runs.append(Path(root))
                dirs[:] = []  # a run's own folders hold no runs
        if not runs:
            raise UsageError(f"{path}: no run directory (with a caps.csv) under it")
        found += runs
    unique = list(dict.fromkeys(p.resolve() for p in found))
    return unique


# A price per kWh above this is a typo in any currency (the dearest are a few thousand).
MAX_TARIFF_PER_KWH = 1_000_000.0


def check_options(opts: FleetOptions) -> None:
    """Every number of a fleet report finite and in range (``--tariff inf`` prices nothing).

    Raises:
        UsageError: One line naming the option and its range.
    """
    t = opts.tariff_per_kwh
    if t is not None and not (math.isfinite(t) and 0.0 <= t <= MAX_TARIFF_PER_KWH):
        raise UsageError(
            f"--tariff must be a price per kWh from 0 to {MAX_TARIFF_PER_KWH:g}, not {t:g}"
        )
    if not (math.isfinite(opts.duty) and 0.0 < opts.duty <= 1.0):
        raise UsageError(f"--duty must be more than 0 and at most 1, not {opts.duty:g}")
    if not (math.isfinite(opts.max_tps_loss_pct) and 0.0 <= opts.max_tps_loss_pct < 100.0):
        raise UsageError(
            f"--max-tps-loss must be between 0 and 100 %, not {opts.max_tps_loss_pct:g}"
        )


def fleet_report(paths: Sequence[Path], options: FleetOptions | None = None) -> dict[str, Any]:
    """Load, analyse and summarise every run under ``paths``.

    Args:
        paths: Run directories or folders holding them (searched recursively).
        options: Tariff, duty and near-peak tolerance.

    Returns:
        The fleet report (``fleet.json``), NaN as None.

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
) -> dict[str, Any]:
    """The fleet report of loaded curves (see :func:`fleet_report`)."""
    root = _common_root([c.source for c in curves])
    cards: list[_Card] = []
    unusable: list[dict[str, Any]] = [_unreadable(p, e) for p, e in failed]
    for curve in curves:
        if is_clock_curve(curve.caps):
            unusable.append(_unreadable(curve.source, "a clock-lock sweep, not a power-cap curve"))
            continue
        card = _card(curve, root, opts)
        if card is None:
            unusable.append(_unreadable(curve.source, "no usable cap"))
        else:
            cards.append(card)
    cards = _unique_labels(cards, root)
    groups: dict[tuple[str, int, str, str], list[_Card]] = {}
    for card in cards:
        groups.setdefault(card.key, []).append(card)
    out_groups = [_group(k, g, opts) for k, g in sorted(groups.items(), key=lambda kv: kv[0])]
    incomplete = [
        {"label": c.label, "run_dir": c.run_dir, "status": c.status, "error": c.error}
        for c in cards
        if c.status not in ("complete", "unknown")
    ]
    return sanitize(
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
            "totals": {
                "kw_saved": float(sum(_f(g["savings"].get("kw_saved")) for g in out_groups)),
                "mwh_per_year_saved": float(
                    sum(_f(g["savings"].get("mwh_per_year_saved")) for g in out_groups)
                ),
            },
        }
    )


def _unreadable(run_dir: Path, error: str) -> dict[str, Any]:
    """A run left out, with how its sweep ended when its run.json says (a node that failed
    before it finished a cap has no curve but does have a reason)."""
    entry: dict[str, Any] = {"run_dir": str(run_dir), "error": error}
    try:
        run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return entry
    if isinstance(run, dict) and run.get("status") not in (None, "complete"):
        entry["status"] = run.get("status")
        entry["error"] = run.get("error") or f"{error} (no error recorded)"
    return entry


def _f(value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def _common_root(paths: Sequence[Path]) -> Path:
    try:
        return Path(os.path.commonpath([str(p) for p in paths]))
    except ValueError:
        return Path("/")


def _card(curve: Curve, root: Path, opts: FleetOptions) -> _Card | None:
    """Analyse one run; None when it has no usable cap."""
    result = None if opts.reanalyze else _stored_analysis(curve, opts)
    if result is None:
        result = analyze(curve, bootstrap=0, max_tps_loss_pct=opts.max_tps_loss_pct)
    rows = [
        r
        for r in result["caps"]
        if r.get("status") == "ok" and _ok(r.get("tps")) and _ok(r.get("power_w"))
    ]
    if not rows or not result.get("sweet_spot"):
        return None
    by_cap: dict[float, dict[str, Any]] = {}
    for r in rows:  # one row per cap (the last measured), as the analysis uses
        by_cap[float(r["cap_w"])] = r
    caps = sorted(by_cap)
    thermal = {
        float(c): float(t) if t is not None and math.isfinite(t) else 0.0
        for c, t in zip(
            curve.caps["cap_w"].to_list(), curve.caps["thermal_throttle_pct"].to_list(), strict=True
        )
    }
    run = result["run"]
    sim = (curve.run or {}).get("simulation") or {}
    # a simulated card is named by its simulated node (many of them share one real host)
    node = sim.get("node") if isinstance(sim, dict) else None
    host = node or (curve.run or {}).get("host")
    rel = os.path.relpath(curve.source, root) if curve.source != root else curve.source.name
    return _Card(
        label=str(host or rel),
        run_dir=str(curve.source),
        key=(
            str(run.get("gpu_name") or "unknown GPU"),
            int(run.get("n_gpus") or 1),
            str(run.get("load_mode") or "unknown mode"),
            str(run.get("model") or "unknown model"),
        ),
        metric=str(result["metric"]),
        caps_w=np.array(caps, dtype=float),
        tps=np.array([float(by_cap[c]["tps"]) for c in caps]),
        power_w=np.array([float(by_cap[c]["power_w"]) for c in caps]),
        temp_c=np.array([_num(by_cap[c].get("temp_max_c")) for c in caps]),
        thermal_pct=np.array([thermal.get(c, 0.0) for c in caps]),
        sweet_w=float(result["sweet_spot"]["cap_w"]),
        near_peak_w=_num((result.get("near_peak") or {}).get("cap_w")),
        envelope_w=(
            _num(run.get("min_limit_w")),
            _num(run.get("default_limit_w")),
            _num(run.get("max_limit_w")),
        ),
        # run.json, not a reused analysis.json, knows how the sweep ended (a resumed run)
        status=str((curve.run or {}).get("status") or run.get("status") or "unknown"),
        error=(curve.run or {}).get("error"),
        defaults_w=_defaults_by_gpu(run),
    )


def _defaults_by_gpu(run: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    """Each card's name and default limit on a rig of different cards (analysis ``run``)."""
    defaults = run.get("default_limits_w") or []
    names = run.get("gpu_names") or []
    if not defaults or len(names) != len(defaults):
        return ()
    return tuple((str(n), float(d)) for n, d in zip(names, defaults, strict=True))


def _stored_analysis(curve: Curve, opts: FleetOptions) -> dict[str, Any] | None:
    """The run's analysis.json when it is what :func:`analyze` would say now: written by this
    powersweep version after caps.csv last changed, with the same near-peak tolerance. A sweep
    always leaves one, and reading it is what keeps a thousand runs fast."""
    path = curve.source / "analysis.json"
    try:
        if path.stat().st_mtime < (curve.source / "caps.csv").stat().st_mtime:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema_version") != 1:
        return None
    near = data.get("near_peak") or {}
    fresh = (
        (data.get("tool") or {}).get("version") == __version__
        and isinstance(data.get("caps"), list)
        and isinstance(data.get("run"), dict)
        and data.get("metric") == curve.metric
        and near.get("max_tps_loss_pct", opts.max_tps_loss_pct) == opts.max_tps_loss_pct
    )
    return data if fresh else None


def _unique_labels(cards: list[_Card], root: Path) -> list[_Card]:
    """Cards named by host; where two share one (several runs of a node), by their path."""
    counts = Counter(c.label for c in cards)
    return [
        replace(c, label=os.path.relpath(c.run_dir, root) if Path(c.run_dir) != root else c.run_dir)
        if counts[c.label] > 1
        else c
        for c in cards
    ]


def _ok(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return NAN


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


def _matrix(cards: Sequence[_Card], grid: np.ndarray) -> tuple[np.ndarray, ...]:
    """(TPS, draw, temperature, thermal-throttle %) of each card at each grid cap (NaN outside
    the card's measured range)."""
    shape = (len(cards), len(grid))
    tps, power, temp, thr = (np.full(shape, NAN) for _ in range(4))
    for i, c in enumerate(cards):
        inside = (grid >= c.caps_w[0] - 1e-6) & (grid <= c.caps_w[-1] + 1e-6)
        g = grid[inside]
        tps[i, inside] = np.interp(g, c.caps_w, c.tps)
        power[i, inside] = np.interp(g, c.caps_w, c.power_w)
        if np.isfinite(c.temp_c).any():
            ok = np.isfinite(c.temp_c)
            temp[i, inside] = np.interp(g, c.caps_w[ok], c.temp_c[ok])
        # throttling is a per-cap fact: the nearest measured cap's
        near = np.abs(c.caps_w[None, :] - g[:, None]).argmin(axis=1)
        thr[i, inside] = c.thermal_pct[near]
    return tps, power, temp, thr


def _band(values: np.ndarray, grid: np.ndarray) -> dict[str, Any]:
    """Median, IQR and min-max over cards at each cap (caps no card measured are left out)."""
    keep = np.isfinite(values).sum(axis=0) >= 1
    v = values[:, keep]
    with np.errstate(all="ignore"):
        q = np.nanpercentile(v, [0, 25, 50, 75, 100], axis=0) if v.size else np.empty((5, 0))
    return {
        "cap_w": grid[keep].tolist(),
        "min": q[0].tolist(),
        "q1": q[1].tolist(),
        "median": q[2].tolist(),
        "q3": q[3].tolist(),
        "max": q[4].tolist(),
        "n": np.isfinite(v).sum(axis=0).tolist(),
    }


def _group(
    key: tuple[str, int, str, str], cards: list[_Card], opts: FleetOptions
) -> dict[str, Any]:
    gpu_name, n_gpus, load_mode, model = key
    grid = np.unique(np.round(np.concatenate([c.caps_w for c in cards]), 1))
    tps, power, temp, thr = _matrix(cards, grid)
    with np.errstate(all="ignore"):
        tpw = tps / power
    envelope = Counter(c.envelope_w for c in cards).most_common(1)[0][0]
    outliers = find_outliers(
        [c.label for c in cards],
        [c.envelope_w for c in cards],
        [_throttle_from(c) for c in cards],
        grid,
        tps,
        power,
        temp,
        thr,
    )
    inlier = np.array([c.label not in outliers for c in cards])
    fleet_cap = _fleet_cap(cards, grid, tps[inlier], power[inlier], inlier)
    steps = np.diff(grid)
    step_w = float(np.median(steps)) if len(steps) else NAN
    per_card = [_versus_own(c, fleet_cap) for c in cards]
    savings = _savings(cards, fleet_cap, opts)
    default_w = envelope[1]
    by_gpu = Counter(c.defaults_w for c in cards).most_common(1)[0][0]
    band_cards = tpw[inlier] if inlier.any() else tpw
    return {
        "gpu_name": gpu_name,
        "n_gpus": n_gpus,
        "load_mode": load_mode,
        "model": model,
        "metric": cards[0].metric,
        "n_cards": len(cards),
        "envelope_w": {"min": envelope[0], "default": envelope[1], "max": envelope[2]},
        "step_w": step_w,
        "sweet_spot_w": _dist([c.sweet_w for c in cards]),
        "near_peak_w": _dist([c.near_peak_w for c in cards]),
        "fleet_cap": {
            "cap_w": fleet_cap,
            # a rig of different cards has no one default: the cap is a share of each card's
            "pct_of_default": (
                fleet_cap / default_w * 100.0 if default_w > 0 and not by_gpu else None
            ),
            "pct_of_default_by_gpu": [
                {"gpu_name": n, "default_w": d, "pct_of_default": fleet_cap / d * 100.0}
                for n, d in by_gpu
                if d > 0
            ]
            or None,
            "fleet_tps_per_w": _pooled(cards, inlier, fleet_cap),
            "fleet_tps_per_w_at_default": _pooled(cards, inlier, default_w),
            "tps_per_w_vs_own_best_pct": _dist([p["tps_per_w_vs_own_best_pct"] for p in per_card]),
            "tps_vs_own_best_pct": _dist([p["tps_vs_own_best_pct"] for p in per_card]),
            "excluded_outliers": len(outliers),
        },
        "savings": savings,
        "band": _band(band_cards, grid),
        "outliers": [
            {
                "label": c.label,
                "run_dir": c.run_dir,
                "causes": outliers[c.label],
                "sweet_spot_w": c.sweet_w,
                "curve": {
                    "cap_w": c.caps_w.tolist(),
                    "tps_per_w": (c.tps / c.power_w).tolist(),
                },
            }
            for c in cards
            if c.label in outliers
        ],
        "cards": [
            {
                "label": c.label,
                "run_dir": c.run_dir,
                "status": c.status,
                "sweet_spot_w": c.sweet_w,
                "near_peak_w": c.near_peak_w,
                "outlier": c.label in outliers,
                **p,
            }
            for c, p in zip(cards, per_card, strict=True)
        ],
    }


def _pooled(cards: Sequence[_Card], use: np.ndarray, cap_w: float) -> float:
    """Fleet TPS/W at a cap: all the group's tokens over all its watts (each card at the cap it
    can run)."""
    tps = power = 0.0
    for c, u in zip(cards, use, strict=True):
        if not u or not math.isfinite(cap_w):
            continue
        t, p = c.at(c.clamped(cap_w))
        if math.isfinite(t) and math.isfinite(p):
            tps, power = tps + t, power + p
    return tps / power if power > 0 else NAN


def _fleet_cap(
    cards: Sequence[_Card], grid: np.ndarray, tps: np.ndarray, power: np.ndarray, use: np.ndarray
) -> float:
    """One cap for the group: the most tokens per joule over its (non-outlier) cards.

    Pooling cards averages their noise; with fewer than three cards the pooled curve is as noisy
    as one card, so the median of the cards' own (smoothed) sweet spots is used instead.
    """
    own = [c.sweet_w for c, u in zip(cards, use, strict=True) if u] or [c.sweet_w for c in cards]
    if len(own) < 3 or tps.size == 0:
        median = float(np.median(own))
        return float(grid[np.abs(grid - median).argmin()])
    covered = np.isfinite(tps) & np.isfinite(power)
    coverage = covered.sum(axis=0) / tps.shape[0]
    with np.errstate(all="ignore"):
        pooled = np.where(covered, tps, 0).sum(axis=0) / np.where(covered, power, 0).sum(axis=0)
    pooled[coverage < MIN_COVERAGE] = NAN
    if not np.isfinite(pooled).any():
        return float(grid[np.abs(grid - np.median(own)).argmin()])
    return float(grid[int(np.nanargmax(pooled))])


def _versus_own(card: _Card, fleet_cap: float) -> dict[str, Any]:
    """What the fleet cap costs or gains this card against its own sweet spot."""
    cap = card.clamped(fleet_cap)
    t, p = card.at(cap)
    t0, p0 = card.at(card.sweet_w)
    return {
        "cap_at_fleet_cap_w": cap,
        "tps_at_fleet_cap": t,
        "tps_per_w_at_fleet_cap": t / p,
        "tps_per_w_vs_own_best_pct": ((t / p) / (t0 / p0) - 1.0) * 100.0,
        "tps_vs_own_best_pct": (t / t0 - 1.0) * 100.0,
    }


def _savings(cards: Sequence[_Card], fleet_cap: float, opts: FleetOptions) -> dict[str, Any]:
    """Every card of the group at the fleet cap against its default limit, at measured TPS.

    A card whose sweep did not measure its default limit (an unknown default, or ``--caps``
    that stop short of it) cannot be priced and is counted in ``n_cards_unpriced``.
    """
    p_def = p_cap = t_def = t_cap = 0.0
    n = unpriced = 0
    for c in cards:
        default = c.envelope_w[1]
        td, pd = c.at(default) if math.isfinite(default) else (NAN, NAN)
        if not (math.isfinite(td) and math.isfinite(pd)):
            unpriced += 1
            continue
        tc, pc = c.at(c.clamped(fleet_cap))
        if not (math.isfinite(tc) and math.isfinite(pc)):
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


def _throttle_from(card: _Card) -> float | None:
    hit = card.caps_w[card.thermal_pct >= THROTTLE_PCT]
    return float(hit.min()) if len(hit) else None


def group_title(group: Mapping[str, Any]) -> str:
    """A group's name in headings and charts: GPU (times count), load mode, model."""
    gpu = str(group.get("gpu_name") or "unknown GPU")
    n = int(group.get("n_gpus") or 1)
    if n > 1:
        gpu = f"{n} x {gpu}"
    return f"{gpu} · {group.get('load_mode')} · {group.get('model')}"
