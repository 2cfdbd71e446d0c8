"""The analysis of a curve: sweet spot (with the caps tied with it within noise),
recommendations, structure, regimes and findings, as the JSON-ready dict that becomes
analysis.json."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

import polars as pl

from powersweep import __version__
from powersweep.analysis import (
    binding,
    cap_points,
    claims,
    noise,
    serving,
    steadiness,
    structure,
    trust,
)
from powersweep.analysis.cap_points import CapPoint, Region
from powersweep.analysis.curve_noise import CurveNoise
from powersweep.analysis.findings import Finding, finding
from powersweep.analysis.load import Curve
from powersweep.analysis.near_peak import judged_tps, near_peak_index, region_groups
from powersweep.analysis.objectives import (
    Objective,
    SelectionContext,
    objective_named,
    pick_sweet_spot,
)
from powersweep.analysis.pooling import cap_rows, curve_points, table_rows, usable
from powersweep.analysis.power_findings import (
    FIRST_CODES,
    answer_findings,
    boundary_text,
    no_bind_text,
    regime_findings,
    status_findings,
    structure_findings,
    watts,
)
from powersweep.analysis.precision import Reading
from powersweep.analysis.requests import rate_findings, server_rates, warning_findings
from powersweep.analysis.result_types import (
    CapLatencyTarget,
    CapRow,
    Pick,
    Plateau,
    PowerAnalysis,
    RawNum,
    Regime,
    RunFacts,
    ToolInfo,
)
from powersweep.analysis.run_record import GpuSelection, RunGpu, RunRecord
from powersweep.errors import UsageError
from powersweep.runformat import as_float

NAN = math.nan


def analyze(
    curve: Curve,
    *,
    max_tps_loss_pct: float = 5.0,
    objective: str = "tps-per-w",
    eta: float = 0.5,
    bootstrap: int = 1000,
    seed: int = 0,
    default_limit_w: float | None = None,
    tariff_per_kwh: float | None = None,
    max_ttft_ms: float | None = None,
    max_itl_ms: float | None = None,
) -> PowerAnalysis:
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
        tariff_per_kwh: Price of a kWh: cost per 1M tokens and the savings against the default
            limit (None: energy only).
        max_ttft_ms: Latency target for the time to first token's p95 (None: none).
        max_itl_ms: Latency target for the inter-token latency's p95 (None: none).

    Returns:
        The typed analysis; its ``to_json()`` is what analysis.json holds (docs/run-format.md).

    Raises:
        UsageError: An option is out of range.
    """
    selector = objective_named(objective, eta=eta)
    if not 0.0 <= eta <= 1.0:  # said whatever the objective: a typo in a script shows early
        raise UsageError(f"--eta must be between 0 and 1, got {eta}")
    if not 0.0 <= max_tps_loss_pct < 100.0:
        raise UsageError(f"--max-tps-loss must be between 0 and 100 %, got {max_tps_loss_pct}")
    if bootstrap < 0:
        raise UsageError(f"--bootstrap must be 0 or more, got {bootstrap}")
    serving.check_options(tariff_per_kwh, max_ttft_ms, max_itl_ms)

    run = run_facts(curve, default_limit_w)
    caps = curve.caps
    metric = curve.metric
    ok = usable(caps, metric)
    points = curve_points(ok, metric)
    findings: list[Finding] = [
        finding("warning", "input_note", note, "check the run directory's files")
        for note in curve.notes
    ]
    slowdown = as_float(run.slowdown_temp_c)

    # One row per cap: a cap measured again (the confirm phase) shows its pooled figures, so the
    # starred row is always the best row of the table.
    rows = cap_rows(table_rows(caps, ok), metric)
    rates = server_rates(curve.requests)
    findings += status_findings(caps)
    findings += warning_findings(curve.requests) + rate_findings(rates)
    findings += trust.input_findings(curve)  # issue 12: rows set aside, suspect caps, faults
    findings += serving.serving_load_findings(caps, lambda r: watts(as_float(r["cap_w"])))
    status_why = claims.status_reason(curve.run, str(curve.source))
    bare = PowerAnalysis(
        tool=ToolInfo("powersweep", __version__),
        metric=metric,
        source=str(curve.source),
        run=run,
        caps=rows,
        answer=None,
        # What the sweep's confirm phase re-measured, and why (run.json ``confirm``).
        confirm=curve.run.confirm if curve.run else None,
        server_rates=rates,
    )
    if not points:
        findings.append(
            finding(
                "warning",
                "no_usable_caps",
                "no cap finished with status ok and a finite TPS and draw",
                "rerun the sweep; see the error column of caps.csv",
            )
        )
        answer = claims.answer_of(status_why=status_why, usable=0)
        return replace(bare, answer=answer, findings=findings)

    default_w = as_float(run.default_limit_w)
    n_gpus = int(points[0].cap_total_w / points[0].cap_w)
    all_caps = [float(c) for c in caps["cap_w"].to_list()]
    regions = structure.find_regions(
        points, all_caps, slowdown_temp_c=slowdown, step_w=_planned_step_w(curve.run)
    )
    regimes = structure.regimes(points, regions, slowdown_temp_c=slowdown)
    groups = region_groups([p.cap_w for p in points], regions)
    sweet = _sweet_spot(points, default_w)
    scatter = _scatter(caps, metric, regimes, sweet.cap_w)
    near = _near_peak(points, groups, max_tps_loss_pct, default_w)
    sweet, near = _with_noise(
        sweet, near, curve, points, groups, max_tps_loss_pct, bootstrap, seed, scatter
    )
    binds = binding.caps_bind(points, scatter)
    answer = claims.answer_of(
        status_why=status_why,
        usable=len(points),
        binds_why=None if binds.binds else no_bind_text(binds),
        boundary_why=boundary_text(sweet, run),
    )
    rec = _recommend(points, near.cap_w, selector, default_w, run, n_gpus) if answer.given else None
    regime_of = {r.cap_w: r.regime for r in regimes}
    rows = [replace(row, regime=regime_of.get(row.cap_w)) for row in rows]
    tariff = serving.run_tariff(curve.run, tariff_per_kwh)
    rows, picks, served = _serving(
        rows, (sweet, near, rec), curve.caps, default_w, tariff, max_ttft_ms, max_itl_ms
    )
    sweet_spot, near_peak, recommendation = (_per_card_pct(p, run.default_limits_w) for p in picks)
    assert sweet_spot is not None
    analysis = replace(
        bare,
        caps=rows,
        answer=answer,
        sweet_spot=replace(sweet_spot, caps_bind=binds.binds),
        near_peak=near_peak,
        recommendation=recommendation,
        plateaus=[_plateau(r) for r in regions],
        regimes=regimes,
        energy=served.energy,
        latency_target=served.latency_target,
        power_cap_binds=binds,
    )
    findings += served.findings
    findings += answer_findings(analysis, points, binding.tps_sigmas(points, scatter))
    findings += structure_findings(points, regions, run, slowdown)
    findings += regime_findings(points, regimes, slowdown)
    # issue 24: counter against sampled draw, and a card still heating while measured
    findings += steadiness.findings(ok.iter_rows(named=True), lambda r: watts(as_float(r["cap_w"])))
    # what withholds the answer (or the caps that never bind) is said first
    findings.sort(key=lambda f: f.code not in FIRST_CODES)
    return replace(analysis, findings=findings)


