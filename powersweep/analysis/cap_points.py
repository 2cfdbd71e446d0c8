"""The measured caps as the structure analysis sees them, the curve's noise, and what holds a cap.

:mod:`.structure` finds plateaus, ceilings and regimes from these; the adaptive planner and the
findings ask the same per-cap questions (is heat holding it, was the card kept busy).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

NAN = math.nan

BOOST_PLATEAU = "boost_plateau"
DRAW_CEILING = "draw_ceiling"
POWER_LIMITED = "power_limited"
THERMAL_LIMITED = "thermal_limited"
UNDER_LOADED = "under_loaded"

# Below this utilization the workload, not the cap, decides the draw.
UNDER_LOADED_UTIL_PCT = 50.0
# Share of load samples with the thermal clock-event bit that makes a cap thermal-limited.
THERMAL_THROTTLE_PCT = 20.0
# Within this many degrees of the slowdown threshold (with draw under the cap): thermal-limited.
THERMAL_MARGIN_C = 3.0
# With the thermal clock-event bit read and clear, only this close to slowdown still counts.
THERMAL_MARGIN_BIT_CLEAR_C = 1.0
# A cap is power-limited when this share of its load samples had the power-cap bit set...
POWER_BIT_PCT = 50.0
# ... or when it draws within this margin of its cap: how tightly the card holds a binding cap,
# at least this many watts per GPU (real cards hold a binding cap to a fraction of a watt).
MIN_BINDING_MARGIN_W = 1.0
BINDING_MARGIN_SIGMAS = 4.0
# A draw ceiling's draw rises much less than the cap: per step, and over the whole ceiling.
CEILING_STEP_RISE_FRAC = 0.35
CEILING_SLOPE = 0.25
# A draw ceiling sits clearly under the cap at the top of the sweep: by this share of the top cap
# and by this many usual cap steps.
CEILING_HEADROOM_FRAC = 0.03
CEILING_HEADROOM_STEPS = 1.5
# A region's first cap is still power-limited when the region's level lies this many draw-noise
# sigmas above what that cap allows.
LEVEL_ABOVE_CAP_SIGMAS = 1.0
MIN_REGION_CAPS = 3
# Two caps are adjacent when their gap is at most this many usual steps; one missing (or failed)
# cap in between is tolerated, a wider hole splits.
ADJACENT_STEPS = 1.5
ONE_MISSING_STEPS = 2.5


@dataclass(frozen=True)
class CapPoint:
    """One measured (status ok, finite) cap as the structure analysis sees it.

    Attributes:
        cap_w: Cap per GPU.
        cap_total_w: Cap over all GPUs (``cap_w * n_gpus``), comparable with ``power_w``.
        power_w: Median combined draw.
        tps: The metric's TPS.
        sm_clock_mhz: Median SM clock (NaN if unknown).
        pstate: Most common P-state (NaN if unknown).
        util_pct: Median utilization (NaN if unknown).
        temp_max_c: Hottest reading (NaN if unknown).
        thermal_throttle_pct: Share of samples thermally throttled (NaN if unknown).
        pwr_throttle_pct: Share of samples power throttled (NaN if unknown).
        tps_sigma_rel: The point's own TPS noise, 1 sigma relative (NaN if unknown: a bare
            curve states none).
    """

    cap_w: float
    cap_total_w: float
    power_w: float
    tps: float
    sm_clock_mhz: float = NAN
    pstate: float = NAN
    util_pct: float = NAN
    temp_max_c: float = NAN
    thermal_throttle_pct: float = NAN
    pwr_throttle_pct: float = NAN
    tps_sigma_rel: float = NAN


@dataclass(frozen=True)
class Region:
    """A flat region found in the curve.

    Attributes:
        kind: ``boost_plateau`` or ``draw_ceiling``.
        start_w: First cap of the region (per GPU).
        end_w: Last cap of the region (per GPU).
        power_w: Median combined draw over the region.
        tps: Median TPS over the region.
        caps_w: The measured caps in the region.
        missing_caps_w: Caps inside the region that were not measured (failed or skipped).
        escape_w: The first cap above the region where the draw rises again (plateaus only).
    """

    kind: str
    start_w: float
    end_w: float
    power_w: float
    tps: float
    caps_w: tuple[float, ...]
    missing_caps_w: tuple[float, ...]
    escape_w: float | None


@dataclass(frozen=True)
class Noise:
    """Noise of the curve between caps, estimated from second differences (robust to kinks).

    Attributes:
        power_w: Standard deviation of a cap's draw, W.
        tps_rel: Relative standard deviation of a cap's TPS.
    """

    power_w: float
    tps_rel: float


def typical_step_w(caps_w: Sequence[float]) -> float:
    """The usual gap between planned caps (median of the positive gaps), NaN with one cap."""
    ordered = sorted(set(caps_w))
    gaps = [b - a for a, b in itertools.pairwise(ordered) if b > a]
    return float(statistics.median(gaps)) if gaps else NAN


def estimate_noise(points: Sequence[CapPoint], step_w: float) -> Noise:
    """Estimate cap-to-cap noise of draw and TPS from second differences of adjacent caps.

    A second difference is zero on any straight stretch (power-limited or flat alike), so its
    median absolute value measures the noise and ignores the few kinks between regions.
    """
    d2_power: list[float] = []
    d2_tps: list[float] = []
    for a, b, c in zip(points, points[1:], points[2:], strict=False):
        if not (adjacent(a, b, step_w) and adjacent(b, c, step_w)):
            continue
        d2_power.append(abs(a.power_w - 2 * b.power_w + c.power_w))
        if a.tps > 0 and b.tps > 0 and c.tps > 0:
            d2_tps.append(abs(math.log(a.tps) - 2 * math.log(b.tps) + math.log(c.tps)))
    # Var(a - 2b + c) = 6 sigma^2 for independent noise; 1.4826 turns a MAD into a sigma.
    scale = 1.4826 / math.sqrt(6.0)
    power = scale * statistics.median(d2_power) if d2_power else 0.0
    tps = scale * statistics.median(d2_tps) if d2_tps else 0.0
    return Noise(power_w=max(power, 0.25), tps_rel=max(tps, 0.002))


def binding_margin_w(points: Sequence[CapPoint], step_w: float) -> float:
    """How far under a binding cap this card draws (W, whole set): within it, the cap binds.

    Learnt from the caps where the cap clearly binds (the power-cap clock-event bit set, else
    the draw following the cap): their usual headroom plus a few sigmas of its spread, at least
    ``MIN_BINDING_MARGIN_W`` per GPU. Real cards hold a binding cap to a fraction of a watt, so a
    card drawing 15 W under its cap is not held by it, whatever its TPS does.
    """
    n_gpus = points[0].cap_total_w / points[0].cap_w if points else 1.0
    floor = MIN_BINDING_MARGIN_W * n_gpus
    binding = [
        p.cap_total_w - p.power_w
        for p in points
        if math.isfinite(p.pwr_throttle_pct) and p.pwr_throttle_pct >= POWER_BIT_PCT
    ]
    if not binding:
        for a, b in itertools.pairwise(points):
            d_cap = b.cap_total_w - a.cap_total_w
            if adjacent(a, b, step_w) and d_cap > 0 and (b.power_w - a.power_w) / d_cap >= 0.9:
                binding += [a.cap_total_w - a.power_w, b.cap_total_w - b.power_w]
    # Only readings at (or just under) their cap can teach how tightly a cap is held.
    binding = [h for h in binding if h < 0.05 * (points[0].cap_total_w if points else 1.0)]
    if len(binding) < 3:
        return floor
    med = statistics.median(binding)
    mad = statistics.median(abs(h - med) for h in binding)
    return max(floor, med + BINDING_MARGIN_SIGMAS * 1.4826 * mad)


def power_limited(p: CapPoint, margin_w: float) -> bool:
    """The cap holds the card: its clock-event bit says so, or the draw sits at the cap."""
    if math.isfinite(p.pwr_throttle_pct) and p.pwr_throttle_pct >= POWER_BIT_PCT:
        return True
    return p.cap_total_w - p.power_w <= margin_w


def is_under_loaded(p: CapPoint) -> bool:
    """True when utilization shows the GPU was not kept busy."""
    return math.isfinite(p.util_pct) and p.util_pct < UNDER_LOADED_UTIL_PCT


def is_thermal(p: CapPoint, slowdown_temp_c: float) -> bool:
    """True when heat, not the cap, limits this cap."""
    # The thermal clock-event bit is the card's own word; with it read and clear, a card right
    # at its slowdown threshold still counts (the bit can lag a card riding the threshold), but
    # a draw ceiling a few degrees under it does not.
    bits = math.isfinite(p.thermal_throttle_pct)
    if bits and p.thermal_throttle_pct >= THERMAL_THROTTLE_PCT:
        return True
    if math.isfinite(slowdown_temp_c) and math.isfinite(p.temp_max_c):
        below_cap = p.power_w < p.cap_total_w * 0.98
        margin = THERMAL_MARGIN_BIT_CLEAR_C if bits else THERMAL_MARGIN_C
        return p.temp_max_c >= slowdown_temp_c - margin and below_cap
    return False


def is_eligible(p: CapPoint, slowdown_temp_c: float) -> bool:
    """A cap that can belong to a flat region: neither under-loaded nor held by heat."""
    return not (is_under_loaded(p) or is_thermal(p, slowdown_temp_c))


def adjacent(a: CapPoint, b: CapPoint, step_w: float, max_steps: float = ADJACENT_STEPS) -> bool:
    """Caps at most ``max_steps`` usual steps apart (one missing cap between them splits)."""
    return 0 < b.cap_w - a.cap_w <= max_steps * step_w + 1e-9
