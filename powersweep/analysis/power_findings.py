"""The findings of a power-cap curve: caps not measured, whether any cap binds, a sweet spot
at the envelope's edge, plateaus and ceilings, regimes, and the recommendation in words.

Each function returns findings (:func:`~powersweep.analysis.findings.finding`) from the figures
:func:`~powersweep.analysis.core.analyze` computed; nothing here reads a file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

from powersweep.analysis import cap_points, noise, trust
from powersweep.analysis.cap_points import CapPoint, Region
from powersweep.analysis.curve_noise import falls
from powersweep.analysis.findings import Finding, finding
from powersweep.analysis.result_types import (
    Answer,
    CapsBind,
    Pick,
    Plateau,
    PowerAnalysis,
    Regime,
    RunFacts,
    known,
)
from powersweep.runformat import as_float

NAN = math.nan
# A finding lists at most this many caps tied with the best; more are given as a count and range.
TIED_LISTED_MAX = 8
# Findings that say why there is no answer come first, before anything the summary lists.
FIRST_CODES = frozenset(
    {
        "run_interrupted",
        "run_partial",
        "run_failed",
        "run_running",
        "too_few_points",
        "no_cap_binds",
    }
)


def status_findings(caps: pl.DataFrame) -> list[Finding]:
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
        parts.append(f"{watts(row['cap_w'])} {row['status']}{why}")
    return [
        finding(
            "warning",
            "caps_not_measured",
            f"{bad.height} cap(s) not measured and left out of the analysis: " + "; ".join(parts),
            "rerun those caps (a rejected cap may be outside the card's limits)",
        )
    ]


def _spans(binds: CapsBind) -> tuple[float, float, float, float]:
    """The draw's and the caps' spans, W (NaN where not given)."""
    d_lo, d_hi = binds.draw_w or (None, None)
    c_lo, c_hi = binds.caps_w or (None, None)
    return as_float(d_lo), as_float(d_hi), as_float(c_lo), as_float(c_hi)


def no_bind_text(binds: CapsBind) -> str:
    """Why caps that never bind give no answer, in one line."""
    d_lo, d_hi, c_lo, c_hi = _spans(binds)
    return (
        f"no cap binds: the card drew {d_lo:.0f}-{d_hi:.0f} W under caps of {c_lo:g}-{c_hi:g} W "
        "and its TPS stayed flat within noise, so power capping cannot save energy for this load"
    )


def no_bind_finding(binds: CapsBind) -> Finding:
    return finding(
        "warning",
        "no_cap_binds",
        no_bind_text(binds) + "; the TPS/W differences between these caps are the draw's drift, "
        "not the caps', and none is an efficiency win",
        "lock clocks instead, which bind at any draw: `powersweep --axis sm-clock` (or "
        "mem-clock); or sweep caps below the draw, if the card allows them",
    )


def binds_by_tps_finding(binds: CapsBind) -> Finding:
    d_lo, d_hi, c_lo, c_hi = _spans(binds)
    return finding(
        "info",
        "binds_by_tps",
        f"the caps bind although the averaged draw ({d_lo:.0f}-{d_hi:.0f} W under caps of "
        f"{c_lo:g}-{c_hi:g} W) sits under each cap: TPS follows the cap, which a cap that does "
        "not bind cannot make it do. A bursty load draws in peaks the cap holds, and a draw "
        "averaged over a window (NVML's ~1 s average) understates them",
        None,
    )


def falls_finding(points: Sequence[CapPoint], sigmas: Sequence[float]) -> list[Finding]:
    """``tps_falls_with_cap``: neighbouring caps whose TPS falls as the cap rises, beyond noise."""
    pairs = [(points[i], points[i + 1]) for i in falls([p.tps for p in points], sigmas)]
    if not pairs:
        return []
    listed = "; ".join(
        f"{a.tps:.4g} at {watts(a.cap_w)} -> {b.tps:.4g} at {watts(b.cap_w)}" for a, b in pairs
    )
    caps = ",".join(f"{c:g}" for c in sorted({p.cap_w for pair in pairs for p in pair}))
    return [
        finding(
            "warning",
            "tps_falls_with_cap",
            f"TPS fell as the cap rose, beyond the readings' noise: {listed}. A higher cap never "
            "slows a card: something else changed between those points (another load on the GPU "
            "or the server, the server's state, heat)",
            f"measure those caps again (`--caps {caps}`) with nothing else running",
        )
    ]


def too_few_finding(answer: Answer) -> Finding:
    return finding(
        "warning",
        "too_few_points",
        str(answer.why),
        "measure at least three caps around the one you care about (e.g. `--caps` with a "
        "cap 10-20 W on each side), or sweep the whole envelope",
    )


def watts(value: float) -> str:
    return f"{value:g} W"


def boundary_findings(sweet: Pick, points: Sequence[CapPoint], run: RunFacts) -> list[Finding]:
    side = known(sweet.at_boundary)
    if side is None:
        return []
    cap = sweet.cap_w
    if side == "low":
        limit = as_float(run.min_limit_w)
        room = cap - limit if math.isfinite(limit) else NAN
        direction, bound_name = "lower", "minimum"
    else:
        limit = as_float(run.max_limit_w)
        room = limit - cap if math.isfinite(limit) else NAN
        direction, bound_name = "higher", "maximum"
    if not math.isfinite(limit):
        extend = f"the card's {bound_name} limit is unknown (no run.json)"
        hint = f"extend the sweep {direction} than {watts(cap)} if the card allows it"
    elif room > 0.5:
        extend = (
            f"the card's {bound_name} limit is {watts(limit)}: the sweep can extend {watts(room)}"
        )
        hint = f"extend the sweep {direction}, to {watts(limit)}"
    else:
        extend = f"this is already the card's {bound_name} limit, so it cannot go further"
        hint = "this is the best the card allows"
    return [
        finding(
            "warning",
            f"sweet_spot_at_{side}_boundary",
            f"the sweet spot {watts(cap)} is the {'lowest' if side == 'low' else 'highest'} cap "
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


def structure_findings(
    points: Sequence[CapPoint], regions: Sequence[Region], run: RunFacts, slowdown: float
) -> list[Finding]:
    out: list[Finding] = []
    for r in regions:
        members = [p for p in points if p.cap_w in r.caps_w]
        missing = (
            f" ({', '.join(watts(c) for c in r.missing_caps_w)} not measured inside it)"
            if r.missing_caps_w
            else ""
        )
        if r.kind == cap_points.BOOST_PLATEAU:
            out.append(
                finding(
                    "info",
                    "boost_plateau",
                    f"boost plateau {r.start_w:g}-{r.end_w:g} W{missing}: draw stays at "
                    f"~{r.power_w:.0f} W and TPS at ~{r.tps:.3g} while the cap rises; the card "
                    f"escapes at {watts(r.escape_w or NAN)}",
                    f"caps above {watts(r.start_w)} up to {watts(r.end_w)} buy nothing: set "
                    f"{watts(r.start_w)} for the same TPS, or {watts(r.escape_w or NAN)} or more "
                    "if you need the next boost state",
                )
            )
            continue
        hot = _is_hot(members, slowdown)
        # "Stays cool" is a claim about temperatures: only measured ones may make it.
        measured_temps = any(math.isfinite(p.temp_max_c) for p in members)
        if hot:
            hint = (
                "the card runs hot at the ceiling: this is cooling, not software; improve "
                "airflow or cooling before raising the cap"
            )
        elif run.load_mode in (None, "decode-single"):
            hint = (
                ("the card stays cool, so " if measured_temps else "")
                + "the workload cannot use more power: try "
                "`--load-mode prefill-heavy` or more concurrency (decode-concurrent)"
            )
        else:
            hint = (
                ("the card stays cool: " if measured_temps else "")
                + "the workload or memory bandwidth limits it; caps above "
                f"{watts(r.start_w)} only waste headroom"
            )
        if not hot and not measured_temps:
            hint += " (no temperatures were measured: check that cooling is not the limit)"
        out.append(
            finding(
                "info",
                "draw_ceiling",
                f"draw ceiling from {watts(r.start_w)} to the top of the sweep ({watts(r.end_w)})"
                f"{missing}: draw stalls at ~{r.power_w:.0f} W, clearly under the cap, while "
                "TPS only jitters",
                hint,
            )
        )
    return out


def regime_findings(
    points: Sequence[CapPoint], regimes: Sequence[Regime], slowdown: float
) -> list[Finding]:
    out: list[Finding] = []
    thermal = [r.cap_w for r in regimes if r.regime == cap_points.THERMAL_LIMITED]
    if thermal:
        out.append(
            finding(
                "warning",
                "thermal_limited",
                f"thermal-limited at {', '.join(watts(c) for c in thermal)}: heat, not the cap, "
                "holds the clocks there",
                "improve cooling (airflow, fan curve, repaste); software will not help",
            )
        )
    loaded = [p for p in points if math.isfinite(p.util_pct)]
    under = [r.cap_w for r in regimes if r.regime == cap_points.UNDER_LOADED]
    draws = [p.power_w for p in points]
    flat_everywhere = len(points) >= 3 and (max(draws) - min(draws)) < 0.05 * max(draws)
    if (loaded and len(under) == len(points)) or (under and flat_everywhere):
        out.append(
            finding(
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
            finding(
                "warning",
                "under_loaded",
                f"utilization under 50% at {', '.join(watts(c) for c in under)}",
                "check that nothing else used the server during the sweep",
            )
        )
    bandwidth = [r.cap_w for r in regimes if r.bound == "bandwidth"]
    if len(bandwidth) >= 2:
        out.append(
            finding(
                "info",
                "bandwidth_bound",
                f"SM clock keeps rising with the cap but TPS does not at "
                f"{', '.join(watts(c) for c in bandwidth)}: decode is memory-bandwidth-bound there",
                "caps there buy clock, not tokens; a memory overclock would help more",
            )
        )
    return out


def _tied_text(caps_w: Sequence[float]) -> str:
    if len(caps_w) <= TIED_LISTED_MAX:
        return ", ".join(watts(c) for c in caps_w)
    return f"{len(caps_w)} caps from {watts(min(caps_w))} to {watts(max(caps_w))}"


def _unbound_ceiling(sweet: Pick, plateaus: Sequence[Plateau]) -> Plateau | None:
    """The draw ceiling the sweet spot sits on when every cap of it ties with the best.

    Its caps run one operating point (the workload cannot use more power), so the cap does not
    bind there and the best reading among them is noise.
    """
    tied = set(known(sweet.tied_caps) or [])
    for region in plateaus:
        caps = region.caps_w
        if (
            region.kind == "draw_ceiling"
            and sweet.cap_w in caps
            and len(caps) > 1
            and set(caps) <= tied
        ):
            return region
    return None


def recommendation_findings(analysis: PowerAnalysis) -> list[Finding]:
    sweet, near, rec = analysis.sweet_spot, analysis.near_peak, analysis.recommendation
    assert sweet is not None and near is not None and rec is not None
    hint = f"`nvidia-smi -pl {sweet.cap_w:g}` for the most tokens per watt"
    ceiling = _unbound_ceiling(sweet, analysis.plateaus)
    tied = known(sweet.tied_caps) or []
    if ceiling is not None:
        hint = (
            f"every cap from {watts(ceiling.start_w)} to {watts(ceiling.end_w)} runs one "
            "operating point (the draw ceiling) and is as efficient within noise: the cap does "
            "not bind there, so any of them "
            f"(`nvidia-smi -pl {ceiling.start_w:g}` is the lowest) serves this load as well; "
            "choose by the other loads the card runs"
        )
    out = [
        finding(
            "info",
            "sweet_spot",
            f"best efficiency at {noise.sweet_spot_text(sweet)}: {_measured(sweet)}"
            + _default_note(sweet)
            + (f"; statistically tied: {_tied_text(tied)}" if len(tied) > 1 else ""),
            hint,
        ),
        finding(
            "info",
            "near_peak",
            f"near-peak: {noise.sweet_spot_text(near)} keeps TPS within "
            f"{as_float(near.max_tps_loss_pct):g}% of the best (loses "
            f"{as_float(near.tps_loss_pct):.1f}%) at {as_float(near.tps_per_w):.4f} TPS/W"
            + _default_note(near),
            "use it when speed matters more than the last bit of efficiency",
        ),
    ]
    if rec.objective == "cost":
        out.append(
            finding(
                "info",
                "cost_objective",
                f"cost objective (eta {as_float(rec.eta):g}): {watts(rec.cap_w)}"
                + _default_note(rec),
                None,
            )
        )
    return out


def _measured(pick: Pick) -> str:
    """A pick's TPS/W, TPS and draw, in words."""
    return (
        f"{as_float(pick.tps_per_w):.4f} TPS/W "
        f"({as_float(pick.tps):.4g} TPS at {as_float(pick.power_w):.1f} W)"
    )


