"""A measured ``caps.csv`` as a curve a replayed card follows (:class:`ReplayCurve`), and the
noise-free answer of a replay (:func:`replay_truth`); the card and rig are in
:mod:`powersweep.sim.replay`."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from powersweep.analysis import load_curve
from powersweep.analysis.cap_points import (
    BOOST_PLATEAU,
    DRAW_CEILING,
    CapPoint,
    estimate_noise,
    typical_step_w,
)
from powersweep.analysis.clock_curve import is_clock_curve
from powersweep.analysis.run_record import RunRecord
from powersweep.analysis.structure import find_regions, regimes
from powersweep.errors import UsageError
from powersweep.sweep.gpu import PowerEnvelope

READING_NOISE_PCT = 0.3
IDLE_FRACTION_OF_MIN_DRAW = 0.15
FALLBACK_PREFILL_TPS = 2000.0
FALLBACK_TEMP_C = 60.0
IDLE_SM_MHZ = 210.0
# A cap whose draw is within this of the cap is power-limited (the power-cap clock event is set).
TRACKING_MARGIN_FRAC = 0.01
_UTIL_TIME_CONSTANT_S = 0.25


@dataclass(frozen=True)
class ReplayCurve:
    """A measured curve ready to replay (ascending caps, ok rows only, per-GPU caps).

    Attributes:
        source: Where it was read from.
        caps_w: Measured caps, ascending.
        power_w: Combined draw at each cap.
        tps: The metric's TPS at each cap.
        metric: ``narr_tps`` or ``prefill_tps``.
        sm_clock_mhz: SM clock at each cap (NaN where unknown).
        prefill_tps: Prefill TPS at each cap (None when the curve has none).
        temp_c: Hottest temperature at each cap (None when the curve has none).
        n_gpus: GPUs the curve was measured on (draw is over all of them).
        power_noise_w: Cap-to-cap noise of the combined draw (1 sigma), W.
        tps_noise_rel: Relative cap-to-cap noise of TPS (1 sigma).
        gpu_name: Name the replayed GPU reports.
    """

    source: Path
    caps_w: tuple[float, ...]
    power_w: tuple[float, ...]
    tps: tuple[float, ...]
    metric: str
    sm_clock_mhz: tuple[float, ...]
    prefill_tps: tuple[float, ...] | None
    temp_c: tuple[float, ...] | None
    n_gpus: int
    power_noise_w: float
    tps_noise_rel: float
    gpu_name: str

    @property
    def load_mode(self) -> str:
        """The load mode the curve stands for."""
        return "prefill-heavy" if self.metric == "prefill_tps" else "decode-single"

    def at(self, cap_w: float) -> tuple[float, float, float]:
        """Noise-free (combined draw, TPS, SM clock) at a per-GPU cap (interpolated, clamped)."""
        return (
            _interp(self.caps_w, self.power_w, cap_w),
            _interp(self.caps_w, self.tps, cap_w),
            _interp(self.caps_w, self.sm_clock_mhz, cap_w),
        )

    def prefill_at(self, cap_w: float) -> float:
        """Prefill TPS at a cap (a fixed stand-in when the curve has none)."""
        if self.prefill_tps is None:
            return FALLBACK_PREFILL_TPS
        return _interp(self.caps_w, self.prefill_tps, cap_w)

    def temp_at(self, cap_w: float) -> float:
        """Temperature at a cap (a fixed stand-in when the curve has none)."""
        if self.temp_c is None:
            return FALLBACK_TEMP_C
        return _interp(self.caps_w, self.temp_c, cap_w)

    def envelope(self, default_w: float | None = None) -> PowerEnvelope:
        """The replayed card's envelope: the measured range, default the highest cap."""
        lo, hi = self.caps_w[0], self.caps_w[-1]
        default = hi if default_w is None else min(max(default_w, lo), hi)
        return PowerEnvelope(lo, default, hi, default)


