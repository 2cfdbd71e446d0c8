"""Built-in simulated GPUs: physical constants per card, model and cooling class.

A profile is not a lookup table of answers: it holds the constants of the physics in
:mod:`powersweep.sim.physics` (voltage/frequency curve, clock bins, static and dynamic power, the
roofline of decode and prefill, the thermal path). Curves, plateaus and ceilings emerge from them.

``rtx3090-air`` is fitted to the club-3090 rig (air-cooled RTX 3090, 100/370/390 W envelope,
Qwen3.6-27B Q3 on llama.cpp): decode sweet spot near 290 W, a firmware boost plateau at
340-370 W (SM held at 1560 MHz, ~334 W) that escapes at 380 W.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, replace

from powersweep.errors import UsageError


@dataclass(frozen=True)
class ThermalPath:
    """First-order thermal model of a card in its cooling.

    Attributes:
        cooling: Cooling class (``air``, ``water``, ``aio``).
        ambient_c: Intake/coolant temperature.
        resistance_c_per_w: Steady-state rise per watt of draw.
        time_constant_s: Run seconds for 63% of a step response.
    """

    cooling: str
    ambient_c: float
    resistance_c_per_w: float
    time_constant_s: float


@dataclass(frozen=True)
class GpuProfile:
    """Physical constants of one simulated card serving one model.

    Clocks: SM clock bins run from ``sm_min_mhz`` to ``sm_fine_max_mhz`` in ``sm_step_mhz`` steps
    (the firmware dithers between adjacent fine bins to meet a cap exactly), then only the discrete
    ``boost_states_mhz`` (no dithering across a state: a cap that cannot afford the next state
    leaves watts unused, which is a boost plateau).

    Power: ``static_w`` (at 60 C, rising by ``leakage_per_c`` per degree) plus SM dynamic power
    ``dyn_w_per_mhz_v2 * f * V(f)^2 * u_compute`` plus memory power ``mem_dyn_w * u_memory``, where
    the utilisations follow the roofline of the running work.

    Decode (one step of a batch of B streams) takes ``decode_compute_mhz_s * (1 + batch_compute
    * (B-1)) / f + decode_memory_s * (1 + batch_memory * (B-1))`` seconds; prefill runs at
    ``prefill_tps_per_mhz * f`` tokens/s, slowed by attention for long prompts
    (``1 + n / prefill_attn_tokens``).

    Attributes:
        name: Profile name (``rtx3090-air``).
        gpu_name: Name the simulated GPU reports.
        vram_mib: Memory size.
        min_limit_w: Lowest settable limit.
        default_limit_w: Default limit (TDP).
        max_limit_w: Highest settable limit.
        user_limit_w: Limit in force when the rig starts (the user's own setting).
        rejects_below_w: Caps below this are silently not applied (the card keeps its limit).
        sm_min_mhz: Lowest SM bin.
        sm_fine_max_mhz: Highest fine SM bin.
        sm_step_mhz: Fine bin spacing.
        boost_states_mhz: Discrete states above the fine range, ascending.
        voltage_curve: (MHz, volts) points, piecewise linear.
        idle_sm_mhz: SM clock when idle.
        mem_clock_mhz: Memory clock under load.
        idle_mem_clock_mhz: Memory clock when idle.
        idle_w: Draw when idle.
        static_w: Static draw under load at 60 C.
        leakage_per_c: Relative static increase per degree.
        dyn_w_per_mhz_v2: SM dynamic power coefficient.
        mem_dyn_w: Memory-system power at full bandwidth.
        decode_compute_mhz_s: Compute part of one decode step for one stream (s * MHz).
        decode_memory_s: Memory part of one decode step (s).
        batch_compute: Extra compute per extra stream, relative.
        batch_memory: Extra memory traffic per extra stream, relative.
        prefill_tps_per_mhz: Prefill tokens/s per MHz of SM clock.
        prefill_attn_tokens: Prompt length at which attention doubles prefill time per token.
        prefill_compute_util: SM utilisation during prefill.
        context_tokens: Context the simulated model is loaded with.
        thermal: Thermal path.
        slowdown_temp_c: Temperature where thermal slowdown starts.
        power_noise_pct: Relative noise of a power reading (1 sigma).
        mem_tiers_mhz: Memory clocks the card can be locked to under load, descending (as
            ``nvmlDeviceGetSupportedMemoryClocks`` lists them, idle tiers aside); empty: only
            ``mem_clock_mhz``.
        mem_static_w: Memory-interface draw at the full memory clock whether or not data moves;
            it scales with the memory clock, so a lower tier saves it.
        decode_overlap: How much of a decode step's compute hides under its memory traffic (0:
            they add; 1: a pure roofline, the slower of the two sets the step).
        mem_locks_supported: Whether the driver lets the memory clock be locked (many GeForce
            cards refuse).
        sm_lock_ignored_below_mhz: SM locks below this are silently ignored (the card keeps
            boosting), as some drivers do.
        vendor: ``nvidia`` or ``amd``; an AMD card is read and set through the amdsmi backend
            (over :class:`powersweep.sim.amdsmi.SimAmdsmi`).
        amd_power_fields: Which of amdsmi's socket-power readings an AMD card fills
            (``current``, ``average``); the other reads ``N/A``.
        amd_violation_status: Whether an AMD card reports its throttle (violation) status.
        power_usage_average_s: The window of the driver's power usage reading
            (``nvmlDeviceGetPowerUsage``): a one-second moving average on Ampere and newer; 0
            for an older card, whose reading is a short average like the instant one.
        instant_power_field: Whether the driver fills the instantaneous power field
            (``NVML_FI_DEV_POWER_INSTANT``; amdsmi's current socket power is chosen by
            ``amd_power_fields``).
        energy_counter_period_s: How often the total-energy counter advances: it holds the energy
            of its last update between updates (0: continuously).
        energy_counter_gain: How fast the energy counter runs against the true draw (1: exact; a
            drifting or miscalibrated sensor is planted with another value).
    """

    name: str
    gpu_name: str
    vram_mib: int
    min_limit_w: float
    default_limit_w: float
    max_limit_w: float
    user_limit_w: float
    rejects_below_w: float
    sm_min_mhz: float
    sm_fine_max_mhz: float
    sm_step_mhz: float
    boost_states_mhz: tuple[float, ...]
    voltage_curve: tuple[tuple[float, float], ...]
    idle_sm_mhz: float
    mem_clock_mhz: float
    idle_mem_clock_mhz: float
    idle_w: float
    static_w: float
    leakage_per_c: float
    dyn_w_per_mhz_v2: float
    mem_dyn_w: float
    decode_compute_mhz_s: float
    decode_memory_s: float
    batch_compute: float
    batch_memory: float
    prefill_tps_per_mhz: float
    prefill_attn_tokens: float
    prefill_compute_util: float
    context_tokens: int
    thermal: ThermalPath
    slowdown_temp_c: float
    power_noise_pct: float = 0.3
    mem_tiers_mhz: tuple[float, ...] = ()
    mem_static_w: float = 0.0
    decode_overlap: float = 0.0
    mem_locks_supported: bool = True
    sm_lock_ignored_below_mhz: float = 0.0
    vendor: str = "nvidia"
    amd_power_fields: tuple[str, ...] = ("current", "average")
    amd_violation_status: bool = True
    # Every built-in NVIDIA card is Ampere or newer: a 1 s power usage beside an instant field.
    power_usage_average_s: float = 1.0
    instant_power_field: bool = True
    # NVIDIA counters advance every 10-100 ms by card and driver (Zeus infers "as slow as 10 Hz";
    # a Volta was seen near 10 ms): the slowest, 100 ms, quantises a window's energy the most.
    energy_counter_period_s: float = 0.1
    energy_counter_gain: float = 1.0

    def supported_mem_clocks_mhz(self) -> tuple[float, ...]:
        """Memory clocks NVML would list, descending: the load tiers, then the idle clock."""
        tiers = self.mem_tiers_mhz or (self.mem_clock_mhz,)
        return tuple(sorted({*tiers, self.idle_mem_clock_mhz}, reverse=True))

    def supported_sm_clocks_mhz(self, mem_mhz: float) -> tuple[float, ...]:
        """SM clocks NVML would list for a memory clock, descending (few at the idle tier)."""
        bins = self.sm_bins_mhz()
        if mem_mhz <= self.idle_mem_clock_mhz + 1e-6 and mem_mhz < self.mem_clock_mhz:
            bins = tuple(b for b in bins if b <= 1000.0) or bins[:1]
        return tuple(sorted(bins, reverse=True))

    def sm_bins_mhz(self) -> tuple[float, ...]:
        """All SM clock bins, ascending: fine bins then boost states."""
        n = round((self.sm_fine_max_mhz - self.sm_min_mhz) / self.sm_step_mhz)
        fine = tuple(self.sm_min_mhz + i * self.sm_step_mhz for i in range(n + 1))
        return fine + tuple(s for s in self.boost_states_mhz if s > self.sm_fine_max_mhz)


AIR_GEFORCE = ThermalPath("air", ambient_c=30.0, resistance_c_per_w=0.12, time_constant_s=25.0)
WATER = ThermalPath("water", ambient_c=30.0, resistance_c_per_w=0.045, time_constant_s=40.0)

_RTX3090_AIR = GpuProfile(
    name="rtx3090-air",
    gpu_name="NVIDIA GeForce RTX 3090 (simulated)",
    vram_mib=24576,
    min_limit_w=100.0,
    default_limit_w=370.0,
    max_limit_w=390.0,
    user_limit_w=370.0,
    rejects_below_w=0.0,
    sm_min_mhz=210.0,
    sm_fine_max_mhz=1560.0,
    sm_step_mhz=15.0,
    boost_states_mhz=(1635.0, 1680.0, 1740.0, 1800.0, 1860.0),
    voltage_curve=(
        (210.0, 0.70),
        (1445.0, 0.75),
        (1545.0, 0.803),
        (1635.0, 0.866),
        (1680.0, 0.881),
        (1740.0, 0.93),
        (1860.0, 1.0),
    ),
    idle_sm_mhz=210.0,
    mem_clock_mhz=9751.0,
    idle_mem_clock_mhz=405.0,
    idle_w=32.0,
    static_w=108.0,
    leakage_per_c=0.003,
    dyn_w_per_mhz_v2=0.275,
    mem_dyn_w=35.0,
    decode_compute_mhz_s=34.13,
    decode_memory_s=0.007262,
    batch_compute=0.35,
    batch_memory=0.03,
    prefill_tps_per_mhz=0.62,
    prefill_attn_tokens=24000.0,
    prefill_compute_util=0.9,
    context_tokens=32768,
    thermal=AIR_GEFORCE,
    slowdown_temp_c=88.0,
)

_RTX4090_AIR = GpuProfile(
    name="rtx4090-air",
    gpu_name="NVIDIA GeForce RTX 4090 (simulated)",
    vram_mib=24564,
    min_limit_w=150.0,
    default_limit_w=450.0,
    max_limit_w=600.0,
    user_limit_w=450.0,
    rejects_below_w=0.0,
    sm_min_mhz=210.0,
    sm_fine_max_mhz=2790.0,
    sm_step_mhz=15.0,
    boost_states_mhz=(),
    voltage_curve=((210.0, 0.88), (2250.0, 0.88), (2600.0, 0.98), (2790.0, 1.07)),
    idle_sm_mhz=210.0,
    mem_clock_mhz=10501.0,
    idle_mem_clock_mhz=405.0,
    idle_w=22.0,
    static_w=95.0,
    leakage_per_c=0.003,
    dyn_w_per_mhz_v2=0.17,
    mem_dyn_w=45.0,
    decode_compute_mhz_s=30.0,
    decode_memory_s=0.0105,
    batch_compute=0.35,
    batch_memory=0.03,
    prefill_tps_per_mhz=1.1,
    prefill_attn_tokens=24000.0,
    prefill_compute_util=0.92,
    context_tokens=32768,
    thermal=ThermalPath("air", ambient_c=30.0, resistance_c_per_w=0.1, time_constant_s=25.0),
    slowdown_temp_c=88.0,
)

_RTX5090_AIR = GpuProfile(
    name="rtx5090-air",
    gpu_name="NVIDIA GeForce RTX 5090 (simulated)",
    vram_mib=32607,
    min_limit_w=400.0,
    default_limit_w=575.0,
    max_limit_w=600.0,
    user_limit_w=575.0,
    rejects_below_w=0.0,
    sm_min_mhz=210.0,
    sm_fine_max_mhz=2880.0,
    sm_step_mhz=15.0,
    boost_states_mhz=(),
    voltage_curve=((210.0, 0.85), (2600.0, 0.87), (2800.0, 0.97), (2880.0, 1.02)),
    idle_sm_mhz=210.0,
    mem_clock_mhz=14001.0,
    idle_mem_clock_mhz=405.0,
    idle_w=30.0,
    static_w=106.0,
    leakage_per_c=0.003,
    dyn_w_per_mhz_v2=0.19,
    mem_dyn_w=10.0,
    decode_compute_mhz_s=36.0,
    decode_memory_s=0.0085,
    batch_compute=0.3,
    batch_memory=0.03,
    prefill_tps_per_mhz=1.5,
    prefill_attn_tokens=24000.0,
    prefill_compute_util=0.93,
    context_tokens=32768,
    thermal=ThermalPath("air", ambient_c=30.0, resistance_c_per_w=0.1, time_constant_s=25.0),
    slowdown_temp_c=88.0,
    # GDDR7 tiers as nvidia-smi -lmc offers them; the interface's draw follows the tier
    mem_tiers_mhz=(14001.0, 12001.0, 10001.0, 7001.0),
    mem_static_w=90.0,
)

_H100_SXM = GpuProfile(
    name="h100-sxm",
    gpu_name="NVIDIA H100 80GB HBM3 (simulated)",
    vram_mib=81559,
    min_limit_w=200.0,
    default_limit_w=700.0,
    max_limit_w=700.0,
    user_limit_w=700.0,
    rejects_below_w=0.0,
    sm_min_mhz=345.0,
    sm_fine_max_mhz=1980.0,
    sm_step_mhz=15.0,
    boost_states_mhz=(),
    voltage_curve=((345.0, 0.70), (1400.0, 0.70), (1700.0, 0.80), (1980.0, 0.90)),
    idle_sm_mhz=345.0,
    mem_clock_mhz=2619.0,
    idle_mem_clock_mhz=2619.0,
    idle_w=70.0,
    static_w=90.0,
    leakage_per_c=0.002,
    dyn_w_per_mhz_v2=0.36,
    mem_dyn_w=110.0,
    decode_compute_mhz_s=8.0,
    decode_memory_s=0.022,
    batch_compute=0.5,
    batch_memory=0.02,
    prefill_tps_per_mhz=4.5,
    prefill_attn_tokens=32000.0,
    prefill_compute_util=0.95,
    context_tokens=65536,
    thermal=ThermalPath("air", ambient_c=25.0, resistance_c_per_w=0.06, time_constant_s=30.0),
    slowdown_temp_c=87.0,
    # HBM3 has one clock under load; decode overlaps most of its compute with memory traffic,
    # so it draws well under the 700 W cap and barely slows with the SM clock
    mem_tiers_mhz=(2619.0,),
    mem_static_w=25.0,
    decode_overlap=0.7,
)

# H200: the H100's compute with HBM3e (4.8 TB/s): decode steps move the same bytes faster.
_H200_SXM = replace(
    _H100_SXM,
    name="h200-sxm",
    gpu_name="NVIDIA H200 (simulated)",
    vram_mib=143771,
    mem_clock_mhz=3201.0,
    idle_mem_clock_mhz=3201.0,
    mem_tiers_mhz=(3201.0,),
    decode_memory_s=0.0155,
    mem_dyn_w=95.0,
    context_tokens=131072,
)

# MI300X (OAM, CDNA3): 750 W board power, the default and highest cap; amdsmi reports 0 W as its
# lowest. Gfx clock up to 2100 MHz; 192 GB HBM3 at one clock (1300 MHz, 5.3 TB/s), which amdsmi
# cannot lock. It fills current socket power only (no average) and reports violation status.
# Decode is bandwidth-bound: the step is mostly HBM traffic, overlapped with compute (vLLM),
# so decode draws far below the cap and a lower cap costs little speed.
_MI300X = GpuProfile(
    name="mi300x",
    gpu_name="AMD Instinct MI300X (simulated)",
    vram_mib=196592,
    min_limit_w=0.0,
    default_limit_w=750.0,
    max_limit_w=750.0,
    user_limit_w=750.0,
    rejects_below_w=0.0,
    sm_min_mhz=500.0,
    sm_fine_max_mhz=2100.0,
    sm_step_mhz=25.0,
    boost_states_mhz=(),
    voltage_curve=((500.0, 0.70), (1300.0, 0.70), (1400.0, 0.78), (2100.0, 1.00)),
    idle_sm_mhz=500.0,
    mem_clock_mhz=1300.0,
    idle_mem_clock_mhz=1300.0,
    idle_w=150.0,
    static_w=190.0,
    leakage_per_c=0.002,
    dyn_w_per_mhz_v2=0.34,
    mem_dyn_w=140.0,
    decode_compute_mhz_s=7.0,
    decode_memory_s=0.0145,
    batch_compute=0.5,
    batch_memory=0.02,
    prefill_tps_per_mhz=5.0,
    prefill_attn_tokens=32000.0,
    prefill_compute_util=0.95,
    context_tokens=131072,
    thermal=ThermalPath("air", ambient_c=25.0, resistance_c_per_w=0.07, time_constant_s=30.0),
    slowdown_temp_c=100.0,
    mem_tiers_mhz=(1300.0,),
    mem_static_w=30.0,
    decode_overlap=0.7,
    mem_locks_supported=False,
    vendor="amd",
    amd_power_fields=("current",),
    amd_violation_status=True,
)

# RX 7900 XTX (reference board, RDNA3): 355 W total board power; amdgpu lets the cap move from
# -10% to +15% of it (320-408 W). Gfx clock 500 MHz up to 2500 MHz boost (no discrete boost
# states: RDNA3 clocks move in small steps); 24 GB GDDR6 at 20 Gbps (960 GB/s; amdsmi's MCLK
# 1249 MHz, idle 96 MHz). It fills average socket power only and has no violation status.
# llama.cpp on HIP reaches less of the bandwidth than CUDA on an RTX 3090: a longer memory step.
_RX7900XTX = GpuProfile(
    name="rx7900xtx",
    gpu_name="AMD Radeon RX 7900 XTX (simulated)",
    vram_mib=24560,
    min_limit_w=320.0,
    default_limit_w=355.0,
    max_limit_w=408.0,
    user_limit_w=355.0,
    rejects_below_w=0.0,
    sm_min_mhz=500.0,
    sm_fine_max_mhz=2500.0,
    sm_step_mhz=15.0,
    boost_states_mhz=(),
    voltage_curve=((500.0, 0.70), (1500.0, 0.75), (2100.0, 0.86), (2500.0, 1.02)),
    idle_sm_mhz=500.0,
    mem_clock_mhz=1249.0,
    idle_mem_clock_mhz=96.0,
    idle_w=22.0,
    static_w=75.0,
    leakage_per_c=0.003,
    dyn_w_per_mhz_v2=0.125,
    mem_dyn_w=60.0,
    decode_compute_mhz_s=10.0,
    decode_memory_s=0.017,
    batch_compute=0.35,
    batch_memory=0.03,
    prefill_tps_per_mhz=0.55,
    prefill_attn_tokens=24000.0,
    prefill_compute_util=0.9,
    context_tokens=32768,
    thermal=ThermalPath("air", ambient_c=30.0, resistance_c_per_w=0.15, time_constant_s=25.0),
    slowdown_temp_c=110.0,
    mem_tiers_mhz=(1249.0, 772.0, 456.0),
    mem_static_w=25.0,
    vendor="amd",
    amd_power_fields=("average",),
    amd_violation_status=False,
)

_BUILTIN: dict[str, GpuProfile] = {
    p.name: p
    for p in (
        _RTX3090_AIR,
        replace(_RTX3090_AIR, name="rtx3090-water", thermal=WATER),
        _RTX4090_AIR,
        _RTX5090_AIR,
        _H100_SXM,
        _H200_SXM,
        _MI300X,
        _RX7900XTX,
    )
}

PROFILE_DESCRIPTIONS: dict[str, str] = {
    "rtx3090-air": "RTX 3090, air: 100/370/390 W, boost plateau 340-370 W (club-3090 rig)",
    "rtx3090-water": "RTX 3090, water: same card, cooler and leaner than air",
    "rtx4090-air": "RTX 4090, air: 150/450/600 W, decode draw ceiling near 395 W",
    "rtx5090-air": "RTX 5090, air: 400/575/600 W (no cap below 400 W), hot; four memory tiers",
    "h100-sxm": "H100 SXM: 200/700/700 W, decode far below the cap; SM locks save energy",
    "h200-sxm": "H200 SXM: 200/700/700 W, HBM3e; decode far below the cap, SM locks save energy",
    "mi300x": "AMD Instinct MI300X (amdsmi): 0/750/750 W, HBM3; decode far below the cap",
    "rx7900xtx": "AMD Radeon RX 7900 XTX (amdsmi): 320/355/408 W, only -10%/+15% of its TBP",
}


def profile_names() -> list[str]:
    """Names of the built-in profiles, in a stable order."""
    return list(_BUILTIN)


def get_profile(name: str) -> GpuProfile:
    """Return a built-in profile by name.

    Raises:
        UsageError: Unknown name (the message lists the known ones).
    """
    try:
        return _BUILTIN[name]
    except KeyError:
        raise UsageError(
            f"unknown simulation profile {name!r}; known: {', '.join(_BUILTIN)} "
            "(see --list-profiles)"
        ) from None


# Planted outliers of a simulated fleet: what makes one card of a model unlike the others.
OUTLIERS: dict[str, str] = {
    "hot": "badly cooled card: intake 12 C warmer, 50% more thermal resistance",
    "low-envelope": "different firmware: default and maximum limit 85% of the model's",
    "throttling": "slowdown threshold 25 C lower (firmware or sensor): throttles while not hot",
    "energy-drift": "energy counter runs 5% fast (a drifting sensor): counter and draw disagree",
}
# How fast the planted ``energy-drift`` card's counter runs against its true draw.
ENERGY_DRIFT_GAIN = 1.05


@dataclass(frozen=True)
class CardSpec:
    """One simulated card of a fleet: a profile, its per-card spread and a planted outlier.

    Attributes:
        profile: Built-in profile name.
        spread: Relative card-to-card variation (0.03 for +-3%); 0 is the profile itself.
        outlier: A key of :data:`OUTLIERS`, or None.
    """

    profile: str
    spread: float = 0.0
    outlier: str | None = None


def parse_card_spec(text: str) -> CardSpec:
    """Parse ``NAME``, ``NAME~SPREAD`` or ``NAME~SPREAD~OUTLIER`` (``rtx4090-air~0.03``).

    Raises:
        UsageError: Unknown profile or outlier, or a spread that is not a number in 0..0.3.
    """
    name, _, rest = text.strip().partition("~")
    get_profile(name)
    spread_text, _, outlier = rest.partition("~")
    spread = 0.0
    if spread_text:
        try:
            spread = float(spread_text)
        except ValueError:
            raise UsageError(
                f"--simulate {text!r}: the spread after ~ must be a fraction like 0.03"
            ) from None
        if not 0.0 <= spread <= 0.3:
            raise UsageError(f"--simulate {text!r}: the spread must be between 0 and 0.3")
    if outlier and outlier not in OUTLIERS:
        raise UsageError(
            f"--simulate {text!r}: unknown outlier {outlier!r}; known: {', '.join(OUTLIERS)}"
        )
    return CardSpec(name, spread, outlier or None)


def fleet_card(spec: CardSpec, node: str, index: int = 0) -> GpuProfile:
    """The profile of one card of a fleet, perturbed reproducibly by its node name.

    Silicon (switching power, leakage, memory timing) and cooling (intake temperature, thermal
    resistance) vary uniformly within +-``spread``; the node name and card index seed the draw,
    so a node always gets the same card and different nodes get different ones. The ground truth
    follows the perturbed card because it is computed from this profile.

    Args:
        spec: Profile, spread and planted outlier.
        node: The node's name (``--sim-node``).
        index: The card's index on the node.

    Returns:
        The perturbed profile (same ``name`` and ``gpu_name`` as the model's).
    """
    base = get_profile(spec.profile)
    card = base
    if spec.spread > 0:
        seed = zlib.crc32(f"{node}/{index}/{spec.profile}".encode())
        rng = random.Random(seed)

        def vary(scale: float = 1.0) -> float:
            return 1.0 + scale * spec.spread * rng.uniform(-1.0, 1.0)

        th = base.thermal
        card = replace(
            base,
            dyn_w_per_mhz_v2=base.dyn_w_per_mhz_v2 * vary(),
            static_w=base.static_w * vary(),
            decode_memory_s=base.decode_memory_s * vary(0.3),
            thermal=replace(
                th,
                # a 3% spread moves the intake by up to 3 C (position in the chassis or rack)
                ambient_c=th.ambient_c + 100.0 * spec.spread * rng.uniform(-1.0, 1.0),
                resistance_c_per_w=th.resistance_c_per_w * vary(),
            ),
        )
    if spec.outlier == "hot":
        th = card.thermal
        card = replace(
            card,
            thermal=replace(
                th, ambient_c=th.ambient_c + 12.0, resistance_c_per_w=th.resistance_c_per_w * 1.5
            ),
        )
    elif spec.outlier == "throttling":
        card = replace(card, slowdown_temp_c=card.slowdown_temp_c - 25.0)
    elif spec.outlier == "energy-drift":
        card = replace(card, energy_counter_gain=ENERGY_DRIFT_GAIN)
    elif spec.outlier == "low-envelope":
        low = round(card.default_limit_w * 0.85 / 5.0) * 5.0
        card = replace(
            card,
            default_limit_w=low,
            max_limit_w=low,
            user_limit_w=min(card.user_limit_w, low),
        )
    return card
