"""Replay profiles: a simulated rig built from a measured ``caps.csv``.

Any community curve can be re-swept under any strategy: at a power limit ``L`` the replayed card
draws, decodes and clocks what the measured curve says at ``L``, linearly interpolated between
the two measured caps around it (so it is exact at measured caps and monotone between them).

The reasoning: docs/simulated-rig.md, "powersweep.sim.replay".
"""

from __future__ import annotations

import math
import os
import random
import threading
import zlib

from powersweep.clock import Clock
from powersweep.errors import GpuError, UsageError
from powersweep.sim.engine import WorkKind
from powersweep.sim.replay_curve import (
    FALLBACK_TEMP_C,
    IDLE_FRACTION_OF_MIN_DRAW,
    IDLE_SM_MHZ,
    READING_NOISE_PCT,
    TRACKING_MARGIN_FRAC,
    ReplayCurve,
    replay_profile,
    replay_truth,
)
from powersweep.sweep.gpu import (
    CLOCK_EVENT_GPU_IDLE,
    CLOCK_EVENT_SW_POWER_CAP,
    ClockOffset,
    GpuIdentity,
    GpuProcess,
    GpuSample,
    LockedClocks,
    LockResult,
    PowerEnvelope,
    SetLimitResult,
    SupportedClocks,
)

__all__ = ["ReplayCurve", "ReplayGpu", "ReplayRig", "replay_profile", "replay_truth"]

_UTIL_TIME_CONSTANT_S = 0.25


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
        self._offsets: dict[tuple[float, float], tuple[float, float]] = {}
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

    def lock_sm_clock(self, mhz: float, min_mhz: float | None = None) -> LockResult:
        return LockResult(mhz, False, "a replayed power-cap curve cannot lock clocks")

    def lock_mem_clock(self, mhz: float) -> LockResult:
        return LockResult(mhz, False, "a replayed power-cap curve cannot lock clocks")

    def reset_clock_locks(self, sm: bool = True, mem: bool = True) -> None:
        return None

    def sm_clock_offset(self) -> ClockOffset:
        return ClockOffset(False, message="a replayed power-cap curve has no clock offset")

    def set_sm_clock_offset(self, mhz: float) -> LockResult:
        return LockResult(mhz, False, "a replayed power-cap curve has no clock offset")

    def mem_clock_offset(self) -> ClockOffset:
        return ClockOffset(False, message="a replayed power-cap curve has no clock offset")

    def set_mem_clock_offset(self, mhz: float) -> LockResult:
        return LockResult(mhz, False, "a replayed power-cap curve has no clock offset")

    # --- which cards serve the model (issue 14) ---------------------------------------------

    def compute_processes(self) -> tuple[GpuProcess, ...] | None:
        """The replayed server: this process, on every replayed card (memory unknown)."""
        return (GpuProcess(os.getpid(), math.nan),)

    def xid_events(self) -> tuple[int, ...] | None:
        """None: a replayed power-cap curve has no driver to report GPU faults."""
        return None

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

        Drawn once per operating point from the seed: caps where the measured card ran one
        operating point (a boost plateau or a draw ceiling: the same draw and SM clock) share
        it, as a real card there reads one TPS, and revisiting a cap sees the same curve point.
        """
        if not self._noise:
            return 0.0, 0.0
        draw, _, clock = self.curve.at(cap_w)
        key = (float(round(draw)), round(clock, -1) if math.isfinite(clock) else round(cap_w, 3))
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

    def instability_mhz(self) -> float:
        return 0.0  # a replayed curve has no clock offset to push past a margin

    def reset_count(self) -> int:
        return 0

    def off_bus(self) -> bool:
        return False
