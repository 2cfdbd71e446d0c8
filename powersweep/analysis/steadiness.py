"""Whether each point was measured on a steady card: its energy counter and its sampled draw
agree, and the temperature still to come did not bias it (issues 24, 44).

Reads caps.csv rows only (``energy_j``, ``energy_sampled_j``, ``window_s``,
``temp_drift_c_per_min``, ``drift_bias_pct``, ``thermal_tau_s``, ``thermal_wait_s``); older runs
without a column give no finding on it (or the slope alone).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from powersweep.analysis.findings import Finding, finding
from powersweep.analysis.precision import DEFAULT_TAU_S
from powersweep.runformat import CsvRow, as_float

# At steady load the instant draw moves little within the sampler's half-second ticks, so the
# trapezoid over a window's ticks carries only the readings' own noise (a fraction of a
# percent over tens of readings) and the counter's quantisation (below). The counter is the
# driver's truth over a window; a gap beyond 3% means one of the two is wrong: a drifting
# counter, or a draw that moves faster than the ticks see (spiky load, or a card whose instant
# reading samples only part of each 100 ms), where the draw median used for TPS/W is off too.
ENERGY_MISMATCH_FRAC = 0.03
# Gaps that agree within this at every point (three or more) are one sensor's gain, not a
# draw the samples miss (that moves with the load from point to point).
SAME_GAIN_SPREAD = 0.01
# The slowest update period of an energy counter (NVIDIA: 10-100 ms by card and driver). Each end
# of a window's counter delta lags its tick by up to one period, so a window of W seconds may
# differ by this over W without anything being wrong: allowed on top of the 3%.
COUNTER_PERIOD_MAX_S = 0.1
# A point whose TPS/W the temperature still to come moves by more than this was measured on a
# card still heating (or cooling): its ``drift_bias_pct`` (the drift's slope times the card's
# fitted time constant, each degree priced by the curve's own slope) is carried in its stated
# precision, and beyond 1% it outweighs what a window's noise costs (0.3-0.6% at a steady
# point). The sweep's wait aims at half of it (``sweep.sampling.thermal.wait_goal_rel``), so a
# point it let through is not named, and one the bound cut short is, with the wait that
# would do (:func:`needed_wait_s`).
STILL_HEATING_BIAS_REL = 0.01
# The share of that bias the sweep's wait aims under: the wait reads the drift from the same
# trailing readings as the point's row will, but its degree is priced before the point's own
# rate is known (by its neighbours' slope), and whole-degree readings scatter a slope by about
# 0.5 °C/min: a point the wait let through reads under the finding's bound.
WAIT_SHARE_OF_FINDING = 0.6
# A point's drift can change the answer only where its TPS/W lies this close to the best's:
# twice the bias the finding names (the point's and the best's, of opposite signs) and a 10 W
# step's worth of TPS/W near a sweet spot (about 1%). A point further under the best keeps its
# bias inside its stated precision, where it changes no pick: the sweep does not wait for it,
# and the finding does not name it.
CONTENDS_MARGIN_REL = 3.0 * STILL_HEATING_BIAS_REL
# Runs older than ``drift_bias_pct`` are judged by the slope alone: at 6 °C/min a card with a
# thermal time constant up to 100 s still has up to 10 °C to go (a 2% bias under a binding cap).
DRIFT_C_PER_MIN = 6.0
# The time constant assumed where the run fitted none (analysis.precision.DEFAULT_TAU_S).
ASSUMED_TAU_S = DEFAULT_TAU_S
# The advised wait is rounded up to this many seconds.
WAIT_STEP_S = 5.0


def energy_gap(row: CsvRow) -> float:
    """``(counter - sampled) / sampled`` of one row; NaN when either is missing."""
    counter, sampled = as_float(row.get("energy_j")), as_float(row.get("energy_sampled_j"))
    if not (math.isfinite(counter) and math.isfinite(sampled) and sampled > 0):
        return math.nan
    return (counter - sampled) / sampled


def energy_tolerance(row: CsvRow) -> float:
    """The gap one row's figures may show: :data:`ENERGY_MISMATCH_FRAC`, or the sampled draw's
    own 95% half-width (``power_u95_pct``) where that is wider (the trapezoid over the ticks is
    the sampled mean draw times the window, known no better than that mean, which a bursty load
    such as prefill widens), plus what the counter's update period can explain over the row's
    window."""
    window = as_float(row.get("window_s"))
    allowance = COUNTER_PERIOD_MAX_S / window if math.isfinite(window) and window > 0 else 0.0
    # the sampled mean's own precision: the drift's bias (what the draw will be once steady) is
    # no gap between two figures of the same seconds, and the sensors' difference is the gap
    # itself (a tolerance holding it would pass any gap)
    stated = as_float(row.get("power_u95_pct")) / 100.0
    terms = [
        as_float(row.get(k), 0.0) / 100.0 for k in ("power_drift_bias_pct", "power_sensors_pct")
    ]
    sampled = math.sqrt(max(0.0, stated**2 - sum(t**2 for t in terms if math.isfinite(t))))
    base = max(ENERGY_MISMATCH_FRAC, sampled) if math.isfinite(sampled) else ENERGY_MISMATCH_FRAC
    return base + allowance


def energy_findings(rows: Iterable[CsvRow], label: Callable[[CsvRow], str]) -> list[Finding]:
    """``energy_mismatch`` when the counter and the sampled integral of a point disagree.

    Args:
        rows: The ok rows of caps.csv.
        label: Names a row's point (``290 W``, ``SM 1410 MHz``).
    """
    rows = list(rows)
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
            _energy_advice(rows),
        )
    ]


def _energy_advice(rows: Iterable[CsvRow]) -> str:
    """What to do: a counter off by one gain at every point is a sensor, which no sampling
    changes; gaps that differ between points are a draw faster than the samples see."""
    gaps = [g for g in (energy_gap(r) for r in rows) if math.isfinite(g)]
    if len(gaps) >= 3 and max(gaps) - min(gaps) <= SAME_GAIN_SPREAD:
        mean = sum(gaps) / len(gaps)
        return (
            f"the counter reads {abs(mean) * 100:.1f}% {'more' if mean > 0 else 'less'} than "
            "the sampled draw at every point alike: one of the two sensors is off by a gain "
            "that no sampling changes (J/token, the counter's, and TPS/W, the draw's, differ by "
            "it); check the card's power reading against a meter at the wall or the PSU"
        )
    return (
        "the gap differs from point to point: a draw that moves faster than the samples (a "
        "spiky load) misses in the draw median too: sample faster (--sample-interval 0.1) and "
        "compare"
    )


def drift_bias(row: CsvRow) -> float:
    """The relative bias of a row's TPS/W from the temperature still to come (NaN: unknown)."""
    return as_float(row.get("drift_bias_pct")) / 100.0


