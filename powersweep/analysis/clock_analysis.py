"""Clock-lock curves: the efficiency peak, the Pareto front and the memory tiers of a clock sweep.

A clock sweep (``--axis sm-clock|mem-clock|grid``) locks the SM and/or memory clock at each point
under one power limit; ``caps.csv`` then carries ``sm_lock_mhz`` and ``mem_lock_mhz``. A bare
CSV with those columns, ``narr_tps`` (or ``prefill_tps``) and ``power_w`` is enough.

Reads CSV-derived data only (a :class:`~powersweep.analysis.load.Curve`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import polars as pl

from powersweep import __version__
from powersweep.analysis import claims, noise, serving, steadiness
from powersweep.analysis.clock_curve import (
    LOCK_KEYS,
    NO_BIND_FRACTION,
    SATURATION_FRACTION,
    THROTTLED_PCT,
    ClockPoint,
    clock_points,
    infer_axis,
    pareto_front,
    pareto_knee,
    tier_summaries,
)
from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.analysis.curve_noise import falls
from powersweep.analysis.findings import Finding, finding
from powersweep.analysis.load import Curve
from powersweep.analysis.power_findings import FIRST_CODES
from powersweep.analysis.precision import Reading
from powersweep.analysis.result_types import Answer
from powersweep.analysis.trust import ignored_rows, run_findings
from powersweep.runformat import as_float


def analyze_clocks(
    curve: Curve,
    *,
    max_tps_loss_pct: float = 5.0,
    bootstrap: int = 1000,
    seed: int = 0,
    tariff_per_kwh: float | None = None,
    max_ttft_ms: float | None = None,
    max_itl_ms: float | None = None,
) -> ClockAnalysis:
    """Analyse a clock-lock curve (one axis or a grid).

    Args:
        curve: A loaded curve whose rows carry ``sm_lock_mhz`` / ``mem_lock_mhz``.
        max_tps_loss_pct: TPS loss (vs the best TPS) the near-peak point may cost.
        bootstrap: Resamples for the points tied with the peak (0: none); needs samples.csv.
        seed: Seed of the resampling.
        tariff_per_kwh: Price of a kWh: cost per 1M tokens, and the peak's savings against the
            fastest point (None: energy only).
        max_ttft_ms: Latency target for the time to first token's p95 (None: none).
        max_itl_ms: Latency target for the inter-token latency's p95 (None: none).

    Returns:
        The typed analysis of a clock sweep (``to_json()``: its analysis.json, docs/run-format.md):
        ``axis``, ``points``, ``peak`` (also as ``sweet_spot``; with ``tied_points``, the points
        statistically tied with it, and ``noise_source``), ``near_peak``, ``pareto_front``,
        ``tiers``, ``bandwidth_capped_tiers``, ``saturation``, ``power_cap_binds`` and ``findings``.
    """
    from powersweep.analysis.core import run_facts, sanitize

    serving.check_options(tariff_per_kwh, max_ttft_ms, max_itl_ms)

    points = clock_points(curve.caps, curve.metric)
    run = run_facts(curve)
    axis = infer_axis(points, curve.run)
    result: dict[str, Any] = {
        "schema_version": 1,
        "tool": {"name": "powersweep", "version": __version__},
        "kind": "clocks",
        "axis": axis,
        "metric": curve.metric,
        "source": str(curve.source),
        "run": run,
        "points": [p.as_dict() for p in points],
        "rows": _rows(curve.caps, curve.metric),
        "answer": None,
        "peak": None,
        "sweet_spot": None,
        "near_peak": None,
        "pareto_front": [],
        "pareto_knee": None,
        "tiers": [],
        "bandwidth_capped_tiers": [],
        "saturation": None,
        "power_cap_binds": None,
        "energy": None,
        "latency_target": None,
        "findings": [],
    }
    findings: list[Finding] = result["findings"]
    status_why = claims.status_reason(curve.run, str(curve.source), "points")
    findings += ignored_rows(curve) + run_findings(curve.run, curve.requests, str(curve.source))
    findings += _status_findings(curve.caps)
    ok_rows = curve.caps
    if "status" in ok_rows.columns:
        ok_rows = ok_rows.filter(pl.col("status").is_null() | (pl.col("status") == "ok"))
    findings += steadiness.findings(ok_rows.iter_rows(named=True), point_label)
    if not points:
        findings.append(
            finding("warning", "no_usable_points", "no clock point finished ok with TPS and draw")
        )
        result["answer"] = claims.answer_of(status_why=status_why, usable=0, what="points")
        return ClockAnalysis.from_json(sanitize(result))
    peak = max(points, key=lambda p: p.tps_per_w)
    fastest = max(points, key=lambda p: p.tps)
    floor = fastest.tps * (1.0 - max_tps_loss_pct / 100.0)
    near = min((p for p in points if p.tps >= floor), key=lambda p: p.power_w)
    result["peak"] = {
        **peak.as_dict(),
        **_versus(peak, fastest),
        **_peak_noise(curve, points, peak, bootstrap, seed),
    }
    result["sweet_spot"] = result["peak"]
    answer = claims.answer_of(
        status_why=status_why,
        usable=len(points),
        boundary_why=_boundary(points, peak),
        what="points",
    )
    result["answer"] = answer
    result["fastest"] = fastest.as_dict()
    result["near_peak"] = {
        **near.as_dict(),
        "tps_loss_pct": 100.0 * (fastest.tps - near.tps) / fastest.tps,
        "max_tps_loss_pct": max_tps_loss_pct,
    }
    front = pareto_front(points)
    result["pareto_front"] = [p.as_dict() for p in front]
    knee = pareto_knee(front)
    result["pareto_knee"] = knee.as_dict() if knee else None
    tiers = tier_summaries(points)
    result["tiers"] = tiers
    result["bandwidth_capped_tiers"] = [t["mem_lock_mhz"] for t in tiers if t["caps_tps"]]
    fastest_tier = next(t for t in tiers if not t["caps_tps"])
    sat = fastest_tier["tps_stops_rising_at_sm_mhz"]
    result["saturation"] = (
        {"sm_lock_mhz": sat, "mem_lock_mhz": fastest_tier["mem_lock_mhz"]} if sat else None
    )
    dicts = result["points"]
    if answer.given:  # nothing is chosen without an answer, so nothing is saved
        serving.attach(
            result,
            dicts,
            dicts[points.index(peak)],
            dicts[points.index(fastest)],
            tariff=serving.run_tariff(curve.run, tariff_per_kwh),
            max_ttft_ms=max_ttft_ms,
            max_itl_ms=max_itl_ms,
            name=point_label,
            reading=_own_reading(curve, points, dicts),
        )
    binds = _power_binds(points, curve.caps, curve.run)
    result["power_cap_binds"] = binds
    if answer.kind == claims.NONE:
        findings.insert(0, _no_answer(answer, peak))
    else:
        findings += _findings(result, peak, fastest, binds, run)
    findings += _falls_finding(curve, points)
    # what withholds the answer is said first
    findings.sort(key=lambda f: f.code not in FIRST_CODES)
    return ClockAnalysis.from_json(sanitize(result))


def _falls_finding(curve: Curve, points: Sequence[ClockPoint]) -> list[Finding]:
    """``tps_falls_with_clock``: neighbouring SM locks of one memory tier (or memory locks at
    one SM lock) whose TPS fell as the lock rose, beyond the readings' noise (each point's own,
    else the curve's): as ``tps_falls_with_cap`` for caps."""
    own = noise.own_readings(curve.caps, LOCK_KEYS, [(_lock_key(p), p.tps_per_w) for p in points])
    scatter = noise.curve_noise(curve.caps, curve.metric)

    def sigma(p: ClockPoint) -> float:
        reading = own.get(_lock_key(p))
        stated = reading.tps_tie_u95_rel / 1.96 if reading is not None else math.nan
        return stated if math.isfinite(stated) and stated > 0 else scatter.tps_rel

    found = []
    for axis, other in (("sm_lock_mhz", "mem_lock_mhz"), ("mem_lock_mhz", "sm_lock_mhz")):
        lines: dict[float | None, list[ClockPoint]] = {}
        for p in points:
            if math.isfinite(getattr(p, axis)):
                held = getattr(p, other)
                lines.setdefault(held if math.isfinite(held) else None, []).append(p)
        for line in lines.values():
            line.sort(key=lambda p: getattr(p, axis))
            for i in falls([p.tps for p in line], [sigma(p) for p in line]):
                a, b = line[i], line[i + 1]
                found.append(
                    f"{a.tps:.4g} at {_label(a.sm_lock_mhz, a.mem_lock_mhz)} -> {b.tps:.4g} at "
                    f"{_label(b.sm_lock_mhz, b.mem_lock_mhz)}"
                )
    if not found:
        return []
    return [
        finding(
            "warning",
            "tps_falls_with_clock",
            f"TPS fell as a clock lock rose, beyond the readings' noise: {'; '.join(found)}. A "
            "higher lock never slows a card: something else changed between those points "
            "(another load on the GPU or the server, the server's state, heat)",
            "measure those points again (--sm-clocks, --mem-clocks) with nothing else running",
        )
    ]


