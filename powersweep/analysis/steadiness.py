"""Whether each point was measured on a steady card: its energy counter and its sampled draw
agree, and its temperature had stopped drifting (issue 24).

Reads caps.csv rows only (``energy_j``, ``energy_sampled_j``, ``window_s``,
``temp_drift_c_per_min``); older runs without a column give no finding on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from powersweep.analysis.findings import Finding, finding

# At steady load the instant draw moves little within the sampler's half-second ticks, so the
# trapezoid over a window's ticks carries only the readings' own noise (a fraction of a
# percent over tens of readings) and the counter's quantisation (below). The counter is the
# driver's truth over a window; a gap beyond 3% means one of the two is wrong: a drifting
# counter, or a draw that moves faster than the ticks see (spiky load, or a card whose instant
# reading samples only part of each 100 ms), where the draw median used for TPS/W is off too.
ENERGY_MISMATCH_FRAC = 0.03
# The slowest update period of an energy counter (NVIDIA: 10-100 ms by card and driver). Each end
# of a window's counter delta lags its tick by up to one period, so a window of W seconds may
# differ by this over W without anything being wrong: allowed on top of the 3%.
COUNTER_PERIOD_MAX_S = 0.1
# A card whose temperature moves faster than this during the measured window was still heating
# (or cooling): under a cap a cooler card runs about 1% faster per 5 °C, and at 6 °C/min a card
# with a thermal time constant up to 100 s still has up to 10 °C to go (a 2% bias). It is twice
# the bound the sweep waits for (3 °C/min) before it measures: a card let through at that bound
# only slows its drift during the window, and a fit of whole-degree readings over a short window
# carries about 1 °C/min of noise, which must not read as heating.
DRIFT_C_PER_MIN = 6.0


def _number(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def energy_gap(row: Mapping[str, Any]) -> float:
    """``(counter - sampled) / sampled`` of one row; NaN when either is missing."""
    counter, sampled = _number(row.get("energy_j")), _number(row.get("energy_sampled_j"))
    if not (math.isfinite(counter) and math.isfinite(sampled) and sampled > 0):
        return math.nan
    return (counter - sampled) / sampled


def energy_tolerance(row: Mapping[str, Any]) -> float:
    """The gap one row's figures may show: :data:`ENERGY_MISMATCH_FRAC`, or the sampled draw's
    own 95% half-width (``power_u95_pct``) where that is wider (the trapezoid over the ticks is
    the sampled mean draw times the window, known no better than that mean, which a bursty load
    such as prefill widens), plus what the counter's update period can explain over the row's
    window."""
    window = _number(row.get("window_s"))
    allowance = COUNTER_PERIOD_MAX_S / window if math.isfinite(window) and window > 0 else 0.0
    # the sampled mean's own precision: the drift's bias (what the draw will be once steady) is
    # no gap between two figures of the same seconds
    stated = _number(row.get("power_u95_pct")) / 100.0
    bias = _number(row.get("power_drift_bias_pct")) / 100.0
    sampled = math.sqrt(max(0.0, stated**2 - bias**2)) if math.isfinite(bias) else stated
    base = max(ENERGY_MISMATCH_FRAC, sampled) if math.isfinite(sampled) else ENERGY_MISMATCH_FRAC
    return base + allowance


def energy_findings(
    rows: Iterable[dict[str, Any]], label: Callable[[dict[str, Any]], str]
) -> list[Finding]:
    """``energy_mismatch`` when the counter and the sampled integral of a point disagree.

    Args:
        rows: The ok rows of caps.csv.
        label: Names a row's point (``290 W``, ``SM 1410 MHz``).
    """
    bad = []
    for row in rows:
        gap = energy_gap(row)
        if math.isfinite(gap) and abs(gap) > energy_tolerance(row):
            bad.append(f"{label(row)} ({gap * 100:+.1f}%)")
    if not bad:
        return []
    return [
        finding(
            "warning",
            "energy_mismatch",
            f"the energy counter and the sampled draw disagree by more than "
            f"{ENERGY_MISMATCH_FRAC * 100:g}% (or the sampled draw's own precision) at "
            f"{', '.join(bad)}",
            "a counter that runs fast or slow against the draw is a sensor to distrust; a draw "
            "that moves faster than the samples (spiky load) misses in the draw median too: "
            "sample faster (--sample-interval) and compare",
        )
    ]


def thermal_findings(
    rows: Iterable[dict[str, Any]], label: Callable[[dict[str, Any]], str]
) -> list[Finding]:
    """``still_heating`` when a point's temperature still drifted during its measured window.

    Args:
        rows: The ok rows of caps.csv.
        label: Names a row's point.
    """
    heating: list[str] = []
    cooling: list[str] = []
    for row in rows:
        drift = _number(row.get("temp_drift_c_per_min"))
        if not math.isfinite(drift) or abs(drift) <= DRIFT_C_PER_MIN:
            continue
        (heating if drift > 0 else cooling).append(f"{label(row)} ({drift:+.1f} C/min)")
    parts = []
    if heating:
        parts.append(f"still heating at {', '.join(heating)}")
    if cooling:
        parts.append(f"still cooling at {', '.join(cooling)}")
    if not parts:
        return []
    return [
        finding(
            "warning",
            "still_heating",
            f"the card's temperature moved faster than {DRIFT_C_PER_MIN:g} C/min while it was "
            f"measured: {'; '.join(parts)}: its TPS/W there is biased (about 1% per 5 C still "
            "to come)",
            "give the card longer to reach its temperature (--thermal-wait-seconds) and "
            "measure those points again",
        )
    ]


def findings(
    rows: Iterable[dict[str, Any]], label: Callable[[dict[str, Any]], str]
) -> list[Finding]:
    """Both checks over the ok rows of a curve."""
    rows = list(rows)
    return energy_findings(rows, label) + thermal_findings(rows, label)
