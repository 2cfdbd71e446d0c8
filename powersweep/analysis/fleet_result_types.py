"""The fleet report, typed: what ``fleet.json`` holds, as frozen dataclasses.

The same rules as :mod:`powersweep.analysis.result_types`: one ``to_json``/``from_json`` per
record (msgspec), a null is ``None``, a key only some reports write is :data:`~msgspec.UNSET` and
stays unwritten, so ``FleetReport.from_json(doc).to_json() == doc`` for every fleet.json the tool
writes.

The reasoning: docs/fleets.md, "powersweep.analysis.fleet_result_types".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from msgspec import UNSET, UnsetType

from powersweep.analysis.fleet_axis import AXES, POWER, FleetAxis
from powersweep.analysis.result_types import JsonRecord, Num, OptNum, ToolInfo

T = TypeVar("T")


def _written(*values: T | UnsetType) -> T | None:
    """The first value written (the one spelling of a key the writer used), else None."""
    for value in values:
        if not isinstance(value, UnsetType):
            return value
    return None


class FleetRecord(JsonRecord):
    """A record of ``fleet.json`` (its schema errors name that file)."""

    FILE: ClassVar[str] = "fleet.json"


@dataclass(frozen=True)
class ReportOptions(FleetRecord):
    """What the report was asked (kept as given: an int stays an int)."""

    tariff_per_kwh: int | float | None = None
    duty: int | float = 1.0
    max_tps_loss_pct: int | float = 5.0


@dataclass(frozen=True)
class Unreadable(FleetRecord):
    """A run left out (no usable curve), with how its sweep ended where run.json says."""

    run_dir: str = ""
    error: str | None = None
    status: str | UnsetType | None = UNSET


@dataclass(frozen=True)
class Incomplete(FleetRecord):
    """A card whose sweep did not complete (counted with the settings it finished)."""

    label: str = ""
    run_dir: str = ""
    status: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class AxisInfo(FleetRecord):
    """What a group swept, as fleet.json names it (:meth:`AxisInfo.of` makes it from the axis)."""

    name: str = POWER
    setting_key: str = "cap_w"
    tier_key: str | None = None
    unit: str = "W"
    noun: str = "cap"
    answer_key: str = "fleet_cap"
    suffix: str = "w"
    reference: str = "the default limit"

    @classmethod
    def of(cls, axis: FleetAxis) -> AxisInfo:
        """What fleet.json says about an axis (so its readers need not know the names)."""
        return cls(
            name=axis.name,
            setting_key=axis.setting_key,
            tier_key=axis.tier_key,
            unit=axis.unit,
            noun=axis.noun,
            answer_key=axis.answer_key,
            suffix=axis.suffix,
            reference=axis.reference,
        )


@dataclass(frozen=True)
class Dist(FleetRecord):
    """A spread over the group's cards (median, quartiles, range) of ``n`` finite values."""

    n: int = 0
    median: Num = None
    q1: Num = None
    q3: Num = None
    min: Num = None
    max: Num = None


@dataclass(frozen=True)
class Envelope(FleetRecord):
    """The (min, default, max) power limit most of the group's cards have, W."""

    min: Num = None
    default: Num = None
    max: Num = None


@dataclass(frozen=True)
class WithinNoise(FleetRecord):
    """The settings tied with the fleet's answer (cards resampled; none with < 3 cards)."""

    x: list[Num] = field(default_factory=list)
    tier: Num = None
    share: list[Num] | UnsetType = UNSET
    resamples: int = 0


@dataclass(frozen=True)
class GpuShare(FleetRecord):
    """A rig of different cards: the fleet cap as a share of one card's default."""

    gpu_name: str | None = None
    default_w: Num = None
    pct_of_default: Num = None


@dataclass(frozen=True)
class Setting(FleetRecord):
    """A setting: a cap, or clock locks (a grid: the SM and the memory lock)."""

    cap_w: OptNum = UNSET
    sm_lock_mhz: OptNum = UNSET
    mem_lock_mhz: OptNum = UNSET

    @property
    def setting(self) -> float | None:
        """The swept setting (the axis's ``setting_key``: a grid's SM lock)."""
        return _written(self.sm_lock_mhz, self.mem_lock_mhz, self.cap_w)