def _boundary(points: Sequence[ClockPoint], peak: ClockPoint) -> str | None:
    """Why the peak is a boundary: the lowest or highest SM lock measured on its memory tier
    (a memory tier is one of the card's few, so the lowest one is no boundary to extend)."""
    tier = [
        p.sm_lock_mhz
        for p in points
        if math.isfinite(p.sm_lock_mhz) and _same(p.mem_lock_mhz, peak.mem_lock_mhz)
    ]
    if len(set(tier)) < 2 or not math.isfinite(peak.sm_lock_mhz):
        return None
    if peak.sm_lock_mhz == min(tier):
        return "the peak is the lowest SM lock measured: the optimum may lie lower"
    if peak.sm_lock_mhz == max(tier):
        return "the peak is the highest SM lock measured: the optimum may lie higher"
    return None


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _no_answer(answer: Answer, peak: ClockPoint) -> Finding:
    """The best point measured, named as such, with why it is no answer."""
    code = "too_few_points" if str(answer.why).startswith("only ") else "best_measured"
    return finding(
        "warning",
        code,
        f"no answer: {answer.why}; best of the points measured: "
        f"{_label(peak.sm_lock_mhz, peak.mem_lock_mhz)}, {peak.tps_per_w:.4g} TPS/W "
        f"({peak.tps:.1f} TPS at {peak.power_w:.0f} W), not an answer",
        "measure at least three locks around it (--sm-clocks)"
        if code == "too_few_points"
        else None,
    )


