"""powersweep.sim.profiles: the simulated GPUs' profiles as data (``powersweep/sim/profiles.toml``,
read once, validated), their clock bins, and the cards of a simulated fleet (``NAME~SPREAD~OUTLIER``
specs, each card perturbed reproducibly by its node)."""

from __future__ import annotations

import re
from dataclasses import replace
from importlib import resources

import pytest

from powersweep.errors import UsageError
from powersweep.sim import profiles
from powersweep.sim.profiles import (
    ENERGY_DRIFT_GAIN,
    CardSpec,
    GpuProfile,
    ProfileDataError,
    ThermalPath,
    builtin_catalogue,
    fleet_card,
    get_profile,
    parse_card_spec,
    parse_profiles,
    profile_names,
)

# The values the profiles held as Python literals before they became data.
RTX3090_AIR = GpuProfile(
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
    thermal=ThermalPath("air", ambient_c=30.0, resistance_c_per_w=0.12, time_constant_s=25.0),
    slowdown_temp_c=88.0,
    power_noise_pct=0.3,
    mem_tiers_mhz=(),
    mem_static_w=0.0,
    decode_overlap=0.0,
    mem_locks_supported=True,
    sm_lock_ignored_below_mhz=0.0,
    vendor="nvidia",
    amd_power_fields=("current", "average"),
    amd_violation_status=True,
    power_usage_average_s=1.0,
    instant_power_field=True,
    energy_counter_period_s=0.1,
    energy_counter_gain=1.0,
    vf_offset_min_mhz=-200.0,
    vf_offset_max_mhz=1000.0,
    stable_offset_mhz=175.0,
    stable_offset_spread_mhz=25.0,
    mem_offset_min_mhz=-2000.0,
    mem_offset_max_mhz=6000.0,
    mem_offset_per_clock_mhz=2.0,
    stable_mem_offset_mhz=1500.0,
    stable_mem_offset_spread_mhz=500.0,
    mem_replay_loss_per_mhz=0.0002,
    mem_corrupt_beyond_mhz=600.0,
)


def _packaged_text() -> str:
    return resources.files("powersweep.sim").joinpath("profiles.toml").read_text(encoding="utf-8")


def test_the_packaged_file_loads_every_profile_once_in_order() -> None:
    catalogue = builtin_catalogue()
    assert builtin_catalogue() is catalogue  # read once per process
    assert profile_names() == [
        "rtx3090-air",
        "rtx3090-water",
        "rtx4090-air",
        "rtx5090-air",
        "h100-sxm",
        "h200-sxm",
        "mi300x",
        "rx7900xtx",
    ]
    assert list(catalogue.descriptions) == profile_names()
    assert profiles.PROFILE_DESCRIPTIONS is catalogue.descriptions
    assert all(get_profile(n).name == n for n in profile_names())
    with pytest.raises(TypeError):
        catalogue.profiles["x"] = RTX3090_AIR  # type: ignore[index]


