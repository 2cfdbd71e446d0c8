"""Readings no card can show, set aside with why: a draw outside what a card draws or above its
cap beyond the sensor's tolerance (``implausible``), and a reading its own curve's physics forbids
(``outlier``: :mod:`.curve_noise`). Both stay in the table and leave every pick."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from powersweep.analysis import curve_noise
from powersweep.analysis.standing import current_rows, pooled_rows
from powersweep.runformat import CLOCK_LOCK_COLUMNS

# Plausible draw of one card, W: anything outside is a broken reading or a unit mix-up.
MIN_PLAUSIBLE_W = 1.0
MAX_PLAUSIBLE_W = 5000.0
IMPLAUSIBLE = "implausible"
OUTLIER = "outlier"
# A card holds its cap on its own sensor; the reading it reports may differ from that by the
# sensor's stated accuracy (NVML: within +-5% of the draw) plus a step's overshoot of a watt or
# two. A point's draw further above its cap is no reading of a card that holds its limit.
OVER_CAP_TOLERANCE_FRAC = 0.05
OVER_CAP_TOLERANCE_W = 2.0
METRICS: tuple[str, ...] = ("narr_tps", "prefill_tps")
_Z95 = 1.96


def mark_implausible(caps: pl.DataFrame) -> pl.DataFrame:
    """Rows whose draw no card can show get status ``implausible``, with why in ``error``:
    under 1 W or over 5 kW per card, or above the cap beyond the sensor's tolerance."""
    per_card = pl.col("power_w") / pl.col("n_gpus").clip(lower_bound=1.0)
    over = per_card > pl.col("cap_w") * (1.0 + OVER_CAP_TOLERANCE_FRAC) + OVER_CAP_TOLERANCE_W
    reasons = [
        (
            (per_card < MIN_PLAUSIBLE_W) | (per_card > MAX_PLAUSIBLE_W),
            pl.format(
                "draw {} W per card is implausible (under 1 W or over 5 kW)", per_card.round(3)
            ),
        ),
        (
            over.fill_null(False),
            pl.format(
                "draw {} W per card is over its {} W cap beyond the sensor's 5% tolerance "
                "(a card holds its limit)",
                per_card.round(1),
                pl.col("cap_w"),
            ),
        ),
    ]
    ok = (pl.col("status") == "ok") & pl.col("power_w").is_finite() & (pl.col("power_w") > 0)
    status, error = pl.col("status"), pl.col("error")
    for bad, why in reversed(reasons):
        status = pl.when(ok & bad).then(pl.lit(IMPLAUSIBLE)).otherwise(status)
        error = pl.when(ok & bad).then(why).otherwise(error)
    return caps.with_columns(status.alias("status"), error.alias("error"))


def mark_outliers(caps: pl.DataFrame, group: str | None = None) -> pl.DataFrame:
    """Rows whose reading breaks its curve's physics by far get status ``outlier``, with why.

    Along each line of the curve (the caps; a clock curve's SM locks at each memory lock and
    its memory locks at each SM lock) TPS and draw must not peak or dip
    (:func:`~.curve_noise.outliers`), judged against the larger of each point's own precision
    (``tps_u95_pct``, ``power_u95_pct``) and the curve's robust fall scatter. An undervolt search
    (clock offsets at one lock) is not such a curve and is left as it is. ``group`` names the
    column that tells runs apart when many are marked at once (the fleet's one scan).
    """
    if caps.height < 3:
        return caps
    if "sm_offset_mhz" in caps.columns and caps["sm_offset_mhz"].drop_nulls().len():
        return caps
    indexed = caps.with_row_index("_index")
    parts = [indexed] if group is None else indexed.partition_by(group, maintain_order=True)
    reasons: dict[int, str] = {}
    for part in parts:
        reasons.update(_part_outliers(part))
    if not reasons:
        return caps
    why = pl.Series("_why", [reasons.get(i) for i in range(caps.height)], dtype=pl.String)
    hit = why.is_not_null()
    return caps.with_columns(
        pl.when(hit).then(pl.lit(OUTLIER)).otherwise(pl.col("status")).alias("status"),
        pl.when(hit).then(why).otherwise(pl.col("error")).alias("error"),
    )


def pick_metric(caps: pl.DataFrame) -> str | None:
    """The TPS a curve is judged by: decode TPS, or prefill TPS for a prefill-only curve."""
    for metric in METRICS:
        if metric not in caps.columns:
            continue
        usable = caps.filter(
            pl.col(metric).is_not_null()
            & pl.col(metric).is_finite()
            & (pl.col(metric) > 0)
            & pl.col("power_w").is_not_null()
            & pl.col("power_w").is_finite()
            & (pl.col("power_w") > 0)
        )
        if usable.height:
            return metric
    return None