def replay_profile(path: Path, *, gpu_name: str | None = None) -> ReplayCurve:
    """Read a measured curve (a run directory or a caps.csv, even a bare one) for replay.

    Args:
        path: Run directory or CSV with ``cap_w``, ``power_w`` and ``narr_tps`` or
            ``prefill_tps`` (``sm_clock_mhz``, ``prefill_tps``, ``temp_max_c``, ``n_gpus`` used
            when present).
        gpu_name: Name to report; default from run.json or the file name.

    Returns:
        The curve.

    Raises:
        UsageError: The file is missing or malformed, or has fewer than two usable caps.
    """
    curve = load_curve(Path(path))
    if is_clock_curve(curve.caps):
        raise UsageError(f"{path} is a clock-lock curve: replay replays power-cap curves")
    metric = curve.metric
    ok = (
        curve.caps.filter(
            (pl.col("status") == "ok")
            & pl.col(metric).is_not_null()
            & pl.col(metric).is_finite()
            & pl.col("power_w").is_not_null()
            & (pl.col("power_w") > 0)
        )
        .unique(subset="cap_w", keep="last", maintain_order=True)
        .sort("cap_w")
    )
    if ok.height < 2:
        raise UsageError(f"{path}: a replay needs at least two caps with status ok, draw and TPS")
    caps = tuple(float(c) for c in ok["cap_w"])
    power = tuple(float(p) for p in ok["power_w"])
    tps = tuple(float(t) for t in ok[metric])
    n_gpus = int(ok["n_gpus"].max() or 1)  # type: ignore[arg-type]
    clocks = _fill_column(caps, ok["sm_clock_mhz"].to_list())
    prefill = _optional_column(caps, ok["prefill_tps"].to_list())
    temps = _optional_column(caps, ok["temp_max_c"].to_list())
    points = [
        CapPoint(cap_w=c, cap_total_w=c * n_gpus, power_w=p, tps=t)
        for c, p, t in zip(caps, power, tps, strict=True)
    ]
    noise = estimate_noise(points, typical_step_w(caps))
    name = gpu_name or _name_from_run(curve.run) or f"replay of {Path(path).name}"
    return ReplayCurve(
        source=Path(path),
        caps_w=caps,
        power_w=power,
        tps=tps,
        metric=metric,
        sm_clock_mhz=clocks,
        prefill_tps=prefill,
        temp_c=temps,
        n_gpus=max(1, n_gpus),
        power_noise_w=noise.power_w,
        tps_noise_rel=noise.tps_rel,
        gpu_name=name,
    )


def replay_truth(curve: ReplayCurve, caps_w: Sequence[float]) -> dict[str, Any]:
    """The noise-free answer of a replay, shaped like ``GroundTruth.to_dict()``.

    Sweet spot: the best TPS/W of the interpolated curve at ``caps_w``; plateaus: what the
    analysis finds on that noise-free curve.
    """
    caps = sorted({float(c) for c in caps_w})
    if not caps:
        raise UsageError("replay truth needs at least one cap")
    rows: list[dict[str, Any]] = []
    points: list[CapPoint] = []
    for c in caps:
        power, tps, sm = curve.at(c)
        points.append(CapPoint(c, c * curve.n_gpus, power, tps, sm_clock_mhz=sm))
        rows.append(
            {
                "cap_w": c,
                "tps": tps,
                "power_w": power,
                "tps_per_w": tps / power,
                "sm_clock_mhz": sm,
                "temp_c": curve.temp_at(c),
            }
        )
    regions = find_regions(points, caps)
    for row, reg in zip(rows, regimes(points, regions), strict=True):
        row["regime"] = reg.regime
    best = max(rows, key=lambda r: (r["tps_per_w"], -r["cap_w"]))
    return {
        "load_mode": curve.load_mode,
        "concurrency": 1,
        "prompt_tokens": None,
        "caps": rows,
        "sweet_spot": {"cap_w": best["cap_w"], "tps_per_w": best["tps_per_w"]},
        "plateaus": [
            {"kind": r.kind, "start_w": r.start_w, "end_w": r.end_w, "power_w": round(r.power_w, 2)}
            for r in regions
            if r.kind in (BOOST_PLATEAU, DRAW_CEILING)
        ],
    }


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise-linear interpolation, clamped to the end values outside ``xs``."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x) - 1
    x0, x1 = xs[i], xs[i + 1]
    if x1 == x0:
        return ys[i]
    return ys[i] + (ys[i + 1] - ys[i]) * (x - x0) / (x1 - x0)


def _fill_column(caps: Sequence[float], values: Sequence[Any]) -> tuple[float, ...]:
    """A column with gaps filled by interpolation over the known values (NaN if none known)."""
    known = [
        (c, float(v))
        for c, v in zip(caps, values, strict=True)
        if v is not None and math.isfinite(v)
    ]
    if not known:
        return tuple(math.nan for _ in caps)
    xs = [c for c, _ in known]
    ys = [v for _, v in known]
    return tuple(_interp(xs, ys, c) for c in caps)


def _optional_column(caps: Sequence[float], values: Sequence[Any]) -> tuple[float, ...] | None:
    filled = _fill_column(caps, values)
    return None if all(math.isnan(v) for v in filled) else filled


def _name_from_run(run: RunRecord | None) -> str | None:
    name = run.gpus[0].name if run and run.gpus else None
    return f"{name} (replay)" if name is not None else None