def test_loaded_profiles_equal_the_reference_values() -> None:
    assert get_profile("rtx3090-air") == RTX3090_AIR
    assert get_profile("rtx3090-water") == replace(
        RTX3090_AIR,
        name="rtx3090-water",
        thermal=ThermalPath(
            "water", ambient_c=30.0, resistance_c_per_w=0.045, time_constant_s=40.0
        ),
    )
    # H200: the H100 with HBM3e, every other constant inherited
    assert get_profile("h200-sxm") == replace(
        get_profile("h100-sxm"),
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
    mi300x = get_profile("mi300x")
    assert (mi300x.vendor, mi300x.amd_power_fields, mi300x.mem_locks_supported) == (
        "amd",
        ("current",),
        False,
    )
    assert (mi300x.min_limit_w, mi300x.default_limit_w, mi300x.max_limit_w) == (0.0, 750.0, 750.0)
    assert mi300x.thermal == ThermalPath("air", 25.0, 0.07, 30.0)
    assert mi300x.energy_counter_period_s == 0.1  # from [defaults]


def test_geforce_profiles_have_an_sm_clock_offset_and_a_plausible_stable_margin() -> None:
    margins = {"rtx3090-air": (150, 200), "rtx4090-air": (200, 250), "rtx5090-air": (225, 275)}
    for name, (low, high) in margins.items():
        card = get_profile(name)
        assert card.vf_offset_supported
        assert (card.vf_offset_min_mhz, card.vf_offset_max_mhz) == (-200.0, 1000.0)
        spread = card.stable_offset_spread_mhz
        assert low <= card.stable_offset_mhz - spread <= card.stable_offset_mhz + spread <= high
    assert get_profile("rtx3090-water").stable_offset_mhz == 175.0  # inherited from its base
    # AMD and datacenter profiles have none (the [defaults])
    for name in ("h100-sxm", "h200-sxm", "mi300x", "rx7900xtx"):
        card = get_profile(name)
        assert not card.vf_offset_supported
        assert (card.vf_offset_min_mhz, card.vf_offset_max_mhz) == (0.0, 0.0)
        assert (card.stable_offset_mhz, card.stable_offset_spread_mhz) == (0.0, 0.0)


def test_a_whole_number_is_read_as_a_float_and_types_are_exact() -> None:
    text = _packaged_text().replace("min_limit_w = 100.0", "min_limit_w = 100", 1)
    card = parse_profiles(text).profiles["rtx3090-air"]
    assert card == RTX3090_AIR
    assert type(card.min_limit_w) is float
    assert type(card.vram_mib) is int
    assert type(card.voltage_curve[0]) is tuple


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "static_w = 108.0\n",
            "",
            "profiles.toml: profile 'rtx3090-air': missing field 'static_w'",
        ),
        (
            "vram_mib = 24576",
            'vram_mib = "24 GiB"',
            "profiles.toml: profile 'rtx3090-air': field 'vram_mib' must be a whole number, "
            "not '24 GiB'",
        ),
        (
            "vram_mib = 24576",
            "vram_mib = 24576.0",
            "profile 'rtx3090-air': field 'vram_mib' must be a whole number, not 24576.0",
        ),
        (
            "idle_w = 32.0",
            "idle_w = true",
            "profile 'rtx3090-air': field 'idle_w' must be a number, not True",
        ),
        (
            "mem_locks_supported = false",
            'mem_locks_supported = "no"',
            "profile 'mi300x': field 'mem_locks_supported' must be true or false, not 'no'",
        ),
        (
            "[210.0, 0.70],",
            "[210.0],",
            "profile 'rtx3090-air': field 'voltage_curve[0]' must be an array of 2, not [210.0]",
        ),
        (
            "resistance_c_per_w = 0.045,",
            'resistance_c_per_w = "low",',
            "profile 'rtx3090-water': field 'thermal.resistance_c_per_w' must be a number",
        ),
        (
            "ambient_c = 25.0, resistance_c_per_w = 0.07,",
            "resistance_c_per_w = 0.07,",
            "profile 'mi300x': missing field 'thermal.ambient_c'",
        ),
        (
            "[profiles.rx7900xtx]\n",
            "[profiles.rx7900xtx]\nstatik_w = 75.0\n",
            "profiles.toml: profile 'rx7900xtx': unknown field 'statik_w'",
        ),
        (
            "[profiles.rtx4090-air]\n",
            "[profiles.rtx4090-air]\nname = 'rtx4090'\n",
            "profiles.toml: profile 'rtx4090-air': unknown field 'name'",
        ),
        (
            "[defaults]\n",
            "[defaults]\nname = 'x'\n",
            "profiles.toml: [defaults]: unknown field 'name'",
        ),
        (
            'base = "h100-sxm"',
            'base = "h300-sxm"',
            "profile 'h200-sxm': base 'h300-sxm' is not a profile defined above it",
        ),
        (
            'description = "RTX 4090, air: 150/450/600 W, decode draw ceiling near 395 W"\n',
            "",
            "profile 'rtx4090-air': missing field 'description'",
        ),
        (
            'vendor = "amd"',
            'vendor = "intel"',
            "profile 'mi300x': field 'vendor' must be one of ('nvidia', 'amd')",
        ),
        ("max_limit_w = 390.0", "max_limit_w = 300.0", "profile 'rtx3090-air': min_limit_w <="),
        (
            "vf_offset_min_mhz = -200.0",
            "vf_offset_min_mhz = 50.0",
            "profile 'rtx3090-air': vf_offset_min_mhz <= 0 <= vf_offset_max_mhz must hold",
        ),
        (
            "stable_offset_spread_mhz = 25.0",
            "stable_offset_spread_mhz = 200.0",
            "profile 'rtx3090-air': 0 <= stable_offset_spread_mhz <= stable_offset_mhz",
        ),
        (
            "stable_offset_mhz = 175.0",
            'stable_offset_mhz = "high"',
            "profile 'rtx3090-air': field 'stable_offset_mhz' must be a number, not 'high'",
        ),
        (
            "stable_offset_spread_mhz = 0.0\n",
            "",
            "profiles.toml: profile 'h100-sxm': missing field 'stable_offset_spread_mhz'",
        ),
        ("[profiles.rtx3090-air]", "[profiles.rtx3090-air", "profiles.toml: not valid TOML:"),
    ],
)
def test_bad_data_is_refused_in_one_line_naming_the_profile_and_field(
    old: str, new: str, message: str
) -> None:
    text = _packaged_text()
    assert old in text
    with pytest.raises(ProfileDataError) as refused:
        parse_profiles(text.replace(old, new, 1))
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_an_unknown_module_attribute_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="PROFILE_DESCRIPTION'"):
        _ = profiles.PROFILE_DESCRIPTION


