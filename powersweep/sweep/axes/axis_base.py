"""What an axis is: the one seam between what a sweep varies and everything that reads it.

A sweep varies one thing per point (the power limit, an SM clock lock, a memory clock lock, both
locks on a grid).

The reasoning: docs/architecture.md, "powersweep.sweep.axes.axis_base".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, cast

from powersweep.analysis.context import CardFacts
from powersweep.analysis.load import Curve
from powersweep.analysis.objectives import TpsPerW
from powersweep.analysis.result_files import write_analysis
from powersweep.analysis.result_types import JsonRecord
from powersweep.analysis.serving import ServingOptions
from powersweep.clock import Clock
from powersweep.sweep.estimate import check_plan_time
from powersweep.sweep.gpu import Gpu
from powersweep.sweep.options import SweepOptions
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.planning.undervolt_steps import UndervoltPlan
from powersweep.sweep.resume import ResumeState

R = TypeVar("R", bound=JsonRecord)


@dataclass(frozen=True)
class PlannedPoints:
    """What a sweep measures: its points and the caps they run under.

    Attributes:
        caps_w: The caps to measure (power axis), or the one limit a clock sweep holds.
        points: The clock-lock points (empty on the power axis, where the caps are the points).
        undervolt: The undervolt search's bounds (its steps are chosen as it goes).
    """

    caps_w: list[float]
    points: list[SweepPoint] = field(default_factory=list)
    undervolt: UndervoltPlan | None = None


@dataclass(frozen=True)
class AnalysisSettings:
    """What the user asked of an analysis (``analyze`` flags, the sweep's own report).

    Attributes:
        max_tps_loss_pct: TPS loss against the best that the near-peak point may cost.
        objective: The recommendation's objective (:mod:`powersweep.analysis.objectives`).
        eta: Weight of energy in the ``cost`` objective.
        serving: A tariff and latency targets.
        card: Facts about the card a bare caps.csv lacks (name, limits).
        bootstrap: Resamples for the intervals where a point has no repeats (0: none).
    """

    max_tps_loss_pct: float = 5.0
    objective: str = TpsPerW.name
    eta: float = 0.5
    serving: ServingOptions = field(default_factory=ServingOptions)
    card: CardFacts | None = None
    bootstrap: int = 1000


class SweepAxis(ABC, Generic[R]):
    """One axis: its name (the ``--axis`` value), its words, and how its curves are read.

    ``R`` is the axis's typed analysis (:class:`~powersweep.analysis.result_types.PowerAnalysis`,
    :class:`~powersweep.analysis.clock_result_types.ClockAnalysis`).

    Attributes:
        name: The ``--axis`` value (``power``, ``sm-clock``...).
        noun: What one point is called in messages (``cap``, ``point``).
        locks_clocks: Its points lock clocks (the restore journal records locks).
    """

    name: ClassVar[str]
    noun: ClassVar[str]
    locks_clocks: ClassVar[bool]
    fewer_flags: ClassVar[str]
    # the axis's result type (R): what analyze builds and read reads
    result_type: ClassVar[type[JsonRecord]]

    @abstractmethod
    def plan(
        self,
        options: SweepOptions,
        gpus: list[Gpu],
        warn: Callable[[str], None],
        clock: Clock | None = None,
    ) -> PlannedPoints:
        """The points to measure on these GPUs (``clock``: the rig's, whose wall time bounds the
        plan too).

        Raises:
            UsageError: A plan too large or longer than a day.
            GpuError: The card cannot say what the plan needs (its supported clocks).
        """

    @abstractmethod
    def resumed(self, options: SweepOptions, gpus: list[Gpu], left: ResumeState) -> PlannedPoints:
        """The points a resumed sweep has left."""

    @abstractmethod
    def sets_limit(self, options: SweepOptions) -> bool:
        """True when the sweep sets the power limit (the cards must let it be set)."""

    def check_time(self, options: SweepOptions, n_points: int, clock: Clock | None) -> None:
        """Refuse a plan longer than a day, in this axis's words.

        Raises:
            UsageError: The plan may take more than a day.
        """
        check_plan_time(options, n_points, clock, noun=f"{self.noun}s", fewer=self.fewer_flags)

    @abstractmethod
    def matches(self, curve: Curve) -> bool:
        """True when a saved curve was measured on this axis (its columns, its run.json)."""

    @abstractmethod
    def analyze(self, curve: Curve, settings: AnalysisSettings) -> R:
        """The curve's analysis, typed (``to_json()`` is what ``analysis.json`` holds).

        Raises:
            UsageError: A setting is out of range.
        """

    def read(self, data: Mapping[str, Any]) -> R:
        """A saved analysis of this axis, typed.

        Raises:
            UsageError: It does not follow the schema.
        """
        return cast(R, self.result_type.from_json(data))

    @abstractmethod
    def answer(self, result: R) -> JsonRecord | None:
        """The point that answers the question (None: no usable point)."""

    @abstractmethod
    def summary(self, curve: Curve, result: R) -> str:
        """The paste-ready markdown summary."""

    @abstractmethod
    def headline(self, result: R) -> str | None:
        """The answer in one line, printed when a sweep ends (None: no answer)."""

    def write_outputs(self, result: R, summary: str, out_dir: Path) -> list[Path]:
        """Write ``analysis.json`` and the summary as ``summary.md``, each whole.

        Raises:
            PowersweepError: A file cannot be written.
        """
        return write_analysis(result, summary, out_dir)

    @abstractmethod
    def charts(
        self,
        curve: Curve,
        result: R,
        out_dir: Path,
        *,
        formats: Sequence[str],
        title: str | None,
    ) -> list[Path]:
        """Draw the axis's charts into ``out_dir`` (matplotlib is imported here, when drawn).

        Raises:
            UsageError: A bad format, or nothing to plot.
            PowersweepError: A file cannot be written.
        """

    @abstractmethod
    def tied(self, result: R, point: SweepPoint) -> bool:
        """True when the analysis still ties ``point`` with the best (the confirm phase)."""

    @abstractmethod
    def confirm_record(self, result: R) -> dict[str, Any]:
        """What run.json's ``confirm`` records of the analysis after the confirm phase."""
