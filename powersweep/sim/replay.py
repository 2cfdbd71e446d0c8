"""Replay profiles: a simulated rig built from a measured ``caps.csv``.

Any community curve can be re-swept under any strategy: at a power limit ``L`` the replayed card
draws, decodes and clocks what the measured curve says at ``L``, linearly interpolated between
the two measured caps around it (so it is exact at measured caps and monotone between them).
Outside the measured caps the curve is clamped to the nearest end; the replayed envelope is the
measured range (lowest cap to highest), so a sweep never sets a limit there anyway.

Noise has the measured size: the curve's cap-to-cap noise (estimated from second differences of
adjacent caps, as the analysis does) becomes a per-cap offset, drawn once per cap from a seeded
generator, on draw and TPS; each reading adds the simulated card's per-reading jitter (0.3 %) on
top. A re-sweep therefore scatters around the measured curve as much as the measured curve
scattered around its own trend.

Not replayed: temperature (a constant, or the measured ``temp_max_c`` when present), the load
mode (the curve's TPS is served whatever the batch: replay a curve under its own load mode) and
prefill when the curve has no ``prefill_tps`` (a fixed rate stands in).
"""

from __future__ import annotations

import bisect
import math
import os
import random
import threading
import zlib
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
from powersweep.analysis.clocks import is_clock_curve
from powersweep.analysis.structure import find_regions, regimes
from powersweep.clock import Clock
from powersweep.errors import GpuError, UsageError
from powersweep.sim.engine import WorkKind
from powersweep.sweep.gpu import (
    CLOCK_EVENT_GPU_IDLE,
    CLOCK_EVENT_SW_POWER_CAP,
    GpuIdentity,
    GpuProcess,
    GpuSample,
    LockedClocks,
    LockResult,
    PowerEnvelope,
    SetLimitResult,
    SupportedClocks,
)

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


class ReplayGpu:
    """One replayed card: implements :class:`~powersweep.sweep.gpu.Gpu`.

    Args:
        curve: The measured curve.
        clock: Run clock (energy and utilization evolve on it).
        index: NVML-style index.
        seed: Seed of the noise.
        noise: False serves the noise-free curve (tests, ground truth).
        default_w: Default limit to report (the highest cap when None).
    """

    def __init__(
        self,
        curve: ReplayCurve,
        clock: Clock,
        *,
        index: int = 0,
        seed: int = 0,
        noise: bool = True,
        default_w: float | None = None,
    ) -> None:
        self.curve = curve
        self._clock = clock
        self._index = index
        self._seed = seed
        self._noise = noise
        self._env = curve.envelope(default_w)
        self._limit_w = self._env.default_w
        self._rng = random.Random(seed * 1009 + index)
        self._lock = threading.Lock()
        self._busy = False
        self._util = 0.0
        self._energy_mj = 0.0
        self._t = clock.now()
        self._offsets: dict[float, tuple[float, float]] = {}
        self._persistence = False
        self._uuid = f"GPU-replay-{zlib.crc32(str(curve.source).encode()):08x}-{index}"

    # --- Gpu protocol -------------------------------------------------------------------------

    @property
    def index(self) -> int:
        return self._index

    def identity(self) -> GpuIdentity:
        return GpuIdentity(
            index=self._index,
            name=self.curve.gpu_name,
            uuid=self._uuid,
            vram_mib=24576,
            driver_version="replay",
        )

    def envelope(self) -> PowerEnvelope:
        e = self._env
        return PowerEnvelope(e.min_w, e.default_w, e.max_w, self._limit_w)

    def set_power_limit(self, watts: float) -> SetLimitResult:
        e = self._env
        if not e.min_w - 1e-9 <= watts <= e.max_w + 1e-9:
            return SetLimitResult(
                watts,
                self._limit_w,
                self._limit_w,
                False,
                f"{watts:g} W is outside the replayed range {e.min_w:g}-{e.max_w:g} W",
            )
        with self._lock:
            self._advance()
            self._limit_w = float(watts)
        return SetLimitResult(watts, self._limit_w, self._limit_w, True)

    def read_sample(self) -> GpuSample:
        with self._lock:
            self._advance()
            busy, util, energy, limit = self._busy, self._util, self._energy_mj, self._limit_w
            power = self._power_w()
            jitter = self._rng.gauss(0.0, READING_NOISE_PCT / 100.0) if self._noise else 0.0
        _, _, sm = self.curve.at(limit)
        bits = CLOCK_EVENT_GPU_IDLE
        if busy:
            tracking = power >= limit * (1.0 - TRACKING_MARGIN_FRAC)
            bits = CLOCK_EVENT_SW_POWER_CAP if tracking else 0
        return GpuSample(
            gpu_index=self._index,
            power_w=round(power * (1.0 + jitter), 2),
            energy_mj=float(math.floor(energy)),
            temp_c=float(round(self.curve.temp_at(limit) if busy else FALLBACK_TEMP_C - 20.0)),
            sm_clock_mhz=sm if busy else IDLE_SM_MHZ,
            mem_clock_mhz=math.nan,
            util_pct=float(round(100.0 * util)),
            pstate=2 if busy else 8,
            clock_event_bits=bits,
        )

    def slowdown_temp_c(self) -> float:
        return math.nan

    def persistence_mode(self) -> bool | None:
        return self._persistence

    def set_persistence_mode(self, enabled: bool) -> bool | None:
        self._persistence = bool(enabled)
        return self._persistence

    def locked_clocks(self) -> LockedClocks:
        return LockedClocks(known=True, user_clock_setting_active=False)

    # --- clock locks: a replayed power curve has no clocks to lock ----------------------------

    def supported_clocks(self) -> SupportedClocks:
        raise GpuError("a replayed power-cap curve has no clocks to lock: sweep --axis power")

    def lock_sm_clock(self, mhz: float) -> LockResult:
        return LockResult(mhz, False, "a replayed power-cap curve cannot lock clocks")

    def lock_mem_clock(self, mhz: float) -> LockResult:
        return LockResult(mhz, False, "a replayed power-cap curve cannot lock clocks")

    def reset_clock_locks(self, sm: bool = True, mem: bool = True) -> None:
        return None

    # --- which cards serve the model (issue 14) ---------------------------------------------

    def compute_processes(self) -> tuple[GpuProcess, ...] | None:
        """The replayed server: this process, on every replayed card (memory unknown)."""
        return (GpuProcess(os.getpid(), math.nan),)

    # --- rig side -----------------------------------------------------------------------------

    @property
    def limit_w(self) -> float:
        """The power limit in force."""
        return self._limit_w

    def set_busy(self, busy: bool) -> None:
        """Switch between loaded and idle (the time until now is accounted at the old state)."""
        with self._lock:
            self._advance()
            self._busy = busy

    def offsets(self, cap_w: float) -> tuple[float, float]:
        """This cap's noise offsets: (draw in W, relative TPS); zero without noise.

        Drawn once per cap from the seed, so revisiting a cap sees the same curve point.
        """
        key = round(cap_w, 3)
        if not self._noise:
            return 0.0, 0.0
        if key not in self._offsets:
            rng = random.Random(zlib.crc32(f"{self._seed}:{key}".encode()))
            self._offsets[key] = (
                rng.gauss(0.0, self.curve.power_noise_w),
                rng.gauss(0.0, self.curve.tps_noise_rel),
            )
        return self._offsets[key]

    # --- internals (lock held) ----------------------------------------------------------------

    def _power_w(self) -> float:
        n = self.curve.n_gpus
        if not self._busy:
            return IDLE_FRACTION_OF_MIN_DRAW * self.curve.power_w[0] / n
        draw, _, _ = self.curve.at(self._limit_w)
        d_power, _ = self.offsets(self._limit_w)
        # The measured draw never exceeds the cap; the noise must not either.
        return min(draw + d_power, self._limit_w * n) / n

    def _advance(self) -> None:
        now = self._clock.now()
        dt = now - self._t
        if dt <= 0:
            return
        self._t = now
        self._energy_mj += self._power_w() * dt * 1000.0
        target = 1.0 if self._busy else 0.0
        self._util = target + (self._util - target) * math.exp(-dt / _UTIL_TIME_CONSTANT_S)


