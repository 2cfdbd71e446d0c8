"""Clock-lock curves: the efficiency peak, the Pareto front and the memory tiers of a clock sweep.

A clock sweep (``--axis sm-clock|mem-clock|grid``) locks the SM and/or memory clock at each point
under one power limit; ``caps.csv`` then carries ``sm_lock_mhz`` and ``mem_lock_mhz``. A bare
CSV with those columns, ``narr_tps`` (or ``prefill_tps``) and ``power_w`` is enough.

Reads CSV-derived data only (a :class:`~powersweep.analysis.load.Curve`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import polars as pl
from msgspec import UNSET

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
from powersweep.analysis.clock_result_types import (
    ClockAnalysis,
    LimitBinds,
    LockLatencyTarget,
    LockPoint,
    LockRow,
    Locks,
    LockShare,
)
from powersweep.analysis.curve_noise import falls
from powersweep.analysis.findings import Finding, finding
from powersweep.analysis.load import Curve
from powersweep.analysis.power_findings import FIRST_CODES
from powersweep.analysis.precision import Reading
from powersweep.analysis.result_types import Answer, PointFigures, ToolInfo
from powersweep.analysis.run_record import RunRecord
from powersweep.analysis.trust import ignored_rows, run_findings
from powersweep.runformat import CsvRow, as_float


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
    from powersweep.analysis.core import run_facts

    serving.check_options(tariff_per_kwh, max_ttft_ms, max_itl_ms)

    points = clock_points(curve.caps, curve.metric)
    run = run_facts(curve)
    findings: list[Finding] = []
    status_why = claims.status_reason(curve.run, str(curve.source), "points")
    findings += ignored_rows(curve) + run_findings(curve.run, curve.requests, str(curve.source))
    findings += _status_findings(curve.caps)
    findings += serving.serving_load_findings(curve.caps, point_label)
    ok_rows = curve.caps
    if "status" in ok_rows.columns:
        ok_rows = ok_rows.filter(pl.col("status").is_null() | (pl.col("status") == "ok"))
    findings += steadiness.findings(ok_rows.iter_rows(named=True), point_label)
    records = [p.record() for p in points]
    bare = ClockAnalysis(
        tool=ToolInfo("powersweep", __version__),
        axis=infer_axis(points, curve.run),
        metric=curve.metric,
        source=str(curve.source),
        run=run,
        points=records,
        rows=_rows(curve.caps, curve.metric),
        answer=None,
    )
    if not points:
        findings.append(
            finding("warning", "no_usable_points", "no clock point finished ok with TPS and draw")
        )
        answer = claims.answer_of(status_why=status_why, usable=0, what="points")
        return replace(bare, answer=answer, findings=findings)
    peak = max(points, key=lambda p: p.tps_per_w)
    fastest = max(points, key=lambda p: p.tps)
    floor = fastest.tps * (1.0 - max_tps_loss_pct / 100.0)
    near = min((p for p in points if p.tps >= floor), key=lambda p: p.power_w)
    peak_record = _with_versus(peak.record(), peak, fastest)
    peak_record = _peak_noise(peak_record, curve, points, peak, bootstrap, seed)
    answer = claims.answer_of(
        status_why=status_why,
        usable=len(points),
        boundary_why=_boundary(points, peak),
        what="points",
    )
    front = pareto_front(points)
    knee = pareto_knee(front)
    tiers = tier_summaries(points)
    fastest_tier = next(t for t in tiers if not t.caps_tps)
    sat = fastest_tier.tps_stops_rising_at_sm_mhz
    served = serving.Served[LockLatencyTarget](None, None, [])
    if answer.given:  # nothing is chosen without an answer, so nothing is saved
        records = serving.priced(records, serving.run_tariff(curve.run, tariff_per_kwh))
        served = serving.served(
            records,
            records[points.index(peak)],
            records[points.index(fastest)],
            tariff=serving.run_tariff(curve.run, tariff_per_kwh),
            max_ttft_ms=max_ttft_ms,
            max_itl_ms=max_itl_ms,
            name=_point_name,
            reading=_own_reading(curve, points, records),
            target=LockLatencyTarget,
        )
    findings += served.findings
    binds = _power_binds(points, curve.caps, curve.run)
    analysis = replace(
        bare,
        points=records,
        answer=answer,
        peak=peak_record,
        fastest=fastest.record(),
        near_peak=replace(
            near.record(),
            tps_loss_pct=as_float(100.0 * (fastest.tps - near.tps) / fastest.tps, None),
            max_tps_loss_pct=max_tps_loss_pct,
        ),
        pareto_front=[p.record() for p in front],
        pareto_knee=knee.record() if knee else None,
        tiers=tiers,
        bandwidth_capped_tiers=[t.mem_lock_mhz for t in tiers if t.caps_tps],
        saturation=Locks(sat, fastest_tier.mem_lock_mhz) if sat else None,
        power_cap_binds=binds,
        energy=served.energy,
        latency_target=served.latency_target,
    )
    if answer.kind == claims.NONE:
        findings.insert(0, _no_answer(answer, peak))
    else:
        findings += _findings(analysis, peak, fastest)
    findings += _falls_finding(curve, points)
    # what withholds the answer is said first
    findings.sort(key=lambda f: f.code not in FIRST_CODES)
    return replace(analysis, findings=findings)


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
    curve: Curve, points: Sequence[ClockPoint], records: Sequence[LockPoint]
) -> Callable[[LockPoint], Reading]:
    """Each point's own reading, its repeats pooled, by its analysis record (the record's own
    figures where the run has none)."""
    own = noise.own_readings(
        curve.caps, LOCK_KEYS, [(_lock_key(p), p.tps / p.power_w) for p in points]
    )
    by_record = {id(r): own.get(_lock_key(p)) for p, r in zip(points, records, strict=True)}
    return lambda r: by_record.get(id(r)) or Reading.of(r.to_json())


def _lock_key(p: ClockPoint) -> tuple[float | None, ...]:
    return noise.point_key([p.sm_lock_mhz, p.mem_lock_mhz])


def _peak_noise(
    record: LockPoint,
    curve: Curve,
    points: Sequence[ClockPoint],
    peak: ClockPoint,
    n_boot: int,
    seed: int,
) -> LockPoint:
    """The peak with the points statistically tied with it: each point's TPS units and load
    ticks resampled within what was measured there (as for caps, :mod:`.noise`), or, in runs
    that state each point's own precision, the points within it of the peak. Without raw data
    (a bare CSV) only the peak itself is named."""
    if n_boot <= 0:
        return replace(record, tied_points=[_locks(peak)], noise_source=None, best_share=None)
    keyed = [(_lock_key(p), p.tps / p.power_w) for p in points]
    own = noise.own_readings(curve.caps, LOCK_KEYS, keyed)
    if _lock_key(peak) in own and len(own) >= 2:
        best = own[_lock_key(peak)]
        close = [p for p in points if p is peak or _own_tied(own.get(_lock_key(p)), best)]
        return replace(record, tied_points=[_locks(p) for p in close], noise_source=noise.OWN)
    if curve.samples is None:
        return _curve_ties(record, curve, points, peak)
    draws = noise.resample_points(
        curve, LOCK_KEYS, [(_lock_key(p), p.tps, p.power_w) for p in points], n_boot, seed
    )
    if draws is None:
        return _curve_ties(record, curve, points, peak)
    tied, share, _ = noise.tied_with_best(draws, list(points).index(peak))
    shares = [
        LockShare(lock.sm_lock_mhz, lock.mem_lock_mhz, as_float(share[k], None))
        for k, lock in enumerate(_locks(p) for p in points)
    ]
    return replace(
        record,
        tied_points=[_locks(points[k]) for k in tied],
        noise_source=noise.RESAMPLED,
        best_share=shares,
    )


def _curve_ties(
    record: LockPoint, curve: Curve, points: Sequence[ClockPoint], peak: ClockPoint
) -> LockPoint:
    """A bare clock curve's ties: the points within its own reading noise of the peak, that
    noise measured along the peak's own locks where physics forbids any scatter
    (:mod:`.curve_noise`)."""
    sm, mem = _lock_key(peak)
    scatter = noise.curve_noise(
        curve.caps, curve.metric, through={"sm_lock_mhz": sm, "mem_lock_mhz": mem}
    )
    close = [p for p in points if p is peak or scatter.tied(p.tps_per_w, peak.tps_per_w)]
    return replace(
        record,
        tied_points=[_locks(p) for p in close],
        noise_source=noise.TYPICAL if scatter.from_floor else noise.CURVE,
        best_share=None,
    )


def _own_tied(reading: Reading | None, best: Reading) -> bool:
    return reading is not None and reading.tied_with(best)


def _locks(p: ClockPoint) -> Locks:
    return Locks(*_lock_key(p))


def _with_versus(record: LockPoint, p: ClockPoint, fastest: ClockPoint) -> LockPoint:
    """A point with how it compares with the fastest point."""
    return replace(
        record,
        tps_per_w_vs_fastest_pct=as_float(100.0 * (p.tps_per_w / fastest.tps_per_w - 1.0), None),
        tps_vs_fastest_pct=as_float(100.0 * (p.tps / fastest.tps - 1.0), None),
        energy_per_token_saving_pct=as_float(100.0 * (1.0 - fastest.tps_per_w / p.tps_per_w), None),
    )


def _rows(caps: pl.DataFrame, metric: str) -> list[LockRow]:
    """The table as measured: every row of caps.csv, its status and error kept."""
    rows = []
    for row in caps.iter_rows(named=True):
        tps, power = as_float(row.get(metric)), as_float(row.get("power_w"))
        column = as_float(row.get(metric), None)
        figures = PointFigures(
            tps=as_float(tps, None),
            power_w=as_float(power, None),
            tps_per_w=as_float(tps / power, None) if power > 0 and math.isfinite(tps) else None,
            sm_clock_mhz=as_float(row.get("sm_clock_mhz"), None),
            mem_clock_mhz=as_float(row.get("mem_clock_mhz"), None),
            pwr_throttle_pct=as_float(row.get("pwr_throttle_pct"), None),
            status=row.get("status"),
            error=row.get("error"),
            code_tps=column if metric == "code_tps" else UNSET,
        )
        rows.append(
            LockRow(
                sm_lock_mhz=as_float(row.get("sm_lock_mhz"), None),
                mem_lock_mhz=as_float(row.get("mem_lock_mhz"), None),
                cap_w=as_float(row.get("cap_w"), None),
                figures=figures,
                narr_tps=column if metric == "narr_tps" else UNSET,
                prefill_tps=column if metric == "prefill_tps" else UNSET,
                decode_tps=column if metric == "decode_tps" else UNSET,
            )
        )
    return rows


def _power_binds(
    points: Sequence[ClockPoint], caps: pl.DataFrame, run: RunRecord | None
) -> LimitBinds | None:
    """Whether the limit in force ever bound: the highest draw against it, and throttling."""
    limits = [p.cap_w for p in points if math.isfinite(p.cap_w)]
    if not limits:
        return None
    n_gpus = len((run.gpus if run else None) or []) or 1
    limit_total = min(limits) * n_gpus
    max_draw = max(p.power_w for p in points)
    throttle = (
        [float(v) for v in caps["pwr_throttle_pct"].drop_nulls().to_list()]
        if "pwr_throttle_pct" in caps.columns
        else []
    )
    throttled = any(v > THROTTLED_PCT for v in throttle)
    return LimitBinds(
        limit_w=as_float(limit_total, None),
        max_draw_w=as_float(max_draw, None),
        max_draw_pct_of_limit=as_float(100.0 * max_draw / limit_total, None),
        binds=throttled or max_draw >= NO_BIND_FRACTION * limit_total,
    )


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


def point_label(p: CsvRow) -> str:
    """``SM 1410 MHz / mem 9001 MHz`` for a caps.csv row (or any map of the two locks)."""
    return _label(as_float(p.get("sm_lock_mhz")), as_float(p.get("mem_lock_mhz")))


def _point_name(p: LockPoint) -> str:
    """A point as the energy and latency answers name it."""
    return _label(as_float(p.sm_lock_mhz), as_float(p.mem_lock_mhz))


def _findings(analysis: ClockAnalysis, peak: ClockPoint, fastest: ClockPoint) -> list[Finding]:
    out = []
    vs, binds = analysis.peak, analysis.power_cap_binds
    assert vs is not None
    out.append(
        finding(
            "info",
            "clock_peak",
            f"efficiency peak at {_label(peak.sm_lock_mhz, peak.mem_lock_mhz)}: "
            f"{peak.tps_per_w:.4g} TPS/W, {peak.tps:.1f} TPS at {peak.power_w:.0f} W; "
            f"{as_float(vs.tps_per_w_vs_fastest_pct):+.0f}% TPS/W and "
            f"{as_float(vs.tps_vs_fastest_pct):+.1f}% "
            f"TPS against the fastest point ({_label(fastest.sm_lock_mhz, fastest.mem_lock_mhz)})",
        )
    )
    for tier in analysis.tiers:
        sat = tier.tps_stops_rising_at_sm_mhz
        mem = as_float(tier.mem_lock_mhz)
        where = f"memory at {mem:.0f} MHz" if math.isfinite(mem) else "the memory clock in force"
        if tier.caps_tps:
            out.append(
                finding(
                    "info",
                    "tier_caps_tps",
                    f"{where} caps TPS at {as_float(tier.top_tps):.1f} "
                    f"({as_float(tier.below_fastest_tier_pct):.0f}% below the fastest tier): "
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
    if binds is not None and not binds.binds:
        draw_w, limit_w = as_float(binds.max_draw_w), as_float(binds.limit_w)
        mode = analysis.run.load_mode or "this load"
        kind = "decode" if str(mode).startswith("decode") else str(mode)
        out.append(
            finding(
                "info",
                "power_cap_does_not_bind",
                f"the draw peaked at {draw_w:.0f} W, "
                f"{as_float(binds.max_draw_pct_of_limit):.0f}% of the {limit_w:.0f} W limit "
                f"in force, and the card never throttled on power: power caps do not bind in "
                f"{kind} on this card (only a cap under {draw_w:.0f} W would slow "
                "it); clock locks are the lever",
            )
        )
    return out
