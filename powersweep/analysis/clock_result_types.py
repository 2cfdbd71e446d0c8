"""The analysis of a clock-lock curve, typed (``analysis.json`` with ``kind`` ``clocks``).

The same rules as :mod:`powersweep.analysis.result_types`: frozen dataclasses, one
``to_json``/``from_json`` each, null as ``None``, a key only some analyses write as ``UNSET``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Self

from msgspec import UNSET, UnsetType

from powersweep.analysis.findings import Finding
from powersweep.analysis.result_types import (
    Answer,
    Energy,
    JsonRecord,
    LatencyTarget,
    Num,
    OptNum,
    PointFigures,
    PointRecord,
    RunFacts,
    ToolInfo,
)
from powersweep.runformat import JsonMap, JsonObject


@dataclass(frozen=True)
class LockPoint(PointRecord):
    """One set of clock locks measured (repeats pooled), with its figures.

    The peak (``sweet_spot``) adds how it compares with the fastest point and the points tied
    with it; near-peak adds the TPS it gives up.
    """

    KEYS: ClassVar[tuple[str, ...]] = (
        "sm_lock_mhz",
        "mem_lock_mhz",
        "cap_w",
        "tps",
        "power_w",
        "tps_per_w",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "j_per_token",
        "j_per_token_u95_pct",
        "j_per_token_sampled",
        "kwh_per_mtok",
        "energy_tokens",
        "ttft_p50_ms",
        "ttft_p95_ms",
        "itl_p50_ms",
        "itl_p95_ms",
        "ttft_p95_hi_ms",
        "itl_p95_hi_ms",
        "tps_u95_pct",
        "tps_per_w_u95_pct",
        "cost_per_mtok",
        "tps_per_w_vs_fastest_pct",
        "tps_vs_fastest_pct",
        "energy_per_token_saving_pct",
        "tied_points",
        "noise_source",
        "best_share",
        "tps_loss_pct",
        "max_tps_loss_pct",
    )

    sm_lock_mhz: Num = None
    mem_lock_mhz: Num = None
    cap_w: Num = None
    figures: PointFigures = field(default_factory=PointFigures)
    tps_per_w_vs_fastest_pct: OptNum = UNSET
    tps_vs_fastest_pct: OptNum = UNSET
    energy_per_token_saving_pct: OptNum = UNSET
    tied_points: list[Locks] | UnsetType | None = UNSET
    noise_source: str | UnsetType | None = UNSET
    best_share: list[LockShare] | UnsetType | None = UNSET
    tps_loss_pct: OptNum = UNSET
    max_tps_loss_pct: OptNum = UNSET


@dataclass(frozen=True)
class LockLatencyTarget(LatencyTarget):
    """A clock curve's latency target: its points are clock points."""

    point: LockPoint | None = None
    within_noise_point: LockPoint | UnsetType | None = UNSET


@dataclass(frozen=True)
class Locks(JsonRecord):
    """A point's clock locks alone (a tie, the saturation point)."""

    sm_lock_mhz: Num = None
    mem_lock_mhz: Num = None


@dataclass(frozen=True)
class LockShare(JsonRecord):
    """How often a point came out best when its readings were resampled."""

    sm_lock_mhz: Num = None
    mem_lock_mhz: Num = None
    share: Num = None


@dataclass(frozen=True)
class LockRow(PointRecord):
    """One row of the table as measured (status and error kept; the metric's own column)."""

    KEYS: ClassVar[tuple[str, ...]] = (
        "sm_lock_mhz",
        "mem_lock_mhz",
        "cap_w",
        "narr_tps",
        "code_tps",
        "prefill_tps",
        "decode_tps",
        "power_w",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "pwr_throttle_pct",
        "status",
        "error",
        "tps",
        "tps_per_w",
    )

    sm_lock_mhz: Num = None
    mem_lock_mhz: Num = None
    cap_w: Num = None
    figures: PointFigures = field(default_factory=PointFigures)
    narr_tps: OptNum = UNSET
    prefill_tps: OptNum = UNSET
    decode_tps: OptNum = UNSET


