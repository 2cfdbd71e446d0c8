"""The runs of a fleet, found and analysed: one :class:`CardCurve` per run, on any axis.

A card is what one run measured, read back from its CSVs (through its ``analysis.json`` where
that is fresh): its measured settings (caps, or clock locks), TPS, draw, temperature and thermal
throttling at each, and its own answers (sweet spot or efficiency peak, near-peak).

The reasoning: docs/fleets.md, "powersweep.analysis.fleet_cards".
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from msgspec import UNSET, UnsetType

from powersweep import __version__
from powersweep.analysis.clock_analysis import analyze_clocks
from powersweep.analysis.clock_curve import is_clock_curve
from powersweep.analysis.clock_result_types import ClockAnalysis, LockPoint
from powersweep.analysis.core import analyze
from powersweep.analysis.fleet_axis import FleetAxis, axis_of_analysis, best_of, rows_of
from powersweep.analysis.fleet_result_types import Unreadable
from powersweep.analysis.load import Curve
from powersweep.analysis.result_types import CapRow, Pick, PowerAnalysis, RunFacts
from powersweep.analysis.run_record import RunRecord
from powersweep.errors import UsageError
from powersweep.runformat import CsvRow, as_float

NAN = math.nan
# Two settings are the same within this (W or MHz): CSVs round them.
SAME = 1e-6


@dataclass(frozen=True)
class CardCurve:
    """One run, analysed: its usable curve and its own answers.

    Attributes:
        label: The card's name in the report (its host, or simulated node).
        run_dir: The run directory.
        key: GPU model, GPUs per rig, load mode, served model, axis name: the card's group.
        axis: What the run swept.
        metric: ``narr_tps`` or ``prefill_tps``.
        x: Each measured setting (W, or MHz of the swept lock), ascending within a tier.
        tier: A grid's second lock (memory MHz) per setting; NaN on a one-axis sweep.
        tps: TPS of the metric per setting.
        power_w: Median draw per setting.
        temp_c: Hottest reading per setting (NaN where unknown).
        thermal_pct: Share of samples thermally throttled per setting.
        best: The card's own best setting (x, tier).
        near_peak: Its near-peak setting (x, tier; NaN when none).
        envelope_w: Its (min, default, max) limit.
        status: How its sweep ended.
        error: Its sweep's error, if any.
        defaults_w: A rig of different cards: each card's name and default (empty otherwise).
        host: The host (or simulated node) that ran it.
        gpus: Each GPU's (UUID, name) as run.json names them.
        held_cap_w: A clock run's limit held with ``--cap`` (None: the limit in force stayed).
    """

    label: str
    run_dir: str
    key: tuple[str, int, str, str, str]
    axis: FleetAxis
    metric: str
    x: np.ndarray
    tier: np.ndarray
    tps: np.ndarray
    power_w: np.ndarray
    temp_c: np.ndarray
    thermal_pct: np.ndarray
    best: tuple[float, float]
    near_peak: tuple[float, float]
    envelope_w: tuple[float, float, float]
    status: str
    error: str | None
    defaults_w: tuple[tuple[str, float], ...] = ()
    host: str | None = None
    gpus: tuple[tuple[str, str], ...] = ()
    held_cap_w: float | None = None

    def _in_tier(self, tier: float) -> np.ndarray:
        if math.isnan(tier):
            return np.isnan(self.tier)
        return np.abs(self.tier - tier) <= SAME

    def at(self, x: float, tier: float = NAN) -> tuple[float, float]:
        """(TPS, draw) at a setting, interpolated inside the measured range, NaN outside."""
        use = self._in_tier(tier)
        xs = self.x[use]
        if not len(xs) or not math.isfinite(x) or x < xs[0] - SAME or x > xs[-1] + SAME:
            return NAN, NAN
        return float(np.interp(x, xs, self.tps[use])), float(np.interp(x, xs, self.power_w[use]))

    def clamped(self, x: float, tier: float = NAN) -> float:
        """The setting this card really runs when the fleet asks for ``x`` (its range bounds;
        NaN when it did not measure that tier)."""
        xs = self.x[self._in_tier(tier)]
        if not len(xs) or not math.isfinite(x):
            return NAN
        return float(min(max(x, xs[0]), xs[-1]))

    @property
    def reference(self) -> tuple[float, float]:
        """What savings are counted against: the default limit (power), else the highest lock
        the card measured, in its highest tier."""
        if not self.axis.is_clock:
            return self.envelope_w[1], NAN
        tiers = self.tier[np.isfinite(self.tier)]
        top = float(tiers.max()) if len(tiers) else NAN
        xs = self.x[self._in_tier(top)]
        return (float(xs.max()) if len(xs) else NAN), top


def discover_runs(paths: Iterable[Path]) -> list[Path]:
    """Run directories under the given paths: a run itself, or any folder holding runs.

    Raises:
        UsageError: A path does not exist or holds no run.
    """
    found: list[Path] = []
    for path in paths:
        path = Path(path)
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory")
        if path.is_file():
            if path.name != "caps.csv":
                raise UsageError(f"{path}: give run directories or folders holding them")
            found.append(path.parent)
            continue
        if (path / "caps.csv").is_file():
            found.append(path)
            continue
        runs = []
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d != "charts" and not d.startswith("."))
            if "caps.csv" in files:
                runs.append(Path(root))
                dirs[:] = []  # a run's own folders hold no runs
        if not runs:
            raise UsageError(f"{path}: no run directory (with a caps.csv) under it")
        found += runs
    unique = list(dict.fromkeys(p.resolve() for p in found))
    return unique


def unreadable(run_dir: Path, error: str) -> Unreadable:
    """A run left out, with how its sweep ended when its run.json says (a node that failed
    before it finished a cap has no curve but does have a reason)."""
    entry = Unreadable(run_dir=str(run_dir), error=error)
    try:
        run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return entry
    if isinstance(run, dict) and run.get("status") not in (None, "complete"):
        return Unreadable(
            run_dir=str(run_dir),
            error=_text(run.get("error") or f"{error} (no error recorded)"),
            status=_text(run.get("status")),
        )
    return entry


def common_root(paths: Iterable[Path]) -> Path:
    """The folder every path is under (``/`` when they share none)."""
    try:
        return Path(os.path.commonpath([str(p) for p in paths]))
    except ValueError:
        return Path("/")


def card_of(curve: Curve, root: Path, max_tps_loss_pct: float, reanalyze: bool) -> CardCurve | None:
    """Analyse one run (power or clocks); None when it has no usable setting."""
    clock = is_clock_curve(curve.caps)
    result = None if reanalyze else _stored_analysis(curve, max_tps_loss_pct, clock)
    if result is None:
        result = (
            analyze_clocks(curve, max_tps_loss_pct=max_tps_loss_pct, bootstrap=0)
            if clock
            else analyze(curve, bootstrap=0, max_tps_loss_pct=max_tps_loss_pct)
        )
    axis = axis_of_analysis(result)
    best = best_of(result)
    rows = [r for r in rows_of(result) if _ok(r.figures.tps) and _ok(r.figures.power_w)]
    if not rows or best is None:
        return None
    by_setting: dict[tuple[float, float], CapRow | LockPoint] = {}
    for r in rows:  # one row per setting (the last measured), as the analysis uses
        by_setting[_setting(r, axis)] = r
    settings = sorted(by_setting, key=lambda s: (_tier_order(s[1]), s[0]))
    facts = _row_facts(curve, axis)
    run = result.run
    meta = curve.run or RunRecord()
    # a simulated card is named by its simulated node (many of them share one real host)
    host = (meta.simulation.node if meta.simulation else None) or meta.host
    rel = os.path.relpath(curve.source, root) if curve.source != root else curve.source.name
    temp = [as_float(_temp_of(by_setting[s])) for s in settings]
    return CardCurve(
        label=str(host or rel),
        run_dir=str(curve.source),
        key=(
            str(run.gpu_name or "unknown GPU"),
            int(run.n_gpus or 1),
            str(run.load_mode or "unknown mode"),
            str(run.model or "unknown model"),
            axis.name,
        ),
        axis=axis,
        metric=str(result.metric),
        x=np.array([s[0] for s in settings], dtype=float),
        tier=np.array([s[1] for s in settings], dtype=float),
        tps=np.array([as_float(by_setting[s].figures.tps) for s in settings]),
        power_w=np.array([as_float(by_setting[s].figures.power_w) for s in settings]),
        # the analysis's own reading where it has one, else caps.csv's (a clock point's)
        temp_c=np.array(
            [
                t if math.isfinite(t) else facts.get(s, (NAN, 0.0))[0]
                for s, t in zip(settings, temp, strict=True)
            ]
        ),
        thermal_pct=np.array([facts.get(s, (NAN, 0.0))[1] for s in settings]),
        best=_setting(best, axis),
        near_peak=_setting(result.near_peak, axis),
        envelope_w=(
            as_float(run.min_limit_w),
            as_float(run.default_limit_w),
            as_float(run.max_limit_w),
        ),
        # run.json, not a reused analysis.json, knows how the sweep ended (a resumed run)
        status=str(meta.status or run.status or "unknown"),
        error=meta.error,
        defaults_w=_defaults_by_gpu(run),
        host=str(host) if host else None,
        gpus=_gpus(meta),
        held_cap_w=_held_cap(meta),
    )


def _setting(row: CapRow | Pick | LockPoint | None, axis: FleetAxis) -> tuple[float, float]:
    """An analysis row's (or pick's) setting on the axis: (x, tier); NaN where it has none."""
    if row is None:
        return NAN, NAN
    keys: dict[str, float | None] = {"cap_w": row.cap_w}
    if isinstance(row, LockPoint):
        keys.update(sm_lock_mhz=row.sm_lock_mhz, mem_lock_mhz=row.mem_lock_mhz)
    tier = as_float(keys.get(axis.tier_key)) if axis.tier_key else NAN
    return as_float(keys.get(axis.setting_key)), tier


def _csv_setting(row: CsvRow, axis: FleetAxis) -> tuple[float, float]:
    """A caps.csv row's setting on the axis: (x, tier)."""
    tier = as_float(row.get(axis.tier_key)) if axis.tier_key else NAN
    return as_float(row.get(axis.setting_key)), tier


