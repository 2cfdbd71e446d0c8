"""The analysis of a curve: sweet spot (with a bootstrap interval), recommendations, structure,
regimes and findings, as the JSON-ready dict that becomes analysis.json."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from powersweep import __version__
from powersweep.analysis import structure, trust
from powersweep.analysis.load import Curve
from powersweep.analysis.requests import rate_findings, server_rates, warning_findings
from powersweep.analysis.structure import CapPoint, Region
from powersweep.errors import UsageError

NAN = math.nan
OBJECTIVES = ("tps-per-w", "near-peak", "cost")
# A cap is statistically tied with the peak when it is best in at least this share of resamples.
TIED_SHARE = 0.05
ENERGY_MISMATCH_FRAC = 0.05
# Sweet spot under noise: caps within this many sigmas of the best TPS/W are candidates, judged
# by a local quadratic fit over this many neighbours each side (curves of at least 5 caps).
SWEET_Z = 2.0
SMOOTH_HALF_WINDOW = 3
FIT_SD_PENALTY = 1.0
MIN_SMOOTH_CAPS = 5
# Phases of samples.csv that are not the measured load.
_IDLE_PHASES = ("warmup", "settle", "ramp")


def analyze(
    curve: Curve,
    *,
    max_tps_loss_pct: float = 5.0,
    objective: str = "tps-per-w",
    eta: float = 0.5,
    bootstrap: int = 1000,
    seed: int = 0,
    default_limit_w: float | None = None,
) -> dict[str, Any]:
    """Analyse a curve.

    Args:
        curve: The loaded curve.
        max_tps_loss_pct: TPS loss (vs the sweep's best TPS) the near-peak cap may cost.
        objective: ``tps-per-w`` (sweet spot), ``near-peak`` or ``cost`` (Zeus-style
            ``eta * energy_per_token + (1 - eta) * max_power * time_per_token``).
        eta: Weight of energy in the cost objective, 0..1.
        bootstrap: Resamples for the sweet-spot interval (0 disables it); needs samples.csv and
            requests.csv.
        seed: Seed of the bootstrap.
        default_limit_w: The card's default limit when run.json does not say (per GPU).

    Returns:
        A JSON-serialisable dict following analysis.json (docs/run-format.md), NaN as None.

    Raises:
        UsageError: An option is out of range.
    """
    if objective not in OBJECTIVES:
        raise UsageError(f"unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}")
    if not 0.0 <= eta <= 1.0:
        raise UsageError(f"--eta must be between 0 and 1, got {eta}")
    if not 0.0 <= max_tps_loss_pct < 100.0:
        raise UsageError(f"--max-tps-loss must be between 0 and 100 %, got {max_tps_loss_pct}")
    if bootstrap < 0:
        raise UsageError(f"--bootstrap must be 0 or more, got {bootstrap}")

    run = run_facts(curve, default_limit_w)
    caps = curve.caps
    metric = curve.metric
    ok = _usable(caps, metric)
    points = _points(ok, metric)
    findings: list[dict[str, Any]] = [
        _finding("warning", "input_note", note, "check the run directory's files")
        for note in curve.notes
    ]
    slowdown = _float(run.get("slowdown_temp_c"))

    rows = _cap_rows(caps, metric)
    result: dict[str, Any] = {
        "schema_version": 1,
        "tool": {"name": "powersweep", "version": __version__},
        "metric": metric,
        "source": str(curve.source),
        "run": run,
        "caps": rows,
        "sweet_spot": None,
        "near_peak": None,
        "recommendation": None,
        "plateaus": [],
        "regimes": [],
        "findings": findings,
    }
    findings += _status_findings(caps)
    result["server_rates"] = server_rates(curve.requests)
    findings += warning_findings(curve.requests) + rate_findings(result["server_rates"])
    findings += trust.input_findings(curve)  # issue 12: rows set aside, suspect caps, faults
    if not points:
        findings.append(
            _finding(
                "warning",
                "no_usable_caps",
                "no cap finished with status ok and a finite TPS and draw",
                "rerun the sweep; see the error column of caps.csv",
            )
        )
        return sanitize(result)

    default_w = _float(run.get("default_limit_w"))
    n_gpus = int(points[0].cap_total_w / points[0].cap_w)
    sweet = _sweet_spot(points, default_w)
    boot = _bootstrap(curve, points, bootstrap, seed, sweet["cap_w"]) if bootstrap > 0 else None
    if boot is not None:
        sweet.update(boot)
    else:
        sweet.update({"tied_caps": None, "interval_w": None, "bootstrap": None})
    result["sweet_spot"] = sweet
    result["near_peak"] = _near_peak(points, max_tps_loss_pct, default_w)
    result["recommendation"] = _recommend(
        points, objective, eta, max_tps_loss_pct, default_w, run, n_gpus
    )

    all_caps = [float(c) for c in caps["cap_w"].to_list()]
    regions = structure.find_regions(
        points, all_caps, slowdown_temp_c=slowdown, step_w=_planned_step_w(curve.run)
    )
    result["plateaus"] = [_region_dict(r) for r in regions]
    result["regimes"] = structure.regimes(points, regions, slowdown_temp_c=slowdown)
    regime_of = {r["cap_w"]: r["regime"] for r in result["regimes"]}
    for row in rows:
        row["regime"] = regime_of.get(row["cap_w"])

    _per_card_pct(result, run.get("default_limits_w"))
    findings += _boundary_findings(sweet, points, run)
    findings += _recommendation_findings(result)
    findings += _structure_findings(points, regions, run, slowdown)
    findings += _regime_findings(points, result["regimes"], slowdown)
    findings += _energy_findings(ok)
    return sanitize(result)


def run_facts(curve: Curve, default_limit_w: float | None = None) -> dict[str, Any]:
    """Header facts from run.json (None where unknown), as analysis.json's ``run``.

    A rig of different cards is named after each (``gpu_label``: ``A + B``); its envelope is the
    one swept (the intersection: the highest minimum, the lowest maximum) and its default is the
    mean of the cards' defaults (a cap's % of it is the combined cap over the combined default),
    each card's own default in ``default_limits_w``.
    """
    run = curve.run or {}
    gpus: list[Any] = run["gpus"] if isinstance(run.get("gpus"), list) else []
    cards: list[dict[str, Any]] = [g for g in gpus if isinstance(g, dict)]
    first: dict[str, Any] = cards[0] if cards else {}
    server: dict[str, Any] = run["server"] if isinstance(run.get("server"), dict) else {}
    tool: dict[str, Any] = run["tool"] if isinstance(run.get("tool"), dict) else {}
    n_caps = curve.caps["n_gpus"].drop_nulls()
    n_gpus = len(gpus) if gpus else (int(n_caps.max()) if n_caps.len() else 1)  # type: ignore[arg-type]
    names = [str(g["name"]) for g in cards if g.get("name")]
    distinct = list(dict.fromkeys(names))
    defaults = _numbers(cards, "default_limit_w")
    default: Any = (
        (defaults[0] if len(set(defaults)) == 1 else math.fsum(defaults) / len(defaults))
        if defaults
        else first.get("default_limit_w")
    )
    if default is None and default_limit_w is not None:
        default = default_limit_w
    mins, maxes = _numbers(cards, "min_limit_w"), _numbers(cards, "max_limit_w")
    return {
        "gpu_name": " + ".join(distinct) if len(distinct) > 1 else first.get("name"),
        "gpu_label": _gpu_label(names, n_gpus),
        "gpu_names": names or None,
        "n_gpus": n_gpus,
        "cooling": run.get("cooling"),
        "load_mode": run.get("load_mode"),
        "model": server.get("model"),
        "engine": server.get("engine"),
        "date": run.get("started_at"),
        "tool_version": tool.get("version"),
        "default_limit_w": default,
        "default_limits_w": defaults if len(set(defaults)) > 1 else None,
        "min_limit_w": max(mins) if mins else first.get("min_limit_w"),
        "max_limit_w": min(maxes) if maxes else first.get("max_limit_w"),
        "slowdown_temp_c": first.get("slowdown_temp_c"),
        "status": run.get("status"),
        "simulated": bool(run.get("simulation")),
        "gpu_selection": _selection(run.get("gpu_selection")),
    }


def _selection(raw: Any) -> str | None:
    """Which GPUs were swept and why, in one line (``run.json``'s ``gpu_selection``)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("picked"), list):
        return None
    picked = ", ".join(str(i) for i in raw["picked"])
    return f"{picked} ({raw['reason']})" if raw.get("reason") else picked


def _numbers(cards: Sequence[dict[str, Any]], key: str) -> list[float]:
    """Every card's number under ``key``; empty unless each card has one."""
    values = [c.get(key) for c in cards]
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return numbers if values and len(numbers) == len(values) else []


def _gpu_label(names: Sequence[str], n_gpus: int) -> str | None:
    """``RTX 3090``, ``2 x RTX 3090`` or ``RTX 3090 + RTX 4090`` (each distinct card named)."""
    if not names:
        return None
    counts = Counter(names)
    if len(counts) == 1:
        return f"{n_gpus} x {names[0]}" if n_gpus > 1 else names[0]
    # different cards: short names (``RTX 3090``), a suffix they all share said once
    short = {n: n.removeprefix("NVIDIA ").removeprefix("GeForce ") for n in counts}
    suffixes = {
        s.rsplit(" (", 1)[1] if s.endswith(")") and " (" in s else "" for s in short.values()
    }
    tail = ""
    if len(suffixes) == 1 and "" not in suffixes:
        tail = f" ({suffixes.pop()}"
        short = {n: s.rsplit(" (", 1)[0] for n, s in short.items()}
    parts = (f"{n} x {short[name]}" if n > 1 else short[name] for name, n in counts.items())
    return " + ".join(parts) + tail


def _per_card_pct(result: dict[str, Any], defaults: Sequence[float] | None) -> None:
    """Add each card's own % of default to the recommendations of a rig of different cards."""
    if not defaults:
        return
    for key in ("sweet_spot", "near_peak", "recommendation"):
        rec = result.get(key)
        if isinstance(rec, dict) and isinstance(rec.get("cap_w"), int | float):
            rec["pct_of_default_by_gpu"] = [rec["cap_w"] / d * 100.0 for d in defaults if d > 0]


def sanitize(value: Any) -> Any:
    """Make a value JSON-safe: NaN/inf -> None, numpy scalars -> Python, tuples -> lists."""
    if isinstance(value, dict):
        return {str(k): sanitize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _finding(severity: str, code: str, message: str, hint: str | None = None) -> dict[str, Any]:
    return {"severity": severity, "code": code, "message": message, "hint": hint}


def _float(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return NAN
    return out


def _usable(caps: pl.DataFrame, metric: str) -> pl.DataFrame:
    """Rows that count: status ok, finite positive draw, finite TPS; one per cap (the last)."""
    ok = caps.filter(
        (pl.col("status") == "ok")
        & pl.col(metric).is_not_null()
        & pl.col(metric).is_finite()
        & (pl.col(metric) >= 0)
        & pl.col("power_w").is_not_null()
        & pl.col("power_w").is_finite()
        & (pl.col("power_w") > 0)
    )
    return ok.unique(subset="cap_w", keep="last", maintain_order=True).sort("cap_w")


def _points(ok: pl.DataFrame, metric: str) -> list[CapPoint]:
    def f(row: dict[str, Any], key: str) -> float:
        v = row.get(key)
        return NAN if v is None else float(v)

    out: list[CapPoint] = []
    for row in ok.iter_rows(named=True):
        n = f(row, "n_gpus")
        n = n if math.isfinite(n) and n >= 1 else 1.0
        out.append(
            CapPoint(
                cap_w=float(row["cap_w"]),
                cap_total_w=float(row["cap_w"]) * n,
                power_w=float(row["power_w"]),
                tps=float(row[metric]),
                sm_clock_mhz=f(row, "sm_clock_mhz"),
                pstate=f(row, "pstate"),
                util_pct=f(row, "util_pct"),
                temp_max_c=f(row, "temp_max_c"),
                thermal_throttle_pct=f(row, "thermal_throttle_pct"),
                pwr_throttle_pct=f(row, "pwr_throttle_pct"),
            )
        )
    return out


def _cap_rows(caps: pl.DataFrame, metric: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for row in caps.iter_rows(named=True):
        tps, power = row.get(metric), row.get("power_w")
        tpw = (
            tps / power
            if tps is not None and power is not None and math.isfinite(tps) and power > 0
            else None
        )
        rows.append(
            {
                "cap_w": row["cap_w"],
                "tps": tps,
                "code_tps": row.get("code_tps"),
                "power_w": power,
                "tps_per_w": tpw,
                "sm_clock_mhz": row.get("sm_clock_mhz"),
                "mem_clock_mhz": row.get("mem_clock_mhz"),
                "temp_max_c": row.get("temp_max_c"),
                "status": row.get("status"),
                "error": row.get("error"),
                "util_pct": row.get("util_pct"),
                "pstate": row.get("pstate"),
                "pwr_throttle_pct": row.get("pwr_throttle_pct"),
                "thermal_throttle_pct": row.get("thermal_throttle_pct"),
                "energy_j": row.get("energy_j"),
                "energy_sampled_j": row.get("energy_sampled_j"),
                "n_gpus": row.get("n_gpus"),
            }
        )
    return rows


def _pct_of_default(cap_w: float, default_w: float) -> float:
    return cap_w / default_w * 100.0 if math.isfinite(default_w) and default_w > 0 else NAN


def _tpw_at(points: Sequence[CapPoint], cap_w: float) -> float:
    """TPS/W at a cap: measured, or linearly interpolated between the caps around it."""
    for p in points:
        if abs(p.cap_w - cap_w) < 1e-6:
            return p.tps / p.power_w
    for a, b in itertools.pairwise(points):
        if a.cap_w < cap_w < b.cap_w:
            frac = (cap_w - a.cap_w) / (b.cap_w - a.cap_w)
            ta, tb = a.tps / a.power_w, b.tps / b.power_w
            return ta + frac * (tb - ta)
    return NAN


def _versus_default(
    points: Sequence[CapPoint], cap_w: float, tpw: float, default_w: float
) -> dict[str, Any]:
    at_default = _tpw_at(points, default_w) if math.isfinite(default_w) else NAN
    gain = (tpw / at_default - 1.0) * 100.0 if math.isfinite(at_default) and at_default > 0 else NAN
    return {
        "pct_of_default": _pct_of_default(cap_w, default_w),
        "tps_per_w_at_default": at_default,
        "tps_per_w_gain_vs_default_pct": gain,
    }


def _point_dict(points: Sequence[CapPoint], p: CapPoint, default_w: float) -> dict[str, Any]:
    tpw = p.tps / p.power_w
    return {
        "cap_w": p.cap_w,
        "tps_per_w": tpw,
        "tps": p.tps,
        "power_w": p.power_w,
        **_versus_default(points, p.cap_w, tpw, default_w),
    }


def pick_sweet_spot(points: Sequence[CapPoint]) -> tuple[CapPoint, CapPoint]:
    """The sweet-spot cap: (pick, raw best TPS/W).

    The raw best decides unless other caps are within measurement noise of it; then, among the
    caps within ``SWEET_Z`` noise sigmas of the best, the one whose local quadratic fit of TPS/W
    (over ``SMOOTH_HALF_WINDOW`` neighbours each side) is highest wins. Near a flat peak a single
    noisy cap 20 W away can beat the true optimum by a fraction of a percent; the fit uses the
    shape of the curve around each candidate, so one lucky reading no longer moves the answer.
    An exact tie goes to the lower (cheaper) cap.

    Args:
        points: Measured caps, sorted by cap.

    Returns:
        The chosen cap and the cap with the highest raw TPS/W (the same one on a clear peak).
    """
    raw = max(points, key=lambda p: (p.tps / p.power_w, -p.cap_w))
    if len(points) < MIN_SMOOTH_CAPS:
        return raw, raw
    sigma = _tpw_noise_rel(points)
    floor = raw.tps / raw.power_w * (1.0 - SWEET_Z * sigma)
    candidates = [k for k, p in enumerate(points) if p.tps / p.power_w >= floor]
    if len(candidates) < 2:
        return raw, raw
    tpw = np.array([p.tps / p.power_w for p in points])
    caps = np.array([p.cap_w for p in points])
    sd = sigma * float(tpw.max())
    scores = {}
    for k in candidates:
        value, leverage = _local_quadratic(caps, tpw, k)
        # A fit at the end of the sweep extrapolates and is as noisy as the reading itself;
        # judge each candidate by a lower bound so a well-supported one is preferred.
        scores[k] = value - FIT_SD_PENALTY * sd * math.sqrt(leverage)
    best = max(candidates, key=lambda k: (scores[k], -points[k].cap_w))
    return points[best], raw


def _planned_step_w(run: dict[str, Any] | None) -> float | None:
    """The step of the planned grid (run.json ``caps_planned``), None when unknown.

    An adaptive sweep measures a subset of its grid; the step of the measured caps would be two
    to four grid steps and scale the structure tolerances wrongly.
    """
    planned = (run or {}).get("caps_planned")
    if not isinstance(planned, list):
        return None
    caps: list[float] = []
    for c in planned:
        try:
            caps.append(float(c))
        except (TypeError, ValueError):
            continue
    step = structure.typical_step_w([c for c in caps if math.isfinite(c)])
    return step if math.isfinite(step) and step > 0 else None


def _tpw_noise_rel(points: Sequence[CapPoint]) -> float:
    """Relative 1-sigma noise of one cap's TPS/W, from the curve's own scatter.

    Median absolute second difference of log TPS/W over adjacent caps (zero on any straight
    stretch, so kinks barely count); no floor, so a noise-free curve keeps its raw best.
    """
    step_w = structure.typical_step_w([p.cap_w for p in points])
    d2: list[float] = []
    for a, b, c in zip(points, points[1:], points[2:], strict=False):
        gaps = (b.cap_w - a.cap_w, c.cap_w - b.cap_w)
        if not all(0 < g <= structure.ADJACENT_STEPS * step_w + 1e-9 for g in gaps):
            continue
        ra, rb, rc = (p.tps / p.power_w for p in (a, b, c))
        if ra > 0 and rb > 0 and rc > 0:
            d2.append(abs(math.log(ra) - 2 * math.log(rb) + math.log(rc)))
    # Var(a - 2b + c) = 6 sigma^2 for independent noise; 1.4826 turns a MAD into a sigma.
    return 1.4826 / math.sqrt(6.0) * float(np.median(d2)) if d2 else 0.0


def _local_quadratic(caps: np.ndarray, tpw: np.ndarray, k: int) -> tuple[float, float]:
    """TPS/W at ``caps[k]`` from a quadratic fitted to its neighbours, and the fit's leverage.

    The leverage is the variance of the fitted value in units of one reading's variance (1.0
    for the raw value when there are too few neighbours to fit).
    """
    lo = max(0, k - SMOOTH_HALF_WINDOW)
    hi = min(len(caps), k + SMOOTH_HALF_WINDOW + 1)
    if hi - lo < 4:
        return float(tpw[k]), 1.0
    x = caps[lo:hi] - caps[k]
    scale = float(np.max(np.abs(x))) or 1.0
    design = np.vander(x / scale, 3)
    coef, *_ = np.linalg.lstsq(design, tpw[lo:hi], rcond=None)
    # Variance of the intercept of an ordinary least-squares fit: [(X^T X)^-1]_{22}.
    leverage = float(np.linalg.pinv(design.T @ design)[2, 2])
    return float(coef[2]), leverage


def _sweet_spot(points: Sequence[CapPoint], default_w: float) -> dict[str, Any]:
    # Full precision from the raw columns; see pick_sweet_spot for how noise is handled.
    best, raw = pick_sweet_spot(points)
    out = _point_dict(points, best, default_w)
    at_boundary = None
    if len(points) > 1:
        if best.cap_w == points[0].cap_w:
            at_boundary = "low"
        elif best.cap_w == points[-1].cap_w:
            at_boundary = "high"
    out["at_boundary"] = at_boundary
    # Where the fit overrode a single best reading, say so (the table shows the raw values).
    out["raw_best_cap_w"] = raw.cap_w
    return out


def _near_peak(points: Sequence[CapPoint], max_loss_pct: float, default_w: float) -> dict[str, Any]:
    best_tps = max(p.tps for p in points)
    floor = best_tps * (1.0 - max_loss_pct / 100.0)
    pick = next(p for p in points if p.tps >= floor)
    out = _point_dict(points, pick, default_w)
    out["tps_loss_pct"] = (best_tps - pick.tps) / best_tps * 100.0 if best_tps > 0 else 0.0
    out["max_tps_loss_pct"] = max_loss_pct
    return out


def _recommend(
    points: Sequence[CapPoint],
    objective: str,
    eta: float,
    max_loss_pct: float,
    default_w: float,
    run: dict[str, Any],
    n_gpus: int,
) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if objective == "tps-per-w":
        pick, _ = pick_sweet_spot(points)
    elif objective == "near-peak":
        best_tps = max(p.tps for p in points)
        pick = next(p for p in points if p.tps >= best_tps * (1.0 - max_loss_pct / 100.0))
    else:
        max_limit = _float(run.get("max_limit_w"))
        # Zeus normalises time by the highest power the card could draw.
        max_power = (
            max_limit * n_gpus if math.isfinite(max_limit) else max(p.cap_total_w for p in points)
        )
        costs = [
            (
                eta * p.power_w / p.tps + (1.0 - eta) * max_power / p.tps
                if p.tps > 0
                else math.inf,
                p.cap_w,
                p,
            )
            for p in points
        ]
        cost, _, pick = min(costs, key=lambda c: (c[0], c[1]))
        extra = {"eta": eta, "cost": cost, "max_power_w": max_power}
    return {"objective": objective, **_point_dict(points, pick, default_w), **extra}


def _region_dict(r: Region) -> dict[str, Any]:
    return {
        "kind": r.kind,
        "start_w": r.start_w,
        "end_w": r.end_w,
        "power_w": r.power_w,
        "tps": r.tps,
        "caps_w": list(r.caps_w),
        "missing_caps_w": list(r.missing_caps_w),
        "escape_w": r.escape_w,
    }


# --- bootstrap ---------------------------------------------------------------------------------


def _bootstrap(
    curve: Curve, points: Sequence[CapPoint], n_boot: int, seed: int, sweet_cap_w: float
) -> dict[str, Any] | None:
    """Resample each cap's requests (TPS) and load samples (draw); count how often each cap wins."""
    if curve.requests is None or curve.samples is None:
        return None
    req_tps = _request_tps(curve.requests, curve.metric)
    tick_power = _tick_power(curve.samples, _serving_gpus(curve.run))
    if not req_tps or not tick_power:
        return None
    rng = np.random.default_rng(seed)
    draws = np.empty((n_boot, len(points)))
    resampled = 0
    for k, p in enumerate(points):
        tps = req_tps.get(p.cap_w)
        power = tick_power.get(p.cap_w)
        if tps is None or power is None or len(tps[0]) < 2 or len(power) < 2:
            # Without raw data this cap keeps its point estimate (no spread).
            draws[:, k] = p.tps / p.power_w
            continue
        resampled += 1
        rates, tokens = tps
        idx = rng.integers(0, len(rates), size=(n_boot, len(rates)))
        tok = tokens[idx]
        # Token-weighted like caps.csv: total tokens over total decode time.
        tps_b = tok.sum(axis=1) / (tok / rates[idx]).sum(axis=1)
        pidx = rng.integers(0, len(power), size=(n_boot, len(power)))
        power_b = np.median(power[pidx], axis=1)
        draws[:, k] = tps_b / power_b
    if resampled < 2:
        return None
    winners = np.argmax(draws, axis=1)
    share = np.bincount(winners, minlength=len(points)) / n_boot
    lo = np.percentile(draws, 2.5, axis=0)
    hi = np.percentile(draws, 97.5, axis=0)
    best = max(range(len(points)), key=lambda k: (points[k].tps / points[k].power_w, -k))
    tied = [
        points[k].cap_w
        for k in range(len(points))
        if k == best
        or points[k].cap_w == sweet_cap_w
        or share[k] >= TIED_SHARE
        or hi[k] >= lo[best]
    ]
    return {
        "tied_caps": tied,
        "interval_w": [min(tied), max(tied)],
        "bootstrap": {
            "resamples": n_boot,
            "seed": seed,
            "caps_resampled": resampled,
            "best_share": {str(p.cap_w): float(share[k]) for k, p in enumerate(points)},
            "tps_per_w_ci": {
                str(p.cap_w): [float(lo[k]), float(hi[k])] for k, p in enumerate(points)
            },
        },
    }


def _request_tps(requests: pl.DataFrame, metric: str) -> dict[float, tuple[np.ndarray, np.ndarray]]:
    """Per cap: (per-request TPS, weights in tokens) of the requests that make the metric."""
    need = {"cap_w", "prompt_kind"}
    if not need <= set(requests.columns):
        return {}
    df = requests
    if "ok" in df.columns:
        df = df.filter(pl.col("ok").cast(pl.String).str.to_lowercase().is_in(["true", "1"]))
    if metric == "narr_tps":
        if "decode_tps" not in df.columns:
            return {}
        df = df.filter(pl.col("prompt_kind") == "narr").with_columns(
            pl.col("decode_tps").alias("_tps"),
            (
                (pl.col("completion_tokens") - 1).alias("_tok")
                if "completion_tokens" in df.columns
                else pl.lit(1.0).alias("_tok")
            ),
        )
    else:
        cols = {"prompt_tokens", "t_start_s", "t_first_token_s"}
        if not cols <= set(df.columns):
            return {}
        df = df.filter(pl.col("prompt_kind") == "prefill").with_columns(
            (pl.col("prompt_tokens") / (pl.col("t_first_token_s") - pl.col("t_start_s"))).alias(
                "_tps"
            ),
            pl.col("prompt_tokens").alias("_tok"),
        )
    df = df.filter(
        pl.col("_tps").is_finite() & (pl.col("_tps") > 0) & pl.col("_tok").is_finite()
    ).with_columns(pl.col("_tok").clip(lower_bound=1.0))
    out: dict[float, tuple[np.ndarray, np.ndarray]] = {}
    for (cap,), group in df.group_by(["cap_w"], maintain_order=True):
        out[float(cap)] = (group["_tps"].to_numpy(), group["_tok"].to_numpy())
    return out


def _serving_gpus(run: dict[str, Any] | None) -> list[int] | None:
    """run.json's ``gpu_selection.serving``: the GPUs whose utilization marks a load tick."""
    selection = (run or {}).get("gpu_selection")
    serving = selection.get("serving") if isinstance(selection, dict) else None
    if not isinstance(serving, list) or not all(isinstance(i, int) for i in serving):
        return None
    return serving or None


def _tick_power(
    samples: pl.DataFrame, serving: Sequence[int] | None = None
) -> dict[float, np.ndarray]:
    """Per cap: combined draw of every load tick (GPUs summed per tick), util > 50 % on the
    busiest serving GPU (every GPU when ``serving`` is unknown)."""
    if not {"cap_w", "power_w"} <= set(samples.columns):
        return {}
    df = samples.filter(pl.col("power_w").is_finite())
    if "phase" in df.columns:
        df = df.filter(~pl.col("phase").is_in(list(_IDLE_PHASES)))
    keys = ["cap_w", "tick"] if "tick" in df.columns else ["cap_w", "t_s"]
    if keys[1] not in df.columns:
        return {}
    aggs = [pl.col("power_w").sum().alias("p")]
    if "util_pct" in df.columns:
        # the busiest card: an idle card beside a loaded one must not hide the load
        util = pl.col("util_pct")
        if serving and "gpu_index" in df.columns:
            util = util.filter(pl.col("gpu_index").is_in([float(i) for i in serving]))
        aggs.append(util.max().alias("u"))
    ticks = df.group_by(keys, maintain_order=True).agg(aggs)
    if "u" in ticks.columns:
        ticks = ticks.filter(pl.col("u").is_null() | (pl.col("u") > 50.0))
    out: dict[float, np.ndarray] = {}
    for (cap,), group in ticks.sort(keys).group_by(["cap_w"], maintain_order=True):
        out[float(cap)] = group["p"].to_numpy()
    return out


# --- findings ----------------------------------------------------------------------------------


def _status_findings(caps: pl.DataFrame) -> list[dict[str, Any]]:
    # suspect/implausible rows and caps re-measured successfully are trust's findings
    remeasured = caps.filter(pl.col("status") == "ok")["cap_w"]
    bad = caps.filter(
        (pl.col("status") != "ok")
        & ~pl.col("status").is_in(list(trust.OWN_STATUSES))
        & ~pl.col("cap_w").is_in(remeasured.to_list())
    )
    if bad.height == 0:
        return []
    parts = []
    for row in bad.iter_rows(named=True):
        why = f": {row['error']}" if row.get("error") else ""
        parts.append(f"{_w(row['cap_w'])} {row['status']}{why}")
    return [
        _finding(
            "warning",
            "caps_not_measured",
            f"{bad.height} cap(s) not measured and left out of the analysis: " + "; ".join(parts),
            "rerun those caps (a rejected cap may be outside the card's limits)",
        )
    ]


def _w(value: float) -> str:
    return f"{value:g} W"


def _boundary_findings(
    sweet: dict[str, Any], points: Sequence[CapPoint], run: dict[str, Any]
) -> list[dict[str, Any]]:
    side = sweet.get("at_boundary")
    if side is None:
        return []
    cap = sweet["cap_w"]
    if side == "low":
        limit = _float(run.get("min_limit_w"))
        room = cap - limit if math.isfinite(limit) else NAN
        direction, bound_name = "lower", "minimum"
    else:
        limit = _float(run.get("max_limit_w"))
        room = limit - cap if math.isfinite(limit) else NAN
        direction, bound_name = "higher", "maximum"
    if not math.isfinite(limit):
        extend = f"the card's {bound_name} limit is unknown (no run.json)"
        hint = f"extend the sweep {direction} than {_w(cap)} if the card allows it"
    elif room > 0.5:
        extend = f"the card's {bound_name} limit is {_w(limit)}: the sweep can extend {_w(room)}"
        hint = f"extend the sweep {direction}, to {_w(limit)}"
    else:
        extend = f"this is already the card's {bound_name} limit, so it cannot go further"
        hint = "this is the best the card allows"
    return [
        _finding(
            "warning",
            f"sweet_spot_at_{side}_boundary",
            f"the sweet spot {_w(cap)} is the {'lowest' if side == 'low' else 'highest'} cap "
            f"measured; the true optimum may lie {direction}; {extend}",
            hint,
        )
    ]


def _is_hot(points: Sequence[CapPoint], slowdown: float) -> bool:
    for p in points:
        if math.isfinite(p.thermal_throttle_pct) and p.thermal_throttle_pct > 5.0:
            return True
        if math.isfinite(p.temp_max_c):
            limit = slowdown - 8.0 if math.isfinite(slowdown) else 83.0
            if p.temp_max_c >= limit:
                return True
    return False


def _structure_findings(
    points: Sequence[CapPoint], regions: Sequence[Region], run: dict[str, Any], slowdown: float
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in regions:
        members = [p for p in points if p.cap_w in r.caps_w]
        missing = (
            f" ({', '.join(_w(c) for c in r.missing_caps_w)} not measured inside it)"
            if r.missing_caps_w
            else ""
        )
        if r.kind == structure.BOOST_PLATEAU:
            out.append(
                _finding(
                    "info",
                    "boost_plateau",
                    f"boost plateau {r.start_w:g}-{r.end_w:g} W{missing}: draw stays at "
                    f"~{r.power_w:.0f} W and TPS at ~{r.tps:.3g} while the cap rises; the card "
                    f"escapes at {_w(r.escape_w or NAN)}",
                    f"caps above {_w(r.start_w)} up to {_w(r.end_w)} buy nothing: set "
                    f"{_w(r.start_w)} for the same TPS, or {_w(r.escape_w or NAN)} or more "
                    "if you need the next boost state",
                )
            )
            continue
        hot = _is_hot(members, slowdown)
        if hot:
            hint = (
                "the card runs hot at the ceiling: this is cooling, not software; improve "
                "airflow or cooling before raising the cap"
            )
        elif run.get("load_mode") in (None, "decode-single"):
            hint = (
                "the card stays cool, so the workload cannot use more power: try "
                "`--load-mode prefill-heavy` or more concurrency (decode-concurrent)"
            )
        else:
            hint = (
                "the card stays cool: the workload or memory bandwidth limits it; caps above "
                f"{_w(r.start_w)} only waste headroom"
            )
        out.append(
            _finding(
                "info",
                "draw_ceiling",
                f"draw ceiling from {_w(r.start_w)} to the top of the sweep ({_w(r.end_w)})"
                f"{missing}: draw stalls at ~{r.power_w:.0f} W, clearly under the cap, while "
                "TPS only jitters",
                hint,
            )
        )
    return out


def _regime_findings(
    points: Sequence[CapPoint], regimes: Sequence[dict[str, Any]], slowdown: float
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    thermal = [r["cap_w"] for r in regimes if r["regime"] == structure.THERMAL_LIMITED]
    if thermal:
        out.append(
            _finding(
                "warning",
                "thermal_limited",
                f"thermal-limited at {', '.join(_w(c) for c in thermal)}: heat, not the cap, "
                "holds the clocks there",
                "improve cooling (airflow, fan curve, repaste); software will not help",
            )
        )
    loaded = [p for p in points if math.isfinite(p.util_pct)]
    under = [r["cap_w"] for r in regimes if r["regime"] == structure.UNDER_LOADED]
    draws = [p.power_w for p in points]
    flat_everywhere = len(points) >= 3 and (max(draws) - min(draws)) < 0.05 * max(draws)
    if (loaded and len(under) == len(points)) or (under and flat_everywhere):
        out.append(
            _finding(
                "warning",
                "workload_too_small",
                "utilization stays low"
                + (" and the draw is flat at every cap" if flat_everywhere else "")
                + ": the load never kept the GPU busy, so the caps were not tested",
                "use a larger model or more concurrency (decode-concurrent), or "
                "`--load-mode prefill-heavy`",
            )
        )
    elif under:
        out.append(
            _finding(
                "warning",
                "under_loaded",
                f"utilization under 50% at {', '.join(_w(c) for c in under)}",
                "check that nothing else used the server during the sweep",
            )
        )
    bandwidth = [r["cap_w"] for r in regimes if r.get("bound") == "bandwidth"]
    if len(bandwidth) >= 2:
        out.append(
            _finding(
                "info",
                "bandwidth_bound",
                f"SM clock keeps rising with the cap but TPS does not at "
                f"{', '.join(_w(c) for c in bandwidth)}: decode is memory-bandwidth-bound there",
                "caps there buy clock, not tokens; a memory overclock would help more",
            )
        )
    return out


def _energy_findings(ok: pl.DataFrame) -> list[dict[str, Any]]:
    both = ok.filter(
        pl.col("energy_j").is_not_null()
        & pl.col("energy_sampled_j").is_not_null()
        & (pl.col("energy_sampled_j") > 0)
    )
    bad = [
        (row["cap_w"], (row["energy_j"] - row["energy_sampled_j"]) / row["energy_sampled_j"])
        for row in both.iter_rows(named=True)
        if abs(row["energy_j"] - row["energy_sampled_j"]) / row["energy_sampled_j"]
        > ENERGY_MISMATCH_FRAC
    ]
    if not bad:
        return []
    detail = ", ".join(f"{_w(c)} ({d * 100:+.0f}%)" for c, d in bad)
    return [
        _finding(
            "warning",
            "energy_mismatch",
            f"the NVML energy counter and the sampled draw disagree by more than 5% at {detail}",
            "sample faster (a shorter sampling interval) or trust the energy counter; "
            "the draw median may miss short spikes",
        )
    ]


def _recommendation_findings(result: dict[str, Any]) -> list[dict[str, Any]]:
    sweet, near, rec = result["sweet_spot"], result["near_peak"], result["recommendation"]
    out = [
        _finding(
            "info",
            "sweet_spot",
            f"best efficiency at {_w(sweet['cap_w'])}: {sweet['tps_per_w']:.4f} TPS/W "
            f"({sweet['tps']:.4g} TPS at {sweet['power_w']:.1f} W)"
            + _default_note(sweet)
            + (
                f"; statistically tied: {', '.join(_w(c) for c in sweet['tied_caps'])}"
                if sweet.get("tied_caps") and len(sweet["tied_caps"]) > 1
                else ""
            )
            + (
                f"; the single best reading, {_w(sweet['raw_best_cap_w'])}, is within noise of "
                "it and the curve's shape around both favours this cap"
                if sweet.get("raw_best_cap_w") not in (None, sweet["cap_w"])
                else ""
            ),
            f"`nvidia-smi -pl {sweet['cap_w']:g}` for the most tokens per watt",
        ),
        _finding(
            "info",
            "near_peak",
            f"near-peak: {_w(near['cap_w'])} keeps TPS within {near['max_tps_loss_pct']:g}% of "
            f"the best (loses {near['tps_loss_pct']:.1f}%) at {near['tps_per_w']:.4f} TPS/W"
            + _default_note(near),
            "use it when speed matters more than the last bit of efficiency",
        ),
    ]
    if rec["objective"] == "cost":
        out.append(
            _finding(
                "info",
                "cost_objective",
                f"cost objective (eta {rec['eta']:g}): {_w(rec['cap_w'])}" + _default_note(rec),
                None,
            )
        )
    return out


def _default_note(rec: dict[str, Any]) -> str:
    pct = rec.get("pct_of_default")
    gain = rec.get("tps_per_w_gain_vs_default_pct")
    parts = []
    by_gpu = rec.get("pct_of_default_by_gpu")
    if by_gpu:
        parts.append(" / ".join(f"{p:.0f}%" for p in by_gpu) + " of each card's default limit")
    elif pct is not None and math.isfinite(pct):
        parts.append(f"{pct:.0f}% of the default limit")
    if gain is not None and math.isfinite(gain):
        parts.append(f"{gain:+.1f}% TPS/W vs the default limit")
    return f" ({', '.join(parts)})" if parts else ""
