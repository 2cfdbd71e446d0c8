"""A clock-lock curve as points: each locked point's figures, the axis it varies, its Pareto
front and knee, where the SM clock saturates, and its memory tiers.

Reads CSV-derived data only; :mod:`powersweep.analysis.clock_analysis` builds the analysis from
these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import polars as pl

from powersweep.analysis.clock_result_types import LockPoint, Tier
from powersweep.analysis.pooling import current_rows, pool_repeats, served_figures
from powersweep.analysis.result_types import PointFigures
from powersweep.analysis.run_record import RunRecord
from powersweep.runformat import as_float

# A memory tier "caps TPS" when its best TPS is this fraction below the fastest tier's best.
TIER_CAP_FRACTION = 0.05
# Along the SM axis, TPS has "stopped rising" once it is within this fraction of the top TPS.
SATURATION_FRACTION = 0.03
# The limit in force bound when the draw reached this fraction of it (or the card reported
# power throttling): below it the firmware had watts to spare at every point.
NO_BIND_FRACTION = 0.97
# Share of a point's load samples with the power-cap clock-event bit that counts as throttled (%).
THROTTLED_PCT = 20.0

AXES = ("sm-clock", "mem-clock", "grid")


@dataclass(frozen=True)
class ClockPoint:
    """One measured clock-lock point (status ok, finite TPS and draw).

    Attributes:
        sm_lock_mhz: SM lock (NaN: not locked).
        mem_lock_mhz: Memory lock (NaN: not locked).
        cap_w: Limit in force (NaN when the CSV does not say).
        tps: TPS of the metric.
        power_w: Median combined draw.
        sm_clock_mhz: Measured SM clock (NaN when unknown).
        mem_clock_mhz: Measured memory clock (NaN when unknown).
    """

    sm_lock_mhz: float
    mem_lock_mhz: float
    cap_w: float
    tps: float
    power_w: float
    sm_clock_mhz: float = math.nan
    mem_clock_mhz: float = math.nan
    served: PointFigures = field(default_factory=PointFigures)

    @property
    def tps_per_w(self) -> float:
        """TPS per watt, full precision."""
        return self.tps / self.power_w

    def record(self) -> LockPoint:
        """The point as analysis.json holds it (null where a figure is not finite); its
        per-token figures and stated half-widths are ``served``'s."""
        figures = replace(
            self.served,
            tps=as_float(self.tps, None),
            power_w=as_float(self.power_w, None),
            tps_per_w=as_float(self.tps_per_w, None),
            sm_clock_mhz=as_float(self.sm_clock_mhz, None),
            mem_clock_mhz=as_float(self.mem_clock_mhz, None),
        )
        return LockPoint(
            sm_lock_mhz=as_float(self.sm_lock_mhz, None),
            mem_lock_mhz=as_float(self.mem_lock_mhz, None),
            cap_w=as_float(self.cap_w, None),
            figures=figures,
        )


def is_clock_curve(caps: pl.DataFrame) -> bool:
    """True when the curve's rows carry clock locks (a clock sweep, or a bare clock CSV)."""
    for column in ("sm_lock_mhz", "mem_lock_mhz"):
        if column in caps.columns and caps[column].drop_nulls().len() > 0:
            return True
    return False


LOCK_KEYS = ("sm_lock_mhz", "mem_lock_mhz")


def clock_points(caps: pl.DataFrame, metric: str) -> list[ClockPoint]:
    """The usable points of a clock curve, by memory lock (descending) then SM lock.

    A point measured more than once is one point: the confirm phase's readings pooled, any other
    repeat (a retry, a recheck) replacing the earlier reading
    (:func:`~powersweep.analysis.pooling.pool_repeats`).
    """

    out = []
    usable = []
    for row in current_rows(caps, LOCK_KEYS).iter_rows(named=True):
        tps, power = as_float(row.get(metric)), as_float(row.get("power_w"))
        usable_row = math.isfinite(tps) and tps > 0 and math.isfinite(power) and power > 0
        if row.get("status", "ok") == "ok" and usable_row:
            usable.append(row)
    if not usable:
        return []
    pooled = pool_repeats(pl.DataFrame(usable, schema=caps.schema), metric, LOCK_KEYS)
    for row in pooled.iter_rows(named=True):
        tps, power = as_float(row.get(metric)), as_float(row.get("power_w"))
        out.append(
            ClockPoint(
                sm_lock_mhz=as_float(row.get("sm_lock_mhz")),
                mem_lock_mhz=as_float(row.get("mem_lock_mhz")),
                cap_w=as_float(row.get("cap_w")),
                tps=tps,
                power_w=power,
                sm_clock_mhz=as_float(row.get("sm_clock_mhz")),
                mem_clock_mhz=as_float(row.get("mem_clock_mhz")),
                served=served_figures(row, pooled.columns),
            )
        )
    return sorted(out, key=lambda p: (-_key(p.mem_lock_mhz), _key(p.sm_lock_mhz)))


