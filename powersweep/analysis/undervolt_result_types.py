"""The analysis of an undervolt search, typed (``analysis.json`` with ``kind`` ``undervolt``).

The same rules as :mod:`powersweep.analysis.result_types`: frozen dataclasses, one
``to_json``/``from_json`` each, null as ``None``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from msgspec import UNSET, UnsetType

from powersweep.analysis.findings import Finding
from powersweep.analysis.result_types import (
    Answer,
    JsonRecord,
    Num,
    PointFigures,
    PointRecord,
    RunFacts,
    ToolInfo,
    known,
)


@dataclass(frozen=True)
class OffsetStep(PointRecord):
    """One measured point of the search: the baseline cap, a step, or a soak."""

    KEYS: ClassVar[tuple[str, ...]] = (
        "sm_offset_mhz",
        "sm_lock_mhz",
        "cap_w",
        "reason",
        "status",
        "error",
        "tps",
        "power_w",
        "tps_per_w",
        "j_per_token",
        "tps_u95_pct",
        "tps_per_w_u95_pct",
        "sm_clock_mhz",
        "temp_max_c",
        "answers_checked",
        "answers_differ",
        "mem_offset_mhz",
        "mem_clock_mhz",
        "power_u95_pct",
    )

    sm_offset_mhz: Num = None
    sm_lock_mhz: Num = None
    cap_w: Num = None
    reason: str | None = None
    figures: PointFigures = field(default_factory=PointFigures)
    answers_checked: Num = None
    answers_differ: Num = None
    mem_offset_mhz: Num = None


@dataclass(frozen=True)
class VersusCap(JsonRecord):
    """The chosen undervolt point against the baseline cap, in % of the cap's figures.

    ``tps_per_w_gain_u95_pct`` is the two points' own stated TPS/W half-widths in quadrature;
    ``tied`` says the gain is within it.
    """

    cap_w: Num = None
    tps_per_w_gain_pct: Num = None
    tps_per_w_gain_u95_pct: Num = None
    tps_change_pct: Num = None
    power_change_pct: Num = None
    j_per_token_change_pct: Num = None
    tied: bool | None = None

    @classmethod
    def between(cls, chosen: OffsetStep | None, baseline: OffsetStep | None) -> VersusCap | None:
        """``chosen`` against ``baseline``: each figure's change in % of the baseline's, the
        TPS/W gain's half-width the two points' own in quadrature (None: either is missing)."""
        if chosen is None or baseline is None:
            return None

        def change(a: float | None, b: float | None) -> float | None:
            if a is None or b is None or not b:
                return None
            return 100.0 * (a / b - 1.0)

        gain = change(chosen.figures.tps_per_w, baseline.figures.tps_per_w)
        u_a = known(chosen.figures.tps_per_w_u95_pct)
        u_b = known(baseline.figures.tps_per_w_u95_pct)
        u95 = math.hypot(u_a, u_b) if u_a is not None and u_b is not None else None
        return cls(
            cap_w=baseline.cap_w,
            tps_per_w_gain_pct=gain,
            tps_per_w_gain_u95_pct=u95,
            tps_change_pct=change(chosen.figures.tps, baseline.figures.tps),
            power_change_pct=change(chosen.figures.power_w, baseline.figures.power_w),
            j_per_token_change_pct=change(chosen.figures.j_per_token, baseline.figures.j_per_token),
            tied=abs(gain) <= u95 if gain is not None and u95 is not None else None,
        )


@dataclass(frozen=True)
class IdleAtLock(JsonRecord):
    """The cards left idle at the answer's lock after the search (run.json's ``idle``): what
    the lock costs while the server waits (a high minimum keeps the clock, and the draw, up)."""

    sm_lock_min_mhz: Num = None
    sm_lock_mhz: Num = None
    power_w: Num = None
    sm_clock_mhz: Num = None
    seconds: Num = None

    @property
    def range_text(self) -> str:
        """``SM 210-1485 MHz`` (``SM 1485 MHz`` for a single-value lock)."""
        top, low = self.sm_lock_mhz, self.sm_lock_min_mhz
        if top is None:
            return "no SM lock"
        return f"SM {top:g} MHz" if low is None or low == top else f"SM {low:g}-{top:g} MHz"


@dataclass(frozen=True)
class MemoryAnswer(JsonRecord):
    """The memory phase at the SM answer (issue 45): the memory clock offset stepped up while
    TPS rose beyond noise, its best less the margin, soaked (NVML's unit).

    ``chosen`` is the SM answer with its memory offset; ``versus_cap`` compares it with the
    baseline cap, ``versus_sm`` with the SM answer alone (offset 0 of the phase).
    """

    step_mhz: Num = None
    margin_mhz: Num = None
    steps: list[OffsetStep] = field(default_factory=list)
    soaks: list[OffsetStep] = field(default_factory=list)
    best_mhz: Num = None
    stopped_mhz: Num = None
    stopped_reason: str | None = None
    chosen: OffsetStep | None = None
    versus_cap: VersusCap | None = None
    versus_sm: VersusCap | None = None


@dataclass(frozen=True)
class UndervoltAnalysis(JsonRecord):
    """The analysis of an undervolt search (``--axis undervolt``)."""

    schema_version: int = 1
    tool: ToolInfo | None = None
    kind: str = "undervolt"
    axis: str = "undervolt"
    metric: str = "narr_tps"
    source: str = ""
    run: RunFacts = field(default_factory=RunFacts)
    sm_lock_mhz: Num = None
    step_mhz: Num = None
    margin_mhz: Num = None
    soak_s: Num = None
    baseline: OffsetStep | None = None
    steps: list[OffsetStep] = field(default_factory=list)
    soaks: list[OffsetStep] = field(default_factory=list)
    last_stable_mhz: Num = None
    first_unstable_mhz: Num = None
    first_unstable_reason: str | None = None
    chosen: OffsetStep | None = None
    versus_cap: VersusCap | None = None
    memory: MemoryAnswer | None = None
    findings: list[Finding] = field(default_factory=list)
    idle: IdleAtLock | None = None
    # withheld where the run did not finish (``kind`` none, ``why`` the run's status); absent
    # from a finished search's analysis
    answer: Answer | UnsetType | None = UNSET
