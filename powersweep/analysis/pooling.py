"""A power curve's rows as the analysis reads them: the current row of each cap (a cap
measured again replaces its failed try), the usable ones, repeats of one cap pooled into one
reading, and the rows of the summary's per-cap table and of the analysis' points.

Reads CSV-derived data only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import polars as pl

from powersweep.analysis import serving
from powersweep.analysis.cap_points import CapPoint
from powersweep.analysis.precision import Reading
from powersweep.analysis.result_types import CapRow, PointFigures
from powersweep.analysis.standing import current_rows, pooled_rows
from powersweep.runformat import REPEAT_REASONS, CsvRow, as_float

NAN = math.nan
# A stated 95% half-width over this is one standard deviation (the columns state 95%).
Z95 = 1.96


def usable(caps: pl.DataFrame, metric: str) -> pl.DataFrame:
    """Rows that count: status ok, finite positive draw and TPS; one per cap, repeats pooled
    (:func:`pool_repeats`); a cap whose last measurement did not end ok has none
    (:func:`current_rows`)."""
    ok = current_rows(caps).filter(
        (pl.col("status") == "ok")
        & pl.col(metric).is_not_null()
        & pl.col(metric).is_finite()
        & (pl.col(metric) > 0)
        & pl.col("power_w").is_not_null()
        & pl.col("power_w").is_finite()
        & (pl.col("power_w") > 0)
    )
    return pool_repeats(ok, metric).sort("cap_w")


def pool_repeats(ok: pl.DataFrame, metric: str, by: Sequence[str] = ("cap_w",)) -> pl.DataFrame:
    """One row per point: the confirm phase's re-measurements are pooled with its reading.

    A point measured again to resolve noise (``reason`` ``confirm``) keeps every reading: TPS
    figures are weighted by each measurement's window (``window_s``, else equally), draw by its
    load samples (``n_samples``, else equally); counts, energies and windows add up; the
    precision is the readings' pooled one (:meth:`~.precision.Reading.pooled`); everything else
    is the last measurement's. ``n_measurements`` says how many were pooled. A ``reread`` (the
    run's reference read again) pools as a confirm does. Every other repeat (a retried or
    re-checked point) replaces the earlier reading: the last one before the confirm phase counts.

    Args:
        ok: The usable rows.
        metric: The TPS column the sweep optimises.
        by: The columns that name a point (a cap; the locks of a clock point).
    """
    keys = [c for c in by if c in ok.columns]
    if ok.height == 0 or not keys:
        return ok.with_columns(pl.lit(1, dtype=pl.Int64).alias("n_measurements"))
    ok = pooled_rows(ok, keys)
    tps_cols = [c for c in ("narr_tps", "code_tps", "prefill_tps", metric) if c in ok.columns]
    tps_cols = list(dict.fromkeys(tps_cols))

    def weight(col: str) -> pl.Expr:
        return pl.col(col).fill_null(1.0) if col in ok.columns else pl.lit(1.0)

    df = ok.with_columns(weight("window_s").alias("_wt"), weight("n_samples").alias("_wp"))

    def weighted(col: str, weight: str) -> pl.Expr:
        valid = pl.col(col).is_not_null() & pl.col(col).is_finite()
        num = pl.when(valid).then(pl.col(col) * pl.col(weight)).otherwise(0.0).sum()
        den = pl.when(valid).then(pl.col(weight)).otherwise(0.0).sum()
        return pl.when(den > 0).then(num / den).otherwise(None).alias(col)

    pooled_cols = {
        *tps_cols,
        "power_w",
        "n_samples",
        "n_requests",
        "energy_j",
        "energy_sampled_j",
        "window_s",
        *(c for c in serving.pooled_names() if c != "kwh_per_mtok"),
    }
    aggs = [weighted(c, "_wt") for c in tps_cols]
    aggs += [
        weighted("power_w", "_wp"),
        *(
            # A sum over a missing reading is unknown, not smaller.
            pl.when(pl.col(c).null_count() == 0).then(pl.col(c).sum()).otherwise(None).alias(c)
            # the seconds measured add up too: the energies above are over all of them
            for c in ("n_samples", "n_requests", "energy_j", "energy_sampled_j", "window_s")
            if c in ok.columns
        ),
        pl.len().alias("n_measurements"),
        *serving.pooled_columns(ok.columns),
    ]
    aggs += [pl.col(c).last() for c in ok.columns if c not in pooled_cols and c not in keys]
    pooled = df.group_by(keys, maintain_order=True).agg(aggs)
    tpw = pl.col(metric) / pl.col("power_w")
    pooled = serving.with_kwh(pooled.with_columns(tpw.alias("tps_per_w")))
    return _pooled_precision(ok, keys, pooled).select([*ok.columns, "n_measurements"])


# The precision columns a pooled point states anew (its repeats' own, pooled); a run written
# before readings carried the run's drift has no RUN_DRIFT column.
POOLED_PRECISION = ("tps_u95_pct", "tps_per_w_stat_u95_pct", "drift_bias_pct", "tps_per_w_u95_pct")
RUN_DRIFT = "run_drift_bias_pct"


def _pooled_precision(ok: pl.DataFrame, keys: Sequence[str], pooled: pl.DataFrame) -> pl.DataFrame:
    """A point read more than once states its readings' pooled precision
    (:meth:`~powersweep.analysis.precision.Reading.pooled`: narrower where they agree, wider
    where they disagree beyond their widths), not its last reading's."""
    if not set(POOLED_PRECISION) <= set(ok.columns) or pooled.height == 0:
        return pooled
    multi = pooled.filter(pl.col("n_measurements") > 1)
    if multi.height == 0:
        return pooled
    rows: dict[tuple[object, ...], list[Reading]] = {}
    for row in ok.iter_rows(named=True):
        rows.setdefault(tuple(row[k] for k in keys), []).append(Reading.of(row))
    updates: list[CsvRow] = []
    for row in multi.iter_rows(named=True):
        key = tuple(row[k] for k in keys)
        r = Reading.pooled(rows.get(key, []), float(row["tps_per_w"]))
        updates.append(
            {
                **{k: row[k] for k in keys},
                "tps_u95_pct": 100.0 * r.tps_u95_rel,
                "tps_per_w_stat_u95_pct": 100.0 * r.stat_u95_rel,
                "drift_bias_pct": 100.0 * r.bias_rel,
                "tps_per_w_u95_pct": 100.0 * r.u95_rel,
                **({RUN_DRIFT: 100.0 * r.run_drift_rel} if RUN_DRIFT in ok.columns else {}),
            }
        )
    new = pl.DataFrame(updates)
    new = new.with_columns(
        [pl.col(c).cast(pl.Float64).fill_nan(None) for c in new.columns if c not in keys]
    )
    new = new.with_columns([pl.col(k).cast(pooled.schema[k]) for k in keys])
    return pooled.update(new, on=list(keys), include_nulls=True)