def test_an_unknown_profile_is_a_usage_error_listing_the_known_ones() -> None:
    with pytest.raises(UsageError) as refused:
        get_profile("rtx9090")
    message = str(refused.value)
    assert message.startswith("unknown simulation profile 'rtx9090'; known: rtx3090-air, ")
    assert message.endswith("(see --list-profiles)")


def test_sm_bins_are_the_fine_steps_then_the_boost_states_above_them() -> None:
    bins = RTX3090_AIR.sm_bins_mhz()
    assert bins[:3] == (210.0, 225.0, 240.0)
    assert bins[-6:] == (1560.0, 1635.0, 1680.0, 1740.0, 1800.0, 1860.0)
    assert len(bins) == 91 + 5  # (1560 - 210) / 15 + 1 fine bins, then 1635..1860
    assert list(bins) == sorted(bins)


def test_supported_clocks_descend_and_the_idle_memory_clock_lists_few_sm_clocks() -> None:
    assert RTX3090_AIR.supported_mem_clocks_mhz() == (9751.0, 405.0)
    at_load = RTX3090_AIR.supported_sm_clocks_mhz(9751.0)
    assert at_load[0] == 1860.0 and list(at_load) == sorted(at_load, reverse=True)
    at_idle = RTX3090_AIR.supported_sm_clocks_mhz(405.0)
    assert max(at_idle) <= 1000.0 and at_idle[-1] == 210.0
    tiers = get_profile("rtx5090-air").supported_mem_clocks_mhz()
    assert tiers == (14001.0, 12001.0, 10001.0, 7001.0, 405.0)


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("rtx4090-air", CardSpec("rtx4090-air", 0.0, None)),
        (" rtx4090-air~0.03 ", CardSpec("rtx4090-air", 0.03, None)),
        ("rtx4090-air~0.3~hot", CardSpec("rtx4090-air", 0.3, "hot")),
        ("rtx4090-air~~energy-drift", CardSpec("rtx4090-air", 0.0, "energy-drift")),
        ("rtx4090-air~0", CardSpec("rtx4090-air", 0.0, None)),
    ],
)
def test_card_specs_parse(text: str, spec: CardSpec) -> None:
    assert parse_card_spec(text) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rtx9090~0.03", "unknown simulation profile 'rtx9090'"),
        ("rtx4090-air~3%", "the spread after ~ must be a fraction like 0.03"),
        ("rtx4090-air~0.31", "the spread must be between 0 and 0.3"),
        ("rtx4090-air~-0.01", "the spread must be between 0 and 0.3"),
        ("rtx4090-air~0.03~melted", "unknown outlier 'melted'; known: hot, low-envelope"),
    ],
)
def test_bad_card_specs_are_one_usage_error(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)) as refused:
        parse_card_spec(text)
    assert "\n" not in str(refused.value)


def test_a_fleet_card_is_seeded_by_its_node_and_index_and_stays_within_its_spread() -> None:
    spec = parse_card_spec("rtx4090-air~0.05")
    base = get_profile("rtx4090-air")
    card = fleet_card(spec, "node7")
    assert card == fleet_card(spec, "node7")
    assert card != fleet_card(spec, "node8")
    assert card != fleet_card(spec, "node7", index=1)
    assert (card.name, card.gpu_name) == (base.name, base.gpu_name)
    for field in ("dyn_w_per_mhz_v2", "static_w"):
        assert abs(getattr(card, field) / getattr(base, field) - 1.0) <= 0.05
    assert abs(card.decode_memory_s / base.decode_memory_s - 1.0) <= 0.3 * 0.05
    assert abs(card.thermal.ambient_c - base.thermal.ambient_c) <= 5.0
    assert card.stable_offset_mhz != base.stable_offset_mhz  # the silicon's margin too
    assert abs(card.stable_offset_mhz / base.stable_offset_mhz - 1.0) <= 0.05
    assert fleet_card(parse_card_spec("rtx4090-air"), "node7") == base  # no spread: the model


def test_planted_outliers_change_what_their_description_says() -> None:
    base = get_profile("rtx4090-air")
    hot = fleet_card(CardSpec("rtx4090-air", 0.0, "hot"), "n")
    assert hot.thermal.ambient_c == base.thermal.ambient_c + 12.0
    assert hot.thermal.resistance_c_per_w == pytest.approx(base.thermal.resistance_c_per_w * 1.5)
    throttling = fleet_card(CardSpec("rtx4090-air", 0.0, "throttling"), "n")
    assert throttling.slowdown_temp_c == base.slowdown_temp_c - 25.0
    drift = fleet_card(CardSpec("rtx4090-air", 0.0, "energy-drift"), "n")
    assert drift.energy_counter_gain == ENERGY_DRIFT_GAIN
    low = fleet_card(CardSpec("rtx4090-air", 0.0, "low-envelope"), "n")
    assert low.default_limit_w == low.max_limit_w == round(base.default_limit_w * 0.85 / 5) * 5
    assert low.user_limit_w <= low.max_limit_w