def still_heating(row: CsvRow) -> bool:
    """True when a row was measured on a card still heating or cooling: its drift biases its
    TPS/W beyond :data:`STILL_HEATING_BIAS_REL` (a run older than that column: its drift beyond
    :data:`DRIFT_C_PER_MIN`)."""
    bias = drift_bias(row)
    if "drift_bias_pct" in row and math.isfinite(bias):
        return abs(bias) > STILL_HEATING_BIAS_REL
    drift = as_float(row.get("temp_drift_c_per_min"))
    return math.isfinite(drift) and abs(drift) > DRIFT_C_PER_MIN


def contends(tps_per_w: float, best_tps_per_w: float, bias_rel: float = 0.0) -> bool:
    """A point's TPS/W is close enough to the best's for its drift to change the answer
    (:data:`CONTENDS_MARGIN_REL`, plus the point's own bias); unknown figures contend."""
    if not (math.isfinite(tps_per_w) and math.isfinite(best_tps_per_w) and best_tps_per_w > 0):
        return True
    bias = bias_rel if math.isfinite(bias_rel) else 0.0
    return tps_per_w >= best_tps_per_w * (1.0 - CONTENDS_MARGIN_REL - bias)


def needed_wait_s(row: CsvRow) -> float:
    """Run seconds the point would have needed to wait for its drift's bias to fall to the
    sweep's goal (:data:`WAIT_SHARE_OF_FINDING` of :data:`STILL_HEATING_BIAS_REL`): what it
    waited, plus its card's
    fitted time constant times ``ln(bias / goal)`` (the temperature approaches its level
    exponentially). NaN when the row has no bias."""
    bias = abs(drift_bias(row))
    if not math.isfinite(bias):
        return math.nan
    tau = as_float(row.get("thermal_tau_s"))
    tau = tau if math.isfinite(tau) and tau > 0 else ASSUMED_TAU_S
    waited = as_float(row.get("thermal_wait_s"))
    waited = waited if math.isfinite(waited) and waited > 0 else 0.0
    goal = WAIT_SHARE_OF_FINDING * STILL_HEATING_BIAS_REL
    return waited + (tau * math.log(bias / goal) if bias > goal else 0.0)


