"""Card facts given on the command line for curves that do not carry them (a bare caps.csv).

The reasoning: docs/analyze.md, "powersweep.analysis.context".
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TypeVar

from powersweep.analysis.load import Curve
from powersweep.analysis.plausibility import MAX_PLAUSIBLE_W
from powersweep.analysis.run_record import RunGpu, RunRecord
from powersweep.errors import UsageError

_KEYS = ("default_limit_w", "min_limit_w", "max_limit_w")
T = TypeVar("T", str, int | float)


@dataclass(frozen=True)
class CardFacts:
    """What the user says about the card (None: not given).

    Attributes:
        gpu_name: The card's name.
        default_limit_w: Its default power limit, W.
        min_limit_w: Its lowest settable limit, W.
        max_limit_w: Its highest settable limit, W.
    """

    gpu_name: str | None = None
    default_limit_w: float | None = None
    min_limit_w: float | None = None
    max_limit_w: float | None = None

    def __post_init__(self) -> None:
        for key in _KEYS:
            value = getattr(self, key)
            if value is not None and not (math.isfinite(value) and 0 < value <= MAX_PLAUSIBLE_W):
                flag = "--" + key.removesuffix("_w").replace("_", "-")
                raise UsageError(
                    f"{flag} must be positive watts, at most {MAX_PLAUSIBLE_W:g}, got {value:g}"
                )
        lo, mid, hi = self.min_limit_w, self.default_limit_w, self.max_limit_w
        given = [v for v in (lo, mid, hi) if v is not None]
        if given != sorted(given):
            raise UsageError(
                "the limits must satisfy --min-limit <= --default-limit <= --max-limit"
            )

    @property
    def empty(self) -> bool:
        """True when nothing was given."""
        return self.gpu_name is None and all(getattr(self, k) is None for k in _KEYS)


def with_card_facts(curve: Curve, facts: CardFacts) -> Curve:
    """The curve with the given facts filled in where its run.json does not have them.

    A run directory's run.json was written by the sweep from the card itself, so it wins; a
    given fact that disagrees with it becomes a note (a finding), never a silent override.

    Args:
        curve: The loaded curve.
        facts: What the user said about the card.

    Returns:
        The curve, its ``run`` holding the facts as run.json's first ``gpus`` entry would.
    """
    if facts.empty:
        return curve
    run = curve.run or RunRecord()
    gpus = list(run.gpus or [])
    first = gpus[0] if gpus else RunGpu()
    notes = list(curve.notes)

    def fill(key: str, have: T | None, given: T | None) -> T | None:
        """run.json's value where it has one (a given one that differs is noted), else the
        given one."""
        if given is None:
            return have
        if have is None or have == "":
            return given
        if have != given:
            notes.append(f"run.json says {key} = {have}; the value given ({given}) is ignored")
        return have

    first = dataclasses.replace(
        first,
        name=fill("name", first.name, facts.gpu_name),
        default_limit_w=fill("default_limit_w", first.default_limit_w, facts.default_limit_w),
        min_limit_w=fill("min_limit_w", first.min_limit_w, facts.min_limit_w),
        max_limit_w=fill("max_limit_w", first.max_limit_w, facts.max_limit_w),
    )
    if gpus:
        gpus[0] = first
    else:
        # No run.json: one entry per card of the set, as the sweep writes it.
        counts = curve.caps["n_gpus"].drop_nulls()
        n = int(counts.max()) if counts.len() else 1  # type: ignore[arg-type]
        gpus = [dataclasses.replace(first, index=i) for i in range(max(n, 1))]
    return dataclasses.replace(curve, run=dataclasses.replace(run, gpus=gpus), notes=tuple(notes))