def _temp_of(row: CapRow | LockPoint) -> float | None:
    """The hottest reading the analysis kept for a setting (a cap's row has one)."""
    return row.figures.temp_max_c if isinstance(row, CapRow) else None


def _tier_order(tier: float) -> float:
    return tier if math.isfinite(tier) else -1.0


def _row_facts(curve: Curve, axis: FleetAxis) -> dict[tuple[float, float], tuple[float, float]]:
    """(hottest reading, thermal-throttle %) per setting from caps.csv (the last row of each)."""
    caps = curve.caps
    out: dict[tuple[float, float], tuple[float, float]] = {}
    for row in caps.iter_rows(named=True):
        setting = _csv_setting(row, axis)
        if not math.isfinite(setting[0]):
            continue
        thermal = as_float(row.get("thermal_throttle_pct"))
        out[setting] = (as_float(row.get("temp_max_c")), thermal if math.isfinite(thermal) else 0.0)
    return out


def _gpus(run: RunRecord) -> tuple[tuple[str, str], ...]:
    return tuple((g.uuid or "", g.name or "") for g in run.gpus or [])


def _held_cap(run: RunRecord) -> float | None:
    held = as_float(run.options.hold_cap_w if run.options else None)
    return held if math.isfinite(held) and held > 0 else None