def _own_reading(
    curve: Curve, points: Sequence[ClockPoint], dicts: Sequence[Mapping[str, Any]]
) -> Callable[[Mapping[str, Any]], Reading]:
    """Each point's own reading, its repeats pooled, by its analysis row (the row's own
    columns where the run has none)."""
    own = noise.own_readings(
        curve.caps, LOCK_KEYS, [(_lock_key(p), p.tps / p.power_w) for p in points]
    )
    by_row = {id(d): own.get(_lock_key(p)) for p, d in zip(points, dicts, strict=True)}
    return lambda r: by_row.get(id(r)) or Reading.of(r)


def _lock_key(p: ClockPoint) -> tuple[float | None, ...]:
    return noise.point_key([p.sm_lock_mhz, p.mem_lock_mhz])


def _peak_noise(
    curve: Curve, points: Sequence[ClockPoint], peak: ClockPoint, n_boot: int, seed: int
) -> dict[str, Any]:
    """The points statistically tied with the peak: each point's TPS units and load ticks
    resampled within what was measured there (as for caps, :mod:`.noise`), or, in runs that
    state each point's own precision, the points within it of the peak. Without raw data (a
    bare CSV) only the peak itself is named."""
    only = {"tied_points": [_locks(peak)], "noise_source": None, "best_share": None}
    if n_boot <= 0:
        return only
    keyed = [(_lock_key(p), p.tps / p.power_w) for p in points]
    own = noise.own_readings(curve.caps, LOCK_KEYS, keyed)
    if _lock_key(peak) in own and len(own) >= 2:
        best = own[_lock_key(peak)]
        close = [p for p in points if p is peak or _own_tied(own.get(_lock_key(p)), best)]
        return {"tied_points": [_locks(p) for p in close], "noise_source": noise.OWN}
    if curve.samples is None:
        return _curve_ties(curve, points, peak)
    draws = noise.resample_points(
        curve, LOCK_KEYS, [(_lock_key(p), p.tps, p.power_w) for p in points], n_boot, seed
    )
    if draws is None:
        return _curve_ties(curve, points, peak)
    tied, share, _ = noise.tied_with_best(draws, list(points).index(peak))
    return {
        "tied_points": [_locks(points[k]) for k in tied],
        "noise_source": noise.RESAMPLED,
        "best_share": [{**_locks(p), "share": float(share[k])} for k, p in enumerate(points)],
    }