def standing_ok(caps: pl.DataFrame) -> pl.DataFrame:
    """The rows that stand for their point (:mod:`.standing`) and read ok with a draw."""
    keys = [c for c in ("cap_w", *CLOCK_LOCK_COLUMNS) if c in caps.columns]
    ok = current_rows(caps, keys).filter(
        (pl.col("status") == "ok") & pl.col("power_w").is_finite() & (pl.col("power_w") > 0)
    )
    return pooled_rows(ok, keys)


def _part_outliers(caps: pl.DataFrame) -> dict[int, str]:
    """Row index (in the whole frame: ``_index``) -> why, for one run's rows."""
    ok = standing_ok(caps)
    if ok.height < 3:
        return {}
    out: dict[int, str] = {}
    metric = pick_metric(ok)
    if metric is None:
        return {}
    for axis, key, line in curve_lines(ok):
        for series, why in _line_outliers(line, axis, metric):
            for index in line.filter(pl.col(axis) == series)["_index"].to_list():
                out.setdefault(int(index), why + key)
    return out


def curve_lines(ok: pl.DataFrame) -> list[tuple[str, str, pl.DataFrame]]:
    """``(axis column, where the line lies in words, its rows)`` of every line of a curve's
    standing rows: its caps, or a clock curve's SM locks at each memory lock (and cap) and its
    memory locks at each SM lock."""
    locks = [c for c in CLOCK_LOCK_COLUMNS if c in ok.columns and ok[c].drop_nulls().len()]
    if not locks:
        return [("cap_w", "", ok)]
    out = []
    for axis in locks:
        others = [c for c in (*CLOCK_LOCK_COLUMNS, "cap_w") if c != axis and c in ok.columns]
        on_axis = ok.filter(pl.col(axis).is_not_null())
        for key, line in on_axis.group_by(others, maintain_order=True):
            where = ", ".join(
                f"{_NAMES[c]} {v:g}" for c, v in zip(others, key, strict=True) if v is not None
            )
            out.append((axis, f" (along the {_NAMES[axis]} at {where})" if where else "", line))
    return out


_NAMES = {"sm_lock_mhz": "SM lock", "mem_lock_mhz": "memory lock", "cap_w": "cap"}
_UNITS = {"cap_w": "W", "sm_lock_mhz": "MHz", "mem_lock_mhz": "MHz"}


def _line_outliers(line: pl.DataFrame, axis: str, metric: str) -> list[tuple[float, str]]:
    """The settings of one line whose TPS (the curve's metric) or draw is an outlier, with why."""
    by_x = line.group_by(axis).agg(pl.all()).sort(axis)
    if by_x.height < 3:
        return []
    x = by_x[axis].to_list()
    found: dict[float, str] = {}
    series = [(metric, "tps_u95_pct"), ("power_w", "power_u95_pct")]
    for name, own_col in series:
        values = _means(by_x, name)
        if sum(v > 0 for v in values) < 3:
            continue
        robust = curve_noise.robust_fall_sigma([values])
        own = _means(by_x, own_col) if own_col in by_x.columns else [math.nan] * len(x)
        floor = curve_noise.OUTLIER_FLOOR_SIGMA_REL
        sigma = [max([floor, *(s for s in (robust, u / 100.0 / _Z95) if s == s)]) for u in own]
        # the cap bounds how fast TPS may rise along power caps; a lock raises TPS for few watts
        caps = x if name != "power_w" and axis == "cap_w" else None
        for i in curve_noise.outliers(x, values, sigma, caps):
            found.setdefault(x[i], _why(name, x, values, i, axis))
    return list(found.items())


def _means(by_x: pl.DataFrame, column: str) -> list[float]:
    """The mean of each setting's finite readings of ``column`` (NaN where none)."""
    out = []
    for vals in by_x[column].to_list():
        finite = [float(v) for v in vals if v is not None and math.isfinite(v)]
        out.append(float(np.mean(finite)) if finite else math.nan)
    return out


def _why(name: str, x: Sequence[float], values: Sequence[float], i: int, axis: str) -> str:
    """``narr_tps 185 at 310 W stands above both neighbours (136 at 300 W, 132 at 320 W)``."""
    unit = _UNITS[axis]
    label = "draw (W)" if name == "power_w" else name
    near = [k for k in (i - 1, i + 1) if 0 <= k < len(x)] if 0 < i < len(x) - 1 else []
    if not near:
        near = [1, 2] if i == 0 else [len(x) - 2, len(x) - 3]
    side = "above" if values[i] > max(values[k] for k in near) else "below"
    if min(values[k] for k in near) < values[i] < max(values[k] for k in near):
        side = "apart from"
    others = ", ".join(f"{values[k]:.4g} at {x[k]:g} {unit}" for k in near)
    return (
        f"{label} {values[i]:.4g} at {x[i]:g} {unit} stands {side} its neighbours ({others}) "
        "beyond the curve's noise, where physics allows no peak or dip: a broken or disturbed "
        "reading, left out of every pick"
    )
