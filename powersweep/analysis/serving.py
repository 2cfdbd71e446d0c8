"""What serving costs at each point: energy per token, cost per 1M tokens, latency targets.

The figures come from caps.csv's per-token columns (``j_per_token`` from the energy counter over
the seconds the metric's TPS counts, with its own 95% half-width ``j_per_token_u95_pct``; the
latency percentiles of the same requests); nothing here is fitted.

The reasoning: docs/figures.md, "powersweep.analysis.serving".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

import polars as pl
from msgspec import UNSET

from powersweep.analysis.findings import Finding, finding
from powersweep.analysis.noise import OWN as OWN_MEASUREMENTS
from powersweep.analysis.noise import TYPICAL as TYPICAL_NOISE
from powersweep.analysis.precision import TYPICAL_READING_U95_REL, Reading
from powersweep.analysis.result_types import (
    Energy,
    EnergyFigures,
    LatencyTarget,
    PointFigures,
    PointRecord,
    known,
)
from powersweep.analysis.run_record import RunRecord
from powersweep.errors import UsageError
from powersweep.runformat import CsvRow, as_float

NAN = math.nan
P = TypeVar("P", bound=PointRecord)
T = TypeVar("T", bound=LatencyTarget)
J_PER_KWH = 3.6e6
SECONDS_PER_YEAR = 365.0 * 24.0 * 3600.0
# A tariff above this per kWh is a typo in any currency (the dearest power is under 10,000 of the
# smallest-unit currencies, e.g. won or dong, per kWh).
MAX_TARIFF_PER_KWH = 1_000_000.0
# Latency targets a user can mean (an hour to first token is no target).
MAX_TARGET_MS = 3.6e6
PER_TOKEN_COLUMNS = (
    "j_per_token",
    "j_per_token_u95_pct",
    "j_per_token_sampled",
    "kwh_per_mtok",
    "energy_tokens",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "itl_p50_ms",
    "itl_p95_ms",
    "ttft_p95_hi_ms",
    "itl_p95_hi_ms",
)
# How a point measured more than once (the confirm phase) pools each column: energy per token by
# the tokens it counted (its half-width too: the pooled figure is stated no more precise than
# the readings it averages), percentiles by the window (the percentile of the pooled gaps, near
# enough for readings of one operating point; the worst reading would instead penalise exactly
# the points the confirm phase measures more often: the best ones).
_BY_TOKENS = ("j_per_token", "j_per_token_u95_pct", "j_per_token_sampled")
_BY_WINDOW = (
    "ttft_p50_ms",
    "itl_p50_ms",
    "ttft_p95_ms",
    "itl_p95_ms",
    "ttft_p95_hi_ms",
    "itl_p95_hi_ms",
)
# A target's p95 column and the upper end of its own 95% confidence interval.
_UPPER = {"ttft_p95_ms": "ttft_p95_hi_ms", "itl_p95_ms": "itl_p95_hi_ms"}


@dataclass(frozen=True)
class ServingOptions:
    """What a user asked of the serving figures.

    Attributes:
        tariff_per_kwh: Price of a kWh (None: energy only).
        max_ttft_ms: Target for the time to first token's p95 (None: none).
        max_itl_ms: Target for the inter-token latency's p95 (None: none).
    """

    tariff_per_kwh: float | None = None
    max_ttft_ms: float | None = None
    max_itl_ms: float | None = None

    @property
    def has_target(self) -> bool:
        """A latency target was given."""
        return self.max_ttft_ms is not None or self.max_itl_ms is not None

    @property
    def given(self) -> bool:
        """Anything was given."""
        return self.has_target or self.tariff_per_kwh is not None


def pooled_columns(columns: Sequence[str]) -> list[pl.Expr]:
    """Aggregations of the per-token columns for ``pooling.pool_repeats`` (``_wt``: the window).

    Args:
        columns: The columns of the frame being pooled (old runs lack the per-token ones).
    """
    have = set(columns)
    out: list[pl.Expr] = []

    def weighted(col: str, weight: pl.Expr) -> pl.Expr:
        valid = pl.col(col).is_not_null() & pl.col(col).is_finite() & weight.is_not_null()
        num = pl.when(valid).then(pl.col(col) * weight).otherwise(0.0).sum()
        den = pl.when(valid).then(weight).otherwise(0.0).sum()
        return pl.when(den > 0).then(num / den).otherwise(None).alias(col)

    if "energy_tokens" in have:
        # a hand-made caps.csv may carry J/token without the tokens: then equal weights
        tokens = pl.col("energy_tokens").fill_null(1.0)
        out += [weighted(c, tokens) for c in _BY_TOKENS if c in have]
        out.append(
            pl.when(pl.col("energy_tokens").null_count() == 0)
            .then(pl.col("energy_tokens").sum())
            .otherwise(None)
            .alias("energy_tokens")
        )
    out += [weighted(c, pl.col("_wt")) for c in _BY_WINDOW if c in have]
    return out


def with_kwh(df: pl.DataFrame) -> pl.DataFrame:
    """``kwh_per_mtok`` recomputed from a pooled ``j_per_token``."""
    if "j_per_token" not in df.columns or "kwh_per_mtok" not in df.columns:
        return df
    return df.with_columns((pl.col("j_per_token") * (1e6 / J_PER_KWH)).alias("kwh_per_mtok"))


def pooled_names() -> frozenset[str]:
    """The columns :func:`pooled_columns` aggregates (``kwh_per_mtok`` follows ``j_per_token``)."""
    return frozenset(PER_TOKEN_COLUMNS)


def row_fields(row: CsvRow) -> dict[str, float | None]:
    """The per-token fields of one table row (None where not measured)."""
    return {c: as_float(row.get(c), None) for c in PER_TOKEN_COLUMNS}


def run_tariff(run: RunRecord | None, given: float | None) -> float | None:
    """The tariff to price with: the one given, else the sweep's own (``sweep --tariff``)."""
    if given is not None:
        return given
    value = as_float(run.options.tariff_per_kwh if run and run.options else None, None)
    return value if value is not None and 0 <= value <= MAX_TARIFF_PER_KWH else None


