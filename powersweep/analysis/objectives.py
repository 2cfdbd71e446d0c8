"""The recommendation's objectives: one small selector class each, named by ``--objective``.

A selector picks one measured cap from the curve's points (repeats pooled); what else the pick
reports (``eta``, ``cost``...) it returns beside it.

The reasoning: docs/figures.md, "powersweep.analysis.objectives".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from powersweep.analysis.cap_points import CapPoint
from powersweep.errors import UsageError


@dataclass(frozen=True)
class Selection:
    """A selector's pick.

    Attributes:
        point: The chosen cap.
        weighed: What the cost objective adds to the recommendation (None: another objective).
    """

    point: CapPoint
    weighed: Weighed | None = None


@dataclass(frozen=True)
class Weighed:
    """The cost objective's terms at its pick.

    Attributes:
        eta: The weight of energy it was given.
        cost: The pick's cost (``eta * J/token + (1 - eta) * max power * s/token``).
        max_power_w: The highest draw the card could have, which prices time.
    """

    eta: float
    cost: float
    max_power_w: float


@dataclass(frozen=True)
class SelectionContext:
    """What a selector may need beside the points.

    Attributes:
        near_peak_cap_w: The near-peak cap (per GPU), already found.
        max_limit_w: The card's highest settable limit per GPU (NaN: unknown).
        n_gpus: The GPUs the curve's caps apply to.
    """

    near_peak_cap_w: float
    max_limit_w: float
    n_gpus: int


class Objective(Protocol):
    """Picks the recommended cap among the measured ones."""

    name: ClassVar[str]

    def select(self, points: Sequence[CapPoint], context: SelectionContext) -> Selection:
        """The chosen cap (``points`` sorted by cap, at least one)."""
        ...


def pick_sweet_spot(points: Sequence[CapPoint]) -> CapPoint:
    """The sweet spot: the measured cap with the highest TPS/W, at full precision.

    No fit or smoothing overrides a reading: near a boost-state transition the TPS/W curve has a
    kink that no smooth model follows, and a starred row that is not the best one breaks trust.
    Noise is shown (the caps tied with it, :mod:`powersweep.analysis.noise`) and resolved by
    measuring again (the sweep's confirm phase), never hidden in the pick. An exact tie goes to
    the lower (cheaper) cap.

    Args:
        points: Measured caps (repeats of a cap pooled).

    Returns:
        The cap with the highest TPS/W.
    """
    return max(points, key=lambda p: (p.tps / p.power_w, -p.cap_w))


@dataclass(frozen=True)
class TpsPerW:
    """The most tokens per joule: the sweet spot."""

    name: ClassVar[str] = "tps-per-w"

    def select(self, points: Sequence[CapPoint], context: SelectionContext) -> Selection:
        """The sweet spot."""
        return Selection(pick_sweet_spot(points))


@dataclass(frozen=True)
class NearPeak:
    """The lowest cap within ``--max-tps-loss`` of the best TPS (found by the analysis)."""

    name: ClassVar[str] = "near-peak"

    def select(self, points: Sequence[CapPoint], context: SelectionContext) -> Selection:
        """The near-peak cap."""
        return Selection(next(p for p in points if p.cap_w == context.near_peak_cap_w))


@dataclass(frozen=True)
class Cost:
    """Zeus's cost: ``eta * energy per token + (1 - eta) * max power * time per token``.

    Attributes:
        eta: Weight of energy, 0..1 (1: energy only, 0: time only).
    """

    name: ClassVar[str] = "cost"
    eta: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.eta <= 1.0:
            raise UsageError(f"--eta must be between 0 and 1, got {self.eta}")

    def select(self, points: Sequence[CapPoint], context: SelectionContext) -> Selection:
        """The cap of least cost; a tie goes to the lower cap."""
        # Zeus normalises time by the highest power the card could draw.
        max_power = (
            context.max_limit_w * context.n_gpus
            if math.isfinite(context.max_limit_w)
            else max(p.cap_total_w for p in points)
        )
        costs = [
            (
                self.eta * p.power_w / p.tps + (1.0 - self.eta) * max_power / p.tps
                if p.tps > 0
                else math.inf,
                p.cap_w,
                p,
            )
            for p in points
        ]
        cost, _, pick = min(costs, key=lambda c: (c[0], c[1]))
        return Selection(pick, Weighed(self.eta, cost, max_power))


OBJECTIVES: tuple[str, ...] = (TpsPerW.name, NearPeak.name, Cost.name)


def objective_named(name: str, *, eta: float = 0.5) -> Objective:
    """The selector for ``--objective NAME``.

    Raises:
        UsageError: An unknown objective, or ``eta`` out of 0..1.
    """
    if name == TpsPerW.name:
        return TpsPerW()
    if name == NearPeak.name:
        return NearPeak()
    if name == Cost.name:
        return Cost(eta)
    raise UsageError(f"unknown objective {name!r}; use one of {', '.join(OBJECTIVES)}")