def _key(v: float) -> float:
    return v if math.isfinite(v) else -1.0


def infer_axis(points: Sequence[ClockPoint], run: RunRecord | None) -> str:
    """``sm-clock``, ``mem-clock`` or ``grid``: what run.json says the sweep ended up sweeping
    (a grid that fell back to the SM axis says so), else what the data shows."""
    recorded = run.swept_axis if run else None
    if recorded in AXES:
        return str(recorded)
    sms = {p.sm_lock_mhz for p in points if math.isfinite(p.sm_lock_mhz)}
    mems = {p.mem_lock_mhz for p in points if math.isfinite(p.mem_lock_mhz)}
    if len(sms) > 1 and len(mems) > 1:
        return "grid"
    return "mem-clock" if len(mems) > 1 and len(sms) <= 1 else "sm-clock"


def pareto_front(points: Sequence[ClockPoint]) -> list[ClockPoint]:
    """Points no other point beats on both TPS (higher) and draw (lower), by draw ascending."""
    front = []
    for p in points:
        dominated = any(
            o is not p
            and o.tps >= p.tps
            and o.power_w <= p.power_w
            and (o.tps > p.tps or o.power_w < p.power_w)
            for o in points
        )
        if not dominated:
            front.append(p)
    return sorted(front, key=lambda p: p.power_w)


def pareto_knee(front: Sequence[ClockPoint]) -> ClockPoint | None:
    """The knee of the front: the point farthest above the chord from its cheapest to its
    fastest end, with TPS and draw each scaled to the front's range (None under three points)."""
    if len(front) < 3:
        return None
    lo, hi = front[0], front[-1]
    dw, dt = hi.power_w - lo.power_w, hi.tps - lo.tps
    if dw <= 0 or dt <= 0:
        return None

    def lift(p: ClockPoint) -> float:
        x, y = (p.power_w - lo.power_w) / dw, (p.tps - lo.tps) / dt
        return y - x

    best = max(front[1:-1], key=lift)
    return best if lift(best) > 0 else None


def _tiers(points: Sequence[ClockPoint]) -> dict[float, list[ClockPoint]]:
    tiers: dict[float, list[ClockPoint]] = {}
    for p in points:
        tiers.setdefault(p.mem_lock_mhz if math.isfinite(p.mem_lock_mhz) else math.nan, []).append(
            p
        )
    return tiers


def saturation(points: Sequence[ClockPoint]) -> ClockPoint | None:
    """The lowest SM lock whose TPS is within :data:`SATURATION_FRACTION` of the top TPS of
    these points, when higher SM locks exist above it (else None: TPS still rises)."""
    by_sm = sorted((p for p in points if math.isfinite(p.sm_lock_mhz)), key=lambda p: p.sm_lock_mhz)
    if len(by_sm) < 3:
        return None
    top = max(p.tps for p in by_sm)
    first = next(p for p in by_sm if p.tps >= (1.0 - SATURATION_FRACTION) * top)
    return first if first.sm_lock_mhz < by_sm[-1].sm_lock_mhz else None


def tier_summaries(points: Sequence[ClockPoint]) -> list[Tier]:
    """One entry per memory tier: its curve's peak, top TPS, where TPS stops rising, and
    whether the tier caps TPS (its top TPS well below the fastest tier's)."""
    tiers = _tiers(points)
    best_top = max((max(p.tps for p in ps) for ps in tiers.values()), default=math.nan)
    out = []
    for mem, ps in sorted(tiers.items(), key=lambda kv: -_key(kv[0])):
        top = max(ps, key=lambda p: p.tps)
        peak = max(ps, key=lambda p: p.tps_per_w)
        sat = saturation(ps)
        below = (best_top - top.tps) / best_top if best_top > 0 else 0.0
        out.append(
            Tier(
                mem_lock_mhz=as_float(mem, None),
                n_points=len(ps),
                peak=peak.record(),
                top_tps=as_float(top.tps, None),
                top_tps_sm_lock_mhz=as_float(top.sm_lock_mhz, None),
                below_fastest_tier_pct=as_float(100.0 * below, None),
                caps_tps=len(tiers) > 1 and below > TIER_CAP_FRACTION,
                tps_stops_rising_at_sm_mhz=as_float(sat.sm_lock_mhz, None) if sat else None,
                points=[p.record() for p in sorted(ps, key=lambda p: _key(p.sm_lock_mhz))],
            )
        )
    return out
