"""What the measured points of a sweep said, as the protocol's checks and stop rules read it.

Each point's last status, the figures the consistency checks compare a point with (narrative/code
rate ratios, prefill time per token), and each point's reading with its own precision (the
sequential windows' best so far, the curve's slope that prices a degree of drift).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from powersweep.analysis.precision import Reading
from powersweep.analysis.steadiness import contends
from powersweep.sweep.loads.base import History, LoadRun
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.sampling.consistency import prefill_by_rank, prefill_s_per_token, tps_ratio
from powersweep.sweep.sampling.measure import curve_slope


@dataclass
class PointLedger:
    """What the measured points said: each point's last status, and the figures the
    consistency checks compare a point with.

    Attributes:
        status: Final status per point key (a re-measurement replaces it).
        ratios: code/narrative rate ratio of each point measured ok, by point key.
        prefill_s_per_token: Median time to first token per prompt token of each ok point, by
            the point's position on its axis.
        prefill_by_rank: The same per rank of the prompt in its windows (each point measured
            ok or suspect: a suspect point's prompts are what the next point is judged by too).
        points: The point of each key.
    """

    status: dict[tuple[Any, ...], str] = field(default_factory=dict)
    ratios: dict[tuple[Any, ...], float] = field(default_factory=dict)
    prefill_s_per_token: dict[float, float] = field(default_factory=dict)
    prefill_by_rank: dict[float, dict[int, float]] = field(default_factory=dict)
    points: dict[tuple[Any, ...], SweepPoint] = field(default_factory=dict)
    readings: dict[tuple[Any, ...], Reading] = field(default_factory=dict)
    figures: dict[tuple[Any, ...], tuple[float, float]] = field(default_factory=dict)

    def local_slope(self, point: SweepPoint) -> float:
        """d ln(TPS) / dP between the point measured ok nearest to ``point`` on its axis and the
        next nearest whose draw tells a slope (a plateau's points draw alike: the first one off
        it does); NaN: fewer than two, or no draws far enough apart."""
        if not math.isfinite(point.position):
            return math.nan
        near = sorted(self.figures, key=lambda k: abs(self.points[k].position - point.position))
        if len(near) < 2:
            return math.nan
        tps_a, power_a = self.figures[near[0]]
        for other in near[1:]:
            slope = curve_slope(tps_a, power_a, self.figures[other])
            if math.isfinite(slope):
                return slope
        return math.nan

    def nearest_figures(self, point: SweepPoint) -> tuple[float, float] | None:
        """``(TPS, combined W)`` of the other point measured ok nearest to ``point`` on its
        axis (None: none yet)."""
        others = [k for k in self.figures if k != point.key]
        if not others or not math.isfinite(point.position):
            return None
        near = min(others, key=lambda k: abs(self.points[k].position - point.position))
        return self.figures[near]

    def contends(self, point: SweepPoint) -> bool:
        """``point`` may still be the best: the point measured ok nearest to it reads within
        :data:`~powersweep.analysis.steadiness.CONTENDS_MARGIN_REL` of the best so far (or
        fewer than two are measured). Its drift's bias matters only then."""
        near = self.nearest_figures(point)
        best = self.best_other(point)
        if near is None or best is None or near[1] <= 0:
            return True
        return contends(near[0] / near[1], best.tps_per_w)

    def best_other(self, point: SweepPoint) -> Reading | None:
        """The reading with the highest TPS/W of the points measured ok but ``point``."""
        others = [r for k, r in self.readings.items() if k != point.key]
        return max(others, key=lambda r: r.tps_per_w, default=None)

    def history(self, point: SweepPoint) -> History:
        """The other points' figures, for the checks of ``point``."""
        return History(
            ratios=tuple(r for k, r in self.ratios.items() if k != point.key),
            prefill_s_per_token={
                pos: v for pos, v in self.prefill_s_per_token.items() if pos != point.position
            },
            position=point.position,
            prefill_by_rank={
                pos: v for pos, v in self.prefill_by_rank.items() if pos != point.position
            },
        )

    def record(self, point: SweepPoint, row: Mapping[str, Any], run: LoadRun) -> None:
        """Keep the point's status and, when it was measured ok, its figures."""
        key = point.key
        self.points[key] = point
        self.status[key] = row["status"]
        self.ratios.pop(key, None)
        self.prefill_s_per_token.pop(point.position, None)
        self.readings.pop(key, None)
        self.figures.pop(key, None)
        self.prefill_by_rank.pop(point.position, None)
        by_rank = prefill_by_rank(run.requests, run.windows)
        if by_rank and row["status"] in ("ok", "suspect"):
            self.prefill_by_rank[point.position] = by_rank
        if row["status"] != "ok":
            return
        reading = Reading.of(row)
        if math.isfinite(reading.tps_per_w):
            self.readings[key] = reading
            self.figures[key] = (reading.tps_per_w * row["power_w"], row["power_w"])
        ratio = tps_ratio(row.get("narr_tps", math.nan), row.get("code_tps", math.nan))
        if math.isfinite(ratio):
            self.ratios[key] = ratio
        per_token = prefill_s_per_token(run.requests)
        if per_token:
            per_token.sort()
            self.prefill_s_per_token[point.position] = per_token[len(per_token) // 2]

    def failed(self) -> list[SweepPoint]:
        """The points whose last measurement failed."""
        return [self.points[k] for k, st in self.status.items() if st == "failed"]