def _scatter(
    caps: pl.DataFrame, metric: str, regimes: Sequence[Regime], best_cap_w: float
) -> CurveNoise:
    """The reading noise of a bare curve where its best cap is: among the caps the cap binds
    (whose speed the clock it allows sets), or among those it does not (whose speed the server
    and the workload set, and may wander more): a single-stream decode's scatter above a card's
    draw ceiling is no noise of the clock-limited readings under the cap."""
    binding = {r.cap_w for r in regimes if r.regime == cap_points.POWER_LIMITED}
    alike = (lambda c: c in binding) if best_cap_w in binding else (lambda c: c not in binding)
    keep = [c for c in {r.cap_w for r in regimes} if alike(c)]
    return noise.curve_noise(caps.filter(pl.col("cap_w").is_in(keep)), metric)


def _with_noise(
    sweet: Pick,
    near: Pick,
    curve: Curve,
    points: Sequence[CapPoint],
    groups: Sequence[tuple[int, int]],
    max_tps_loss_pct: float,
    bootstrap: int,
    seed: int,
    scatter: CurveNoise,
) -> tuple[Pick, Pick]:
    """The caps tied with the sweet spot and the near-peak cap: each cap's own readings, a run
    resampled (older runs), or the curve's own scatter (a bare curve); none with
    ``bootstrap`` 0."""
    if bootstrap <= 0:
        return (
            replace(
                sweet,
                tied_caps=None,
                interval_w=None,
                noise_source=None,
                bootstrap=None,
                estimate=None,
                tps_per_w_u95_pct=None,
            ),
            replace(near, tied_caps=None, interval_w=None, noise_source=None),
        )
    keyed = [((p.cap_w,), p.tps / p.power_w) for p in points]
    own = {
        float(k[0]): r
        for k, r in noise.own_readings(curve.caps, noise.CAP_KEYS, keyed).items()
        if k[0] is not None
    }
    draws = None if len(own) >= 2 else noise.resample(curve, points, bootstrap, seed)
    best = noise.sweet_spot_noise(points, sweet.cap_w, draws, own, scatter)
    close = noise.near_peak_noise(points, groups, near.cap_w, max_tps_loss_pct, draws, own, scatter)
    return (
        replace(
            sweet,
            tied_caps=best.tied_caps,
            interval_w=best.interval_w,
            noise_source=best.noise_source,
            bootstrap=best.bootstrap,
            estimate=best.estimate,
            tps_per_w_u95_pct=best.tps_per_w_u95_pct,
        ),
        replace(
            near,
            tied_caps=close.tied_caps,
            interval_w=close.interval_w,
            noise_source=close.noise_source,
        ),
    )