def check_options(
    tariff: float | None, max_ttft_ms: float | None, max_itl_ms: float | None
) -> None:
    """Refuse a tariff or a latency target no user means, with the option's name.

    Raises:
        UsageError: A value is not finite or out of range.
    """
    if tariff is not None and not (math.isfinite(tariff) and 0 <= tariff <= MAX_TARIFF_PER_KWH):
        raise UsageError(
            f"--tariff must be a price per kWh from 0 to {MAX_TARIFF_PER_KWH:g}, not {tariff:g}"
        )
    for name, value in (("--max-ttft-ms", max_ttft_ms), ("--max-itl-ms", max_itl_ms)):
        if value is not None and not (math.isfinite(value) and 0 < value <= MAX_TARGET_MS):
            raise UsageError(f"{name} must be a time in ms above 0, not {value:g}")


def cost_summary(
    chosen: PointFigures | None,
    reference: PointFigures | None,
    tariff: float | None,
    names: tuple[str | None, str | None] = (None, None),
) -> Energy | None:
    """Energy and cost per 1M tokens at the chosen point against a reference point.

    Args:
        chosen: The recommended point's figures.
        reference: The figures of the point it is compared with (the default limit; a clock
            run's fastest point); None when not measured.
        tariff: Price of a kWh (None: energy only).
        names: How the chosen and the reference point are named (None: not named).

    Returns:
        ``chosen`` and ``reference`` figures, what the chosen point saves per 1M tokens and per
        year of the measured load served around the clock at the chosen point's rate, or None
        when the chosen point has no energy per token.
    """
    if chosen is None or chosen.kwh_per_mtok is None:
        return None

    def figures(p: PointFigures) -> EnergyFigures:
        kwh = p.kwh_per_mtok
        return EnergyFigures(
            j_per_token=p.j_per_token,
            j_per_token_u95_pct=p.j_per_token_u95_pct,
            kwh_per_mtok=kwh,
            cost_per_mtok=kwh * tariff if kwh is not None and tariff is not None else None,
            tps=p.tps,
        )

    mine = figures(chosen)
    ref = figures(reference) if reference is not None else None
    if ref is None or ref.kwh_per_mtok is None or mine.kwh_per_mtok is None:
        return Energy(tariff, mine, None, chosen_name=names[0], reference_name=names[1])
    saved_kwh = ref.kwh_per_mtok - mine.kwh_per_mtok
    mtok_year = (mine.tps or 0.0) * SECONDS_PER_YEAR / 1e6
    return Energy(
        tariff,
        mine,
        ref,
        kwh_saved_per_mtok=saved_kwh,
        kwh_saved_per_year=saved_kwh * mtok_year,
        mtok_per_year=mtok_year,
        cost_saved_per_mtok=saved_kwh * tariff if tariff is not None else UNSET,
        cost_saved_per_year=saved_kwh * mtok_year * tariff if tariff is not None else UNSET,
        chosen_name=names[0],
        reference_name=names[1],
    )