@dataclass(frozen=True)
class FleetAnswer(FleetRecord):
    """A group's answer (``fleet_cap`` or ``fleet_lock``): the setting, its noise, the pooled
    TPS/W there and against the reference, what it costs each card against its own best.

    The power axis adds the share of the default limit (``pct_of_default``, or per card of a
    mixed rig) and the TPS/W at the default; a clock axis the limit the runs held.
    """

    cap_w: OptNum = UNSET
    sm_lock_mhz: OptNum = UNSET
    mem_lock_mhz: OptNum = UNSET
    within_noise: WithinNoise | None = None
    fleet_tps_per_w: Num = None
    tps_per_card: Num = None
    fleet_tps_per_w_at_reference: Num = None
    tps_per_w_vs_own_best_pct: Dist | None = None
    tps_vs_own_best_pct: Dist | None = None
    excluded_outliers: int = 0
    held_cap_w: OptNum = UNSET
    pct_of_default: OptNum = UNSET
    pct_of_default_by_gpu: list[GpuShare] | UnsetType | None = UNSET
    fleet_tps_per_w_at_default: OptNum = UNSET

    @property
    def setting(self) -> float | None:
        """The swept setting (the axis's ``setting_key``: a grid's SM lock)."""
        return _written(self.sm_lock_mhz, self.mem_lock_mhz, self.cap_w)


@dataclass(frozen=True)
class Savings(FleetRecord):
    """Every priced card at the answer against its reference (only counts when none is)."""

    n_cards: int = 0
    n_cards_unpriced: int = 0
    kw_default: OptNum = UNSET
    kw_fleet_cap: OptNum = UNSET
    kw_saved: OptNum = UNSET
    mwh_per_year_saved: OptNum = UNSET
    tps_default: OptNum = UNSET
    tps_fleet_cap: OptNum = UNSET
    tps_change_pct: OptNum = UNSET
    kwh_per_mtok_default: OptNum = UNSET
    kwh_per_mtok_fleet_cap: OptNum = UNSET
    cost_per_mtok_default: OptNum = UNSET
    cost_per_mtok_fleet_cap: OptNum = UNSET
    reference: str = ""


@dataclass(frozen=True)
class Band(FleetRecord):
    """TPS/W over the cards at each setting of the answer's tier: min, quartiles, max, n."""

    cap_w: list[Num] | UnsetType = UNSET
    sm_lock_mhz: list[Num] | UnsetType = UNSET
    mem_lock_mhz: list[Num] | UnsetType = UNSET
    tier: Num = None
    min: list[Num] = field(default_factory=list)
    q1: list[Num] = field(default_factory=list)
    median: list[Num] = field(default_factory=list)
    q3: list[Num] = field(default_factory=list)
    max: list[Num] = field(default_factory=list)
    n: list[int] = field(default_factory=list)

    @property
    def settings(self) -> list[Num]:
        """The settings the band spans (the axis's ``setting_key``)."""
        return _written(self.sm_lock_mhz, self.mem_lock_mhz, self.cap_w) or []


@dataclass(frozen=True)
class Cause(FleetRecord):
    """Why a card is an outlier: a code (``hot``, ``firmware_envelope``...) and a sentence."""

    code: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class GpuRef(FleetRecord):
    """One GPU of a card's run, as run.json names it."""

    uuid: str = ""
    name: str = ""


@dataclass(frozen=True)
class OutlierCurve(FleetRecord):
    """An outlier's own TPS/W per setting (its best tier)."""

    cap_w: list[Num] | UnsetType = UNSET
    sm_lock_mhz: list[Num] | UnsetType = UNSET
    mem_lock_mhz: list[Num] | UnsetType = UNSET
    tps_per_w: list[Num] = field(default_factory=list)

    @property
    def settings(self) -> list[Num]:
        """The settings measured (the axis's ``setting_key``)."""
        return _written(self.sm_lock_mhz, self.mem_lock_mhz, self.cap_w) or []


@dataclass(frozen=True)
class Outlier(FleetRecord):
    """A card that departs from its group: its causes, and its own best (what ``fleet apply``
    sets on it: ``apply`` is ``own_best``)."""

    label: str = ""
    run_dir: str = ""
    host: str | None = None
    gpus: list[GpuRef] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    sweet_spot_w: OptNum = UNSET
    sweet_spot_mhz: OptNum = UNSET
    own_best: Setting | None = None
    apply: str = "own_best"
    curve: OutlierCurve | None = None

    @property
    def sweet_spot(self) -> float | None:
        """Its own best setting (W or MHz)."""
        return _written(self.sweet_spot_mhz, self.sweet_spot_w)