Picks = tuple[Pick, Pick, Pick | None]


def _serving(
    rows: Sequence[CapRow],
    picks: Picks,
    caps: pl.DataFrame,
    default_w: float,
    tariff: float | None,
    max_ttft_ms: float | None,
    max_itl_ms: float | None,
) -> tuple[list[CapRow], Picks, serving.Served[CapLatencyTarget]]:
    """Energy per token at the recommended caps, cost against the default, the latency pick:
    the rows priced, the picks with their energy per token, and the answers."""
    usable = [r for r in rows if r.figures.status == "ok" and r.figures.tps_per_w is not None]
    by_cap = {r.cap_w: r.figures for r in usable}

    def per_token(pick: Pick | None) -> Pick | None:
        if pick is None:
            return None
        figures = by_cap.get(pick.cap_w)
        return replace(
            pick,
            j_per_token=figures.j_per_token if figures else None,
            kwh_per_mtok=figures.kwh_per_mtok if figures else None,
        )

    sweet, near, rec = (per_token(p) for p in picks)
    assert sweet is not None and near is not None
    if rec is None:  # no answer: nothing is chosen, so nothing is saved
        return list(rows), (sweet, near, None), serving.Served[CapLatencyTarget](None, None, [])
    rows = serving.priced(rows, tariff)
    usable = [r for r in rows if r.figures.status == "ok" and r.figures.tps_per_w is not None]
    by_row = {r.cap_w: r for r in usable}
    # as the TPS/W gain against the default is: only where the default was measured
    reference = by_row.get(default_w) if math.isfinite(default_w) else None
    served = serving.served(
        usable,
        by_row.get(rec.cap_w),
        reference,
        tariff=tariff,
        max_ttft_ms=max_ttft_ms,
        max_itl_ms=max_itl_ms,
        name=_serving_name,
        reading=_own_reading(caps, usable),
        target=CapLatencyTarget,
    )
    return rows, (sweet, near, rec), served


