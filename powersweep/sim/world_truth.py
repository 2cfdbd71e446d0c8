"""The truth each measured point of a simulated run is compared with, the world's noise included.

``run.json``'s ``simulation.ground_truth`` holds each cap's (or clock point's) long-run steady
value, which the bursts' mean draw and the hiccups' and bursts' share of the rate are already
in.

The reasoning: docs/world-noise.md, "powersweep.sim.world_truth".
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powersweep.runformat import as_float
from powersweep.sim.world import Drift


@dataclass(frozen=True)
class PointTruth:
    """The truth of one caps.csv row.

    Attributes:
        tps: The metric's rate (``narr_tps``, or ``prefill_tps`` in prefill-heavy).
        power_w: The combined mean draw.
        tps_per_w: ``tps / power_w``.
    """

    tps: float
    power_w: float
    tps_per_w: float


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _key(row: Mapping[str, str], clocks: bool) -> tuple[float | None, ...]:
    if clocks:
        return (as_float(row.get("sm_lock_mhz"), None), as_float(row.get("mem_lock_mhz"), None))
    return (as_float(row.get("cap_w"), None),)


def point_truths(run_dir: Path) -> list[PointTruth | None]:
    """One truth per row of the run's caps.csv (None where the ground truth has no such point,
    or the run has none: a real rig, a replayed curve without one)."""
    meta = json.loads((run_dir / "run.json").read_text())
    sim = meta.get("simulation") or {}
    truth = sim.get("ground_truth")
    rows = _read_csv(run_dir / "caps.csv")
    if not truth:
        return [None] * len(rows)
    clocks = "points" in truth
    base: dict[tuple[float | None, ...], Mapping[str, Any]] = {
        _key({k: "" if v is None else str(v) for k, v in p.items()}, clocks): p
        for p in truth["points" if clocks else "caps"]
    }
    models: Mapping[str, Any] = (sim.get("world") or {}).get("models") or {}
    drift = _drift_share(models.get("drift"), run_dir)
    slope = _context_slope(models.get("context-slowdown"))
    decode = truth.get("load_mode") != "prefill-heavy"
    requests = _read_csv(run_dir / "requests.csv") if slope and decode else []
    out: list[PointTruth | None] = []
    for row in rows:
        point = base.get(_key(row, clocks))
        if point is None:
            out.append(None)
            continue
        tps = float(point["tps"]) * drift
        if slope and decode:
            tps /= 1.0 + slope * _mean_context(row, requests, clocks)
        power = float(point["power_w"])
        out.append(PointTruth(tps, power, tps / power))
    return out


def _drift_share(model: Mapping[str, Any] | None, run_dir: Path) -> float:
    """The drift factor's mean over the run (1.0 without drift)."""
    if not model:
        return 1.0
    times = [float(r["t_s"]) for r in _read_csv(run_dir / "samples.csv") if r.get("t_s")]
    if not times:
        return 1.0
    drift = Drift(
        float(model["amplitude_pct"]) / 100.0, float(model["period_s"]), float(model["phase_rad"])
    )
    return drift.mean(min(times), max(times))


def _context_slope(model: Mapping[str, Any] | None) -> float:
    """The step's growth per context token (0.0 without context-slowdown)."""
    if not model:
        return 0.0
    return float(model["pct_per_1k_tokens"]) / 100.0 / 1000.0


def _mean_context(
    row: Mapping[str, str], requests: Sequence[Mapping[str, str]], clocks: bool
) -> float:
    """The context a decode point's metric requests held, weighted by the intervals they
    decoded: each request's prompt plus half its answer."""
    key = _key(row, clocks)
    confirm = row.get("reason") == "confirm"
    weight = total = 0.0
    for r in requests:
        if r.get("prompt_kind") != "narr" or r.get("ok") != "true":
            continue
        if _key(r, clocks) != key or (r.get("confirm") == "true") != confirm:
            continue
        n = as_float(r.get("completion_tokens"), None) or 0.0
        if n < 2:
            continue
        prompt = as_float(r.get("prompt_tokens"), None) or 0.0
        weight += n - 1.0
        total += (n - 1.0) * (prompt + n / 2.0)
    return total / weight if weight > 0 else 0.0