def _default_note(rec: Pick) -> str:
    pct = rec.pct_of_default
    gain = rec.tps_per_w_gain_vs_default_pct
    parts = []
    by_gpu = known(rec.pct_of_default_by_gpu)
    if by_gpu:
        parts.append(" / ".join(f"{p:.0f}%" for p in by_gpu) + " of each card's default limit")
    elif pct is not None and math.isfinite(pct):
        parts.append(f"{pct:.0f}% of the default limit")
    if gain is not None and math.isfinite(gain):
        parts.append(f"{gain:+.1f}% TPS/W vs the default limit")
    return f" ({', '.join(parts)})" if parts else ""


def boundary_text(sweet: Pick, run: RunFacts) -> str | None:
    """Why the best cap is a boundary, not a sweet spot (None: a measured cap on each side)."""
    side = known(sweet.at_boundary)
    if side is None:
        return None
    limit = as_float(run.min_limit_w if side == "low" else run.max_limit_w)
    edge = "lowest" if side == "low" else "highest"
    if math.isfinite(limit) and abs(limit - sweet.cap_w) <= 0.5:
        return f"the best cap is the card's {'minimum' if side == 'low' else 'maximum'} limit"
    return (
        f"the best cap is the {edge} one measured: the optimum may lie "
        f"{'lower' if side == 'low' else 'higher'}"
    )