def _defaults_by_gpu(run: RunFacts) -> tuple[tuple[str, float], ...]:
    """Each card's name and default limit on a rig of different cards (analysis ``run``)."""
    defaults = run.default_limits_w or []
    names = run.gpu_names or []
    if not defaults or len(names) != len(defaults):
        return ()
    return tuple((str(n), float(d)) for n, d in zip(names, defaults, strict=True))


def _stored_analysis(
    curve: Curve, max_tps_loss_pct: float, clock: bool
) -> PowerAnalysis | ClockAnalysis | None:
    """The run's analysis.json when it is what the analysis would say now: written by this
    powersweep version after caps.csv last changed, of the same kind, with the same near-peak
    tolerance. A sweep always leaves one, and reading it is what keeps a thousand runs fast. A
    file that does not follow the schema is analysed again, as a stale one is."""
    path = curve.source / "analysis.json"
    try:
        if path.stat().st_mtime < (curve.source / "caps.csv").stat().st_mtime:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema_version") != 1:
        return None
    # the kind picks the model; the keys a model would default must have been written
    if (data.get("kind") == "clocks") != clock or not {
        "run",
        "metric",
        "points" if clock else "caps",
    } <= data.keys():
        return None
    try:
        result = ClockAnalysis.from_json(data) if clock else PowerAnalysis.from_json(data)
    except UsageError:
        return None
    near = result.near_peak
    tolerance = UNSET if near is None else near.max_tps_loss_pct
    fresh = (
        result.tool is not None
        and result.tool.version == __version__
        and result.metric == curve.metric
        and (isinstance(tolerance, UnsetType) or tolerance == max_tps_loss_pct)
    )
    return result if fresh else None


def unique_labels(cards: list[CardCurve], root: Path) -> list[CardCurve]:
    """Cards named by host; where two of a group share one (several runs of a node), by path."""
    counts = Counter((c.label, c.key) for c in cards)
    return [
        replace(c, label=os.path.relpath(c.run_dir, root) if Path(c.run_dir) != root else c.run_dir)
        if counts[(c.label, c.key)] > 1
        else c
        for c in cards
    ]


def _ok(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def _text(value: object) -> str | None:
    """A run.json field as text (None stays None): fleet.json's fields are strings."""
    return value if value is None or isinstance(value, str) else str(value)