class ReplayRig:
    """Replayed GPUs serving the curve's TPS: a GpuBackend and a SimEngine, like ``SimRig``.

    Args:
        curve: The measured curve (its ``n_gpus`` cards are replayed, sharing the draw).
        clock: Run clock shared with the simulated server and the sweep.
        seed: Noise seed.
        noise: False replays the noise-free curve.
        context_tokens: Context the served model reports.
    """

    def __init__(
        self,
        curve: ReplayCurve,
        clock: Clock,
        *,
        seed: int = 0,
        noise: bool = True,
        context_tokens: int = 32768,
    ) -> None:
        self.curve = curve
        self._clock = clock
        self._context_tokens = context_tokens
        self.gpus = [
            ReplayGpu(curve, clock, index=i, seed=seed, noise=noise) for i in range(curve.n_gpus)
        ]
        self._lock = threading.Lock()
        self._active = 0

    # --- GpuBackend ---------------------------------------------------------------------------

    def device_count(self) -> int:
        """Number of replayed GPUs."""
        return len(self.gpus)

    def gpu(self, index: int) -> ReplayGpu:
        """The replayed GPU at ``index``."""
        if not 0 <= index < len(self.gpus):
            raise UsageError(f"GPU {index} does not exist (the replay has {len(self.gpus)})")
        return self.gpus[index]

    def close(self) -> None:
        """Nothing to release; present for the backend protocol."""

    # --- SimEngine ----------------------------------------------------------------------------

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def context_tokens(self) -> int:
        return self._context_tokens

    def work_started(self, kind: WorkKind) -> None:
        with self._lock:
            self._active += 1
            for g in self.gpus:
                g.set_busy(True)

    def work_finished(self, kind: WorkKind) -> None:
        with self._lock:
            self._active = max(0, self._active - 1)
            busy = self._active > 0
            for g in self.gpus:
                g.set_busy(busy)

    def decode_rate_tps(self) -> float:
        limit = min(g.limit_w for g in self.gpus)
        _, tps, _ = self.curve.at(limit)
        _, d_tps = self.gpus[0].offsets(limit)
        return max(tps * (1.0 + d_tps), 1e-3)

    def prefill_rate_tps(self, prompt_tokens: int) -> float:
        limit = min(g.limit_w for g in self.gpus)
        _, d_tps = self.gpus[0].offsets(limit)
        return max(self.curve.prefill_at(limit) * (1.0 + d_tps), 1e-3)


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
        row["regime"] = reg["regime"]
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


def _name_from_run(run: dict[str, Any] | None) -> str | None:
    if not run:
        return None
    gpus = run.get("gpus")
    if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict):
        name = gpus[0].get("name")
        return f"{name} (replay)" if isinstance(name, str) else None
    return None