def _own_reading(caps: pl.DataFrame, usable: Sequence[CapRow]) -> Callable[[CapRow], Reading]:
    """Each usable cap's own reading, its repeats pooled (a row's own columns otherwise)."""
    keyed = [((r.cap_w,), as_float(r.figures.tps_per_w)) for r in usable]
    own = noise.own_readings(caps, noise.CAP_KEYS, keyed)
    return lambda r: own.get((r.cap_w,)) or Reading.of(r.to_json())


def _serving_name(row: CapRow) -> str:
    """A cap as the energy and latency answers name it."""
    return watts(row.cap_w)


def run_facts(curve: Curve, default_limit_w: float | None = None) -> RunFacts:
    """Header facts from run.json (None where unknown), as analysis.json's ``run``.

    A rig of different cards is named after each (``gpu_label``: ``A + B``); its envelope is the
    one swept (the intersection: the highest minimum, the lowest maximum) and its default is the
    mean of the cards' defaults (a cap's % of it is the combined cap over the combined default),
    each card's own default in ``default_limits_w``.
    """
    run = curve.run or RunRecord()
    cards = run.gpus or []
    first = cards[0] if cards else RunGpu()
    n_caps = curve.caps["n_gpus"].drop_nulls()
    n_gpus = len(cards) if cards else (int(n_caps.max()) if n_caps.len() else 1)  # type: ignore[arg-type]
    names = [str(g.name) for g in cards if g.name]
    distinct = list(dict.fromkeys(names))
    defaults = _numbers([g.default_limit_w for g in cards])
    default: RawNum = (
        (defaults[0] if len(set(defaults)) == 1 else math.fsum(defaults) / len(defaults))
        if defaults
        else first.default_limit_w
    )
    if default is None and default_limit_w is not None:
        default = default_limit_w
    mins = _numbers([g.min_limit_w for g in cards])
    maxes = _numbers([g.max_limit_w for g in cards])
    return RunFacts(
        gpu_name=" + ".join(distinct) if len(distinct) > 1 else first.name,
        gpu_label=_gpu_label(names, n_gpus),
        gpu_names=names or None,
        n_gpus=n_gpus,
        cooling=run.cooling,
        load_mode=run.load_mode,
        model=run.server.model if run.server else None,
        engine=run.server.engine if run.server else None,
        date=run.started_at,
        tool_version=run.tool.version if run.tool else None,
        default_limit_w=default,
        default_limits_w=defaults if len(set(defaults)) > 1 else None,
        min_limit_w=max(mins) if mins else first.min_limit_w,
        max_limit_w=min(maxes) if maxes else first.max_limit_w,
        slowdown_temp_c=first.slowdown_temp_c,
        status=run.status,
        simulated=run.simulation is not None,
        gpu_selection=_selection(run.gpu_selection),
    )


def _selection(selection: GpuSelection | None) -> str | None:
    """Which GPUs were swept and why, in one line (``run.json``'s ``gpu_selection``)."""
    if selection is None or selection.picked is None:
        return None
    picked = ", ".join(str(i) for i in selection.picked)
    return f"{picked} ({selection.reason})" if selection.reason else picked


def _numbers(values: Sequence[RawNum]) -> list[float]:
    """Every card's number; empty unless each card has one."""
    numbers = [float(v) for v in values if v is not None]
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


def _per_card_pct(pick: Pick | None, defaults: Sequence[float] | None) -> Pick | None:
    """A pick with each card's own % of default, on a rig of different cards."""
    if not defaults or pick is None:
        return pick
    return replace(pick, pct_of_default_by_gpu=[pick.cap_w / d * 100.0 for d in defaults if d > 0])


