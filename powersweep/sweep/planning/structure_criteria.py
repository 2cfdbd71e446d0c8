"""The structure criterion of adaptive planning, and the grid of caps every criterion works on.

The reasoning: docs/reference.md, "powersweep.sweep.planning.structure_criteria".
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
from powersweep.analysis.structure import FLAT_SIGMAS, follows_cap, tps_sigmas
from powersweep.sweep.planning.measured import (
    CEILING_EDGE,
    CEILING_FILL,
    PLATEAU_EDGE,
    PLATEAU_FILL,
    CapMeasurement,
    PlannedCap,
)

# A cap's draw is "under the cap" (off the cap line) when it is this far below it.
UNDER_CAP_FRAC = 0.012
UNDER_CAP_MIN_W = 2.5
# The noise margin on a flat run's draw when finding the first cap that can reach it.
LEVEL_TOL_FRAC = 0.003
LEVEL_TOL_MIN_W = 0.5
# Edges (near-peak crossing, upper plateau edge) are bracketed by caps at most this many steps
# apart: the reported cap is then within one step of the dense sweep's.
EDGE_BRACKET_STEPS = 2
# Two flat caps belong to one flat run when their draws differ by at most this share.
SAME_LEVEL_FRAC = 0.03


class StructureCriteria:
    """The structure criterion and the grid helpers of
    :class:`~powersweep.sweep.planning.strategy.AdaptivePlanner` (its base; the attributes below
    are set by its constructor)."""

    grid: list[float]
    step_w: float
    n_gpus: int
    slowdown_temp_c: float

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
        ordered = self._points(done)
        sigma = tps_sigmas(ordered)
        for k, p in enumerate(ordered):
            c, m = p.cap_w, done[p.cap_w]
            cap_total = c * self.n_gpus
            under = cap_total - m.power_w > max(UNDER_CAP_FRAC * cap_total, UNDER_CAP_MIN_W)
            # Heat or a starved GPU holds the draw there, not a boost state or the workload:
            # the analysis never reports such caps as a region, so there is nothing to refine.
            if is_thermal(p, self.slowdown_temp_c) or is_under_loaded(p):
                under = False
            # a cap whose TPS follows it binds a bursty load under it: no flat run there
            if under and follows_cap(ordered, k, upward_only=True):
                under = False
            if under and current:
                level = statistics.median(done[x].power_w for x in current)
                tps = statistics.median(done[x].tps for x in current)
                flat_tps = abs(math.log(m.tps / tps)) <= FLAT_SIGMAS * math.sqrt(2.0) * sigma[k]
                if abs(m.power_w - level) <= SAME_LEVEL_FRAC * level and flat_tps:
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