def _curve_ties(curve: Curve, points: Sequence[ClockPoint], peak: ClockPoint) -> dict[str, Any]:
    """A bare clock curve's ties: the points within its own reading noise of the peak, that
    noise measured along the peak's own locks where physics forbids any scatter
    (:mod:`.curve_noise`)."""
    scatter = noise.curve_noise(curve.caps, curve.metric, through=_locks(peak))
    close = [p for p in points if p is peak or scatter.tied(p.tps_per_w, peak.tps_per_w)]
    return {
        "tied_points": [_locks(p) for p in close],
        "noise_source": noise.TYPICAL if scatter.from_floor else noise.CURVE,
        "best_share": None,
    }


def _own_tied(reading: Reading | None, best: Reading) -> bool:
    return reading is not None and reading.tied_with(best)


def _locks(p: ClockPoint) -> dict[str, float | None]:
    sm, mem = _lock_key(p)
    return {"sm_lock_mhz": sm, "mem_lock_mhz": mem}


def _versus(p: ClockPoint, fastest: ClockPoint) -> dict[str, Any]:
    return {
        "tps_per_w_vs_fastest_pct": 100.0 * (p.tps_per_w / fastest.tps_per_w - 1.0),
        "tps_vs_fastest_pct": 100.0 * (p.tps / fastest.tps - 1.0),
        "energy_per_token_saving_pct": 100.0 * (1.0 - fastest.tps_per_w / p.tps_per_w),
    }


def _rows(caps: pl.DataFrame, metric: str) -> list[dict[str, Any]]:
    keep = [
        c
        for c in (
            "sm_lock_mhz",
            "mem_lock_mhz",
            "cap_w",
            metric,
            "power_w",
            "sm_clock_mhz",
            "mem_clock_mhz",
            "pwr_throttle_pct",
            "status",
            "error",
        )
        if c in caps.columns
    ]
    rows = []
    for row in caps.select(keep).iter_rows(named=True):
        tps, power = as_float(row.get(metric)), as_float(row.get("power_w"))
        row["tps"] = tps
        row["tps_per_w"] = tps / power if power > 0 and math.isfinite(tps) else None
        rows.append(row)
    return rows


