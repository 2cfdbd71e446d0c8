"""A fake :class:`powersweep.sweep.gpu.Gpu` for unit tests of the measurement protocol.

No driver, no simulated physics: a settable power limit, a draw that follows the limit up to
what the load asks of the card (``ceiling_w``), a temperature that is steady or keeps rising,
and a record of every call::

    clock = VirtualClock()
    gpu = FakeGpu(0, clock=clock, ceiling_w=280.0, refuse_below_w=150.0)
    gpu.set_power_limit(120.0).accepted  # False: the card keeps its limit
    gpu.calls["set_power_limit"]  # 1

What it can do:

* Limits: ``min_w``/``max_w`` bound what it takes (outside: not accepted, as NVML's invalid
  argument comes back); ``refuse_below_w`` and ``refuse`` make it keep its old limit for some
  requests (an RTX 5090 refusing caps under 400 W); a refused request leaves the limit as it was.
* Draw: ``min(limit, ceiling_w)`` plus seeded Gaussian noise (``draw_noise_w``); the energy
  counter advances by the draw between reads (NaN without a clock).
* Temperature: ``temp_c`` plus ``heat_c_per_min`` times the run minutes on ``clock``: steady at
  0, a card that never settles above it.
* Clock locks: taken and read back; the clocks read follow them unless ``follow_locks`` is
  False (a card that ignores a lock it accepted).
* Xids: ``xids`` is a list a test appends Xid codes to; ``xid_events`` returns them and clears
  it (``()`` by default); set it to None for a card whose Xids cannot be read.
* ``calls`` counts every call by method name; ``limits_set`` lists the requests in order;
  ``events`` (a list shared with the test, optional) gets ``("set_power_limit", index, W, run s)``
  for each request, so a test can order them against its own callbacks.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Collection
from typing import Any

from powersweep.clock import Clock
from powersweep.sweep.gpu import (
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
from powersweep.sweep.gpu.protocol import CLOCK_EVENT_SW_POWER_CAP

# the SM clock offsets the fake card accepts, MHz
OFFSET_RANGE_MHZ = (-200.0, 1000.0)
# the memory clock offsets it accepts, MHz (NVML's unit)
MEM_OFFSET_RANGE_MHZ = (-2000.0, 6000.0)


class FakeGpu:
    """One fake card (satisfies the ``Gpu`` protocol).

    Args:
        index: Its index.
        clock: Run clock (temperature rise, energy counter); None: both stand still.
        min_w: Lowest limit it takes.
        max_w: Highest limit it takes.
        default_w: Its default limit (and the limit in force unless ``limit_w``).
        limit_w: The limit in force at the start (None: ``default_w``).
        ceiling_w: What the load asks of the card: the draw under a higher limit.
        refuse_below_w: Requests under it are not taken (the old limit stays).
        refuse: Requests that are not taken (exact watts).
        draw_noise_w: Standard deviation of the draw's noise, W.
        temp_c: Temperature at run time 0.
        heat_c_per_min: How fast the temperature rises, °C per run minute (0: steady).
        util_pct: Utilization read (above 50: the load runs).
        follow_locks: The clocks read follow the locks taken (False: a lock silently ignored).
        seed: Seeds the draw's noise.
        events: A list every limit request is appended to (shared with the test).
    """

    def __init__(
        self,
        index: int = 0,
        *,
        clock: Clock | None = None,
        min_w: float = 100.0,
        max_w: float = 400.0,
        default_w: float = 350.0,
        limit_w: float | None = None,
        ceiling_w: float = 300.0,
        refuse_below_w: float | None = None,
        refuse: Collection[float] = (),
        draw_noise_w: float = 0.3,
        temp_c: float = 60.0,
        heat_c_per_min: float = 0.0,
        util_pct: float = 95.0,
        follow_locks: bool = True,
        seed: int = 0,
        events: list[tuple[Any, ...]] | None = None,
    ) -> None:
        self._index = index
        self.clock = clock
        self.min_w, self.max_w, self.default_w = min_w, max_w, default_w
        self.limit_w = default_w if limit_w is None else limit_w
        self.ceiling_w = ceiling_w
        self.refuse_below_w = refuse_below_w
        self.refuse = set(refuse)
        self.draw_noise_w = draw_noise_w
        self.temp_c = temp_c
        self.heat_c_per_min = heat_c_per_min
        self.util_pct = util_pct
        self.follow_locks = follow_locks
        self.events = events
        self.calls: Counter[str] = Counter()
        self.limits_set: list[float] = []
        self.sm_lock_mhz: float | None = None
        # the SM lock's bottom (None: min = max)
        self.sm_lock_min_mhz: float | None = None
        self.sm_offset_mhz = 0.0
        self.mem_offset_mhz = 0.0
        self.mem_lock_mhz: float | None = None
        self.xids: list[int] | None = []
        self._rng = random.Random(seed * 1000 + index)
        self._energy_mj = 0.0
        self._energy_t_s: float | None = None

    # --- the Gpu protocol ---------------------------------------------------------------------

    @property
    def index(self) -> int:
        return self._index

    def identity(self) -> GpuIdentity:
        self.calls["identity"] += 1
        return GpuIdentity(self._index, "Fake GPU", f"GPU-fake-{self._index}", 24576, "0.0")

    def envelope(self) -> PowerEnvelope:
        self.calls["envelope"] += 1
        return PowerEnvelope(self.min_w, self.default_w, self.max_w, self.limit_w)

    def set_power_limit(self, watts: float) -> SetLimitResult:
        self.calls["set_power_limit"] += 1
        self.limits_set.append(watts)
        if self.events is not None:
            now = self.clock.now() if self.clock is not None else math.nan
            self.events.append(("set_power_limit", self._index, watts, now))
        refused = (
            not self.min_w <= watts <= self.max_w
            or watts in self.refuse
            or (self.refuse_below_w is not None and watts < self.refuse_below_w)
        )
        if refused:
            return SetLimitResult(
                watts,
                self.limit_w,
                self.limit_w,
                accepted=False,
                message=f"fake GPU {self._index} kept {self.limit_w:g} W",
            )
        self.limit_w = watts
        return SetLimitResult(watts, watts, watts, accepted=True)

    def read_sample(self) -> GpuSample:
        self.calls["read_sample"] += 1
        draw = self.draw_w()
        now = self.clock.now() if self.clock is not None else math.nan
        if self._energy_t_s is not None and math.isfinite(now):
            self._energy_mj += draw * (now - self._energy_t_s) * 1000.0
        self._energy_t_s = now if math.isfinite(now) else None
        binding = self.limit_w <= self.ceiling_w
        return GpuSample(
            gpu_index=self._index,
            power_w=draw,
            energy_mj=self._energy_mj if math.isfinite(now) else math.nan,
            temp_c=self.temperature_c(),
            sm_clock_mhz=(self.follow_locks and self.sm_lock_mhz) or 1800.0,
            mem_clock_mhz=(self.follow_locks and self.mem_lock_mhz) or 9501.0,
            util_pct=self.util_pct,
            pstate=0,
            clock_event_bits=CLOCK_EVENT_SW_POWER_CAP if binding else 0,
            power_instant_w=draw,
        )

    def slowdown_temp_c(self) -> float:
        self.calls["slowdown_temp_c"] += 1
        return 90.0

    def persistence_mode(self) -> bool | None:
        self.calls["persistence_mode"] += 1
        return True

    def set_persistence_mode(self, enabled: bool) -> bool | None:
        self.calls["set_persistence_mode"] += 1
        return enabled

    def locked_clocks(self) -> LockedClocks:
        self.calls["locked_clocks"] += 1
        return LockedClocks(
            True, self.sm_lock_mhz, self.mem_lock_mhz, sm_min_mhz=self.sm_lock_min_mhz
        )

    def supported_clocks(self) -> SupportedClocks:
        self.calls["supported_clocks"] += 1
        sm = tuple(float(m) for m in range(1800, 200, -15))
        return SupportedClocks((9501.0, 5001.0), {9501.0: sm, 5001.0: sm})

    def lock_sm_clock(self, mhz: float, min_mhz: float | None = None) -> LockResult:
        self.calls["lock_sm_clock"] += 1
        self.sm_lock_mhz = mhz
        self.sm_lock_min_mhz = min_mhz
        return LockResult(mhz, True)

    def lock_mem_clock(self, mhz: float) -> LockResult:
        self.calls["lock_mem_clock"] += 1
        self.mem_lock_mhz = mhz
        return LockResult(mhz, True)

    def reset_clock_locks(self, sm: bool = True, mem: bool = True) -> None:
        self.calls["reset_clock_locks"] += 1
        if sm:
            self.sm_lock_mhz = None
            self.sm_lock_min_mhz = None
        if mem:
            self.mem_lock_mhz = None

    def sm_clock_offset(self) -> ClockOffset:
        self.calls["sm_clock_offset"] += 1
        return ClockOffset(True, self.sm_offset_mhz, *OFFSET_RANGE_MHZ)

    def set_sm_clock_offset(self, mhz: float) -> LockResult:
        self.calls["set_sm_clock_offset"] += 1
        low, high = OFFSET_RANGE_MHZ
        if not low <= mhz <= high:
            return LockResult(mhz, False, f"{mhz:g} MHz is outside -200..1000 MHz")
        self.sm_offset_mhz = mhz
        return LockResult(mhz, True)

    def mem_clock_offset(self) -> ClockOffset:
        self.calls["mem_clock_offset"] += 1
        return ClockOffset(True, self.mem_offset_mhz, *MEM_OFFSET_RANGE_MHZ)

    def set_mem_clock_offset(self, mhz: float) -> LockResult:
        self.calls["set_mem_clock_offset"] += 1
        low, high = MEM_OFFSET_RANGE_MHZ
        if not low <= mhz <= high:
            return LockResult(mhz, False, f"{mhz:g} MHz is outside -2000..6000 MHz")
        self.mem_offset_mhz = mhz
        return LockResult(mhz, True)

    def compute_processes(self) -> tuple[GpuProcess, ...] | None:
        self.calls["compute_processes"] += 1
        return ()

    def xid_events(self) -> tuple[int, ...] | None:
        self.calls["xid_events"] += 1
        if self.xids is None:
            return None
        xids = tuple(self.xids)
        self.xids.clear()
        return xids

    # --- what the test reads ------------------------------------------------------------------

    def draw_w(self) -> float:
        """The draw now: the limit, or what the load asks when that is less, plus noise."""
        noise = self._rng.gauss(0.0, self.draw_noise_w) if self.draw_noise_w > 0 else 0.0
        return min(self.limit_w, self.ceiling_w) + noise

    def temperature_c(self) -> float:
        """The temperature now (rising at ``heat_c_per_min`` from ``temp_c``)."""
        minutes = self.clock.now() / 60.0 if self.clock is not None else 0.0
        return self.temp_c + self.heat_c_per_min * minutes
