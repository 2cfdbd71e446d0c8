"""Adaptive cap planning: a coarse pass, then refinement only where the answer can change.

A dense sweep measures every cap of the envelope at ``--step-size``; most of them land far from
anything a user acts on. :class:`AdaptivePlanner` measures a coarse pass (about every fourth cap,
both ends included), then refines at the step size:

* **bracket peak**: around the best TPS/W cap until both of its step neighbours are measured (the
  first probe into a wide gap goes where a parabola through the three best caps peaks);
* **near-peak edge**: where TPS crosses ``(1 - max_tps_loss_pct)`` of the best TPS for the last
  time below the best-TPS cap (the analysis' rule, :mod:`powersweep.analysis.near_peak`), until
  the caps on either side of that crossing are at most two steps apart;
* **plateau edge** / **ceiling edge**: around every run of caps whose draw stays clearly under the
  cap. The lower edge is pinned by physics: draw never exceeds the cap, so the first cap that can
  sit on a flat region at draw ``L`` is the lowest cap at or above ``L``; it is measured. The upper
  edge of a plateau is bisected until the last flat cap and the first cap above it are at most
  two steps apart. Then the region is filled (midpoints of its widest gaps) until the analysis
  (:func:`powersweep.analysis.structure.find_regions`, run on the measured caps exactly as
  ``powersweep analyze`` will) reports it. A short draw ceiling at the top of the envelope (three
  caps) shows in the coarse pass as a top cap drawing clearly under its cap; the lowest cap that
  can reach its draw and the fill between them are then measured. The analysis is asked with
  the grid's step (as ``analyze`` takes it from run.json ``caps_planned``), so its ceiling
  headroom rule is the dense sweep's. Caps the analysis calls thermal-limited or under-loaded
  (thermal clock-event bit, temperature at slowdown, low utilization) never start a flat run:
  heat, not a boost state or the workload, holds their draw, and no sweep reports them as a
  region.

Last, while the budget leaves a cap to spare, the near-peak crossing is narrowed to neighbouring
caps (a two-step bracket leaves its middle cap to noise) and then the best cap's step
neighbours are measured.

Budget: at most half the grid's caps (``MAX_CAPS_SHARE``, never fewer than the coarse pass). A
reading near a threshold can keep an edge moving; past the budget the caps still asked for are
not measured but named in :attr:`AdaptivePlanner.left_out`, peak first, then the near-peak edge,
then structure, so what is left out is what matters least.

Stop criteria: :meth:`AdaptivePlanner.next_caps` returns nothing when the budget is spent, or
when every coarse cap is measured, the best TPS/W cap has both step neighbours measured (or is
at an end of the envelope), the near-peak crossing is bracketed within two steps (one, with caps
to spare), and every flat run has its lowest possible cap measured, its upper edge bracketed
within two steps and is found by the analysis on the measured caps. Each criterion only ever
asks for unmeasured caps of the envelope, so planning ends after at most every cap was measured.

Pure: no I/O and no clock. The driver measures what it is told (in its usual descending order,
see :func:`plan_order`) and calls :meth:`AdaptivePlanner.next_caps` again.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from powersweep.analysis.cap_points import (
    MIN_REGION_CAPS,
    CapPoint,
    Region,
    is_thermal,
    is_under_loaded,
)
from powersweep.analysis.near_peak import near_peak_index, region_groups
from powersweep.analysis.structure import find_regions
from powersweep.sweep.planning.measured import (
    BRACKET_PEAK,
    CEILING_EDGE,
    CEILING_FILL,
    COARSE,
    NEAR_PEAK_EDGE,
    PLATEAU_EDGE,
    PLATEAU_FILL,
    CapMeasurement,
    PlannedCap,
    coarse_order,
    plan_order,
    usable,
)

__all__ = [
    "BRACKET_PEAK",
    "CEILING_EDGE",
    "CEILING_FILL",
    "COARSE",
    "DEFAULT_COARSE_STEPS",
    "MAX_CAPS_SHARE",
    "NEAR_PEAK_EDGE",
    "PLATEAU_EDGE",
    "PLATEAU_FILL",
    "AdaptivePlanner",
    "CapMeasurement",
    "PlannedCap",
    "coarse_order",
    "plan_order",
]

DEFAULT_COARSE_STEPS = 4
# A cap's draw is "under the cap" (off the cap line) when it is this far below it.
UNDER_CAP_FRAC = 0.012
UNDER_CAP_MIN_W = 2.5
# The noise margin on a flat run's draw when finding the first cap that can reach it.
LEVEL_TOL_FRAC = 0.003
LEVEL_TOL_MIN_W = 0.5
# Edges (near-peak crossing, upper plateau edge) are bracketed by caps at most this many steps
# apart: the reported cap is then within one step of the dense sweep's.
EDGE_BRACKET_STEPS = 2
# An adaptive sweep measures at most this share of the grid (never fewer caps than its coarse
# pass): past it, a dense sweep would cost little more. Noise can keep moving an edge a little;
# the budget stops that chase, and the caps it leaves out are reported (``left_out``).
MAX_CAPS_SHARE = 0.5
# The near-peak crossing's and the best cap's step neighbours are measured only while this many
# caps more would still leave the sweep under its budget: the extra reading may move the peak
# or an edge, and those get their caps first.
SPARE_CAPS = 1
# Two flat caps belong to one flat run when their draws differ by at most this share.
SAME_LEVEL_FRAC = 0.03


class AdaptivePlanner:
    """Plans an adaptive sweep over a grid of caps.

    Args:
        envelope_caps: Every cap a dense sweep would measure (the grid), any order.
        step_w: The refinement step (``--step-size``), W.
        coarse_step_w: Spacing of the coarse pass; None uses ``DEFAULT_COARSE_STEPS`` steps.
        n_gpus: GPUs in the set (draw is combined, caps are per GPU).
        max_tps_loss_pct: The near-peak TPS loss the analysis reports (``--max-tps-loss``).
        peak_bracket_steps: The best TPS/W cap is done when its measured neighbours are at most
            this many steps away on both sides. With 2 (the default) a unimodal curve's true
            peak is within one step of the reported one; 1 measures both step neighbours.
        slowdown_temp_c: The card's thermal slowdown threshold (NaN if unknown), used as the
            analysis uses it to call a hot cap under its cap thermal-limited, not flat.

    Raises:
        ValueError: No caps, or a step that is not positive.
    """

    def __init__(
        self,
        envelope_caps: Sequence[float],
        step_w: float,
        coarse_step_w: float | None = None,
        *,
        n_gpus: int = 1,
        max_tps_loss_pct: float = 5.0,
        peak_bracket_steps: int = 2,
        slowdown_temp_c: float = math.nan,
    ) -> None:
        if not envelope_caps:
            raise ValueError("adaptive planning needs at least one cap")
        if not step_w > 0:
            raise ValueError(f"step must be positive, got {step_w:g}")
        self.grid = sorted({round(float(c), 6) for c in envelope_caps})
        self.step_w = float(step_w)
        coarse = coarse_step_w if coarse_step_w else DEFAULT_COARSE_STEPS * step_w
        self.coarse_every = max(1, round(coarse / step_w))
        self.n_gpus = max(1, n_gpus)
        self.max_tps_loss_pct = max_tps_loss_pct
        self.peak_bracket_steps = max(1, peak_bracket_steps)
        self.slowdown_temp_c = slowdown_temp_c
        self.max_caps = max(len(self.initial_caps()), int(MAX_CAPS_SHARE * len(self.grid)))
        self.left_out: list[tuple[float, str]] = []

    # --- public -------------------------------------------------------------------------------

    def initial_caps(self) -> list[float]:
        """The coarse pass: every ``coarse_every``-th grid cap from the bottom, plus the top."""
        picks = self.grid[:: self.coarse_every]
        if picks[-1] != self.grid[-1]:
            # A last coarse gap under half the coarse spacing would waste a cap: move the last
            # regular pick to the top instead of adding one.
            if len(picks) > 2 and self._steps(picks[-1], self.grid[-1]) < self.coarse_every / 2:
                picks[-1] = self.grid[-1]
            else:
                picks.append(self.grid[-1])
        if len(picks) > 4:
            # Efficiency rises from the floor on every card seen: the floor is measured only
            # when the curve's best lies at the lowest coarse cap (see ``_peak``).
            picks = picks[1:]
        return picks

    def next_caps(self, measured: Mapping[float, CapMeasurement]) -> list[tuple[float, str]]:
        """Caps to measure next, with the reason; empty when the answer cannot change.

        Args:
            measured: Every cap measured so far (status ok, finite draw and TPS) and its result.
                Caps off the grid are used as they are; failed caps should be left out.

        Returns:
            ``(cap_w, reason)`` pairs, at most one per reason kind and region, no cap twice,
            and never more than the budget (``max_caps``) leaves; the caps it could not take
            are in ``left_out`` until the next call.
        """
        done = {round(c, 6): m for c, m in measured.items() if usable(m)}
        missing = [c for c in self.initial_caps() if c not in done and c not in measured]
        if missing:
            return [(c, COARSE) for c in missing]
        if not done:
            return []
        out: list[PlannedCap] = []
        tried = {round(c, 6) for c in measured}
        regions = self.regions(done)
        for plan in (
            self._peak(done, tried),
            self._near_peak(done, regions, tried),
            *self._structure(done, regions, tried),
        ):
            if plan is not None and all(p.cap_w != plan.cap_w for p in out):
                out.append(plan)
        room = max(self.max_caps - len(tried), 0)
        # Peak first, then the near-peak edge, then structure: what the budget cannot take is
        # what matters least, and it is kept to be reported.
        self.left_out = [(p.cap_w, p.reason) for p in out[room:]]
        out = out[:room]
        if not out and not self.left_out and len(tried) + SPARE_CAPS < self.max_caps:
            # Everything is settled, with caps to spare: narrow the near-peak crossing to
            # neighbours (left two steps wide, a reading on either side of the floor that noise
            # flips moves the dense sweep's answer two steps away), then measure the best cap's
            # step neighbours (the sweet spot is already within a step of the dense one; then it
            # is the one a dense sweep would star). In that order, on simulated noisy readings,
            # both figures matched dense a little more often than the other way round.
            last = self._near_peak(done, regions, tried, bracket_steps=1) or self._peak_neighbour(
                done, tried
            )
            if last is not None:
                out.append(last)
        return [(p.cap_w, p.reason) for p in out]

    def _peak_neighbour(
        self, done: Mapping[float, CapMeasurement], tried: set[float]
    ) -> PlannedCap | None:
        """An unmeasured step neighbour of the best TPS/W cap, on its more promising side."""
        caps = sorted(done)
        best = max(caps, key=lambda c: (done[c].tps_per_w, -c))
        sides = []
        for sign in (-1.0, 1.0):
            nb = self._snap(best + sign * self.step_w)
            if nb is None or nb in tried or abs(nb - best) < 1e-6:
                continue
            # the nearest measured cap on that side: the better it is, the likelier the optimum
            # lies between it and the best
            beyond = [c for c in caps if (c - best) * sign > 0]
            near = min(beyond, key=lambda c: abs(c - best)) if beyond else None
            sides.append((done[near].tps_per_w if near is not None else math.inf, nb))
        if not sides:
            return None
        return PlannedCap(max(sides)[1], BRACKET_PEAK)

    def regions(self, measured: Mapping[float, CapMeasurement]) -> list[Region]:
        """The analysis' plateaus and ceilings on the measured caps (as ``analyze`` sees them)."""
        points = self._points({c: m for c, m in measured.items() if usable(m)})
        # The grid's step, as ``analyze`` takes it from run.json ``caps_planned``: the measured
        # subset's gaps are several steps wide.
        return find_regions(
            points,
            [p.cap_w for p in points],
            slowdown_temp_c=self.slowdown_temp_c,
            step_w=self.step_w,
        )

    # --- criteria -----------------------------------------------------------------------------

    def _peak(self, done: Mapping[float, CapMeasurement], tried: set[float]) -> PlannedCap | None:
        caps = sorted(done)
        best = max(caps, key=lambda c: (done[c].tps_per_w, -c))
        k = caps.index(best)
        lo = caps[k - 1] if k > 0 else None
        hi = caps[k + 1] if k + 1 < len(caps) else None
        if lo is None and best > self.grid[0] + 1e-6:
            lo = self.grid[0]  # unmeasured floor below the best: bracket towards it
        wide = {
            side: nb
            for side, nb in (("lo", lo), ("hi", hi))
            if nb is not None
            # an unmeasured floor is measured whatever the distance: the optimum may be it
            and (nb not in done or self._steps(nb, best) > self.peak_bracket_steps + 1e-6)
        }
        if not wide:
            return None
        # Probe first on the side where a parabola through the best cap and its neighbours
        # peaks (else towards the better neighbour).
        vertex = _parabola_vertex(caps, done, k)
        if vertex is not None and vertex != best:
            side = "hi" if vertex > best else "lo"
        elif lo is not None and lo not in done:
            side = "lo"  # best at the lowest measured cap: the optimum may lie below it
        elif lo is not None and hi is not None:
            side = "hi" if done[hi].tps_per_w > done[lo].tps_per_w else "lo"
        else:
            side = "hi" if hi is not None else "lo"
        if side not in wide:
            side = next(iter(wide))
        nb = wide[side]
        sign = 1.0 if side == "hi" else -1.0
        if nb not in done and self._steps(nb, best) <= 2 * self.peak_bracket_steps + 1e-6:
            target = nb
        elif self._steps(nb, best) > 2 * self.peak_bracket_steps + 1e-6:
            # A wide gap: jump to the parabola's peak when it lies in the gap, else halve it.
            inside = vertex is not None and min(nb, best) < vertex < max(nb, best)
            target = vertex if inside and vertex is not None else (nb + best) / 2
        else:
            # Whatever the probe shows, both sides end within the bracket.
            target = best + sign * self.peak_bracket_steps * self.step_w
        # an unmeasured floor is itself a candidate, not only the caps between
        low_end = nb - self.step_w if nb not in done else min(nb, best)
        cap = self._grid_between(target, min(low_end, best), max(nb, best), tried)
        return PlannedCap(cap, BRACKET_PEAK) if cap is not None else None

    def _near_peak(
        self,
        done: Mapping[float, CapMeasurement],
        regions: Sequence[Region],
        tried: set[float],
        bracket_steps: float = EDGE_BRACKET_STEPS,
    ) -> PlannedCap | None:
        caps = sorted(done)
        # The analysis' own rule, on the regions it finds in these caps.
        groups = region_groups(caps, regions)
        k = near_peak_index([done[c].tps for c in caps], groups, self.max_tps_loss_pct)
        if k == 0:
            return None
        a, b = caps[k - 1], caps[k]
        if self._steps(a, b) <= bracket_steps + 1e-6:
            return None
        # Bisect: one probe turns a four-step gap (the coarse spacing) into two-step ones.
        cap = self._grid_between((a + b) / 2, a, b, tried)
        return PlannedCap(cap, NEAR_PEAK_EDGE) if cap is not None else None

    def _structure(
        self, done: Mapping[float, CapMeasurement], regions: Sequence[Region], tried: set[float]
    ) -> list[PlannedCap | None]:
        caps = sorted(done)
        out: list[PlannedCap | None] = []
        for run in self._flat_runs(done):
            top = run[-1] == caps[-1]
            edge, fill = (CEILING_EDGE, CEILING_FILL) if top else (PLATEAU_EDGE, PLATEAU_FILL)
            level = statistics.median(done[c].power_w for c in run)
            # Draw never exceeds the cap: no cap below the level can be on this flat run.
            first_possible = self._snap_up(level / self.n_gpus - self._level_tol(level))
            last_possible = run[-1] if top else caps[caps.index(run[-1]) + 1] - self.step_w
            lowest = first_possible if first_possible is not None else run[0]
            if sum(1 for g in self.grid if lowest - 1e-6 <= g <= last_possible + 1e-6) < (
                MIN_REGION_CAPS
            ):
                # Too few caps fit between the lowest cap that can reach this draw and the next
                # cap off it: no sweep, dense or adaptive, can report a region here.
                continue
            if first_possible is not None and first_possible < run[0]:
                if first_possible not in tried:
                    out.append(PlannedCap(first_possible, edge))
                    continue
                # Measured and not flat: the run starts at the next grid cap above it.
                nxt = self._grid_between(
                    first_possible + self.step_w, first_possible, run[0], tried
                )
                if nxt is not None and self._steps(first_possible, run[0]) > 1 + 1e-6:
                    out.append(PlannedCap(nxt, edge))
                    continue
            if not top:
                above = caps[caps.index(run[-1]) + 1]
                if self._steps(run[-1], above) > EDGE_BRACKET_STEPS + 1e-6:
                    cap = self._grid_between((run[-1] + above) / 2, run[-1], above, tried)
                    if cap is not None:
                        out.append(PlannedCap(cap, edge))
                        continue
            extra = self._edge_context(run, regions, tried)
            if extra is not None:
                out.append(PlannedCap(extra, edge))
                continue
            if not self._reported(run, regions):
                cap = self._fill(run, tried)
                if cap is not None:
                    out.append(PlannedCap(cap, fill))
                continue
            cap = self._shoulder(run, caps, tried)
            if cap is not None:
                out.append(PlannedCap(cap, edge))
        return out

    def _shoulder(
        self, run: Sequence[float], caps: Sequence[float], tried: set[float]
    ) -> float | None:
        """A cap between a reported flat run and the measured cap below it, until they are
        neighbours.

        Physics pins a flat level's first cap (draw never exceeds the cap), but real draws
        often leave the cap line before they level off (a shoulder: short of the cap while
        still rising), and the dense sweep's region starts where the draw first falls short.
        Asked once the region is reported, so the budget's last caps go to it.
        """
        below = [c for c in caps if c < run[0] - 1e-6]
        if not below or self._steps(below[-1], run[0]) <= 1 + 1e-6:
            return None
        return self._grid_between((below[-1] + run[0]) / 2, below[-1], run[0], tried)

    # --- structure helpers --------------------------------------------------------------------

    def _flat_runs(self, done: Mapping[float, CapMeasurement]) -> list[list[float]]:
        """Runs of consecutive measured caps whose draw sits under the cap at one level."""
        runs: list[list[float]] = []
        current: list[float] = []
        points = {p.cap_w: p for p in self._points(done)}
        for c in sorted(done):
            m = done[c]
            cap_total = c * self.n_gpus
            under = cap_total - m.power_w > max(UNDER_CAP_FRAC * cap_total, UNDER_CAP_MIN_W)
            # Heat or a starved GPU holds the draw there, not a boost state or the workload:
            # the analysis never reports such caps as a region, so there is nothing to refine.
            p = points[c]
            if is_thermal(p, self.slowdown_temp_c) or is_under_loaded(p):
                under = False
            if under and current:
                level = statistics.median(done[x].power_w for x in current)
                if abs(m.power_w - level) <= SAME_LEVEL_FRAC * level:
                    current.append(c)
                    continue
            if current:
                runs.append(current)
            current = [c] if under else []
        if current:
            runs.append(current)
        return runs

    def _edge_context(
        self, run: Sequence[float], regions: Iterable[Region], tried: set[float]
    ) -> float | None:
        """The cap below a region the analysis starts on a cap still at its cap line.

        With few caps around it the analysis cannot tell the last power-limited cap from the
        first flat one (its noise estimate is coarse); the step below gives it the slope.
        """
        for r in regions:
            if r.start_w < run[0] - 1e-6 <= r.end_w:
                below = self._snap(r.start_w - self.step_w)
                if below is not None and below not in tried and below < r.start_w:
                    return below
        return None

    def _reported(self, run: Sequence[float], regions: Iterable[Region]) -> bool:
        # A run of one measured cap with nothing flat around it at the step is not a region a
        # dense sweep reports unless three grid caps fit in it; the fill decides that.
        return any(r.start_w <= run[0] + 1e-06 and r.end_w >= run[-1] - 1e-06 for r in regions)

    def _fill(self, run: Sequence[float], tried: set[float]) -> float | None:
        """The grid cap nearest the midpoint of the run's widest unmeasured gap."""
        gaps = sorted(
            ((b - a, a, b) for a, b in itertools.pairwise(run) if self._steps(a, b) > 1 + 1e-6),
            reverse=True,
        )
        for _, a, b in gaps:
            cap = self._grid_between((a + b) / 2, a, b, tried)
            if cap is not None:
                return cap
        return None

    def _level_tol(self, level_w: float) -> float:
        # Only the noise of a cap's median draw: a wider margin would probe caps that cannot
        # reach the level.
        return max(LEVEL_TOL_FRAC * level_w, LEVEL_TOL_MIN_W)

    # --- grid helpers -------------------------------------------------------------------------

    def _steps(self, a: float, b: float) -> float:
        return abs(b - a) / self.step_w

    def _snap(self, target: float) -> float | None:
        near = min(self.grid, key=lambda g: abs(g - target))
        return near if abs(near - target) <= self.step_w / 2 + 1e-6 else None

    def _snap_up(self, target: float) -> float | None:
        return next((g for g in self.grid if g >= target - 1e-6), None)

    def _grid_between(self, target: float, lo: float, hi: float, tried: set[float]) -> float | None:
        """The untried grid cap strictly between lo and hi nearest to target."""
        inside = [g for g in self.grid if lo + 1e-6 < g < hi - 1e-6 and g not in tried]
        if not inside:
            return None
        return min(inside, key=lambda g: (abs(g - target), g))

    def _points(self, done: Mapping[float, CapMeasurement]) -> list[CapPoint]:
        return [
            CapPoint(
                cap_w=c,
                cap_total_w=c * self.n_gpus,
                power_w=m.power_w,
                tps=m.tps,
                sm_clock_mhz=m.sm_clock_mhz,
                util_pct=m.util_pct,
                temp_max_c=m.temp_max_c,
                thermal_throttle_pct=m.thermal_throttle_pct,
            )
            for c, m in sorted(done.items())
        ]


def _parabola_vertex(
    caps: Sequence[float], done: Mapping[float, CapMeasurement], k: int
) -> float | None:
    """Cap where a parabola through the best cap and its measured neighbours peaks."""
    if k == 0 or k + 1 >= len(caps):
        return None
    x0, x1, x2 = caps[k - 1], caps[k], caps[k + 1]
    y0, y1, y2 = (done[x].tps_per_w for x in (x0, x1, x2))
    denom = (x0 - x1) * (x0 - x2) * (x1 - x2)
    if denom == 0:
        return None
    a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denom
    b = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / denom
    if a >= 0:
        return None
    return -b / (2 * a)