def answer_findings(
    analysis: PowerAnalysis, points: Sequence[CapPoint], sigmas: Sequence[float]
) -> list[Finding]:
    """What the analysis can claim, in words: the sweet spot and near-peak (an answer), or why
    there is none and the best cap measured; caps that bind by TPS alone; falls of TPS."""
    answer, binds = known(analysis.answer), known(analysis.power_cap_binds)
    sweet = analysis.sweet_spot
    assert answer is not None and binds is not None and sweet is not None
    out: list[Finding] = []
    if answer.kind == "none":
        if not binds.binds and answer.why == no_bind_text(binds):
            out.append(no_bind_finding(binds))
        elif str(answer.why).startswith("only "):
            out.append(too_few_finding(answer))
        out.append(best_measured_finding(sweet, answer))
    else:
        out += boundary_findings(sweet, points, analysis.run)
        out += recommendation_findings(analysis)
    if binds.by == "tps":
        out.append(binds_by_tps_finding(binds))
    return out + falls_finding(points, sigmas)


def best_measured_finding(sweet: Pick, answer: Answer) -> Finding:
    return finding(
        "info",
        "best_measured",
        f"best of the caps measured: {watts(sweet.cap_w)}, {_measured(sweet)}; not an answer: "
        f"{answer.why}",
        None,
    )