def table_rows(caps: pl.DataFrame, ok: pl.DataFrame) -> pl.DataFrame:
    """The per-cap table: each usable cap once (pooled), and the rows of the caps that did not
    end ok. An ok reading that a later measurement of its cap replaced (a recheck found the cap
    suspect, a retry failed) is left out: it does not stand, so no reader may take it for one."""
    done = set(ok["cap_w"].to_list())
    rest = caps.filter(~pl.col("cap_w").is_in(list(done)))
    if rest.height and "status" in rest.columns:
        latest = (
            ~pl.col("reason").fill_null("").is_in(list(REPEAT_REASONS))
            if "reason" in rest.columns
            else pl.lit(True)
        )
        rest = (
            rest.with_row_index("_i")
            .filter(
                (pl.col("status").fill_null("ok") != "ok")
                | (pl.col("_i") >= pl.col("_i").filter(latest).max().over("cap_w"))
            )
            .drop("_i")
        )
    rest = rest.with_columns(pl.lit(1, dtype=pl.Int64).alias("n_measurements"))
    return pl.concat([ok, rest], how="diagonal_relaxed").sort("cap_w", maintain_order=True)


def curve_points(ok: pl.DataFrame, metric: str) -> list[CapPoint]:
    def f(row: CsvRow, key: str) -> float:
        return as_float(row.get(key))

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
                tps_sigma_rel=f(row, "tps_u95_pct") / 100.0 / Z95,
            )
        )
    return out


def cap_rows(caps: pl.DataFrame, metric: str) -> list[CapRow]:
    """The table's rows, one per row of ``caps`` (its TPS the metric's; null where a figure is
    missing or not finite)."""
    rows: list[CapRow] = []
    for row in caps.iter_rows(named=True):
        tps, power = row.get(metric), row.get("power_w")
        tpw = (
            tps / power
            if tps is not None and power is not None and math.isfinite(tps) and power > 0
            else None
        )
        num = functools.partial(_cell, row)
        n_measurements = row.get("n_measurements")
        figures = PointFigures(
            tps=as_float(tps, None),
            code_tps=num("code_tps"),
            power_w=as_float(power, None),
            tps_per_w=as_float(tpw, None),
            sm_clock_mhz=num("sm_clock_mhz"),
            mem_clock_mhz=num("mem_clock_mhz"),
            temp_max_c=num("temp_max_c"),
            status=row.get("status"),
            error=row.get("error"),
            util_pct=num("util_pct"),
            pstate=num("pstate"),
            pwr_throttle_pct=num("pwr_throttle_pct"),
            thermal_throttle_pct=num("thermal_throttle_pct"),
            energy_j=num("energy_j"),
            energy_sampled_j=num("energy_sampled_j"),
            n_measurements=None if n_measurements is None else int(n_measurements),
            **serving.row_fields(row),
            **stated_u95(row, caps.columns),
        )
        rows.append(CapRow(cap_w=float(row["cap_w"]), figures=figures, n_gpus=num("n_gpus")))
    return rows


def _cell(row: CsvRow, key: str) -> float | None:
    """A row's number under ``key`` (None: missing, or no finite number)."""
    return as_float(row.get(key), None)


def served_figures(row: CsvRow, columns: Sequence[str]) -> PointFigures:
    """A row's per-token figures (:data:`~.serving.PER_TOKEN_COLUMNS`) and its stated
    half-widths (:func:`stated_u95`), the rest of its figures left out."""
    return PointFigures(
        status=None,
        error=None,
        n_measurements=None,
        **serving.row_fields(row),
        **stated_u95(row, columns),
    )


# The stated 95% half-widths a table row carries (pooled where the point was read again), for
# the charts' error bars: written only where the run states them, so older analyses read back.
STATED_U95 = ("tps_u95_pct", "tps_per_w_u95_pct", "power_u95_pct")


def stated_u95(row: CsvRow, columns: Sequence[str]) -> dict[str, float | None]:
    """The row's stated half-widths (:data:`STATED_U95`) present in ``columns``, a non-finite
    or missing one as None."""
    out: dict[str, float | None] = {}
    for c in STATED_U95:
        if c in columns:
            out[c] = as_float(row.get(c), None)
    return out