def thermal_findings(rows: Iterable[CsvRow], label: Callable[[CsvRow], str]) -> list[Finding]:
    """``still_heating`` when a point's temperature still drifted enough during its windows to
    bias its TPS/W beyond :data:`STILL_HEATING_BIAS_REL`, with the wait that would do.

    Args:
        rows: The ok rows of caps.csv.
        label: Names a row's point.
    """
    rows = list(rows)
    tpw = [as_float(r.get("tps_per_w")) for r in rows]
    best = max((v for v in tpw if math.isfinite(v)), default=math.nan)
    heating: list[str] = []
    cooling: list[str] = []
    flagged: list[CsvRow] = []
    for row, value in zip(rows, tpw, strict=True):
        if not still_heating(row) or not contends(value, best, abs(drift_bias(row))):
            continue
        flagged.append(row)
        drift = as_float(row.get("temp_drift_c_per_min"))
        bias = drift_bias(row)
        what = f"{drift:+.1f} C/min" if math.isfinite(drift) else "drifting"
        if math.isfinite(bias):
            what += f", TPS/W {100.0 * bias:+.1f}%"
        heating_now = drift > 0 if math.isfinite(drift) else bias > 0
        (heating if heating_now else cooling).append(f"{label(row)} ({what})")
    if not flagged:
        return []
    parts = []
    if heating:
        parts.append(f"still heating at {', '.join(heating)}")
    if cooling:
        parts.append(f"still cooling at {', '.join(cooling)}")
    return [
        finding(
            "warning",
            "still_heating",
            f"the card's temperature still moved while these points were measured: "
            f"{'; '.join(parts)}: the temperature still to come moves their TPS/W by more "
            f"than {100.0 * STILL_HEATING_BIAS_REL:g}% (inside each point's stated ±), close "
            "enough to the best to change the answer",
            _wait_advice(flagged),
        )
    ]


def _wait_advice(flagged: list[CsvRow]) -> str:
    """The wait the card's fitted thermal model says would do, as a flag to rerun with."""
    needs = [needed_wait_s(r) for r in flagged]
    known = [n for n in needs if math.isfinite(n)]
    if not known:
        return (
            "give the card longer to reach its temperature (--thermal-wait-seconds) and "
            "measure those points again"
        )
    seconds = WAIT_STEP_S * math.ceil(max(known) / WAIT_STEP_S)
    taus = [as_float(r.get("thermal_tau_s")) for r in flagged]
    fitted = [t for t in taus if math.isfinite(t) and t > 0]
    model = (
        f"the card's fitted thermal time constant ({max(fitted):.0f} s)"
        if fitted
        else f"a {ASSUMED_TAU_S:g} s thermal time constant (the run fitted none)"
    )
    return (
        f"rerun with --thermal-wait-seconds {seconds:g}: by {model}, the slowest of these "
        f"points needs {seconds:g} run seconds for its bias to fall under "
        f"{100.0 * WAIT_SHARE_OF_FINDING * STILL_HEATING_BIAS_REL:g}%, and each point waits "
        "only as long as it needs"
    )


def findings(rows: Iterable[CsvRow], label: Callable[[CsvRow], str]) -> list[Finding]:
    """Both checks over the ok rows of a curve."""
    rows = list(rows)
    return energy_findings(rows, label) + thermal_findings(rows, label)
