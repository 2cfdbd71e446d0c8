"""The run-to-run term: how far two readings of one point taken apart in a run differ beyond their
own widths, measured in every run and carried in every point's stated interval.

The reasoning: docs/precision.md, "powersweep.sweep.measurement.run_to_run".
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from powersweep.analysis.curve_noise import excess_scatter
from powersweep.analysis.precision import Reading, RunToRun
from powersweep.runformat import CONFIRM_REASON, REFERENCE_REASON
from powersweep.sweep.measurement.point import PointMeasurer
from powersweep.sweep.measurement.stalls import RunStalls
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.records.writer import RunWriter
from powersweep.sweep.sampling.measure import stated_columns
from powersweep.sweep.sampling.per_token import j_per_token_restated

NO_REFERENCE = "no point's reading stands (none was measured ok): nothing to read again"
REFERENCE_NOT_OK = "the reference point's second reading did not end ok"
# The columns that name a point in caps.csv.
POINT_COLUMNS = ("cap_w", "sm_lock_mhz", "mem_lock_mhz", "sm_offset_mhz")

Key = tuple[float | None, ...]
P = TypeVar("P")


class RunToRunPhase:
    """Reads the reference point again and carries the run-to-run term into every row.

    Args:
        measurer: The protocol every point is measured by.
        writer: The run directory (its caps.csv is restated).
        meta: ``run.json`` content (``run_to_run`` is set).
        warn: Where warnings go.
    """

    def __init__(
        self,
        measurer: PointMeasurer,
        writer: RunWriter,
        meta: dict[str, Any],
        *,
        warn: Callable[[str], None] = lambda _m: None,
    ) -> None:
        self.measurer = measurer
        self.writer = writer
        self.meta = meta
        self.warn = warn

    async def run(self, reference: SweepPoint | None) -> None:
        """Read ``reference`` (the first point measured ok whose reading still stands; None:
        none) again, then carry the term measured from every pair of the run into each caps.csv
        row."""
        skipped = None
        if reference is None:
            skipped = NO_REFERENCE
        else:
            row = await self.measurer.measure(reference, REFERENCE_REASON, 0, 1)
            if row["status"] != "ok":
                skipped = f"{REFERENCE_NOT_OK} ({row['status']}: {row.get('error') or ''})"
        await self.measurer.stop_busy()  # nothing is measured after it
        self.carry(reference, skipped)

    def carry(self, reference: SweepPoint | None, skipped: str | None = None) -> RunToRun:
        """Measure the term from the run's pairs, restate caps.csv and record it.

        decode-single's rates are first stated at the run's stall share (:mod:`.stalls`), whose
        standard error joins the floor: common to the run's points, as the share is."""
        stalls = RunStalls.of(read_rows(self.writer, "requests.csv"))
        rows = read_rows(self.writer)
        if stalls.share > 0 and any(stalls.stated(row) for row in rows):
            self.warn(stalls.note())
        stated: list[dict[str, Any]] = [{**row, **stalls.stated(row)} for row in rows]
        pairs = repeat_pairs(stated)
        floor = math.hypot(self.measurer.run_to_run.floor_rel, stalls.sd_rel)
        curve_var, curve_dof = excess_scatter(curve_lines(stated))
        term = RunToRun.of_pairs([(a, b) for _, _, a, b in pairs], floor, run_middle_s(stated))
        term = term.with_curve(curve_var, curve_dof)
        self.measurer.run_to_run = term
        self.writer.restate_caps(lambda row: {**stalls.stated(row), **restated(row, term)})
        self.meta["stalls"] = stalls.to_dict()
        self.meta["run_to_run"] = {
            **record(term, pairs, reference, skipped),
            "curve_tps_sd_pct": round(100.0 * math.sqrt(curve_var), 4),
            "curve_dof": curve_dof,
        }
        self.writer.write_run_json(self.meta)
        return term


def best_reference(measured: Sequence[tuple[P, Reading | None]]) -> P | None:
    """Of the points measured ok (in order, with their readings), the one whose second reading,
    one point's time after the last, measures the run's drift best: the smallest
    ``sqrt(2 v + b^2 + (s dT)^2) / dt`` (``v`` its own variance, ``b`` its temperature's bias,
    ``dT`` its temperature less the last point's, ``s`` TPS/W's move per degree, ``dt`` the
    seconds between the readings). An early point gives the longest baseline; one read while
    the card still heated, or read again at another temperature (a sweep's hot end read again
    after its cool end), would price its own temperature as the run's drift. The first where
    fewer than two readings carry their time."""
    timed = [(p, r) for p, r in measured if r is not None and math.isfinite(r.t_s)]
    if len(timed) < 2:
        return measured[0][0] if measured else None
    last = max((r for _, r in timed), key=lambda r: r.t_s)
    times = sorted(r.t_s for _, r in timed)
    again_s = times[-1] + (times[-1] - times[0]) / (len(times) - 1)

    def rate_sd(reading: Reading) -> float:
        own = 2.0 * reading.within_var + reading.bias_rel**2 + reading.temperature_var(last.temp_c)
        return math.sqrt(own) / (again_s - reading.t_s) if math.isfinite(own) else math.inf

    return min(timed, key=lambda pr: rate_sd(pr[1]))[0]