def latency_choice(
    candidates: Sequence[P],
    *,
    max_ttft_ms: float | None,
    max_itl_ms: float | None,
    name: Callable[[P], str],
    reading: Callable[[P], Reading],
    target: type[T],
) -> T | None:
    """The most efficient point whose own measured p95 latencies meet the targets, with a
    margin where its p95 is itself too noisy to be sure.

    A p95 is a noisy figure: a point whose p95 meets a target while the upper end of its own 95%
    confidence interval (``*_p95_hi_ms``) does not meets it only within noise. The pick is then
    the most efficient point that meets the targets with that margin, and the answer names the
    more efficient point it passed over; when no point has the margin the best point stays the
    pick and the answer says it meets the target only within noise.

    Args:
        candidates: Usable points, with ``tps_per_w``, ``ttft_p95_ms`` and ``itl_p95_ms`` (and
            their ``*_hi_ms`` and precision figures, where measured).
        max_ttft_ms: Target for the time to first token's p95 (None: none).
        max_itl_ms: Target for the inter-token latency's p95 (None: none).
        name: How a point is named in the answer (``280 W``, ``SM 1410 MHz``).
        reading: A point's TPS/W with its own precision (its repeats pooled).
        target: The axis's latency target record (its point record's).

    Returns:
        None without a target. Else ``met`` (bool), ``point`` (the pick, or the closest point
        when none meets the targets), ``margin`` (its p95s' upper bounds meet the targets too),
        ``within_noise`` (the more efficient point that meets them only within its p95's noise,
        by name; None), ``unsure`` (why the pick's p95s are not sure, when ``margin`` is false),
        ``tied`` (the points that meet them with the pick's margin and whose TPS/W is within
        their own noise of the pick's), ``noise_source``, ``misses``, the targets and the
        point's ``name``.
    """
    given = {"ttft_p95_ms": max_ttft_ms, "itl_p95_ms": max_itl_ms}
    targets = {k: v for k, v in given.items() if v is not None}
    if not targets:
        return None

    def over(p: P) -> float:
        """The worst ratio of a point's p95 to its target (inf: not measured)."""
        ratios = []
        for key, limit in targets.items():
            v = _figure(p.figures, key)
            ratios.append(math.inf if v is None else v / limit)
        return max(ratios)

    usable = [p for p in candidates if p.figures.tps_per_w is not None]
    meeting = [p for p in usable if over(p) <= 1.0]
    if not meeting:
        measured = [p for p in usable if math.isfinite(over(p))]
        closest = min(measured, key=over) if measured else None
        misses = [] if closest is None else _misses(closest.figures, targets)
        return target(
            max_ttft_ms=max_ttft_ms,
            max_itl_ms=max_itl_ms,
            met=False,
            point=closest,
            tied=[],
            misses=misses,
            name=UNSET if closest is None else name(closest),
        )
    best = max(meeting, key=_tps_per_w)
    sure = [p for p in meeting if not _unsure(p.figures, targets)]
    pick = max(sure, key=_tps_per_w) if sure else best
    margin = not _unsure(pick.figures, targets)
    same = sure if margin else meeting
    own = reading(pick)
    tied = [name(p) for p in same if p is pick or _tied(own, reading(p))]
    return target(
        max_ttft_ms=max_ttft_ms,
        max_itl_ms=max_itl_ms,
        met=True,
        point=pick,
        margin=margin,
        within_noise=name(best) if best is not pick else None,
        within_noise_point=best if best is not pick else None,
        unsure=_unsure((best if best is not pick else pick).figures, targets),
        tied=tied,
        noise_source=OWN_MEASUREMENTS if own.known else TYPICAL_NOISE,
        misses=[],
        name=name(pick),
    )


