"""The analysis result, typed: what ``analysis.json`` holds, as frozen dataclasses.

Every record has one ``to_json()`` (the object ``analysis.json`` holds) and one ``from_json()``
(a typed view of such an object), so no reader parses the JSON by hand and a wrong type is one
clear error. A measured point's figures are declared once (:class:`PointFigures`) and held by
every axis's point record beside its setting (:class:`PointRecord`).

The reasoning: docs/figures.md, "powersweep.analysis.result_types".
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from types import UnionType
from typing import (
    TYPE_CHECKING,
    ClassVar,
    Self,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
    get_type_hints,
)

import msgspec
from msgspec import UNSET, UnsetType

from powersweep.analysis.findings import Finding
from powersweep.errors import UsageError
from powersweep.runformat import JsonMap, JsonObject, JsonValue

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")

# A number the analysis may not know (null in analysis.json).
Num = float | None
# A number only some analyses write.
OptNum = float | None | UnsetType
# A number copied from run.json as written there: an int stays an int (analysis.json keeps it).
RawNum = int | float | None


def known(value: T | UnsetType | None) -> T | None:
    """The value, or None where it was null or not written."""
    return None if value is UNSET or isinstance(value, UnsetType) else value


class JsonRecord:
    """One ``to_json`` / ``from_json`` pair for every result record (msgspec's conversion and
    encoding, a point record's figures written flat).

    Attributes:
        FILE: The file the record lives in, named by a schema error.
    """

    FILE: ClassVar[str] = "analysis.json"

    def to_json(self) -> JsonObject:
        """The record as its file holds it (keys not written are left out)."""
        return _record_json(self)

    @classmethod
    def from_json(cls, data: JsonMap) -> Self:
        """A typed view of a record from its file.

        Raises:
            UsageError: A key holds a value of the wrong type (the message names it).
        """
        try:
            return msgspec.convert(_nested(data, cls), type=cls, strict=False)
        except msgspec.ValidationError as exc:
            raise UsageError(f"{cls.FILE} does not follow its schema: {exc}") from None


@dataclass(frozen=True)
class PointFigures:
    """What one measured point showed (repeats pooled), declared once for every axis: its serving
    figures, their stated 95% half-widths (%), its status and how many readings it pools.

    A point's record (a power cap's :class:`CapRow`, a clock point's ``LockPoint`` and
    ``LockRow``, an undervolt step's ``OffsetStep``) holds them as ``figures`` beside its setting;
    its JSON writes them flat among the setting's keys (:class:`PointRecord`). A figure typed
    ``OptNum`` is one only some analyses write.
    """

    tps: Num = None
    code_tps: OptNum = UNSET  # a clock row writes it only where it is the metric
    power_w: Num = None
    tps_per_w: Num = None
    sm_clock_mhz: Num = None
    mem_clock_mhz: Num = None
    temp_max_c: Num = None
    status: str | None = None
    error: str | None = None
    util_pct: Num = None
    pstate: Num = None
    pwr_throttle_pct: Num = None
    thermal_throttle_pct: Num = None
    energy_j: Num = None
    energy_sampled_j: Num = None
    n_measurements: int | None = None
    j_per_token: Num = None
    j_per_token_u95_pct: Num = None
    j_per_token_sampled: Num = None
    kwh_per_mtok: Num = None
    energy_tokens: Num = None
    ttft_p50_ms: Num = None
    ttft_p95_ms: Num = None
    itl_p50_ms: Num = None
    itl_p95_ms: Num = None
    ttft_p95_hi_ms: OptNum = UNSET
    itl_p95_hi_ms: OptNum = UNSET
    tps_u95_pct: OptNum = UNSET
    tps_per_w_u95_pct: OptNum = UNSET
    power_u95_pct: OptNum = UNSET
    cost_per_mtok: OptNum = UNSET


FIGURE_KEYS = frozenset(f.name for f in fields(PointFigures))


class PointRecord(JsonRecord):
    """A measured point's record: its setting and axis fields, and its :class:`PointFigures`.

    Its JSON is flat, in ``KEYS`` order (own fields and figures interleaved as analysis.json has
    always written them); a figure not in ``KEYS`` is not written, and, as for every record, a
    key the document it was read from left out, or one ``UNSET``, is left out.

    Attributes:
        KEYS: The record's JSON keys, in order.
    """

    KEYS: ClassVar[tuple[str, ...]] = ()
    figures: PointFigures

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        unknown = [k for k in cls.KEYS if k not in FIGURE_KEYS and k not in cls.__annotations__]
        if unknown:
            raise TypeError(f"{cls.__name__}.KEYS names no field: {unknown}")

    def to_json(self) -> JsonObject:
        """The record flat, in ``KEYS`` order (its figures among its own keys)."""
        own, figures = self.__dict__, self.figures.__dict__
        out: JsonObject = {}
        for key in self.KEYS:
            given = own if key in _own_fields(type(self)) else figures
            if key in given and (value := given[key]) is not UNSET:
                out[key] = _builtins(value)
        return out

    def with_figures(self, figures: PointFigures) -> Self:
        """The record with other figures (every point record is a frozen dataclass)."""
        # a subclass is a dataclass (its decorator is not seen by the type of ``self``)
        out = replace(cast("DataclassInstance", self), figures=figures)
        return cast(Self, out)

    @classmethod
    def nest(cls, data: JsonMap) -> dict[str, object]:
        """A flat JSON object with its figures gathered under ``figures``, as the record holds
        them."""
        own = _own_fields(cls)
        out = {k: v for k, v in data.items() if k in own or k not in FIGURE_KEYS}
        out["figures"] = {k: v for k, v in data.items() if k in FIGURE_KEYS and k not in own}
        return out


_OWN_FIELDS: dict[type, frozenset[str]] = {}


def _own_fields(record: type[PointRecord]) -> frozenset[str]:
    """A point record's own fields (``figures`` among them), by class."""
    own = _OWN_FIELDS.get(record)
    if own is None:
        own = _OWN_FIELDS[record] = frozenset(f.name for f in fields(record))  # type: ignore[arg-type]
    return own


def _record_json(record: object) -> JsonObject:
    """A record's fields as JSON builtins, as msgspec encodes them: a field msgspec.convert was
    not given is not in the instance's dict, and is left out, as is one ``UNSET``."""
    if not is_dataclass(record) or isinstance(record, type):
        raise TypeError(f"not a record: {record!r}")
    given = record.__dict__
    names = (f.name for f in fields(record) if f.name in given)
    return {name: _builtins(given[name]) for name in names if given[name] is not UNSET}


def _builtins(value: object) -> JsonValue:
    """``value`` as JSON builtins: msgspec's own encoding (a field not written left out), a
    :class:`PointRecord` flattened."""
    if isinstance(value, PointRecord):
        return value.to_json()
    if is_dataclass(value) and not isinstance(value, type):
        return _record_json(value)
    if isinstance(value, list | tuple):
        return [_builtins(v) for v in value]
    if isinstance(value, dict):
        return {k: _builtins(v) for k, v in value.items()}
    out: JsonValue = msgspec.to_builtins(value)
    return out


@functools.cache
def _hints(record: type) -> dict[str, object]:
    return get_type_hints(record)


@functools.cache
def _holds_points(hint: object) -> bool:
    """Whether a value of type ``hint`` can hold a :class:`PointRecord` anywhere inside: only
    those are walked (a fleet report's thousands of outliers hold none; walking them all made
    reading it ten times slower). The records nest without cycles."""
    if isinstance(hint, type) and is_dataclass(hint):
        return issubclass(hint, PointRecord) or any(map(_holds_points, _hints(hint).values()))
    return any(_holds_points(arg) for arg in get_args(hint))


def _nested(data: object, hint: object) -> object:
    """``data`` with every :class:`PointRecord`'s figures nested, found by the record's type
    hints (the inverse of :func:`_builtins`' flattening)."""
    if not _holds_points(hint):
        return data
    if get_origin(hint) in (Union, UnionType):
        for arg in get_args(hint):
            if (is_dataclass(arg) and isinstance(data, Mapping)) or (
                get_origin(arg) is list and isinstance(data, list)
            ):
                return _nested(data, arg)
        return data
    if get_origin(hint) is list and isinstance(data, list):
        return [_nested(v, get_args(hint)[0]) for v in data]
    if isinstance(hint, type) and is_dataclass(hint) and isinstance(data, Mapping):
        hints = _hints(hint)
        out = {k: _nested(v, hints[k]) if k in hints else v for k, v in data.items()}
        return hint.nest(out) if issubclass(hint, PointRecord) else out
    return data


@dataclass(frozen=True)
class ToolInfo(JsonRecord):
    """Which tool wrote the analysis."""

    name: str
    version: str


@dataclass(frozen=True)
class RunFacts(JsonRecord):
    """The run's facts the analysis read (run.json, else the card facts given)."""

    gpu_name: str | None = None
    gpu_label: str | None = None
    gpu_names: list[str] | None = None
    n_gpus: int | None = None
    cooling: str | None = None
    load_mode: str | None = None
    model: str | None = None
    engine: str | None = None
    date: str | None = None
    tool_version: str | None = None
    default_limit_w: RawNum = None
    default_limits_w: list[float] | None = None
    min_limit_w: RawNum = None
    max_limit_w: RawNum = None
    slowdown_temp_c: RawNum = None
    status: str | None = None
    simulated: bool | None = None
    gpu_selection: str | None = None


@dataclass(frozen=True)
class CapRow(PointRecord):
    """One cap's row of the table (repeats pooled), as the summary shows it: the cap, its
    figures, and what limits it (``regime``)."""

    KEYS: ClassVar[tuple[str, ...]] = (
        "cap_w",
        "tps",
        "code_tps",
        "power_w",
        "tps_per_w",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "temp_max_c",
        "status",
        "error",
        "util_pct",
        "pstate",
        "pwr_throttle_pct",
        "thermal_throttle_pct",
        "energy_j",
        "energy_sampled_j",
        "n_gpus",
        "n_measurements",
        "j_per_token",
        "j_per_token_u95_pct",
        "j_per_token_sampled",
        "kwh_per_mtok",
        "energy_tokens",
        "ttft_p50_ms",
        "ttft_p95_ms",
        "itl_p50_ms",
        "itl_p95_ms",
        # in the order the analysis adds them, so analysis.json reads back byte for byte
        "ttft_p95_hi_ms",
        "itl_p95_hi_ms",
        "tps_u95_pct",
        "tps_per_w_u95_pct",
        "cost_per_mtok",
        "regime",
    )

    cap_w: float
    figures: PointFigures = field(default_factory=PointFigures)
    n_gpus: Num = None  # the table's column: a float, as analysis.json writes it
    regime: str | UnsetType | None = UNSET


@dataclass(frozen=True)
class Bootstrap(JsonRecord):
    """How often each cap won the resamples of an older run (no point stated its own
    precision), and each cap's resampled TPS/W interval; keyed by the cap as text."""

    resamples: int
    seed: int
    caps_resampled: int
    tps_units: str
    best_share: dict[str, float] = field(default_factory=dict)
    tps_per_w_ci: dict[str, list[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class NoiseEstimate(JsonRecord):
    """A bare curve's noise: one reading's 95% half-width and the scatter it came from."""

    reading_u95_pct: Num = None
    tps_scatter_pct: Num = None
    power_scatter_pct: Num = None
    dof: Num = None


@dataclass(frozen=True, kw_only=True)
class Pick(JsonRecord):
    """A headline cap: the sweet spot, near-peak or the recommendation.

    The noise fields (``tied_caps``, ``interval_w``, ``noise_source``...) belong to the sweet
    spot and near-peak, ``objective`` (and a cost objective's ``eta``, ``cost``,
    ``max_power_w``) to the recommendation, ``tps_loss_pct`` to near-peak. The recommendation
    writes ``objective`` first, so it comes first here too (keyword-only: it has a default).
    """

    objective: str | UnsetType = UNSET
    cap_w: float
    tps_per_w: Num = None
    tps: Num = None
    power_w: Num = None
    pct_of_default: Num = None
    tps_per_w_at_default: Num = None
    tps_per_w_gain_vs_default_pct: Num = None
    eta: OptNum = UNSET
    cost: OptNum = UNSET
    max_power_w: OptNum = UNSET
    at_boundary: str | UnsetType | None = UNSET
    tps_loss_pct: OptNum = UNSET
    max_tps_loss_pct: OptNum = UNSET
    tied_caps: list[float] | UnsetType | None = UNSET
    interval_w: list[float] | UnsetType | None = UNSET
    noise_source: str | UnsetType | None = UNSET
    bootstrap: Bootstrap | UnsetType | None = UNSET
    estimate: NoiseEstimate | UnsetType | None = UNSET
    tps_per_w_u95_pct: dict[str, Num] | UnsetType | None = UNSET
    j_per_token: OptNum = UNSET
    kwh_per_mtok: OptNum = UNSET
    pct_of_default_by_gpu: list[float] | UnsetType = UNSET
    caps_bind: bool | UnsetType | None = UNSET


@dataclass(frozen=True)
class Plateau(JsonRecord):
    """A run of caps with one TPS (a boost plateau) or one draw (a ceiling)."""

    kind: str
    start_w: float
    end_w: float
    power_w: Num = None
    tps: Num = None
    caps_w: list[float] = field(default_factory=list)
    missing_caps_w: list[float] = field(default_factory=list)
    escape_w: Num = None


@dataclass(frozen=True)
class Regime(JsonRecord):
    """What limits one cap (``power``, ``boost``, ``ceiling``...) and the bound it hit."""

    cap_w: float
    regime: str | None = None
    bound: str | None = None


@dataclass(frozen=True)
class ServerRate(JsonRecord):
    """The server's own token rate at a cap against the tool's."""

    cap_w: float
    tool_tps: Num = None
    server_tps: Num = None
    diff_pct: Num = None
    n_requests: int | None = None


@dataclass(frozen=True)
class CapsBind(JsonRecord):
    """Whether the power caps bind (where none does, no cap is a win), and how it shows:
    ``draw`` (a card draws at its cap) or ``tps`` (TPS follows the cap; the averaged draw sits
    under it)."""

    binds: bool | None = None
    draw_w: list[Num] | None = None
    caps_w: list[Num] | None = None
    by: str | UnsetType | None = UNSET


@dataclass(frozen=True)
class Answer(JsonRecord):
    """What the evidence lets the analysis claim (:mod:`powersweep.analysis.claims`).

    Attributes:
        kind: ``answer``, ``boundary`` (the best point is the first or last measured) or
            ``none`` (the run did not finish, too few points, or caps that never bind).
        why: Why it is a boundary or none, in one line (None for an answer).
        points_usable: The points the answer stands on.
    """

    kind: str
    why: str | None = None
    points_usable: int = 0

    @property
    def given(self) -> bool:
        """The analysis answers (a sweet spot, or a boundary named as such)."""
        return self.kind != "none"


@dataclass(frozen=True)
class EnergyFigures(JsonRecord):
    """Energy and cost per token at one point."""

    j_per_token: Num = None
    j_per_token_u95_pct: OptNum = UNSET
    kwh_per_mtok: Num = None
    cost_per_mtok: Num = None
    tps: Num = None


@dataclass(frozen=True)
class Energy(JsonRecord):
    """Energy per token at the chosen point against a reference, and the savings."""

    tariff_per_kwh: Num = None
    chosen: EnergyFigures | None = None
    reference: EnergyFigures | None = None
    kwh_saved_per_mtok: OptNum = UNSET
    kwh_saved_per_year: OptNum = UNSET
    mtok_per_year: OptNum = UNSET
    cost_saved_per_mtok: OptNum = UNSET
    cost_saved_per_year: OptNum = UNSET
    chosen_name: str | UnsetType | None = UNSET
    reference_name: str | UnsetType | None = UNSET


@dataclass(frozen=True)
class LatencyTarget(JsonRecord):
    """The latency targets, and the most efficient point that meets them (or the closest):
    each axis's names its point record (:class:`CapLatencyTarget`, a clock curve's
    ``LockLatencyTarget``)."""

    max_ttft_ms: Num = None
    max_itl_ms: Num = None
    noise_rel: OptNum = UNSET  # written by older versions only
    met: bool | None = None
    point: PointRecord | None = None
    margin: bool | UnsetType | None = UNSET
    within_noise: str | UnsetType | None = UNSET
    within_noise_point: PointRecord | UnsetType | None = UNSET
    unsure: list[str] | UnsetType | None = UNSET
    tied: list[str] | None = None
    noise_source: str | UnsetType | None = UNSET
    misses: list[str] | None = None
    # the point's name; unwritten where no point was measured against the targets
    name: str | UnsetType | None = UNSET


@dataclass(frozen=True)
class CapLatencyTarget(LatencyTarget):
    """A power curve's latency target: its points are rows of the table."""

    point: CapRow | None = None
    within_noise_point: CapRow | UnsetType | None = UNSET


@dataclass(frozen=True)
class SweepSetting(JsonRecord):
    """A point the sweep set, as run.json names it (a clock run's confirm phase: its locks;
    only the keys written are read back and written)."""

    cap_w: RawNum = None
    sm_lock_mhz: RawNum = None
    mem_lock_mhz: RawNum = None
    sm_offset_mhz: RawNum = None
    mem_offset_mhz: RawNum = None


@dataclass(frozen=True)
class ConfirmRecord(JsonRecord):
    """What the sweep's confirm phase measured again, and why (run.json ``confirm``): caps on
    the power axis, clock points (``points``, the ties as settings) on a clock axis."""

    caps_w: list[float] = field(default_factory=list)
    reason: str | None = None
    skipped: str | UnsetType | None = UNSET
    tied_before: list[float | SweepSetting] | UnsetType | None = UNSET
    best_before_w: OptNum = UNSET
    best_after_w: OptNum = UNSET
    tied_after: list[float | SweepSetting] | UnsetType | None = UNSET
    stopped: str | UnsetType | None = UNSET
    points: list[SweepSetting] | UnsetType | None = UNSET
    tied_points_after: list[SweepSetting] | UnsetType | None = UNSET


@dataclass(frozen=True)
class PowerAnalysis(JsonRecord):
    """The analysis of a power-cap curve (``analysis.json`` of ``--axis power``)."""

    schema_version: int = 1
    tool: ToolInfo | None = None
    metric: str = "narr_tps"
    source: str = ""
    run: RunFacts = field(default_factory=RunFacts)
    caps: list[CapRow] = field(default_factory=list)
    answer: Answer | UnsetType | None = UNSET
    sweet_spot: Pick | None = None
    near_peak: Pick | None = None
    recommendation: Pick | None = None
    plateaus: list[Plateau] = field(default_factory=list)
    regimes: list[Regime] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    confirm: ConfirmRecord | None = None
    energy: Energy | None = None
    latency_target: CapLatencyTarget | None = None
    server_rates: list[ServerRate] = field(default_factory=list)
    power_cap_binds: CapsBind | UnsetType = UNSET