@dataclass(frozen=True)
class FleetCard(FleetRecord):
    """One card of a group: its own best and near-peak setting, and what the group's answer
    costs or gains it (``*_at_fleet_cap`` on the power axis, ``*_at_fleet_lock`` on a clock
    axis)."""

    label: str = ""
    run_dir: str = ""
    status: str | None = None
    host: str | None = None
    gpus: list[GpuRef] = field(default_factory=list)
    sweet_spot_w: OptNum = UNSET
    sweet_spot_mhz: OptNum = UNSET
    near_peak_w: OptNum = UNSET
    near_peak_mhz: OptNum = UNSET
    own_best: Setting | None = None
    outlier: bool = False
    cap_at_fleet_cap_w: OptNum = UNSET
    lock_at_fleet_lock_mhz: OptNum = UNSET
    tps_at_fleet_cap: OptNum = UNSET
    tps_at_fleet_lock: OptNum = UNSET
    tps_per_w_at_fleet_cap: OptNum = UNSET
    tps_per_w_at_fleet_lock: OptNum = UNSET
    tps_per_w_vs_own_best_pct: Num = None
    tps_vs_own_best_pct: Num = None

    @property
    def sweet_spot(self) -> float | None:
        """Its own best setting (sweet spot or efficiency peak; W or MHz)."""
        return _written(self.sweet_spot_mhz, self.sweet_spot_w)

    @property
    def near_peak(self) -> float | None:
        """Its near-peak setting (W or MHz)."""
        return _written(self.near_peak_mhz, self.near_peak_w)

    @property
    def runs_at(self) -> float | None:
        """The setting it runs at under the group's answer (clamped to its measured range)."""
        return _written(self.lock_at_fleet_lock_mhz, self.cap_at_fleet_cap_w)


@dataclass(frozen=True)
class VersusPower(FleetRecord):
    """A clock group beside the power group of the same cards: its answer against the fleet
    cap's pooled TPS/W and TPS per card."""

    fleet_cap_w: Num = None
    fleet_cap_tps_per_w: Num = None
    fleet_cap_tps_per_card: Num = None
    tps_per_w_vs_fleet_cap_pct: Num = None
    tps_per_card_vs_fleet_cap_pct: Num = None


@dataclass(frozen=True)
class FleetGroup(FleetRecord):
    """The runs of one GPU model (and count), load mode, served model and axis: the spread of
    the cards' answers, the group's answer, its savings, band, outliers and cards."""

    gpu_name: str | None = None
    n_gpus: int | None = None
    load_mode: str | None = None
    model: str | None = None
    axis: AxisInfo | UnsetType = UNSET
    metric: str | None = None
    n_cards: int | None = None
    envelope_w: Envelope | None = None
    step_w: OptNum = UNSET
    step_mhz: OptNum = UNSET
    sweet_spot_w: Dist | UnsetType = UNSET
    sweet_spot_mhz: Dist | UnsetType = UNSET
    near_peak_w: Dist | UnsetType = UNSET
    near_peak_mhz: Dist | UnsetType = UNSET
    sweet_spot_tier_mhz: Dist | UnsetType = UNSET
    fleet_cap: FleetAnswer | UnsetType = UNSET
    fleet_lock: FleetAnswer | UnsetType = UNSET
    savings: Savings | None = None
    band: Band | None = None
    outliers: list[Outlier] = field(default_factory=list)
    cards: list[FleetCard] = field(default_factory=list)
    versus_power: VersusPower | UnsetType = UNSET

    @property
    def axis_name(self) -> str:
        """The axis's name as written (a report written before axes were named: power)."""
        return self.axis.name if isinstance(self.axis, AxisInfo) else POWER

    @property
    def fleet_axis(self) -> FleetAxis:
        """The group's axis (one this version does not know: the power cap)."""
        return AXES.get(self.axis_name, AXES[POWER])

    @property
    def answer(self) -> FleetAnswer | None:
        """The group's answer: its fleet cap, or its fleet lock on a clock axis."""
        if self.fleet_axis.answer_key == "fleet_cap":
            return _written(self.fleet_cap)
        return _written(self.fleet_lock)

    @property
    def step(self) -> float | None:
        """The median step between the settings measured (W or MHz)."""
        return _written(self.step_w if self.fleet_axis.suffix == "w" else self.step_mhz)

    @property
    def sweet_spot(self) -> Dist | None:
        """The spread of the cards' own best settings."""
        return _written(self.sweet_spot_w if self.fleet_axis.suffix == "w" else self.sweet_spot_mhz)

    @property
    def near_peak(self) -> Dist | None:
        """The spread of the cards' near-peak settings."""
        return _written(self.near_peak_w if self.fleet_axis.suffix == "w" else self.near_peak_mhz)

    @property
    def sweet_spot_tier(self) -> Dist | None:
        """A grid: the spread of the memory lock of the cards' own best."""
        return _written(self.sweet_spot_tier_mhz)


@dataclass(frozen=True)
class Totals(FleetRecord):
    """What every card at its group's answer saves (cards swept on several axes count once)."""

    kw_saved: Num = None
    mwh_per_year_saved: Num = None


@dataclass(frozen=True)
class FleetReport(FleetRecord):
    """A fleet report (``fleet.json``): one group per GPU model, load mode, model and axis."""

    schema_version: int = 1
    tool: ToolInfo | None = None
    n_runs: int = 0
    n_cards: int = 0
    options: ReportOptions = field(default_factory=ReportOptions)
    unreadable: list[Unreadable] = field(default_factory=list)
    incomplete: list[Incomplete] = field(default_factory=list)
    groups: list[FleetGroup] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)