def _figure(figures: PointFigures, key: str) -> float | None:
    """A latency figure by its column's name (``ttft_p95_ms``, ``itl_p95_hi_ms``...)."""
    return known(getattr(figures, key))


def _tps_per_w(p: PointRecord) -> float:
    return as_float(p.figures.tps_per_w)


def _misses(figures: PointFigures, targets: Mapping[str, float]) -> list[str]:
    """What the closest point misses each target by, in words."""
    out = []
    for key, limit in targets.items():
        value = _figure(figures, key)
        if value is not None and value > limit:
            out.append(f"{key.replace('_ms', '')} {value:.4g} ms > {limit:g} ms")
    return out


def _unsure(figures: PointFigures, targets: Mapping[str, float]) -> list[str]:
    """Why a point's p95s meet the targets only within their own noise (empty: with margin)."""
    out = []
    for key, limit in targets.items():
        what = "TTFT" if key.startswith("ttft") else "inter-token"
        high = _figure(figures, _UPPER[key])
        if high is None:
            out.append(f"its {what} p95 has too few samples to be bounded")
        elif high > limit:
            out.append(f"its {what} p95 may be up to {high:.4g} ms (95% bound) > {limit:g} ms")
    return out


def _tied(a: Reading, b: Reading) -> bool:
    """Two points' TPS/W within their own noise (a typical reading's where one has none)."""
    if a.known and b.known:
        return a.tied_with(b)
    gap = abs(a.tps_per_w - b.tps_per_w) / max(a.tps_per_w, b.tps_per_w)
    return gap <= math.sqrt(2.0) * TYPICAL_READING_U95_REL


def priced(rows: Sequence[P], tariff: float | None) -> list[P]:
    """The rows with their cost per 1M tokens at ``tariff`` (unchanged without one)."""
    if tariff is None:
        return list(rows)
    out = []
    for row in rows:
        kwh = row.figures.kwh_per_mtok
        cost = kwh * tariff if kwh is not None else None
        out.append(row.with_figures(replace(row.figures, cost_per_mtok=cost)))
    return out


@dataclass(frozen=True)
class Served(Generic[T]):
    """What serving costs at the chosen point (:func:`cost_summary`), the latency target's pick
    (:func:`latency_choice`) and its finding."""

    energy: Energy | None
    latency_target: T | None
    findings: list[Finding]


def served(
    candidates: Sequence[P],
    chosen: P | None,
    reference: P | None,
    *,
    tariff: float | None,
    max_ttft_ms: float | None,
    max_itl_ms: float | None,
    name: Callable[[P], str],
    reading: Callable[[P], Reading],
    target: type[T],
) -> Served[T]:
    """The energy and latency answers of an analysis whose rows are already :func:`priced`."""
    names = (name(chosen) if chosen else None, name(reference) if reference else None)
    energy = cost_summary(
        chosen.figures if chosen else None,
        reference.figures if reference else None,
        tariff,
        names,
    )
    choice = latency_choice(
        candidates,
        max_ttft_ms=max_ttft_ms,
        max_itl_ms=max_itl_ms,
        name=name,
        reading=reading,
        target=target,
    )
    return Served(energy, choice, [] if choice is None else [_latency_finding(choice)])


