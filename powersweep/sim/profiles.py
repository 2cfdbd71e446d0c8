"""Built-in simulated GPUs: physical constants per card, model and cooling class.

A profile is not a lookup table of answers: it holds the constants of the physics in
:mod:`powersweep.sim.physics` (voltage/frequency curve, clock bins, static and dynamic power, the
roofline of decode and prefill, the thermal path).

The reasoning: docs/simulated-rig.md, "powersweep.sim.profiles".
"""

from __future__ import annotations

import functools
import random
import reprlib
import tomllib
import typing
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from importlib import resources
from types import MappingProxyType
from typing import Any, TypeVar

from powersweep.errors import UsageError

_T = TypeVar("_T")


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
            (over :class:`powersweep.sim.amdsmi.FakeAmdsmi`).
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
        vf_offset_min_mhz: Lowest SM clock offset the driver accepts on the voltage/frequency
            curve (negative: each clock at a higher voltage).
        vf_offset_max_mhz: Highest SM clock offset the driver accepts (a positive offset runs
            each clock at the voltage of a lower one: the Linux "undervolt"). Both 0: the card
            has no offset to set (AMD and datacenter profiles).
        stable_offset_mhz: The silicon's stable margin: the largest positive offset the
            profile's typical card runs without errors.
        stable_offset_spread_mhz: Card-to-card spread of that margin (the silicon lottery): a
            card's true margin is drawn within +- this from its seed.
        mem_offset_min_mhz: Lowest memory clock offset the driver accepts, in NVML's unit
            (twice the reported memory clock's MHz on GDDR6X/GDDR7: ``nvml_offsets``).
        mem_offset_max_mhz: Highest one. Both 0: the card has no memory offset to set.
        mem_offset_per_clock_mhz: Offset MHz per MHz of the reported memory clock it raises
            (2 where NVML's offset is in the data rate's terms).
        stable_mem_offset_mhz: The memory's stable margin (NVML's unit): the largest offset the
            profile's typical card runs without error replays eating bandwidth.
        stable_mem_offset_spread_mhz: Card-to-card spread of that margin (its seed draws it).
        mem_replay_loss_per_mhz: Share of the memory bandwidth error replays take per MHz of
            offset past the margin (a card's own slope is drawn within +-50% of it).
        mem_corrupt_beyond_mhz: Past the margin by more than this (NVML's unit), errors escape
            the replay and greedy answers go wrong.
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
    power_noise_pct: float
    mem_tiers_mhz: tuple[float, ...]
    mem_static_w: float
    decode_overlap: float
    mem_locks_supported: bool
    sm_lock_ignored_below_mhz: float
    vendor: str
    amd_power_fields: tuple[str, ...]
    amd_violation_status: bool
    power_usage_average_s: float
    instant_power_field: bool
    energy_counter_period_s: float
    energy_counter_gain: float
    vf_offset_min_mhz: float = 0.0
    vf_offset_max_mhz: float = 0.0
    stable_offset_mhz: float = 0.0
    stable_offset_spread_mhz: float = 0.0
    mem_offset_min_mhz: float = 0.0
    mem_offset_max_mhz: float = 0.0
    mem_offset_per_clock_mhz: float = 2.0
    stable_mem_offset_mhz: float = 0.0
    stable_mem_offset_spread_mhz: float = 0.0
    mem_replay_loss_per_mhz: float = 0.0
    mem_corrupt_beyond_mhz: float = 0.0

    @property
    def mem_offset_supported(self) -> bool:
        """Whether the driver lets the memory clock offset be set at all."""
        return self.mem_offset_min_mhz < self.mem_offset_max_mhz

    @property
    def vf_offset_supported(self) -> bool:
        """Whether the driver lets the SM clock offset be set at all (a range to set it in)."""
        return self.vf_offset_min_mhz < self.vf_offset_max_mhz

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
        return _sm_bins_mhz(
            self.sm_min_mhz, self.sm_step_mhz, self.sm_fine_max_mhz, self.boost_states_mhz
        )


@functools.lru_cache(maxsize=64)
def _sm_bins_mhz(
    min_mhz: float, step_mhz: float, fine_max_mhz: float, boost_states_mhz: tuple[float, ...]
) -> tuple[float, ...]:
    # kept: the simulated card asks at every operating point it works out
    n = round((fine_max_mhz - min_mhz) / step_mhz)
    fine = tuple(min_mhz + i * step_mhz for i in range(n + 1))
    return fine + tuple(s for s in boost_states_mhz if s > fine_max_mhz)


DATA_FILE = "profiles.toml"
_VENDORS = ("nvidia", "amd")
_AMD_POWER_FIELDS = ("current", "average")


class ProfileDataError(ValueError):
    """Malformed profile data; the one-line message names the profile and the field."""


@dataclass(frozen=True)
class ProfileCatalogue:
    """The built-in profiles by name, in file order, and the line ``--list-profiles`` prints."""

    profiles: Mapping[str, GpuProfile]
    descriptions: Mapping[str, str]


@functools.cache
def builtin_catalogue() -> ProfileCatalogue:
    """The profiles of the packaged ``profiles.toml``, read and validated once per process."""
    text = resources.files("powersweep.sim").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return parse_profiles(text)


def parse_profiles(text: str, source: str = DATA_FILE) -> ProfileCatalogue:
    """Profiles from TOML text: ``[defaults]``, then one ``[profiles.NAME]`` table each.

    A profile's fields are the defaults, overlaid by those of its ``base`` (a profile defined
    above it) if it names one, overlaid by its own; its ``description`` is not inherited.

    Raises:
        ProfileDataError: Bad TOML, or a field missing, unknown or of the wrong type.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProfileDataError(f"{source}: not valid TOML: {e}") from None
    if unknown := sorted(set(data) - {"defaults", "profiles"}):
        raise ProfileDataError(f"{source}: unknown table {unknown[0]!r}")
    field_names = {f.name for f in fields(GpuProfile)} - {"name"}
    defaults = _table(data.get("defaults", {}), f"{source}: [defaults]")
    if unknown := sorted(set(defaults) - field_names):
        raise ProfileDataError(f"{source}: [defaults]: unknown field {unknown[0]!r}")
    merged: dict[str, dict[str, Any]] = {}
    profiles: dict[str, GpuProfile] = {}
    descriptions: dict[str, str] = {}
    for name, value in _table(data.get("profiles"), f"{source}: [profiles]").items():
        where = f"{source}: profile {name!r}"
        own = dict(_table(value, where))
        base = own.pop("base", None)
        if unknown := sorted(set(own) - field_names - {"description"}):
            raise ProfileDataError(f"{where}: unknown field {unknown[0]!r}")
        if base is not None and _typed(base, str, where, "base") not in merged:
            raise ProfileDataError(f"{where}: base {base!r} is not a profile defined above it")
        descriptions[name] = _typed(own.pop("description", None), str, where, "description")
        merged[name] = {**defaults, **(merged[base] if base else {}), **own, "name": name}
        profiles[name] = _checked(_build(GpuProfile, merged[name], where), where)
    if not profiles:
        raise ProfileDataError(f"{source}: no [profiles.NAME] table")
    return ProfileCatalogue(MappingProxyType(profiles), MappingProxyType(descriptions))


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ProfileDataError(f"{where}: must be a table, not {reprlib.repr(value)}")
    return value


def _build(cls: type[_T], table: Mapping[str, Any], where: str, prefix: str = "") -> _T:
    """An instance of the dataclass ``cls`` from a table holding exactly its fields."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    if unknown := sorted(set(table) - set(names)):
        raise ProfileDataError(f"{where}: unknown field {prefix + unknown[0]!r}")
    if missing := [n for n in names if n not in table]:
        raise ProfileDataError(f"{where}: missing field {prefix + missing[0]!r}")
    hints = typing.get_type_hints(cls)
    return cls(**{n: _typed(table[n], hints[n], where, prefix + n) for n in names})


def _typed(value: Any, hint: Any, where: str, field: str) -> Any:
    """``value`` as the type ``hint`` (a TOML array as a tuple, an integer as a float)."""
    args = typing.get_args(hint)
    if is_dataclass(hint):
        if isinstance(value, dict):
            return _build(hint, value, where, f"{field}.")  # type: ignore[arg-type]
        expected = "a table"
    elif typing.get_origin(hint) is tuple:
        items = [args[0]] * len(value) if isinstance(value, list) and args[-1] is ... else args
        if isinstance(value, list) and len(items) == len(value):
            return tuple(
                _typed(v, h, where, f"{field}[{i}]")
                for i, (v, h) in enumerate(zip(value, items, strict=True))
            )
        expected = "an array" if args[-1] is ... else f"an array of {len(args)}"
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        expected = "a number"
    elif hint in (int, str, bool):
        if type(value) is hint:
            return value
        expected = {int: "a whole number", str: "a string", bool: "true or false"}[hint]
    else:
        raise TypeError(f"no reader for a field of type {hint!r}")
    if value is None:
        raise ProfileDataError(f"{where}: missing field {field!r}")
    raise ProfileDataError(
        f"{where}: field {field!r} must be {expected}, not {reprlib.repr(value)}"
    )


def _checked(p: GpuProfile, where: str) -> GpuProfile:
    """``p`` if its values agree with each other (their types are checked already)."""
    for ok, problem in (
        (p.vendor in _VENDORS, f"field 'vendor' must be one of {_VENDORS}"),
        (
            set(p.amd_power_fields) <= set(_AMD_POWER_FIELDS),
            f"field 'amd_power_fields' may hold only {_AMD_POWER_FIELDS}",
        ),
        (
            p.min_limit_w <= p.default_limit_w <= p.max_limit_w,
            "min_limit_w <= default_limit_w <= max_limit_w must hold",
        ),
        (p.sm_step_mhz > 0, "field 'sm_step_mhz' must be above 0"),
        (
            p.vf_offset_min_mhz <= 0.0 <= p.vf_offset_max_mhz,
            "vf_offset_min_mhz <= 0 <= vf_offset_max_mhz must hold (0 puts the curve back)",
        ),
        (
            0.0 <= p.stable_offset_spread_mhz <= p.stable_offset_mhz,
            "0 <= stable_offset_spread_mhz <= stable_offset_mhz must hold (a margin is never "
            "negative)",
        ),
        (
            p.mem_offset_min_mhz <= 0.0 <= p.mem_offset_max_mhz,
            "mem_offset_min_mhz <= 0 <= mem_offset_max_mhz must hold (0 puts the clock back)",
        ),
        (
            0.0 <= p.stable_mem_offset_spread_mhz <= p.stable_mem_offset_mhz,
            "0 <= stable_mem_offset_spread_mhz <= stable_mem_offset_mhz must hold",
        ),
        (
            p.mem_offset_per_clock_mhz > 0.0
            and p.mem_replay_loss_per_mhz >= 0.0
            and p.mem_corrupt_beyond_mhz >= 0.0,
            "mem_offset_per_clock_mhz must be above 0, mem_replay_loss_per_mhz and "
            "mem_corrupt_beyond_mhz not below 0",
        ),
    ):
        if not ok:
            raise ProfileDataError(f"{where}: {problem}")
    return p


def profile_names() -> list[str]:
    """Names of the built-in profiles, in a stable order."""
    return list(builtin_catalogue().profiles)


def get_profile(name: str) -> GpuProfile:
    """Return a built-in profile by name.

    Raises:
        UsageError: Unknown name (the message lists the known ones).
    """
    profiles = builtin_catalogue().profiles
    try:
        return profiles[name]
    except KeyError:
        raise UsageError(
            f"unknown simulation profile {name!r}; known: {', '.join(profiles)} "
            "(see --list-profiles)"
        ) from None


def __getattr__(name: str) -> Mapping[str, str]:
    # PROFILE_DESCRIPTIONS (name -> the line --list-profiles prints) is read on first use
    if name == "PROFILE_DESCRIPTIONS":
        return builtin_catalogue().descriptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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

    Silicon (switching power, leakage, memory timing, the stable margin of the SM clock offset)
    and cooling (intake temperature, thermal resistance) vary uniformly within +-``spread``; the
    node name and card index seed the draw, so a node always gets the same card and different
    nodes get different ones. The ground truth follows the perturbed card because it is computed
    from this profile.

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
            # drawn last, so the draws above are what they were before cards had a margin
            stable_offset_mhz=base.stable_offset_mhz * vary(),
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
