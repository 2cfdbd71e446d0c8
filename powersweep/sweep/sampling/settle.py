"""Settle detection: measure as soon as a card's readings are stable after a cap change.

A fixed wait after every cap change wastes seconds on cards that settle in a fraction of one, and
is too short on the odd card that takes longer.

The reasoning: docs/reference.md, "powersweep.sweep.sampling.settle".
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Collection, Sequence

from powersweep.clock import Clock
from powersweep.sweep.gpu import Gpu, GpuSample

DEFAULT_WINDOW_S = 0.3
DEFAULT_MIN_S = 0.25
DEFAULT_MAX_S = 3.0
# About 6 sigma of a 0.3 % reading noise: a steady window of ten readings passes with near
# certainty, a step of a few percent (a new cap) does not.
DEFAULT_POWER_TOL_PCT = 2.0
# Never tighter than this in watts: at low draw a percentage is below the meter's resolution.
DEFAULT_POWER_TOL_W = 1.5
# Three 15 MHz bins: dithering between adjacent bins is stable, a boost-state jump (45-75 MHz)
# or a clock ramp is not.
DEFAULT_CLOCK_TOL_MHZ = 45.0
MIN_WINDOW_SAMPLES = 3
# The window of the driver's average power reading (nvmlDeviceGetPowerUsage on Ampere and newer;
# amdsmi's average socket power is taken alike): what a card without an instant reading needs
# after a change before its reading holds nothing of the old draw.
AVERAGED_READING_S = 1.0


class SettleDetector:
    """Decides, reading by reading, when draw and SM clock have settled.

    Pure: it keeps the readings it was given and does no I/O. Times are run seconds; the first
    reading (or ``start_s`` when given) is when the cap was set.

    Args:
        window_s: Trailing window that must be stable, run seconds.
        min_s: Never settled earlier than this after the start.
        max_s: Settled (forced) at this time after the start whatever the readings.
        power_tol_pct: Every draw in the window within this % of the window's median draw.
        power_tol_w: Floor of the draw tolerance, W.
        clock_tol_mhz: Every SM clock in the window within this of the window's median clock.
        start_s: When the cap was set; None takes the first reading's time.

    Raises:
        ValueError: A bound is negative or ``max_s`` is below ``min_s``.
    """

    def __init__(
        self,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        min_s: float = DEFAULT_MIN_S,
        max_s: float = DEFAULT_MAX_S,
        power_tol_pct: float = DEFAULT_POWER_TOL_PCT,
        power_tol_w: float = DEFAULT_POWER_TOL_W,
        clock_tol_mhz: float = DEFAULT_CLOCK_TOL_MHZ,
        start_s: float | None = None,
    ) -> None:
        if window_s < 0 or min_s < 0 or max_s < 0:
            raise ValueError("settle window, min and max must be 0 or more")
        if max_s < min_s:
            raise ValueError(f"settle max {max_s:g} s is below min {min_s:g} s")
        self.window_s = window_s
        self.min_s = min_s
        self.max_s = max_s
        self.power_tol_pct = power_tol_pct
        self.power_tol_w = power_tol_w
        self.clock_tol_mhz = clock_tol_mhz
        self._start_s = start_s
        self._window: deque[tuple[float, float, float]] = deque()
        self._settled_at_s: float | None = None
        self.forced = False

    @property
    def settled(self) -> bool:
        """True once a stable window was seen (or ``max_s`` passed)."""
        return self._settled_at_s is not None

    @property
    def settled_at_s(self) -> float | None:
        """Run seconds from the start to the reading that settled it; None while unsettled."""
        return self._settled_at_s

    def wait_at_least(self, seconds: float) -> None:
        """Never settle earlier than ``seconds`` after the start (within ``max_s``): readings
        that average over a window need it to have passed."""
        self.min_s = min(self.max_s, max(self.min_s, seconds))

    @property
    def start_s(self) -> float | None:
        """When the cap was set (the first reading's time unless given)."""
        return self._start_s

    def add(self, t_s: float, power_w: float, sm_clock_mhz: float) -> bool:
        """Feed one reading; True when settled (stays True afterwards).

        A failed reading (NaN draw) is skipped; a NaN clock only drops the clock test for it.
        """
        if self._settled_at_s is not None:
            return True
        if self._start_s is None:
            self._start_s = t_s
        elapsed = t_s - self._start_s
        if math.isfinite(power_w):
            self._window.append((t_s, power_w, sm_clock_mhz))
        while self._window and self._window[0][0] < t_s - self.window_s - 1e-9:
            self._window.popleft()
        if elapsed >= self.min_s - 1e-9 and self._stable():
            self._settled_at_s = max(elapsed, 0.0)
        elif elapsed >= self.max_s - 1e-9:
            self._settled_at_s = max(elapsed, 0.0)
            self.forced = True
        return self._settled_at_s is not None

    def _stable(self) -> bool:
        if len(self._window) < MIN_WINDOW_SAMPLES:
            return False
        powers = [p for _, p, _ in self._window]
        level = statistics.median(powers)
        tol_w = max(self.power_tol_w, abs(level) * self.power_tol_pct / 100.0)
        if any(abs(p - level) > tol_w for p in powers):
            return False
        clocks = [c for _, _, c in self._window if math.isfinite(c)]
        if len(clocks) >= MIN_WINDOW_SAMPLES:
            centre = statistics.median(clocks)
            if any(abs(c - centre) > self.clock_tol_mhz for c in clocks):
                return False
        return True


def combine(samples: Sequence[GpuSample]) -> tuple[float, float]:
    """Combined draw (sum over the set of each card's :attr:`~GpuSample.draw_w`, NaN if any read
    failed) and the first GPU's SM clock."""
    if not samples:
        return math.nan, math.nan
    power = math.fsum(s.draw_w for s in samples)
    return power, samples[0].sm_clock_mhz


def averaged(samples: Sequence[GpuSample]) -> bool:
    """Whether some card's draw is its driver's average (it read no instant power)."""
    return any(math.isfinite(s.power_w) and not math.isfinite(s.power_instant_w) for s in samples)


async def wait_settled(
    gpus: Sequence[Gpu],
    clock: Clock,
    *,
    interval_s: float = 0.1,
    detector_factory: Callable[[], SettleDetector] = SettleDetector,
    on_tick: Callable[[float, Sequence[GpuSample]], None] | None = None,
    busy_util_pct: float | None = None,
    busy_gpus: Collection[int] | None = None,
) -> float:
    """Poll the GPU set until its readings settle (or the detector's maximum); return the time.

    Reads every GPU every ``interval_s`` run seconds (``clock.asleep``), feeds the combined draw
    and the first GPU's SM clock to a fresh detector and returns when it says settled.

    Args:
        gpus: The GPU set (a cap was just set on each).
        clock: Run clock.
        interval_s: Run seconds between polls; must be positive.
        detector_factory: Makes the detector (its window, bounds and tolerances).
        on_tick: Called with (run seconds, readings) after each poll, e.g. to record the
            readings as ``settle`` samples.
        busy_util_pct: When given, readings where no GPU's utilization reaches this (the load
            has not reached the cards yet) are not fed to the detector; they still count
            towards its maximum.
        busy_gpus: The GPUs whose utilization counts for ``busy_util_pct`` (the serving ones);
            None: every GPU read.

    Returns:
        Run seconds from the call to the reading that settled it.

    Raises:
        ValueError: ``interval_s`` is not positive.
    """
    if not interval_s > 0:
        raise ValueError(f"settle poll interval must be positive, got {interval_s:g}")
    detector = detector_factory()
    t0 = clock.now()
    while True:
        samples = [g.read_sample() for g in gpus]
        t = clock.now()
        if on_tick is not None:
            on_tick(t, samples)
        power, sm_clock = combine(samples)
        if averaged(samples):
            detector.wait_at_least(AVERAGED_READING_S + detector.window_s)
        serving = [s for s in samples if busy_gpus is None or s.gpu_index in busy_gpus]
        utils = [s.util_pct for s in serving or samples if math.isfinite(s.util_pct)]
        # the busiest card: with an idle card in the set, the first one may never be busy
        idle = busy_util_pct is not None and bool(utils) and max(utils) < busy_util_pct
        if idle:
            # The detector's clock starts at the call, not at the first busy reading: its
            # maximum bounds the whole wait.
            power = math.nan
        if detector.start_s is None:
            detector.add(t0, math.nan, math.nan)
        if detector.add(t, power, sm_clock):
            return t - t0
        await clock.asleep(interval_s)
