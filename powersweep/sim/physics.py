"""The physics of a simulated GPU: DVFS under a power cap, the decode/prefill roofline, heat.

Pure functions of a :class:`GpuProfile`, a :class:`Workload`, a power limit and a temperature.
The live :class:`~powersweep.sim.sim_gpu.SimGpu` and the noise-free ground truth both use them, so
the truth is exactly what the simulated card would settle at.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
from dataclasses import dataclass
from typing import Literal

from powersweep.sim.profiles import GpuProfile

Regime = Literal["power_limited", "boost_plateau", "draw_ceiling", "thermal_limited", "idle"]


@dataclass(frozen=True)
class Workload:
    """What a GPU is doing.

    Attributes:
        kind: ``idle``, ``decode`` or ``prefill``.
        batch: Streams decoding together (decode).
        prompt_tokens: Prompt length (prefill), for the attention slowdown.
        share: Fraction of the model's work this GPU does (1/n for n-way tensor parallel).
    """

    kind: Literal["idle", "decode", "prefill"] = "idle"
    batch: int = 1
    prompt_tokens: int = 1000
    share: float = 1.0


IDLE = Workload()


@dataclass(frozen=True)
class Locks:
    """Clock locks in force (``nvidia-smi -lgc`` / ``-lmc``); None: not locked.

    Attributes:
        sm_mhz: SM clock lock's top: the firmware runs at most this bin.
        mem_mhz: Memory clock lock: the memory tier, so the bandwidth.
        sm_min_mhz: SM clock lock's bottom: an idle card clocks down no further (None with a
            lock: min = max, the card idles at ``sm_mhz``).
    """

    sm_mhz: float | None = None
    mem_mhz: float | None = None
    sm_min_mhz: float | None = None


# Share of an SM clock's full-load dynamic draw an idle card still burns when a lock's minimum
# holds its clock up (the clock tree and the P0 voltage stay, the SMs wait). Chosen so an RTX
# 3090 held at ~1560 MHz idles above 100 W against ~30 W at 210 MHz, as users report: an RTX
# 3090 Ti locked with a 1860 MHz minimum "constantly pulling over 100W at idle", fixed by
# lowering the minimum (github.com/xor2k/gpu_undervolt/issues/2); peers lock 210-F for this
# reason (github.com/ilya-zlobintsev/LACT/issues/908).
IDLE_CLOCK_ACTIVITY = 0.35


UNLOCKED = Locks()


@dataclass(frozen=True)
class OperatingPoint:
    """Where a card settles for a given limit, workload and temperature.

    Attributes:
        sm_clock_mhz: Effective (time-averaged) SM clock.
        sm_low_mhz: Lower bin of the dither pair (equals the clock when not dithering).
        sm_high_mhz: Upper bin of the dither pair.
        high_fraction: Share of time at the upper bin.
        power_w: Draw.
        rate_tps: Aggregate tokens/s (decode: all streams; prefill: prompt tokens).
        limited_by: ``power`` (the cap binds), ``boost_state`` (next state unaffordable: a
            plateau), ``max_clock`` (top bin fits: a ceiling), ``thermal`` or ``idle``.
    """

    sm_clock_mhz: float
    sm_low_mhz: float
    sm_high_mhz: float
    high_fraction: float
    power_w: float
    rate_tps: float
    limited_by: str


def voltage(profile: GpuProfile, f_mhz: float, sm_offset_mhz: float = 0.0) -> float:
    """Core voltage at an SM clock (piecewise linear, clamped at the ends).

    An SM clock offset shifts the voltage/frequency curve: with ``sm_offset_mhz`` the card runs
    ``f_mhz`` at the voltage the unshifted curve gives ``f_mhz - sm_offset_mhz`` (not below the
    lowest SM bin), so a positive offset (an undervolt) draws less at the same clock.
    """
    if sm_offset_mhz:
        f_mhz = max(f_mhz - sm_offset_mhz, profile.sm_min_mhz)
    pts = profile.voltage_curve
    if f_mhz <= pts[0][0]:
        return pts[0][1]
    for (f0, v0), (f1, v1) in itertools.pairwise(pts):
        if f_mhz <= f1:
            return v0 + (v1 - v0) * (f_mhz - f0) / (f1 - f0)
    return pts[-1][1]


def static_power_w(profile: GpuProfile, temp_c: float) -> float:
    """Static (leakage and board) draw under load at a temperature."""
    return profile.static_w * (1.0 + profile.leakage_per_c * (temp_c - 60.0))


def mem_ratio(profile: GpuProfile, mem_mhz: float | None) -> float:
    """Memory clock as a fraction of the full one (bandwidth, and memory power, scale with it)."""
    if mem_mhz is None or mem_mhz <= 0:
        return 1.0
    return mem_mhz / profile.mem_clock_mhz


def _step_times(
    profile: GpuProfile,
    work: Workload,
    f_mhz: float,
    mem_mhz: float | None = None,
    mem_goodput: float = 1.0,
) -> tuple[float, float]:
    """(compute seconds, memory seconds) of one unit of work at an SM and memory clock.

    ``mem_goodput`` is the share of the memory clock's transfers that carry data: below 1,
    GDDR6X's error detection and replay resends the rest (a memory offset past its margin), so
    the same bytes take longer."""
    if work.kind == "decode":
        b = max(1, work.batch)
        compute = profile.decode_compute_mhz_s * (1 + profile.batch_compute * (b - 1)) / f_mhz
        memory = profile.decode_memory_s * (1 + profile.batch_memory * (b - 1))
        memory /= mem_ratio(profile, mem_mhz) * mem_goodput
        return compute * work.share, memory * work.share
    raise ValueError(work.kind)


def _step_s(profile: GpuProfile, compute: float, memory: float) -> float:
    # decode_overlap 0: compute and memory phases add; 1: they overlap fully (a roofline)
    return compute + memory - profile.decode_overlap * min(compute, memory)


def rate_tps(
    profile: GpuProfile,
    work: Workload,
    f_mhz: float,
    mem_mhz: float | None = None,
    mem_goodput: float = 1.0,
) -> float:
    """Aggregate token rate at an SM clock (decode: tokens of all streams; prefill: prompt).

    Decode is bandwidth-bound: its memory phase follows the memory clock (``mem_mhz``, an
    offset's rise included) times ``mem_goodput`` (:func:`_step_times`)."""
    if work.kind == "decode":
        compute, memory = _step_times(profile, work, f_mhz, mem_mhz, mem_goodput)
        return max(1, work.batch) / _step_s(profile, compute, memory)
    if work.kind == "prefill":
        base = profile.prefill_tps_per_mhz * f_mhz / work.share
        return base / (1.0 + work.prompt_tokens / profile.prefill_attn_tokens)
    return 0.0


def power_at(
    profile: GpuProfile,
    work: Workload,
    f_mhz: float,
    temp_c: float,
    mem_mhz: float | None = None,
    *,
    sm_offset_mhz: float = 0.0,
    mem_goodput: float = 1.0,
) -> float:
    """Draw at an SM (and memory) clock while running ``work`` at ``temp_c``.

    Memory power is the traffic's (``mem_dyn_w`` at full bandwidth, scaled by the memory clock
    and the share of time memory is busy) plus the interface's ``mem_static_w``, which scales
    with the memory clock whether or not data moves: a lower memory tier saves it. An SM clock
    offset lowers the core voltage at the clock (:func:`voltage`), so the SM's dynamic power.
    """
    if work.kind == "idle":
        return idle_power_w(profile, f_mhz, temp_c, sm_offset_mhz)
    dynamic, memory_w = _load_parts(profile, work, f_mhz, mem_mhz, sm_offset_mhz, mem_goodput)
    return static_power_w(profile, temp_c) + dynamic + memory_w


def idle_sm_mhz(profile: GpuProfile, locks: Locks = UNLOCKED) -> float:
    """The SM clock an idle card settles at: its idle clock, or the SM lock's minimum where
    that is higher (a single-value lock's is its clock), never above the lock's top."""
    if locks.sm_mhz is None or locks.sm_mhz < profile.sm_lock_ignored_below_mhz:
        return profile.idle_sm_mhz
    floor = locks.sm_mhz if locks.sm_min_mhz is None else locks.sm_min_mhz
    bins = locked_bins(profile, locks.sm_mhz)
    # the lowest bin the lock lets the card idle at (a bottom between bins holds the next up)
    held = next((b for b in bins if b >= floor - 1e-6), bins[-1])
    return max(profile.idle_sm_mhz, held)


def idle_power_w(
    profile: GpuProfile, f_mhz: float, temp_c: float, sm_offset_mhz: float = 0.0
) -> float:
    """Draw of an idle card at an SM clock: ``idle_w`` at its idle clock, plus
    :data:`IDLE_CLOCK_ACTIVITY` of the dynamic draw the higher clock and voltage add (an SM
    clock offset lowers that voltage, as under load)."""
    base = profile.idle_w * (1.0 + profile.leakage_per_c * (temp_c - 40.0))
    f0 = profile.idle_sm_mhz
    if f_mhz <= f0:
        return base
    v, v0 = voltage(profile, f_mhz, sm_offset_mhz), voltage(profile, f0)
    extra = profile.dyn_w_per_mhz_v2 * (f_mhz * v * v - f0 * v0 * v0) * IDLE_CLOCK_ACTIVITY
    return base + extra


def _load_parts(
    profile: GpuProfile,
    work: Workload,
    f_mhz: float,
    mem_mhz: float | None,
    sm_offset_mhz: float,
    mem_goodput: float = 1.0,
) -> tuple[float, float]:
    """(SM dynamic, memory) draw at a clock under ``work``: what does not follow the
    temperature. Replays (``mem_goodput`` below 1) keep the memory busy longer: they draw."""
    ratio = mem_ratio(profile, mem_mhz)
    if work.kind == "decode":
        compute, memory = _step_times(profile, work, f_mhz, mem_mhz, mem_goodput)
        step = _step_s(profile, compute, memory)
        u_compute = compute / step
        u_memory = memory / step
    else:
        u_compute = profile.prefill_compute_util
        u_memory = 0.3
    v = voltage(profile, f_mhz, sm_offset_mhz)
    dynamic = profile.dyn_w_per_mhz_v2 * f_mhz * v * v * u_compute
    return dynamic, (profile.mem_dyn_w * u_memory + profile.mem_static_w) * ratio


# An entry per workload (a decode batch is one: 256 streams pass through 256 of them, and a
# cache smaller than that recomputes every bin at each request's start and end), about 10 KB each.
@functools.lru_cache(maxsize=1024)
def _bin_parts(
    profile: GpuProfile,
    work: Workload,
    bins: tuple[float, ...],
    mem_mhz: float | None,
    sm_offset_mhz: float,
    mem_goodput: float = 1.0,
) -> tuple[tuple[float, float], ...]:
    """:func:`_load_parts` of each bin, kept: the simulated card asks for its operating point at
    every 0.1 C, and only the static part follows the temperature."""
    return tuple(_load_parts(profile, work, f, mem_mhz, sm_offset_mhz, mem_goodput) for f in bins)


def locked_bins(profile: GpuProfile, sm_lock_mhz: float | None) -> tuple[float, ...]:
    """The SM bins the firmware may use under an SM lock (all bins without one).

    A lock runs the card at the highest bin not above it; one below the lowest bin holds the
    lowest bin. A lock the card ignores (below ``sm_lock_ignored_below_mhz``) changes nothing.
    """
    bins = profile.sm_bins_mhz()
    if sm_lock_mhz is None or sm_lock_mhz < profile.sm_lock_ignored_below_mhz:
        return bins
    kept = tuple(b for b in bins if b <= sm_lock_mhz + 1e-6)
    return kept or bins[:1]


def operating_point(
    profile: GpuProfile,
    work: Workload,
    limit_w: float,
    temp_c: float,
    locks: Locks = UNLOCKED,
    *,
    sm_offset_mhz: float = 0.0,
    mem_goodput: float = 1.0,
) -> OperatingPoint:
    """Choose the SM clock the firmware settles at under ``limit_w`` (and any clock locks).

    The highest bin whose draw fits the limit wins. Between two adjacent *fine* bins the firmware
    dithers so the draw meets the limit exactly; across a boost-state gap it cannot, so the watts
    between the states go unused (a plateau). If even the top bin fits, the card draws less than
    the cap (a ceiling). An SM lock removes the bins above it (the top allowed bin is then a
    ``max_clock`` ceiling); a memory lock sets the bandwidth and the memory power. An SM clock
    offset (``sm_offset_mhz``) keeps the bins and lowers the draw of each (:func:`voltage`). A
    memory clock offset comes as ``locks.mem_mhz`` (the clock it runs at) and ``mem_goodput``
    (its replays past the margin, :func:`_step_times`).
    """
    if work.kind == "idle":
        f = idle_sm_mhz(profile, locks)
        p = power_at(profile, work, f, temp_c, sm_offset_mhz=sm_offset_mhz)
        return OperatingPoint(f, f, f, 0.0, p, 0.0, "idle")
    mem = locks.mem_mhz
    bins = locked_bins(profile, locks.sm_mhz)
    static = static_power_w(profile, temp_c)
    # power_at's own sum, in its order (static + dynamic + memory): the same floats, with the
    # parts that do not depend on the temperature worked out once per bin set
    powers = [
        static + dynamic + memory_w
        for dynamic, memory_w in _bin_parts(profile, work, bins, mem, sm_offset_mhz, mem_goodput)
    ]
    g = mem_goodput
    # powers rise with f, so the affordable bins are a prefix
    i = bisect.bisect_right(powers, limit_w) - 1
    if i < 0:
        f = bins[0]
        return OperatingPoint(f, f, f, 0.0, powers[0], rate_tps(profile, work, f, mem, g), "power")
    f_lo = bins[i]
    if i == len(bins) - 1:
        return OperatingPoint(
            f_lo, f_lo, f_lo, 0.0, powers[i], rate_tps(profile, work, f_lo, mem, g), "max_clock"
        )
    f_hi = bins[i + 1]
    if f_hi - f_lo > profile.sm_step_mhz + 1e-6:
        return OperatingPoint(
            f_lo, f_lo, f_lo, 0.0, powers[i], rate_tps(profile, work, f_lo, mem, g), "boost_state"
        )
    x = (limit_w - powers[i]) / (powers[i + 1] - powers[i])
    x = min(max(x, 0.0), 1.0)
    # time-share between the two bins: work done per second mixes linearly
    r = (1 - x) * rate_tps(profile, work, f_lo, mem, g) + x * rate_tps(profile, work, f_hi, mem, g)
    p = (1 - x) * powers[i] + x * powers[i + 1]
    return OperatingPoint(f_lo + x * (f_hi - f_lo), f_lo, f_hi, x, p, r, "power")


def gap_power_w(profile: GpuProfile, temp_c: float, mem_mhz: float | None = None) -> float:
    """Draw between two bursts of work (``--sim-world bursty-draw``): the clocks stay up and
    the SMs wait, so the static draw and the memory interface's, no dynamic SM draw."""
    return static_power_w(profile, temp_c) + profile.mem_static_w * mem_ratio(profile, mem_mhz)


def thermal_budget_w(profile: GpuProfile, duty: float = 1.0, mem_mhz: float | None = None) -> float:
    """Draw at which the card's steady temperature reaches its slowdown threshold.

    With bursty work (``duty`` < 1) the temperature follows the mean draw, so the budget is the
    burst draw that, with the gaps' draw (:func:`gap_power_w`), averages to it.
    """
    th = profile.thermal
    budget = (profile.slowdown_temp_c - th.ambient_c) / th.resistance_c_per_w
    if duty >= 1.0:
        return budget
    gap = gap_power_w(profile, profile.slowdown_temp_c, mem_mhz)
    return (budget - (1.0 - duty) * gap) / duty


def mean_power_w(
    profile: GpuProfile, burst_w: float, temp_c: float, duty: float, mem_mhz: float | None = None
) -> float:
    """The time-averaged draw of bursty work: ``duty`` of the time at ``burst_w``, the rest at
    the gaps' draw (``burst_w`` itself when ``duty`` is 1)."""
    if duty >= 1.0:
        return burst_w
    return duty * burst_w + (1.0 - duty) * gap_power_w(profile, temp_c, mem_mhz)


def steady_state(
    profile: GpuProfile,
    work: Workload,
    cap_w: float,
    locks: Locks = UNLOCKED,
    *,
    sm_offset_mhz: float = 0.0,
    duty: float = 1.0,
) -> tuple[OperatingPoint, float, bool]:
    """Noise-free equilibrium at a cap: (operating point, temperature, thermally limited).

    Solves the fixed point of temperature and draw; when the equilibrium would pass the
    slowdown threshold, the thermal controller holds the temperature there by lowering the
    effective limit to the thermal budget. ``sm_offset_mhz`` is the SM clock offset in force.
    With bursty work (``duty`` < 1, ``--sim-world bursty-draw``) the operating point is the
    bursts' (the firmware holds each burst at the cap) and the temperature follows the mean
    draw (:func:`mean_power_w`).
    """
    th = profile.thermal
    offset = sm_offset_mhz
    mem = locks.mem_mhz
    temp = th.ambient_c + th.resistance_c_per_w * cap_w * 0.8
    op = operating_point(profile, work, cap_w, temp, locks, sm_offset_mhz=offset)
    for _ in range(60):
        op = operating_point(profile, work, cap_w, temp, locks, sm_offset_mhz=offset)
        new_temp = th.ambient_c + th.resistance_c_per_w * mean_power_w(
            profile, op.power_w, temp, duty, mem
        )
        if abs(new_temp - temp) < 1e-6:
            break
        temp = new_temp
    if temp <= profile.slowdown_temp_c:
        return op, temp, False
    temp = profile.slowdown_temp_c
    budget = min(cap_w, thermal_budget_w(profile, duty, mem))
    op = operating_point(profile, work, budget, temp, locks, sm_offset_mhz=offset)
    return (
        dataclasses.replace(op, limited_by="thermal"),
        temp,
        True,
    )


def regime_of(op: OperatingPoint) -> Regime:
    """The regime label of an operating point (as the analysis names regimes)."""
    return {
        "power": "power_limited",
        "boost_state": "boost_plateau",
        "max_clock": "draw_ceiling",
        "thermal": "thermal_limited",
        "idle": "idle",
    }[op.limited_by]  # type: ignore[return-value]