def _power_binds(
    points: Sequence[ClockPoint], caps: pl.DataFrame, run: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Whether the limit in force ever bound: the highest draw against it, and throttling."""
    limits = [p.cap_w for p in points if math.isfinite(p.cap_w)]
    if not limits:
        return None
    n_gpus = len((run or {}).get("gpus") or []) or 1
    limit_total = min(limits) * n_gpus
    max_draw = max(p.power_w for p in points)
    throttle = (
        [float(v) for v in caps["pwr_throttle_pct"].drop_nulls().to_list()]
        if "pwr_throttle_pct" in caps.columns
        else []
    )
    throttled = any(v > THROTTLED_PCT for v in throttle)
    return {
        "limit_w": limit_total,
        "max_draw_w": max_draw,
        "max_draw_pct_of_limit": 100.0 * max_draw / limit_total,
        "binds": throttled or max_draw >= NO_BIND_FRACTION * limit_total,
    }


def _status_findings(caps: pl.DataFrame) -> list[Finding]:
    out = []
    for status in ("rejected", "failed"):
        bad = caps.filter(pl.col("status") == status) if "status" in caps.columns else caps[:0]
        if bad.height:
            first = bad.row(0, named=True)
            where = _label(as_float(first.get("sm_lock_mhz")), as_float(first.get("mem_lock_mhz")))
            out.append(
                finding(
                    "warning",
                    f"points_{status}",
                    f"{bad.height} point(s) {status} (first: {where}: {first.get('error') or '?'})",
                    "a rejected lock is one the card clamped or ignored: pick set-points from "
                    "its supported clocks"
                    if status == "rejected"
                    else "see the error column of caps.csv",
                )
            )
    return out


def _label(sm: float, mem: float) -> str:
    parts = []
    if math.isfinite(sm):
        parts.append(f"SM {sm:.0f} MHz")
    if math.isfinite(mem):
        parts.append(f"mem {mem:.0f} MHz")
    return " / ".join(parts) or "unlocked"


def point_label(p: Mapping[str, Any]) -> str:
    """``SM 1410 MHz / mem 9001 MHz`` for a point dict."""
    return _label(as_float(p.get("sm_lock_mhz")), as_float(p.get("mem_lock_mhz")))


def _findings(
    result: dict[str, Any],
    peak: ClockPoint,
    fastest: ClockPoint,
    binds: dict[str, Any] | None,
    run: dict[str, Any],
) -> list[Finding]:
    out = []
    vs = result["peak"]
    out.append(
        finding(
            "info",
            "clock_peak",
            f"efficiency peak at {_label(peak.sm_lock_mhz, peak.mem_lock_mhz)}: "
            f"{peak.tps_per_w:.4g} TPS/W, {peak.tps:.1f} TPS at {peak.power_w:.0f} W; "
            f"{vs['tps_per_w_vs_fastest_pct']:+.0f}% TPS/W and {vs['tps_vs_fastest_pct']:+.1f}% "
            f"TPS against the fastest point ({_label(fastest.sm_lock_mhz, fastest.mem_lock_mhz)})",
        )
    )
    for tier in result["tiers"]:
        sat = tier["tps_stops_rising_at_sm_mhz"]
        where = (
            f"memory at {tier['mem_lock_mhz']:.0f} MHz"
            if math.isfinite(as_float(tier["mem_lock_mhz"]))
            else "the memory clock in force"
        )
        if tier["caps_tps"]:
            out.append(
                finding(
                    "info",
                    "tier_caps_tps",
                    f"{where} caps TPS at {tier['top_tps']:.1f} "
                    f"({tier['below_fastest_tier_pct']:.0f}% below the fastest tier): "
                    "the memory bandwidth sets decode speed there",
                    "keep this tier only where the draw it saves is worth the TPS",
                )
            )
        if sat is not None:
            out.append(
                finding(
                    "info",
                    "bandwidth_bound",
                    f"with {where}, TPS stops rising with the SM clock at about {sat:.0f} MHz "
                    f"(within {100 * SATURATION_FRACTION:.0f}% of the top TPS): decode is "
                    "memory-bandwidth-bound above it, so higher SM locks only add draw",
                )
            )
    if binds is not None and not binds["binds"]:
        mode = run.get("load_mode") or "this load"
        kind = "decode" if str(mode).startswith("decode") else str(mode)
        out.append(
            finding(
                "info",
                "power_cap_does_not_bind",
                f"the draw peaked at {binds['max_draw_w']:.0f} W, "
                f"{binds['max_draw_pct_of_limit']:.0f}% of the {binds['limit_w']:.0f} W limit "
                f"in force, and the card never throttled on power: power caps do not bind in "
                f"{kind} on this card (only a cap under {binds['max_draw_w']:.0f} W would slow "
                "it); clock locks are the lever",
            )
        )
    return out