def _latency_finding(choice: LatencyTarget) -> Finding:
    """The latency target's answer as a finding (the summary's findings list shows it)."""
    goals = " and ".join(
        f"{what} p95 ≤ {limit:g} ms"
        for what, limit in (("TTFT", choice.max_ttft_ms), ("inter-token", choice.max_itl_ms))
        if limit is not None
    )
    if choice.met and choice.point is not None:
        message = (
            f"most efficient point with {goals}: {known(choice.name)} "
            f"({as_float(choice.point.figures.tps_per_w):.4f} TPS/W)"
        )
        unsure = "; ".join(known(choice.unsure) or [])
        margin = known(choice.margin) is not False
        if known(choice.within_noise):
            message += (
                f", with a margin: {known(choice.within_noise)} is more efficient but meets the "
                f"target only within its own noise ({unsure})"
            )
        elif not margin:
            message += f", but only within its own noise ({unsure}): no point has a margin"
        return finding(
            "info" if margin else "warning",
            "latency_target",
            message,
            "powersweep apply RUN --objective slo sets it"
            + ("" if margin else "; longer windows sharpen a p95"),
        )
    closest = known(choice.name)
    return finding(
        "warning",
        "latency_target_unmet",
        f"no measured point meets {goals}"
        + (f"; the closest is {closest} ({'; '.join(choice.misses or [])})" if closest else ""),
        "loosen the target, lower the concurrency, or measure higher caps or clocks",
    )


def serving_load_findings(caps: pl.DataFrame, label: Callable[[CsvRow], str]) -> list[Finding]:
    """``serving_answer`` for a run of the serving load (``--load-mode serving``): its answer
    is TPS/W of the tokens streamed in the windows, while at a fixed arrival rate what a
    setting changes is each request's energy and latency; the points' ``j_per_request`` and
    ``saturated`` named, so the answer is read as what it is (issue 49: the operating map that
    picks by them is a later phase).

    Args:
        caps: caps.csv (a run of another load has no ``j_per_request`` column: nothing).
        label: Names a row's point (``290 W``, ``SM 1410 MHz``).
    """
    if "j_per_request" not in caps.columns:
        return []
    ok = [r for r in caps.iter_rows(named=True) if r.get("status") == "ok"]
    if not ok:
        return []
    # a point read more than once: its last reading (the one its table row ends on)
    by_point = {
        label(r): as_float(r.get("j_per_request"))
        for r in ok
        if math.isfinite(as_float(r.get("j_per_request")))
    }
    costs = [f"{name} {j:.0f} J" for name, j in by_point.items()]
    saturated = [label(r) for r in ok if as_float(r.get("saturated"), 0.0) > 0]
    text = (
        "a serving run: the answer is the TPS/W of the tokens streamed in its windows; at a "
        "fixed arrival rate what a setting changes is each request's energy and latency "
        f"(J/request: {'; '.join(costs) or 'none measured'}), which no pick "
        "reads yet (docs/serving.md)"
    )
    least = _least_per_request([r for r in ok if not as_float(r.get("saturated"), 0.0) > 0], label)
    if least:
        text += f"; the least per request of the points not saturated: {least}"
    if saturated:
        text += (
            f"; saturated at {', '.join(dict.fromkeys(saturated))}: their figures are the "
            "server's capacity, not the offered rate"
        )
    # no "Try:": nothing the user does turns the answer into a pick by energy per request
    return [finding("warning", "serving_answer", text)]


def _least_per_request(rows: Sequence[CsvRow], label: Callable[[CsvRow], str]) -> str:
    """The point with the least J/request among ``rows`` (each point's last reading), its
    stated precision and the points within noise of it (their difference within the two
    half-widths in quadrature); "" where none states one."""
    readings = {
        label(r): (as_float(r.get("j_per_request")), as_float(r.get("j_per_request_u95_pct")))
        for r in rows
        if math.isfinite(as_float(r.get("j_per_request")))
    }
    if not readings:
        return ""
    best = min(readings, key=lambda n: readings[n][0])
    j0, u0 = readings[best]

    def half(j: float, u_pct: float) -> float:
        return j * u_pct / 100.0 if math.isfinite(u_pct) else math.inf

    tied = [
        n
        for n, (j, u) in readings.items()
        if n != best and abs(j - j0) <= math.hypot(half(j0, u0), half(j, u))
    ]
    stated = f" ±{u0:.1f}%" if math.isfinite(u0) else ""
    return f"{best} ({j0:.0f} J{stated}" + (
        f"; within noise of it: {', '.join(tied)})" if tied else ")"
    )
