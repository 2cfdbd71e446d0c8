"""A simulated GPU that implements the :class:`~powersweep.sweep.gpu.Gpu` protocol.

Its state (temperature, energy counter, utilisation) evolves in run time on the injected clock;
its operating point comes from :mod:`powersweep.sim.physics`; readings carry seeded noise.

The reasoning: docs/simulated-rig.md, "powersweep.sim.sim_gpu".
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import threading

from powersweep.clock import Clock
from powersweep.sim.energy_meter import EnergyMeter
from powersweep.sim.limit_store import LimitStore
from powersweep.sim.mem_stability import mem_margin
from powersweep.sim.physics import (
    IDLE,
    UNLOCKED,
    Locks,
    OperatingPoint,
    Workload,
    gap_power_w,
    operating_point,
    thermal_budget_w,
)
from powersweep.sim.physics import (
    rate_tps as rate_at,
)
from powersweep.sim.profiles import GpuProfile
from powersweep.sim.vf_stability import DEFAULT_RESET_BEYOND_MHZ, BusState, stable_margin_mhz
from powersweep.sim.world import World
from powersweep.sweep.gpu import (
    CLOCK_EVENT_APP_CLOCKS,
    CLOCK_EVENT_GPU_IDLE,
    CLOCK_EVENT_SW_POWER_CAP,
    CLOCK_EVENT_SW_THERMAL,
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

_UTIL_TIME_CONSTANT_S = 0.25
# The instantaneous field (and a pre-Ampere card's power usage) still averages over a short
# window, about 0.1 s, so a few milliseconds between two requests do not show as a drop to idle
# draw.
_POWER_READING_TIME_CONSTANT_S = 0.1
_THERMAL_RELEASE_C = 2.0


class SimGpu:
    """One simulated card.

    Args:
        profile: Its physics.
        clock: Run clock (shared with the simulated server and the sampler).
        index: NVML-style index.
        seed: Seed of the reading noise and of the card's silicon lottery (its stable SM clock
            offset margin).
        store: Where the power limit, locks and clock offset persist; None keeps them in
            memory.
        share: Fraction of the model's work on this card (1/n for n-way tensor parallel).
        serving: Whether the model is loaded on this card (its process shows in
            :meth:`compute_processes`); an idle card beside the serving ones has none.
        vf_reset_beyond_mhz: Under load with its offset more than this past its stable margin,
            the card resets (0: at any instability).
        world: The world's noise models on (None: none); this card models ``bursty-draw``
            and ``sensor-lag``.
    """

    def __init__(
        self,
        profile: GpuProfile,
        clock: Clock,
        *,
        index: int = 0,
        seed: int = 0,
        store: LimitStore | None = None,
        share: float = 1.0,
        serving: bool = True,
        vf_reset_beyond_mhz: float = DEFAULT_RESET_BEYOND_MHZ,
        world: World | None = None,
    ) -> None:
        self.profile = profile
        self.serving = serving
        self._bursts = world.bursts if world is not None else None
        self._duty = world.duty if world is not None else 1.0
        self._clock = clock
        self._index = index
        self._rng = random.Random(seed * 1009 + index)
        self._store = store
        self._share = share
        self._uuid = f"GPU-sim-{profile.name}-{index}"
        stored = store.get(self._uuid) if store else None
        self._limit_w = stored if stored is not None else profile.user_limit_w
        persistence = store.get_value(self._persistence_key) if store else None
        self._persistence = persistence is True
        self._locks = store.get_locks(self._uuid) if store else UNLOCKED
        offset = store.get_sm_offset(self._uuid) if store else 0.0
        self._sm_offset_mhz = offset if profile.vf_offset_supported else 0.0
        self._stable_offset_mhz = stable_margin_mhz(profile, seed, index)
        mem_offset = store.get_mem_offset(self._uuid) if store else 0.0
        self._mem_offset_mhz = mem_offset if profile.mem_offset_supported else 0.0
        self._mem_margin = mem_margin(profile, seed, index)
        self._bus = BusState(index, vf_reset_beyond_mhz)
        self._lock = threading.Lock()
        self._workload = IDLE
        th = profile.thermal
        self._temp_c = th.ambient_c + th.resistance_c_per_w * profile.idle_w
        quantum_w = world.sensor_quantum_w if world is not None else None
        self._energy = EnergyMeter(profile, clock.now(), seed, index, quantum_w)
        self._avg_rng = random.Random(seed * 1009 + index + 104729)
        self._power_reading_w = profile.idle_w
        self._util = 0.0
        self._thermal_active = False
        self._t = clock.now()
        self._op_cache: dict[
            tuple[Workload, float, float, Locks, float, float], OperatingPoint
        ] = {}

    # --- Gpu protocol -------------------------------------------------------------------------

    @property
    def index(self) -> int:
        return self._index

    def identity(self) -> GpuIdentity:
        return GpuIdentity(
            index=self._index,
            name=self.profile.gpu_name,
            uuid=self._uuid,
            vram_mib=self.profile.vram_mib,
            driver_version="sim",
        )

    def envelope(self) -> PowerEnvelope:
        p = self.profile
        return PowerEnvelope(p.min_limit_w, p.default_limit_w, p.max_limit_w, self._limit_w)

    def set_power_limit(self, watts: float) -> SetLimitResult:
        self._bus.refuse_off_bus(self._clock.now(), "set its power limit")
        p = self.profile
        if not p.min_limit_w <= watts <= p.max_limit_w:
            return SetLimitResult(
                watts,
                self._limit_w,
                self._limit_w,
                False,
                f"{watts:g} W is outside the envelope {p.min_limit_w:g}-{p.max_limit_w:g} W",
            )
        with self._lock:
            self._advance()
            if watts >= p.rejects_below_w:
                self._limit_w = float(watts)
                if self._store:
                    self._store.put(self._uuid, self._limit_w)
            readback = self._limit_w
        accepted = abs(readback - watts) <= 0.5
        msg = "" if accepted else f"card kept {readback:g} W when asked for {watts:g} W"
        return SetLimitResult(watts, readback, readback, accepted, msg)

    def read_sample(self) -> GpuSample:
        with self._lock:
            self._advance()
            if self._bus.off_bus(self._t):
                return self._bus.lost_sample(self.profile.instant_power_field)
            op = self._op()
            short, usage = self._energy.readings(self._power_reading_w, self._rng, self._avg_rng)
            temp = self._temp_c
            energy = self._energy.counter_mj
            util = self._util
            thermal = self._thermal_active
            busy = self._workload.kind != "idle"
        rng = self._rng
        p = self.profile
        sm = op.sm_low_mhz
        if op.high_fraction > 0 and rng.random() < op.high_fraction:
            sm = op.sm_high_mhz
        bits = 0
        if not busy:
            bits |= CLOCK_EVENT_GPU_IDLE
        elif thermal and op.limited_by == "thermal":
            bits |= CLOCK_EVENT_SW_THERMAL
        elif op.limited_by in ("power", "boost_state"):
            bits |= CLOCK_EVENT_SW_POWER_CAP
        elif self._locks.sm_mhz is not None and op.limited_by == "max_clock":
            bits |= CLOCK_EVENT_APP_CLOCKS
        return GpuSample(
            gpu_index=self._index,
            power_w=usage,
            power_instant_w=short if p.instant_power_field else math.nan,
            energy_mj=float(math.floor(energy)),
            temp_c=float(round(temp + rng.gauss(0.0, 0.2))),
            sm_clock_mhz=sm,
            mem_clock_mhz=self._mem_clock_mhz(busy),
            util_pct=float(round(100.0 * util)),
            pstate=2 if busy else 8,
            clock_event_bits=bits,
        )

    def slowdown_temp_c(self) -> float:
        return self.profile.slowdown_temp_c

    # --- persistence mode and clock-lock reads ------------------------------------------------

    @property
    def _persistence_key(self) -> str:
        return f"{self._uuid}:persistence_mode"

    def persistence_mode(self) -> bool | None:
        return self._persistence

    def set_persistence_mode(self, enabled: bool) -> bool | None:
        with self._lock:
            self._persistence = bool(enabled)
            if self._store:
                self._store.put_value(self._persistence_key, self._persistence)
        return self._persistence

    def locked_clocks(self) -> LockedClocks:
        # Unlike NVML, the simulated card can read its locks back.
        locks = self._locks
        active = locks.sm_mhz is not None or locks.mem_mhz is not None
        return LockedClocks(
            known=True,
            sm_mhz=locks.sm_mhz,
            mem_mhz=locks.mem_mhz,
            user_clock_setting_active=active,
            sm_min_mhz=locks.sm_min_mhz,
        )

    # --- clock locks (issue 15) ---------------------------------------------------------------

    def supported_clocks(self) -> SupportedClocks:
        p = self.profile
        mems = p.supported_mem_clocks_mhz()
        return SupportedClocks(mems, {m: p.supported_sm_clocks_mhz(m) for m in mems})

    def lock_sm_clock(self, mhz: float, min_mhz: float | None = None) -> LockResult:
        self._bus.refuse_off_bus(self._clock.now(), "lock its SM clock")
        bins = self.profile.sm_bins_mhz()
        low = mhz if min_mhz is None else min_mhz
        if not bins[0] <= low <= mhz <= bins[-1]:
            asked = f"{mhz:g}" if min_mhz is None else f"{low:g}-{mhz:g}"
            return LockResult(
                mhz, False, f"{asked} MHz is outside the SM clock range {bins[0]:g}-{bins[-1]:g}"
            )
        bottom = None if min_mhz is None else float(min_mhz)
        self._set_locks(Locks(float(mhz), self._locks.mem_mhz, bottom))
        return LockResult(mhz, True)

    def lock_mem_clock(self, mhz: float) -> LockResult:
        p = self.profile
        if not p.mem_locks_supported:
            return LockResult(
                mhz,
                False,
                f"GPU {self._index} ({p.gpu_name}) does not support memory clock locks "
                "(NVML: Not Supported): many GeForce cards and drivers refuse them",
            )
        tiers = p.supported_mem_clocks_mhz()
        if not min(tiers) <= mhz <= max(tiers):
            return LockResult(
                mhz,
                False,
                f"{mhz:g} MHz is outside the memory clocks {min(tiers):g}-{max(tiers):g}",
            )
        self._set_locks(dataclasses.replace(self._locks, mem_mhz=float(mhz)))
        return LockResult(mhz, True)

    def reset_clock_locks(self, sm: bool = True, mem: bool = True) -> None:
        kept = self._locks
        if sm:
            kept = dataclasses.replace(kept, sm_mhz=None, sm_min_mhz=None)
        self._set_locks(kept if not mem else dataclasses.replace(kept, mem_mhz=None))

    # --- the voltage/frequency curve's offset (issue 36) ---------------------------------------

    def sm_clock_offset(self) -> ClockOffset:
        p = self.profile
        if not p.vf_offset_supported:
            return ClockOffset(False, message=self._no_offset_message())
        return ClockOffset(True, self._sm_offset_mhz, p.vf_offset_min_mhz, p.vf_offset_max_mhz)

    def set_sm_clock_offset(self, mhz: float) -> LockResult:
        self._bus.refuse_off_bus(self._clock.now(), "set its SM clock offset")
        p = self.profile
        if not p.vf_offset_supported:
            return LockResult(mhz, False, self._no_offset_message())
        lo, hi = p.vf_offset_min_mhz, p.vf_offset_max_mhz
        if not lo <= mhz <= hi:
            return LockResult(
                mhz, False, f"{mhz:+g} MHz is outside the SM clock offset range {lo:+g}..{hi:+g}"
            )
        with self._lock:
            self._advance()
            self._sm_offset_mhz = float(mhz)
            if self._store:
                self._store.put_sm_offset(self._uuid, self._sm_offset_mhz)
            self._reset_if_unstable()
        return LockResult(mhz, True)

    def _no_offset_message(self, clock: str = "SM") -> str:
        p = self.profile
        driver = "amdsmi" if p.vendor == "amd" else "NVML"
        where = f"GPU {self._index} ({p.gpu_name})"
        return f"{where} has no {clock} clock offset to set ({driver}: Not Supported)"

    def mem_clock_offset(self) -> ClockOffset:
        p = self.profile
        if not p.mem_offset_supported:
            return ClockOffset(False, message=self._no_offset_message("memory"))
        return ClockOffset(True, self._mem_offset_mhz, p.mem_offset_min_mhz, p.mem_offset_max_mhz)

    def set_mem_clock_offset(self, mhz: float) -> LockResult:
        self._bus.refuse_off_bus(self._clock.now(), "set its memory clock offset")
        p = self.profile
        if not p.mem_offset_supported:
            return LockResult(mhz, False, self._no_offset_message("memory"))
        lo, hi = p.mem_offset_min_mhz, p.mem_offset_max_mhz
        if not lo <= mhz <= hi:
            return LockResult(
                mhz,
                False,
                f"{mhz:+g} MHz is outside the memory clock offset range {lo:+g}..{hi:+g}",
            )
        with self._lock:
            self._advance()
            self._mem_offset_mhz = float(mhz)
            if self._store:
                self._store.put_mem_offset(self._uuid, self._mem_offset_mhz)
        return LockResult(mhz, True, applied_mhz=float(mhz))

    # --- which cards serve the model (issue 14) ---------------------------------------------

    def compute_processes(self) -> tuple[GpuProcess, ...] | None:
        """The simulated server (this process, which runs it) on a serving card, with the
        model's weights (90% of the card's memory); nothing on an idle card."""
        if not self.serving:
            return ()
        return (GpuProcess(os.getpid(), 0.9 * self.profile.vram_mib),)

    def xid_events(self) -> tuple[int, ...] | None:
        """Xid 79 for each reset since the last call (the card fell off the bus); None on an
        AMD card, as amdsmi reports no Xids."""
        if self.profile.vendor == "amd":
            return None
        with self._lock:
            return self._bus.take_xids()

    # --- engine side --------------------------------------------------------------------------

    def set_workload(self, workload: Workload) -> None:
        """Switch what the card is doing (the time until now is accounted at the old work)."""
        with self._lock:
            self._advance()
            self._workload = Workload(
                workload.kind, workload.batch, workload.prompt_tokens, self._share
            )
            self._reset_if_unstable()

    def rate_tps(self, work: Workload | None = None) -> float:
        """Aggregate token rate of ``work`` (default: the current work) at the current clock.

        The clock is set by what the card runs now; another kind of work riding along (decode
        streams beside a long prefill) runs at that clock.
        """
        with self._lock:
            self._advance()
            op = self._op()
            if work is None or _same_work(work, self._workload):
                return op.rate_tps
        shared = Workload(work.kind, work.batch, work.prompt_tokens, self._share)
        mem = self._physics_locks().mem_mhz
        return rate_at(self.profile, shared, op.sm_clock_mhz, mem, self._mem_goodput())

    def set_temperature(self, temp_c: float) -> None:
        """Put the card at a temperature now (a pre-heated card)."""
        with self._lock:
            self._advance()
            self._temp_c = temp_c

    @property
    def limit_w(self) -> float:
        """The power limit in force."""
        return self._limit_w

    @property
    def locks(self) -> Locks:
        """The clock locks in force."""
        return self._locks

    @property
    def sm_offset_mhz(self) -> float:
        """The SM clock offset in force, MHz (0: the unshifted curve)."""
        return self._sm_offset_mhz

    @property
    def truth_stable_offset_mhz(self) -> float:
        """The largest offset this card's silicon runs without errors, MHz: the profile's
        margin moved within its spread by the card's seed and index (the silicon lottery)."""
        return self._stable_offset_mhz

    @property
    def unstable_by_mhz(self) -> float:
        """How far the offset in force goes beyond the stable margin, MHz (0: stable)."""
        return max(0.0, self._sm_offset_mhz - self._stable_offset_mhz)

    @property
    def mem_offset_mhz(self) -> float:
        """The memory clock offset in force, MHz (NVML's unit; 0: the stock memory clock)."""
        return self._mem_offset_mhz

    @property
    def truth_stable_mem_offset_mhz(self) -> float:
        """The largest memory offset this card runs without error replays, MHz (NVML's unit):
        the profile's margin moved within its spread by the card's seed and index."""
        return self._mem_margin.stable_mhz

    @property
    def mem_corrupt_by_mhz(self) -> float:
        """How far the memory offset goes past the point where answers go wrong, MHz (0:
        they hold; replays may still cost bandwidth before it)."""
        return self._mem_margin.corrupt_by_mhz(self._mem_offset_mhz)

    @property
    def resets(self) -> int:
        """How many times the card reset (an offset too far past its margin met load)."""
        return self._bus.resets

    def off_bus(self) -> bool:
        """Whether the card is off the bus now, a reset's recovery not over yet."""
        return self._bus.off_bus(self._clock.now())

    @property
    def true_energy_mj(self) -> float:
        """The true energy drawn since the start (the counter lags it by up to one update
        period, and runs at ``energy_counter_gain`` of it)."""
        with self._lock:
            self._advance()
            return self._energy.true_mj

    @property
    def temp_c(self) -> float:
        """Current temperature (noise-free)."""
        with self._lock:
            self._advance()
            return self._temp_c

    # --- internals (lock held) ----------------------------------------------------------------

    def _set_locks(self, locks: Locks) -> None:
        with self._lock:
            self._advance()
            self._locks = locks
            if self._store:
                self._store.put_locks(self._uuid, locks)

    def _reset_if_unstable(self) -> None:
        """Reset the card, as the driver recovers it after an Xid 79, when it works with its
        offset too far past its margin: offset 0, no clock locks, the default power limit (each
        stored as its setter stores it), and off the bus for a while. Checked whenever the
        offset or the work changes, the only moments the condition can start, so a reset falls
        at an exact run time."""
        if not self._bus.must_reset(self.unstable_by_mhz, self._workload.kind != "idle"):
            return
        self._sm_offset_mhz = 0.0
        self._locks = UNLOCKED
        self._limit_w = self.profile.default_limit_w
        if self._store:
            self._store.put_sm_offset(self._uuid, 0.0)
            self._store.put_locks(self._uuid, UNLOCKED)
            self._store.put(self._uuid, self._limit_w)
        self._bus.reset(self._t)

    def _effective_locks(self) -> Locks:
        """The locks as the physics sees them: a memory lock runs at the nearest load tier."""
        want = self._locks.mem_mhz
        if want is None:
            return self._locks
        tiers = self.profile.mem_tiers_mhz or (self.profile.mem_clock_mhz,)
        return dataclasses.replace(self._locks, mem_mhz=min(tiers, key=lambda t: abs(t - want)))

    def _physics_locks(self) -> Locks:
        """The locks the physics runs at under load: the memory clock an offset raises (by its
        rise in reported MHz) over the lock's tier or the full clock."""
        locks = self._effective_locks()
        rise = self._mem_offset_mhz / self.profile.mem_offset_per_clock_mhz
        if not rise:
            return locks
        base = self.profile.mem_clock_mhz if locks.mem_mhz is None else locks.mem_mhz
        return dataclasses.replace(locks, mem_mhz=base + rise)  # the SM lock's range kept

    def _mem_goodput(self) -> float:
        """Share of the memory's transfers that carry data (replays past the margin)."""
        return self._mem_margin.goodput(self._mem_offset_mhz)

    def _mem_clock_mhz(self, busy: bool) -> float:
        p = self.profile
        if not busy and self._locks.mem_mhz is None:
            return p.idle_mem_clock_mhz  # an offset moves P0/P2, not the idle state
        mem = self._physics_locks().mem_mhz
        return p.mem_clock_mhz if mem is None else mem

    def _effective_limit_w(self) -> float:
        if self._thermal_active:
            budget = thermal_budget_w(self.profile, self._duty, self._physics_locks().mem_mhz)
            return min(self._limit_w, budget)
        return self._limit_w

    def _op(self) -> OperatingPoint:
        # temperature only moves static power; 0.1 C steps keep the cache small and exact enough
        locks = self._physics_locks()
        offset, goodput = self._sm_offset_mhz, self._mem_goodput()
        key = (
            self._workload,
            self._effective_limit_w(),
            round(self._temp_c, 1),
            locks,
            offset,
            goodput,
        )
        op = self._op_cache.get(key)
        if op is None:
            if len(self._op_cache) > 4096:
                self._op_cache.clear()
            op = operating_point(
                self.profile,
                self._workload,
                key[1],
                key[2],
                locks,
                sm_offset_mhz=offset,
                mem_goodput=goodput,
            )
            if self._thermal_active and key[1] < self._limit_w and op.limited_by != "max_clock":
                op = dataclasses.replace(op, limited_by="thermal")
            self._op_cache[key] = op
        return op

    def _advance(self) -> None:
        now = self._clock.now()
        dt = now - self._t
        if dt <= 0:
            return
        t0, self._t = self._t, now
        # piecewise constant power over dt; the callers switch work at the right instants
        power = self._op().power_w
        if self._bursts is None or self._workload.kind == "idle":
            self._run(now, dt, power)
            return
        # bursty work: the burst's draw, and between bursts the gaps' (held clocks, idle SMs)
        mem = self._physics_locks().mem_mhz
        for start, end, working in self._bursts.segments(t0, now):
            draw = power if working else gap_power_w(self.profile, self._temp_c, mem)
            self._run(end, end - start, draw)

    def _run(self, now: float, dt: float, power: float) -> None:
        """The card's state after ``dt`` run seconds ending at ``now`` at a constant draw."""
        th = self.profile.thermal
        t_eq = th.ambient_c + th.resistance_c_per_w * power
        self._temp_c = t_eq + (self._temp_c - t_eq) * math.exp(-dt / th.time_constant_s)
        self._energy.count(now - dt, now, power)
        k = math.exp(-dt / _POWER_READING_TIME_CONSTANT_S)
        self._power_reading_w = power + (self._power_reading_w - power) * k
        busy = 0.0 if self._workload.kind == "idle" else 1.0
        self._util = busy + (self._util - busy) * math.exp(-dt / _UTIL_TIME_CONSTANT_S)
        slowdown = self.profile.slowdown_temp_c
        if self._temp_c >= slowdown - 0.2:
            self._thermal_active = True
        elif self._temp_c < slowdown - _THERMAL_RELEASE_C:
            self._thermal_active = False


def _same_work(a: Workload, b: Workload) -> bool:
    return (a.kind, a.batch, a.prompt_tokens) == (b.kind, b.batch, b.prompt_tokens)