@dataclass(frozen=True)
class Tier(JsonRecord):
    """The points of one memory clock, and where its TPS stops rising with the SM clock."""

    mem_lock_mhz: Num = None
    n_points: int = 0
    peak: LockPoint | None = None
    top_tps: Num = None
    top_tps_sm_lock_mhz: Num = None
    below_fastest_tier_pct: Num = None
    caps_tps: bool | None = None
    tps_stops_rising_at_sm_mhz: Num = None
    points: list[LockPoint] = field(default_factory=list)


@dataclass(frozen=True)
class LimitBinds(JsonRecord):
    """Whether the one power limit a clock sweep held ever bound its draw."""

    limit_w: Num = None
    max_draw_w: Num = None
    max_draw_pct_of_limit: Num = None
    binds: bool | None = None


@dataclass(frozen=True)
class ClockAnalysis(JsonRecord):
    """The analysis of a clock-lock curve (``--axis sm-clock``, ``mem-clock`` or ``grid``)."""

    schema_version: int = 1
    tool: ToolInfo | None = None
    kind: str = "clocks"
    axis: str = "sm-clock"
    metric: str = "narr_tps"
    source: str = ""
    run: RunFacts = field(default_factory=RunFacts)
    points: list[LockPoint] = field(default_factory=list)
    rows: list[LockRow] = field(default_factory=list)
    answer: Answer | UnsetType | None = UNSET
    peak: LockPoint | None = None
    near_peak: LockPoint | None = None
    pareto_front: list[LockPoint] = field(default_factory=list)
    pareto_knee: LockPoint | None = None
    tiers: list[Tier] = field(default_factory=list)
    bandwidth_capped_tiers: list[Num] = field(default_factory=list)
    saturation: Locks | None = None
    power_cap_binds: LimitBinds | None = None
    energy: Energy | None = None
    latency_target: LockLatencyTarget | None = None
    findings: list[Finding] = field(default_factory=list)
    fastest: LockPoint | UnsetType | None = UNSET

    @property
    def sweet_spot(self) -> LockPoint | None:
        """The peak under the power axis's name: analysis.json writes it under both keys."""
        return self.peak

    @classmethod
    def from_json(cls, data: JsonMap) -> Self:
        """A typed clock analysis: its peak read from ``peak`` (or from ``sweet_spot``, its other
        name, where a document has only that)."""
        if "peak" not in data and "sweet_spot" in data:
            data = {**data, "peak": data["sweet_spot"]}
        return super().from_json(data)

    def to_json(self) -> JsonObject:
        """The analysis as its file holds it: the peak written once more as ``sweet_spot``."""
        out: JsonObject = {}
        for key, value in super().to_json().items():
            out[key] = value
            if key == "peak":
                out["sweet_spot"] = value
        return out


@dataclass(frozen=True)
class BestCap(JsonRecord):
    """The power run's best cap, as the comparison with a clock run names it."""

    FILE: ClassVar[str] = "clocks-vs-power.json"

    cap_w: float
    tps: Num = None
    power_w: Num = None
    tps_per_w: Num = None


@dataclass(frozen=True)
class BestClock(JsonRecord):
    """The clock run's efficiency peak, as the comparison with a power run names it."""

    FILE: ClassVar[str] = "clocks-vs-power.json"

    sm_lock_mhz: Num = None
    mem_lock_mhz: Num = None
    tps: Num = None
    power_w: Num = None
    tps_per_w: Num = None


@dataclass(frozen=True)
class ClocksVersusPower(JsonRecord):
    """How the best clock point of one GPU compares with its best power cap
    (``clocks-vs-power.json``): the changes, %, whether the caps bind, in words, and warnings."""

    FILE: ClassVar[str] = "clocks-vs-power.json"

    best_cap: BestCap
    best_clock: BestClock
    tps_per_w_gain_pct: Num = None
    tps_change_pct: Num = None
    power_change_pct: Num = None
    caps_bind: bool = True
    statement: str = ""
    warnings: list[str] = field(default_factory=list)