def _pct_of_default(cap_w: float, default_w: float) -> float:
    return cap_w / default_w * 100.0 if math.isfinite(default_w) and default_w > 0 else NAN


def _tpw_at(points: Sequence[CapPoint], cap_w: float) -> float:
    """TPS/W measured at a cap (NaN where no cap was measured there: never interpolated)."""
    for p in points:
        if abs(p.cap_w - cap_w) < 1e-6:
            return p.tps / p.power_w
    return NAN


def _pick(points: Sequence[CapPoint], p: CapPoint, default_w: float) -> Pick:
    """A measured cap as a headline pick: its figures, and against the default limit."""
    tpw = p.tps / p.power_w
    at_default = _tpw_at(points, default_w) if math.isfinite(default_w) else NAN
    gain = (tpw / at_default - 1.0) * 100.0 if math.isfinite(at_default) and at_default > 0 else NAN
    return Pick(
        cap_w=p.cap_w,
        tps_per_w=as_float(tpw, None),
        tps=as_float(p.tps, None),
        power_w=as_float(p.power_w, None),
        pct_of_default=as_float(_pct_of_default(p.cap_w, default_w), None),
        tps_per_w_at_default=as_float(at_default, None),
        tps_per_w_gain_vs_default_pct=as_float(gain, None),
    )


def _planned_step_w(run: RunRecord | None) -> float | None:
    """The step of the planned grid (run.json ``caps_planned``), None when unknown.

    An adaptive sweep measures a subset of its grid; the step of the measured caps would be two
    to four grid steps and scale the structure tolerances wrongly.
    """
    planned = run.caps_planned if run else None
    if planned is None:
        return None
    caps = [c for c in (as_float(p, None) for p in planned) if c is not None]
    step = cap_points.typical_step_w([c for c in caps if math.isfinite(c)])
    return step if math.isfinite(step) and step > 0 else None


def _sweet_spot(points: Sequence[CapPoint], default_w: float) -> Pick:
    best = pick_sweet_spot(points)
    at_boundary = None
    if len(points) > 1:
        if best.cap_w == points[0].cap_w:
            at_boundary = "low"
        elif best.cap_w == points[-1].cap_w:
            at_boundary = "high"
    return replace(_pick(points, best, default_w), at_boundary=at_boundary)


def _near_peak(
    points: Sequence[CapPoint],
    groups: Sequence[tuple[int, int]],
    max_loss_pct: float,
    default_w: float,
) -> Pick:
    tps = [p.tps for p in points]
    k = near_peak_index(tps, groups, max_loss_pct)
    judged = judged_tps(tps, groups)
    best = max(judged)
    return replace(
        _pick(points, points[k], default_w),
        tps_loss_pct=(best - judged[k]) / best * 100.0 if best > 0 else 0.0,
        max_tps_loss_pct=max_loss_pct,
    )


def _recommend(
    points: Sequence[CapPoint],
    near_cap_w: float,
    objective: Objective,
    default_w: float,
    run: RunFacts,
    n_gpus: int,
) -> Pick:
    context = SelectionContext(near_cap_w, as_float(run.max_limit_w), n_gpus)
    pick = objective.select(points, context)
    out = replace(_pick(points, pick.point, default_w), objective=objective.name)
    weighed = pick.weighed
    if weighed is None:
        return out
    return replace(
        out,
        eta=weighed.eta,
        cost=as_float(weighed.cost, None),
        max_power_w=as_float(weighed.max_power_w, None),
    )


def _plateau(r: Region) -> Plateau:
    return Plateau(
        kind=r.kind,
        start_w=r.start_w,
        end_w=r.end_w,
        power_w=r.power_w,
        tps=r.tps,
        caps_w=list(r.caps_w),
        missing_caps_w=list(r.missing_caps_w),
        escape_w=r.escape_w,
    )


# --- findings ----------------------------------------------------------------------------------