def read_rows(writer: RunWriter, name: str = "caps.csv") -> list[dict[str, str]]:
    """The rows of one of the run's CSV files as written so far (none when it is missing)."""
    try:
        with open(writer.path / name, newline="") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        return []


def run_middle_s(rows: Sequence[Mapping[str, Any]]) -> float:
    """The run second halfway between the run's start (0: the warm-up's conditions are the
    run's too) and its last ok reading, where the run's drift is taken as 0: the figures are
    stated at the run's mean conditions. NaN where no reading carries its time, or where the
    times go back (a resumed run's rows count from another start)."""
    times = [Reading.of(row).t_s for row in rows if row.get("status") == "ok"]
    finite = [t for t in times if math.isfinite(t)]
    if not finite or any(b < a for a, b in itertools.pairwise(finite)):
        return math.nan
    return max(finite) / 2.0


def _key(row: Mapping[str, Any]) -> Key:
    out: list[float | None] = []
    for c in POINT_COLUMNS:
        try:
            v = float(row.get(c) or "nan")
        except ValueError:
            v = math.nan
        out.append(None if math.isnan(v) else v)
    return tuple(out)


def curve_lines(rows: Sequence[Mapping[str, Any]]) -> list[list[tuple[float, float]]]:
    """Each line of the run's curve: ``(TPS, its own variance)`` of every point's first ok
    reading, in order along the limit (the caps; a clock run's SM locks at each memory lock and
    memory locks at each SM lock). An undervolt search's offsets are no such line: none."""
    first: dict[Key, Mapping[str, Any]] = {}
    for row in rows:
        reason = row.get("reason") or ""
        if row.get("status") == "ok" and reason not in (REFERENCE_REASON, CONFIRM_REASON):
            first.setdefault(_key(row), row)
    keys = list(first)
    if any(k[3] is not None for k in keys):
        return []
    locked = [i for i in (1, 2) if any(k[i] is not None for k in keys)] or [0]
    out = []
    for axis in locked:
        others = [i for i in range(3) if i != axis]
        groups: dict[tuple[float | None, ...], list[Key]] = {}
        for k in keys:
            if k[axis] is not None:
                groups.setdefault(tuple(k[i] for i in others), []).append(k)
        for members in groups.values():
            members.sort(key=lambda k: k[axis] or 0.0)
            readings = [Reading.of(first[k]) for k in members]
            out.append([(r.tps, r.fast_or_within(True)[0]) for r in readings])
    return out


def repeat_pairs(
    rows: Sequence[Mapping[str, Any]],
) -> list[tuple[Key, str, Reading, Reading]]:
    """``(point key, reason, first reading, repeat)`` of each repeat of a point in the run: a
    ``reread`` or ``confirm`` row paired with the point's reading that stood before it (its
    last ok row of any other reason)."""
    standing: dict[Key, Mapping[str, Any]] = {}
    out: list[tuple[Key, str, Reading, Reading]] = []
    for row in rows:
        if row.get("status") != "ok":
            continue
        key, reason = _key(row), row.get("reason") or ""
        if reason in (REFERENCE_REASON, CONFIRM_REASON):
            first = standing.get(key)
            if first is not None:
                out.append((key, reason, Reading.of(first), Reading.of(row)))
        else:
            standing[key] = row
    return out


def restated(row: Mapping[str, Any], term: RunToRun) -> dict[str, Any]:
    """The row's precision columns with ``term`` carried, J/token's with them (a row without a
    reading unchanged)."""
    reading = Reading.of(row)
    if not reading.known:
        return {}
    precision = reading.restated(term)
    return {**stated_columns(precision), **j_per_token_restated(row, precision)}


def record(
    term: RunToRun,
    pairs: Sequence[tuple[Key, str, Reading, Reading]],
    reference: SweepPoint | None,
    skipped: str | None,
) -> dict[str, Any]:
    """``run.json`` ``run_to_run``."""

    def pct(v: float) -> float | None:
        return round(100.0 * v, 4) if math.isfinite(v) else None

    return {
        "reference": reference.to_dict() if reference is not None else None,
        "skipped": skipped,
        "pairs": [
            {
                "point": dict(zip(POINT_COLUMNS, key, strict=True)),
                "reason": reason,
                "tps": [a.tps, b.tps],
                "tps_per_w": [a.tps_per_w, b.tps_per_w],
                "tps_per_w_within_u95_pct": [pct(a.within_rel), pct(b.within_rel)],
            }
            for key, reason, a, b in pairs
        ],
        "tps_sd_pct": pct(term.tps_sd_rel),
        "tps_per_w_sd_pct": pct(term.tps_per_w_sd_rel),
        "tps_dof": term.tps_dof if math.isfinite(term.tps_dof) else None,
        "dof": term.dof if math.isfinite(term.dof) else None,
        "floor_sd_pct": pct(term.floor_rel),
        "t_ref_s": term.t_ref_s if math.isfinite(term.t_ref_s) else None,
        "span_s": list(term.span_s) if all(map(math.isfinite, term.span_s)) else None,
        "drift_pct_per_min": pct(60.0 * term.drift.rate_per_s),
        "drift_sd_pct_per_min": pct(60.0 * math.sqrt(term.drift.rate_var)),
        "tps_drift_pct_per_min": pct(60.0 * term.tps_drift.rate_per_s),
        "tps_drift_sd_pct_per_min": pct(60.0 * math.sqrt(term.tps_drift.rate_var)),
    }
