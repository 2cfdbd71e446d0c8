"""Adaptive cap planning: a coarse pass, then refinement only where the answer can change.

A dense sweep measures every cap of the envelope at ``--step-size``; most of them land far from
anything a user acts on.

The reasoning: docs/reference.md, "powersweep.sweep.planning.strategy".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from powersweep.analysis.cap_points import Region
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
from powersweep.sweep.planning.structure_criteria import EDGE_BRACKET_STEPS, StructureCriteria

__all__ = [
    "BRACKET_PEAK",
    "CEILING_EDGE",
    "CEILING_FILL",
    "COARSE",
    "DEFAULT_COARSE_STEPS",
    "MAX_CAPS_SHARE",
    "MIN_ADAPTIVE_CAPS",
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
# An adaptive sweep measures at most this share of the grid (never fewer caps than its coarse
# pass): past it, a dense sweep would cost little more. Noise can keep moving an edge a little;
# the budget stops that chase, and the caps it leaves out are reported (``left_out``).
MAX_CAPS_SHARE = 0.5
# ... and never fewer than this many (the whole grid when it is smaller): a best cap with a
# measured one on each side (an answer needs three, analysis.claims) and the near-peak edge
# bracketed take about six; half a grid of ten or fewer caps cannot place them.
MIN_ADAPTIVE_CAPS = 6
# The near-peak crossing's and the best cap's step neighbours are measured only while this many
# caps more would still leave the sweep under its budget: the extra reading may move the peak
# or an edge, and those get their caps first.
SPARE_CAPS = 1


class AdaptivePlanner(StructureCriteria):
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
        self.max_caps = max(
            len(self.initial_caps()),
            int(MAX_CAPS_SHARE * len(self.grid)),
            min(MIN_ADAPTIVE_CAPS, len(self.grid)),
        )
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
