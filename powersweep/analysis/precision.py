"""Each point's own precision: how far its TPS, draw and TPS/W may lie from the card's steady state.

The reasoning: docs/precision.md, "powersweep.analysis.precision".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from powersweep.analysis.batch_means import batch_count as batch_count
from powersweep.analysis.batch_means import batch_se_rel as batch_se_rel
from powersweep.analysis.batch_means import ratio_se_rel as ratio_se_rel
from powersweep.analysis.batch_means import sensor_step as sensor_step
from powersweep.analysis.run_drift import DriftFit, PairGap, fit_drift
from powersweep.analysis.thermal_drift import (
    DEFAULT_TAU_S as DEFAULT_TAU_S,
)
from powersweep.analysis.thermal_drift import (
    DRIFT_SENSITIVITY_PER_C as DRIFT_SENSITIVITY_PER_C,
)
from powersweep.analysis.thermal_drift import (
    LEAKAGE_W_PER_C as LEAKAGE_W_PER_C,
)
from powersweep.analysis.thermal_drift import TAU_MAX_TICKS as TAU_MAX_TICKS
from powersweep.analysis.thermal_drift import TAU_MIN_TICKS as TAU_MIN_TICKS
from powersweep.analysis.thermal_drift import TAU_RANGE_S as TAU_RANGE_S
from powersweep.analysis.thermal_drift import ThermalModel as ThermalModel
from powersweep.analysis.thermal_drift import drift_bias_rel as drift_bias_rel
from powersweep.analysis.thermal_drift import (
    drift_sensitivity_per_c as drift_sensitivity_per_c,
)
from powersweep.analysis.thermal_drift import fit_thermal as fit_thermal
from powersweep.runformat import CsvRow, as_float

# How far a reading against a real server may lie from another run's beyond everything its own
# run measures (a standard deviation, relative, common to a run's points: it cancels from the
# difference of two points of one run, so ties leave it out). Measured by
# scripts/bench_repeat_point.py: one point (the 768 x 12 model, decode-single) read in 8 separate
# runs against a real llama.cpp server on the CPU, three times: its readings scattered by 7.3%,
# 8.7% and 6.9% (log SD) where the runs' own terms stated 6.1%, 5.2% and 5.8%; the variance left
# over, pooled over the three (21 degrees of freedom), is 5.1%. The machine's two cores were
# shared with other work: a dedicated server scatters less (docs/precision.md). The simulated
# rig's own server carries none: its runs measure their own (its world models).
REAL_SERVER_FLOOR_REL = 0.051

# The drift's path between a pair's readings is unmeasured: a reading between them carries the
# linear estimate of its drift with half of it as a standard deviation (about all of it at 95%;
# docs/precision.md, term 4, "The drift's path")
DRIFT_SHAPE_SD = 0.5
# Two-sided confidence of every stated interval.
CONFIDENCE = 0.95
# Typical repeatability of one reading of a curve with no raw data (a bare caps.csv), as a 95%
# half-width of TPS/W: a 10 s-window reading on a steady card. The published RTX 3090 curve's
# four boost-plateau caps (one operating point read four times) agree within 0.05%, and readings
# of the simulated rig repeat within 0.3%; readings taken minutes apart on a card whose
# temperature moved by 2 C differ by about 1% (the drift sensitivity above), which is what one
# reading of a bare curve cannot rule out.
TYPICAL_READING_U95_REL = 0.01


@dataclass(frozen=True)
class Precision:
    """A point's figures with their uncertainty (relative, 95% half-widths).

    Attributes:
        tps_u95_rel: The stated half-width of the metric's TPS: its statistics (the point's own
            and the run-to-run term) and its drift bias.
        power_u95_rel: Half-width of the draw (the ticks' batch means, the sensor's step, its
            drift bias, the energy counter's difference from the readings).
        stat_u95_rel: Statistical half-width of TPS/W: TPS and draw together, and the run-to-run
            term.
        drift_bias_rel: Expected bias of TPS/W from the temperature still moving (signed:
            negative when the card was warmer than its steady state, so it read low).
        u95_rel: The stated half-width of TPS/W (and of J/token): statistics and drift.
        dof: Degrees of freedom of ``stat_u95_rel`` (NaN: no units).
        within_u95_rel: TPS/W's half-width from the point's own readings alone (what the stop
            rule reads: more time at the point shrinks it).
        within_dof: Its degrees of freedom.
        tps_within_u95_rel: TPS's half-width from the point's own blocks alone.
        tps_within_dof: Its degrees of freedom.
        tps_bias_rel: Expected bias of TPS from the temperature still moving (signed).
        power_step_w: The power sensor's step the readings showed (NaN: not seen).
        run_to_run: The run-to-run term carried.
        power_bias_rel: The draw's drift bias (in ``power_u95_rel``).
        power_sensors_rel: The energy counter's draw over the readings' over the same seconds,
            less one (signed; 0: not read), in ``power_u95_rel``.
        run_drift_rel: Expected bias of TPS/W from the run's drift (signed: the reading less
            the run's middle; :meth:`RunToRun.drift_at`), in ``u95_rel`` with the thermal one.
        tps_run_drift_rel: Of TPS, in ``tps_u95_rel``.
        tps_fast_u95_rel: TPS's half-width from its own blocks taken as independent: the
            variance at the blocks' time scale, which the between-reading term adds to (NaN:
            not known).
        tps_fast_dof: Its degrees of freedom.
    """

    tps_u95_rel: float
    power_u95_rel: float
    stat_u95_rel: float
    drift_bias_rel: float
    u95_rel: float
    dof: float
    within_u95_rel: float = math.nan
    within_dof: float = math.nan
    tps_within_u95_rel: float = math.nan
    tps_within_dof: float = math.nan
    tps_bias_rel: float = 0.0
    power_step_w: float = math.nan
    run_to_run: RunToRun | None = None
    power_bias_rel: float = 0.0
    power_sensors_rel: float = 0.0
    run_drift_rel: float = 0.0
    tps_run_drift_rel: float = 0.0
    tps_fast_u95_rel: float = math.nan
    tps_fast_dof: float = math.nan

    @property
    def known(self) -> bool:
        """True when the statistical part could be estimated."""
        return math.isfinite(self.stat_u95_rel)


@dataclass(frozen=True)
class RunToRun:
    """How far two readings of one point taken apart in a run differ beyond their own widths: a
    between-reading standard deviation (relative), carried in every reading's interval.

    Attributes:
        tps_sd_rel: Of the metric's TPS.
        tps_per_w_sd_rel: Of TPS/W.
        tps_dof: Degrees of freedom of ``tps_sd_rel`` (infinite: measured as 0).
        dof: Degrees of freedom of ``tps_per_w_sd_rel``.
        pairs: Pairs of readings it was measured from (0: none yet).
        floor_rel: The between-run floor common to the run's points (a standard deviation,
            relative: :data:`REAL_SERVER_FLOOR_REL` against a real server, 0 against the
            simulated one), in the stated intervals, not in the statistical half-widths that
            ties between points of one run read.
        tps_drift: The run's drift of TPS (:func:`~.run_drift.fit_drift`): a bias that grows
            with a reading's distance in time from ``t_ref_s``.
        drift: Of TPS/W.
        t_ref_s: The run's middle (run seconds; NaN: no drift measured).
        span_s: The first and last run second of the pairs' readings: the rate is what they
            measured between, and a reading outside carries the drift of the nearest end (a
            rate from a few seconds apart is not drawn out over the run).
    """

    tps_sd_rel: float = 0.0
    tps_per_w_sd_rel: float = 0.0
    tps_dof: float = math.inf
    dof: float = math.inf
    pairs: int = 0
    floor_rel: float = 0.0
    tps_drift: DriftFit = dataclasses.field(default_factory=DriftFit)
    drift: DriftFit = dataclasses.field(default_factory=DriftFit)
    t_ref_s: float = math.nan
    span_s: tuple[float, float] = (math.nan, math.nan)

    @classmethod
    def of_pairs(
        cls,
        pairs: Sequence[tuple[Reading, Reading]],
        floor_rel: float = 0.0,
        t_ref_s: float = math.nan,
    ) -> RunToRun:
        """The term from readings of one point taken apart (a reference read again at the end of
        the run, a confirmed point's repeat).

        Each pair's log-difference has the variance of both readings' own (``v``, the
        difference of their drift biases, which the intervals carry apart, and of their
        temperatures at :data:`DRIFT_SENSITIVITY_PER_C`), the run's drift
        over the seconds between them and twice the between-reading variance: the drift rate
        and what the pairs leave beyond it come from :func:`~.run_drift.fit_drift` (the
        between-reading SD is 0 with infinite degrees of freedom where it is measured as 0).
        ``t_ref_s`` is the run's middle, where the drift's bias is 0 (NaN: no drift rate, every
        pair's difference is the random term's). ``floor_rel`` is carried as it is.
        """
        usable = [(a, b) for a, b in pairs if a.known and b.known]
        timed = math.isfinite(t_ref_s)

        def gap(a: Reading, b: Reading, tps: bool) -> PairGap | None:
            fa, fb = (a.tps, b.tps) if tps else (a.tps_per_w, b.tps_per_w)
            # beyond each reading's fast-scale variance: the term then holds every wander
            # slower than a block, whether or not a reading's own batch means saw it
            (va, da), (vb, db) = a.fast_or_within(tps), b.fast_or_within(tps)
            ba, bb = (a.tps_bias_rel, b.tps_bias_rel) if tps else (a.bias_rel, b.bias_rel)
            if not (fa > 0 and fb > 0 and math.isfinite(va) and math.isfinite(vb)):
                return None
            own = va + vb + (ba - bb) ** 2 + a.temperature_var(b.temp_c)
            dt = b.t_s - a.t_s if timed else math.nan
            own_dof = min((d for d in (da, db) if d > 0), default=math.inf)  # NaN: normal
            return PairGap(math.log(fb / fa), dt, own, own_dof) if own > 0 else None

        def term(tps: bool) -> tuple[float, float, DriftFit, int]:
            gaps = [g for g in (gap(a, b, tps) for a, b in usable) if g is not None]
            fit = fit_drift(gaps)
            sd = math.sqrt(fit.between_var)
            return sd, fit.between_dof if sd > 0 else math.inf, fit, len(gaps)

        tps_sd, tps_dof, tps_fit, n_tps = term(True)
        tpw_sd, tpw_dof, tpw_fit, n_tpw = term(False)
        times = [r.t_s for pair in usable for r in pair if math.isfinite(r.t_s)]
        return cls(
            tps_sd,
            tpw_sd,
            tps_dof,
            tpw_dof,
            max(n_tps, n_tpw),
            floor_rel,
            tps_fit,
            tpw_fit,
            t_ref_s if timed else math.nan,
            (min(times), max(times)) if timed and times else (math.nan, math.nan),
        )

    def drift_at(self, t_s: float) -> tuple[tuple[float, float], tuple[float, float]]:
        """The run drift's ``(bias, variance)`` (relative) of a reading taken at run second
        ``t_s``, of TPS/W and of TPS: the rate times its distance from the run's middle (both
        taken within the pairs' :attr:`span_s`), and the rate's variance times that distance
        squared, with the rate over the reading's own distance outside the span as a variance
        (the drift beyond the pairs is unmeasured), where the pairs show a drift
        (:meth:`~.run_drift.DriftFit.shown`); zeros where they do not, or where either time is
        unknown."""
        lo, hi = self.span_s
        lag = _within(t_s, lo, hi) - _within(self.t_ref_s, lo, hi)
        if not math.isfinite(lag):
            return (0.0, 0.0), (0.0, 0.0)
        # a reading outside the pairs' span: the drift went on or stopped between it and the
        # span, which nothing measured; the rate over that distance is its uncertainty
        outside = t_s - _within(t_s, lo, hi)

        def at(fit: DriftFit) -> tuple[float, float]:
            if not fit.shown:
                return 0.0, 0.0
            beyond = (fit.rate_per_s**2 + fit.rate_var) * outside * outside
            # the pairs measure the drift's net change, not its path between their readings
            shape = (DRIFT_SHAPE_SD * fit.rate_per_s * lag) ** 2
            return fit.rate_per_s * lag, fit.rate_var * lag * lag + beyond + shape

        return at(self.drift), at(self.tps_drift)

    def with_curve(self, variance: float, dof: int) -> RunToRun:
        """The term pooled with what the run's own curve shows between its points
        (:func:`~powersweep.analysis.curve_noise.excess_scatter` of log TPS): both estimate the
        variance between readings taken apart in time, weighted by their degrees of freedom (a
        pair's one, a curve's several: a single pair that happened to agree, or to disagree, no
        longer decides the run alone). TPS/W takes the rate's share as TPS does."""
        if dof <= 0:
            return self

        def pooled(sd: float, own_dof: float, fit: DriftFit) -> tuple[float, float]:
            # a zero measured on the pairs the drift rate left over weighs as many
            weight = min(own_dof, fit.between_dof) if self.pairs else 0.0
            var = (weight * sd * sd + dof * variance) / (weight + dof)
            return math.sqrt(var), (weight + dof) if var > 0 else math.inf

        tps_sd, tps_dof = pooled(self.tps_sd_rel, self.tps_dof, self.tps_drift)
        tpw_sd, tpw_dof = pooled(self.tps_per_w_sd_rel, self.dof, self.drift)
        return dataclasses.replace(
            self, tps_sd_rel=tps_sd, tps_per_w_sd_rel=tpw_sd, tps_dof=tps_dof, dof=tpw_dof
        )


def _within(t_s: float, lo: float, hi: float) -> float:
    """``t_s`` moved into ``[lo, hi]`` (as it is where the span is unknown)."""
    return min(max(t_s, lo), hi) if math.isfinite(lo) and math.isfinite(hi) else t_s


def _combined(parts: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Variance of a sum of independent estimated variances ``(variance, dof)``, and its
    Welch-Satterthwaite degrees of freedom (NaN, NaN when one is unknown)."""
    if not all(math.isfinite(v) and v >= 0 for v, _ in parts):
        return math.nan, math.nan
    var = sum(v for v, _ in parts)
    denom = sum(v * v / d for v, d in parts if v > 0 and math.isfinite(d) and d > 0)
    if not var > 0:
        return 0.0, math.inf
    return var, (var * var / denom if denom > 0 else math.inf)


def _half_width(var: float, dof: float) -> float:
    return t_quantile(dof) * math.sqrt(var) if math.isfinite(var) else math.nan


def t_quantile(dof: float, confidence: float = CONFIDENCE) -> float:
    """Student's t quantile of a two-sided ``confidence`` interval (normal for huge ``dof``)."""
    from scipy.special import stdtrit

    return float(stdtrit(max(1.0, dof), 0.5 + confidence / 2.0))


def point_precision(
    blocks: Sequence[tuple[float, float]],
    power_ticks: Sequence[float],
    slope_c_per_min: float,
    tau_s: float,
    sensitivity_per_c: float = DRIFT_SENSITIVITY_PER_C,
    *,
    tps_sensitivity_per_c: float = 0.0,
    power_sensitivity_per_c: float = 0.0,
    power_step_w: float = math.nan,
    n_cards: int = 1,
    run_to_run: RunToRun | None = None,
    t_s: float = math.nan,
    power_headroom_rel: float = math.inf,
    power_sensors_rel: float = 0.0,
) -> Precision:
    """A point's :class:`Precision` from its own TPS blocks, load ticks and drift, with the
    run-to-run term.

    Args:
        blocks: ``(tokens, seconds)`` units of the metric's TPS, in time order.
        power_ticks: Combined draw of each load tick, in time order.
        slope_c_per_min: The hottest card's temperature slope since the point was set.
        tau_s: The card's thermal time constant (NaN: :data:`DEFAULT_TAU_S`).
        sensitivity_per_c: TPS/W's relative move per degree (:func:`drift_sensitivity_per_c`).
        tps_sensitivity_per_c: TPS's (under a binding cap the leakage comes out of the clock,
            as TPS/W's; under a cap that does not bind the clock holds: 0).
        power_sensitivity_per_c: The draw's (under a cap that does not bind the card draws the
            leakage: its share of the draw; under a binding cap the draw holds: 0). Its bias
            is carried in the draw's half-width.
        power_step_w: The power sensor's step (:func:`sensor_step`; NaN: not seen). A quantised
            reading's error is uniform over one step: variance ``step^2 / 12`` (GUM, type B),
            which no averaging removes when the draw is steadier than the step.
        n_cards: Cards whose readings ``power_ticks`` add up (each quantised on its own).
        run_to_run: The run-to-run term (None: none, before the run measured it).
        power_headroom_rel: How far under its cap the card draws (relative to the draw): a
            heating card's draw rises no further (NaN or infinite: no cap).
        power_sensors_rel: The energy counter's draw over the readings' over the same seconds,
            less one (:func:`~powersweep.sweep.sampling.per_token.sensors_gap_rel`; 0: no
            counter). The counter integrates every burst the readings sample a few instants
            of: where the two differ, the draw is known no better (GUM, a type-B term).
    """
    tps_se, tps_dof = ratio_se_rel(blocks)
    fast_se, fast_dof = ratio_se_rel(blocks, fast=True)
    pw_se, pw_dof = batch_se_rel(power_ticks)
    finite = [p for p in power_ticks if math.isfinite(p)]
    mean_w = sum(finite) / len(finite) if finite else math.nan
    if math.isfinite(power_step_w) and power_step_w > 0 and mean_w > 0:
        pw_var, pw_dof = _combined(
            [(pw_se**2, pw_dof), (max(1, n_cards) * (power_step_w / mean_w) ** 2 / 12, math.inf)]
        )
    else:
        pw_var = pw_se**2
    within = Within(tps_se**2, tps_dof, pw_var, pw_dof, fast_se**2, fast_dof)
    power_bias = drift_bias_rel(slope_c_per_min, tau_s, power_sensitivity_per_c)
    if power_headroom_rel >= 0:  # NaN: no bound
        power_bias = min(power_bias, power_headroom_rel)
    return within.stated(
        drift_bias_rel(slope_c_per_min, tau_s, sensitivity_per_c),
        drift_bias_rel(slope_c_per_min, tau_s, tps_sensitivity_per_c),
        run_to_run or RunToRun(),
        power_step_w,
        power_bias,
        t_s,
        power_sensors_rel,
    )


@dataclass(frozen=True)
class Within:
    """What a point's own readings say: relative variances of its TPS and draw, and their
    degrees of freedom."""

    tps_var: float
    tps_dof: float
    power_var: float
    power_dof: float
    tps_fast_var: float = math.nan
    tps_fast_dof: float = math.nan

    def stated(
        self,
        bias: float,
        tps_bias: float,
        run_to_run: RunToRun,
        power_step_w: float = math.nan,
        power_bias: float = 0.0,
        t_s: float = math.nan,
        power_sensors: float = 0.0,
    ) -> Precision:
        """The point's :class:`Precision`: these variances, the run-to-run term's, the biases
        and the sensors' difference (the draw's in its half-width)."""
        tpw = _combined([(self.tps_var, self.tps_dof), (self.power_var, self.power_dof)])
        fast = (self.tps_fast_var, self.tps_fast_dof)
        stated = compose(
            (self.tps_var, self.tps_dof),
            tpw,
            math.hypot(_half_width(self.power_var, self.power_dof), power_bias, power_sensors),
            (bias, tps_bias),
            run_to_run,
            power_step_w,
            t_s,
            (fast, _combined([fast, (self.power_var, self.power_dof)])),
        )
        return dataclasses.replace(
            stated, power_bias_rel=power_bias, power_sensors_rel=power_sensors
        )


def compose(
    tps: tuple[float, float],
    tps_per_w: tuple[float, float],
    power_u95_rel: float,
    biases: tuple[float, float],
    run_to_run: RunToRun,
    power_step_w: float = math.nan,
    t_s: float = math.nan,
    fast: tuple[tuple[float, float], tuple[float, float]] = ((math.nan, math.nan),) * 2,
) -> Precision:
    """A :class:`Precision` from the within-point ``(variance, dof)`` of TPS and TPS/W, the
    draw's half-width, the ``(TPS/W, TPS)`` drift biases and the run-to-run term at run second
    ``t_s`` (the run's drift from its middle a bias, its rate's uncertainty a variance):
    variances add (Welch-Satterthwaite degrees of freedom, Student's t), biases add in
    quadrature; the between-run floor is in the stated half-widths (TPS, TPS/W), not the
    statistical one.

    ``fast`` holds the ``(variance, dof)`` of TPS and TPS/W with the point's blocks taken as
    independent: the between-reading term is measured beyond those (:meth:`RunToRun.of_pairs`),
    so a point states the larger of its own batch means and its fast variance with the term
    (:func:`_own_or_fast`). Without them (a row before they were recorded) the term adds to its
    own."""
    thermal, tps_thermal = biases
    rtr = run_to_run
    (run_drift, run_drift_var), (tps_run_drift, tps_run_drift_var) = rtr.drift_at(t_s)
    bias, tps_bias = thermal + run_drift, tps_thermal + tps_run_drift
    tps_fast, tpw_fast = fast
    stat_var, stat_dof = _combined(
        [
            _own_or_fast(tps_per_w, tpw_fast, (rtr.tps_per_w_sd_rel**2, rtr.dof)),
            (run_drift_var, rtr.drift.rate_dof),
        ]
    )
    tps_var, tps_dof = _combined(
        [
            _own_or_fast(tps, tps_fast, (rtr.tps_sd_rel**2, rtr.tps_dof)),
            (tps_run_drift_var, rtr.tps_drift.rate_dof),
        ]
    )
    floor = (rtr.floor_rel**2, math.inf)
    stat = _half_width(stat_var, stat_dof)
    # the stated intervals add the between-run floor (common to the run's points)
    stated = _half_width(*_combined([(stat_var, stat_dof), floor]))
    tps_stated = _half_width(*_combined([(tps_var, tps_dof), floor]))
    return Precision(
        tps_u95_rel=math.hypot(tps_stated, tps_bias),
        power_u95_rel=power_u95_rel,
        stat_u95_rel=stat,
        drift_bias_rel=thermal,
        u95_rel=math.hypot(stated, bias),
        dof=stat_dof,
        within_u95_rel=_half_width(*tps_per_w),
        within_dof=tps_per_w[1],
        tps_within_u95_rel=_half_width(*tps),
        tps_within_dof=tps[1],
        tps_bias_rel=tps_thermal,
        power_step_w=power_step_w,
        run_to_run=run_to_run,
        run_drift_rel=run_drift,
        tps_run_drift_rel=tps_run_drift,
        tps_fast_u95_rel=_half_width(*tps_fast),
        tps_fast_dof=tps_fast[1],
    )


def _own_or_fast(
    own: tuple[float, float], fast: tuple[float, float], between: tuple[float, float]
) -> tuple[float, float]:
    """A reading's ``(variance, dof)`` with the between-reading term: the larger of its own
    (batch means, which see a wander slower than its blocks where its window is long enough)
    and its fast-scale variance with the term (measured beyond the fast variances, so it holds
    every wander slower than a block); its own with the term added where the fast one is not
    known. Where no term was measured the larger of the two estimates of one variance stands:
    on few units batch means and the independent estimator differ by chance, and the coverage
    bench's decode-concurrent control went from 94% to 98% with it (docs/precision.md)."""
    if not all(math.isfinite(v) for v in fast):
        return _combined([own, between])
    with_term = _combined([fast, between])
    return with_term if with_term[0] > own[0] or not math.isfinite(own[0]) else own


@dataclass(frozen=True)
class Reading:
    """A point's TPS/W and its precision, as the stop rule, the confirm phase and the analysis
    read them from a caps.csv row.

    Attributes:
        tps_per_w: The figure.
        stat_u95_rel: Its statistical 95% half-width, relative (the run-to-run term included).
        bias_rel: The drift's expected bias, relative (signed).
        tps_u95_rel: The stated 95% half-width of its TPS, relative.
        tps: The metric's TPS (NaN: not known).
        dof: Degrees of freedom of ``stat_u95_rel`` (NaN: not recorded: normal).
        within_u95_rel: TPS/W's half-width from the point's own readings (NaN: a row written
            before it was recorded, whose ``stat_u95_rel`` is that).
        within_dof: Its degrees of freedom.
        tps_within_u95_rel: TPS's from its own blocks.
        tps_within_dof: Its degrees of freedom.
        tps_bias_rel: TPS's drift bias (signed).
        power_u95_rel: The draw's half-width.
        power_step_w: The sensor step the point's readings showed.
        floor_rel: The between-run floor its stated intervals carry (an SD, relative; common
            to the run's points, so left out of ``stat_u95_rel`` and of ties).
        power_bias_rel: The draw's drift bias.
        power_sensors_rel: The energy counter's difference from the readings (in
            ``power_u95_rel``).
        run_drift_rel: TPS/W's bias from the run's drift (signed; a neighbour read seconds
            apart carries nearly the same, which cancels from their tie).
        tps_run_drift_rel: TPS's.
        t_s: The run second of the middle of its figures (NaN: a row written before readings
            carried their time).
        temp_c: The hottest card's temperature over its figures (NaN: not known).
        tps_fast_u95_rel: TPS's half-width from its blocks taken as independent (NaN: a row
            before it was recorded).
        tps_fast_dof: Its degrees of freedom.
    """

    tps_per_w: float
    stat_u95_rel: float
    bias_rel: float
    tps_u95_rel: float = math.nan
    tps: float = math.nan
    dof: float = math.nan
    within_u95_rel: float = math.nan
    within_dof: float = math.nan
    tps_within_u95_rel: float = math.nan
    tps_within_dof: float = math.nan
    tps_bias_rel: float = 0.0
    power_u95_rel: float = math.nan
    power_step_w: float = math.nan
    floor_rel: float = 0.0
    power_bias_rel: float = 0.0
    power_sensors_rel: float = 0.0
    run_drift_rel: float = 0.0
    tps_run_drift_rel: float = 0.0
    t_s: float = math.nan
    temp_c: float = math.nan
    tps_fast_u95_rel: float = math.nan
    tps_fast_dof: float = math.nan

    @classmethod
    def of(cls, row: CsvRow) -> Reading:
        """The reading of a caps.csv row, or of a point record's JSON (NaN where it has none)."""

        def num(key: str, default: float = math.nan) -> float:
            return as_float(row.get(key), default)

        tpw, power = num("tps_per_w"), num("power_w")
        return cls(
            tps_per_w=tpw,
            stat_u95_rel=num("tps_per_w_stat_u95_pct") / 100.0,
            bias_rel=num("drift_bias_pct", 0.0) / 100.0,
            tps_u95_rel=num("tps_u95_pct") / 100.0,
            tps=tpw * power if math.isfinite(tpw) and math.isfinite(power) else math.nan,
            dof=num("tps_per_w_dof"),
            within_u95_rel=num("tps_per_w_within_u95_pct") / 100.0,
            within_dof=num("tps_per_w_within_dof"),
            tps_within_u95_rel=num("tps_within_u95_pct") / 100.0,
            tps_within_dof=num("tps_within_dof"),
            tps_bias_rel=num("tps_drift_bias_pct", 0.0) / 100.0,
            power_u95_rel=num("power_u95_pct") / 100.0,
            power_step_w=num("power_step_w"),
            floor_rel=num("run_to_run_floor_pct", 0.0) / 100.0,
            power_bias_rel=num("power_drift_bias_pct", 0.0) / 100.0,
            power_sensors_rel=num("power_sensors_pct", 0.0) / 100.0,
            run_drift_rel=num("run_drift_bias_pct", 0.0) / 100.0,
            tps_run_drift_rel=num("tps_run_drift_bias_pct", 0.0) / 100.0,
            t_s=num("t_mid_s"),
            temp_c=num("temp_max_c"),
            tps_fast_u95_rel=num("tps_fast_u95_pct") / 100.0,
            tps_fast_dof=num("tps_fast_dof"),
        )

    @property
    def known(self) -> bool:
        """True when the reading carries its own precision."""
        return math.isfinite(self.tps_per_w) and math.isfinite(self.stat_u95_rel)

    def temperature_var(self, temp_c: float) -> float:
        """The relative variance between this reading and one of its point at ``temp_c``: the
        boost and leakage of the degrees between them at :data:`DRIFT_SENSITIVITY_PER_C`, which
        no drift of the run explains (0 where either temperature is unknown)."""
        warmer = DRIFT_SENSITIVITY_PER_C * (temp_c - self.temp_c)
        return warmer * warmer if math.isfinite(warmer) else 0.0

    @property
    def total_bias_rel(self) -> float:
        """TPS/W's expected bias: the temperature's drift and the run's."""
        return self.bias_rel + self.run_drift_rel

    @property
    def tps_total_bias_rel(self) -> float:
        """TPS's expected bias: the temperature's drift and the run's."""
        return self.tps_bias_rel + self.tps_run_drift_rel

    @property
    def u95_rel(self) -> float:
        """The stated 95% half-width of TPS/W: statistics, the between-run floor, the biases."""
        return math.hypot(
            self.stat_u95_rel, t_quantile(math.inf) * self.floor_rel, self.total_bias_rel
        )

    @property
    def tps_stat_u95_rel(self) -> float:
        """TPS's statistical half-width: its stated one less its biases and the floor."""
        common = self.tps_total_bias_rel**2 + (t_quantile(math.inf) * self.floor_rel) ** 2
        return math.sqrt(max(0.0, self.tps_u95_rel**2 - common))

    @property
    def tps_tie_u95_rel(self) -> float:
        """TPS's half-width as a tie between two points of one run reads it: its statistics and
        its biases, not the between-run floor they share."""
        return math.hypot(self.tps_stat_u95_rel, self.tps_total_bias_rel)

    @property
    def within_rel(self) -> float:
        """TPS/W's half-width from the point's own readings (the stop rule's): the statistical
        one of a row written before the two were told apart."""
        return self.within_u95_rel if math.isfinite(self.within_u95_rel) else self.stat_u95_rel

    @property
    def within_var(self) -> float:
        """TPS/W's relative variance from the point's own readings."""
        return _variance(self.within_rel, self.within_dof)

    @property
    def tps_within_var(self) -> float:
        """TPS's relative variance from the point's own blocks (its stated half-width, less its
        drift bias, for a row written before the two were told apart)."""
        if math.isfinite(self.tps_within_u95_rel):
            return _variance(self.tps_within_u95_rel, self.tps_within_dof)
        return _variance(self.tps_stat_u95_rel, math.nan)

    @property
    def tps_fast_var(self) -> float:
        """TPS's relative variance from its blocks taken as independent (NaN: not recorded)."""
        return _variance(self.tps_fast_u95_rel, self.tps_fast_dof)

    @property
    def fast_var(self) -> float:
        """TPS/W's: TPS's fast variance with the draw's own (NaN: not recorded)."""
        return self.tps_fast_var + max(0.0, self.within_var - self.tps_within_var)

    def fast_or_within(self, tps: bool) -> tuple[float, float]:
        """``(variance, dof)`` of TPS (or TPS/W) at the blocks' own time scale, what the
        between-reading term is measured beyond; the point's own where a row before the fast
        one was recorded has none."""
        if math.isfinite(self.tps_fast_var):
            return (self.tps_fast_var if tps else self.fast_var), self.tps_fast_dof
        return (
            (self.tps_within_var, self.tps_within_dof)
            if tps
            else (self.within_var, self.within_dof)
        )

    def restated(self, run_to_run: RunToRun) -> Precision:
        """The reading's precision with ``run_to_run`` in place of the term it carried."""
        power = (max(0.0, self.within_var - self.tps_within_var), self.within_dof)
        fast = (self.tps_fast_var, self.tps_fast_dof)
        stated = compose(
            (self.tps_within_var, self.tps_within_dof),
            (self.within_var, self.within_dof),
            self.power_u95_rel,
            (self.bias_rel, self.tps_bias_rel),
            run_to_run,
            self.power_step_w,
            self.t_s,
            (fast, _combined([fast, power])),
        )
        return dataclasses.replace(
            stated, power_bias_rel=self.power_bias_rel, power_sensors_rel=self.power_sensors_rel
        )

    @classmethod
    def pooled(cls, readings: Sequence[Reading], tps_per_w: float) -> Reading:
        """Several readings of one point (a confirmed point) pooled around ``tps_per_w``.

        The half-widths pool by inverse variance, widened by the Birge ratio where the readings
        disagree beyond them (the Particle Data Group's scale factor ``sqrt(chi2 / (m - 1))``
        when above 1): repeats that agree narrow the interval, repeats that disagree never do so
        silently. The biases are averaged; the between-run floor, common to them, stays.
        """
        known = [r for r in readings if r.known and r.stat_u95_rel > 0]
        if not known:
            return cls(tps_per_w, math.nan, 0.0)
        if len(known) == 1:
            return dataclasses.replace(known[0], tps_per_w=tps_per_w)
        stat, dof = _pooled_half_width(
            [(r.tps_per_w, _variance(r.stat_u95_rel, r.dof), r.dof) for r in known]
        )
        tps_stats = [
            (r.tps, _variance(r.tps_stat_u95_rel, r.tps_within_dof), r.tps_within_dof)
            for r in known
            if math.isfinite(r.tps_u95_rel) and r.tps_u95_rel > 0
        ]
        tps_bias = sum(r.tps_bias_rel for r in known) / len(known)
        tps_run_drift = sum(r.tps_run_drift_rel for r in known) / len(known)
        tps_stat, _ = _pooled_half_width(tps_stats) if tps_stats else (math.nan, math.nan)
        within, within_dof = _pooled_half_width(
            [(r.tps_per_w, r.within_var, r.within_dof) for r in known], scale=False
        )
        floor = max(r.floor_rel for r in known)  # common to the run: no repeat averages it
        return cls(
            tps_per_w,
            stat,
            sum(r.bias_rel for r in known) / len(known),
            math.hypot(tps_stat, t_quantile(math.inf) * floor, tps_bias + tps_run_drift),
            tps=math.nan,
            dof=dof,
            within_u95_rel=within,
            within_dof=within_dof,
            tps_bias_rel=tps_bias,
            floor_rel=floor,
            run_drift_rel=sum(r.run_drift_rel for r in known) / len(known),
            tps_run_drift_rel=tps_run_drift,
        )

    def tied_with(self, other: Reading) -> bool:
        """True when the two readings are within their own noise of each other."""
        return tied(
            self.tps_per_w,
            self.stat_u95_rel,
            self.total_bias_rel,
            other.tps_per_w,
            other.stat_u95_rel,
            other.total_bias_rel,
        )


def _variance(u95_rel: float, dof: float) -> float:
    """The relative variance behind a 95% half-width on ``dof`` degrees of freedom (NaN:
    normal)."""
    q = t_quantile(dof) if math.isfinite(dof) and dof > 0 else t_quantile(math.inf)
    return (u95_rel / q) ** 2 if math.isfinite(u95_rel) else math.nan


def _pooled_half_width(
    readings: Sequence[tuple[float, float, float]], *, scale: bool = True
) -> tuple[float, float]:
    """The 95% half-width (relative) of the inverse-variance mean of ``(figure, variance,
    dof)`` readings, Birge-scaled where they disagree (``scale``), and its degrees of freedom
    (their sum)."""
    ok = [(f, v, d) for f, v, d in readings if f > 0 and math.isfinite(v) and v > 0]
    if not ok:
        return math.nan, math.nan
    weights = [1.0 / v for _, v, _ in ok]
    var = 1.0 / sum(weights)
    dofs = [d if math.isfinite(d) and d > 0 else math.inf for _, _, d in ok]
    dof = sum(dofs)
    logs = [math.log(f) for f, _, _ in ok]
    mean = sum(w * y for w, y in zip(weights, logs, strict=True)) * var
    if scale and len(ok) > 1:
        chi2 = sum(w * (y - mean) ** 2 for w, y in zip(weights, logs, strict=True))
        var *= max(1.0, chi2 / (len(ok) - 1))
    return _half_width(var, dof), dof


def tied(
    tpw_a: float,
    stat_a: float,
    bias_a: float,
    tpw_b: float,
    stat_b: float,
    bias_b: float,
) -> bool:
    """True when two points' TPS/W are within their own noise of each other.

    Their difference is tested against the statistical half-widths in quadrature and the part
    of their drift biases that does not cancel (two points read while the card cooled alike
    both read low by about as much).
    """
    if not all(math.isfinite(v) for v in (tpw_a, tpw_b, stat_a, stat_b)):
        return False
    scale = (tpw_a + tpw_b) / 2.0
    if not scale > 0:
        return False
    gap = abs(tpw_a - tpw_b) / scale
    return gap <= math.sqrt(stat_a**2 + stat_b**2 + (bias_a - bias_b) ** 2)
