"""powersweep.sim.vf_stability: a card's true stable offset margin and its bus state. A card
resets only working past its margin by more than the threshold (any instability at 0); a reset
counts and keeps the card off the bus for a fixed run time, in which its settings are refused in
one line and a reading fails in every field."""

from __future__ import annotations

import math

import pytest

from powersweep.errors import GpuError
from powersweep.sim.profiles import get_profile
from powersweep.sim.vf_stability import (
    DEFAULT_RESET_BEYOND_MHZ,
    RESET_OFF_BUS_S,
    BusState,
    stable_margin_mhz,
)
from powersweep.sweep.gpu import XID_FALLEN_OFF_BUS


@pytest.mark.parametrize(
    ("beyond", "unstable_by", "busy", "resets"),
    [
        (50.0, 0.0, True, False),
        (50.0, 50.0, True, False),  # at the threshold: wrong answers, no crash
        (50.0, 50.5, True, True),
        (50.0, 500.0, False, False),  # an idle card computes nothing wrong
        (0.0, 0.0, True, False),
        (0.0, 0.25, True, True),
    ],
)
def test_a_card_resets_only_working_past_its_margin_by_more_than_the_threshold(
    beyond: float, unstable_by: float, busy: bool, resets: bool
) -> None:
    assert BusState(0, beyond).must_reset(unstable_by, busy) is resets


def test_a_reset_counts_and_takes_the_card_off_the_bus_for_a_while() -> None:
    bus = BusState(3)
    assert bus.reset_beyond_mhz == DEFAULT_RESET_BEYOND_MHZ and RESET_OFF_BUS_S == 5.0
    assert bus.resets == 0 and not bus.off_bus(0.0)
    bus.refuse_off_bus(0.0, "set its power limit")  # on the bus: nothing refused
    bus.reset(100.0)
    assert bus.resets == 1 and bus.off_bus(100.0) and bus.off_bus(104.99)
    assert not bus.off_bus(100.0 + RESET_OFF_BUS_S)
    with pytest.raises(GpuError, match=r"^GPU 3 has fallen off the bus .*: cannot lock it for"):
        bus.refuse_off_bus(102.0, "lock it")
    bus.reset(200.0)
    assert bus.resets == 2 and bus.off_bus(201.0)


@pytest.mark.parametrize(("instant", "errors"), [(True, 9), (False, 8)])
def test_a_reading_off_the_bus_fails_every_field(instant: bool, errors: int) -> None:
    s = BusState(2).lost_sample(instant)
    assert s.gpu_index == 2 and s.read_errors == errors
    assert all(
        math.isnan(v) for v in (s.power_w, s.power_instant_w, s.energy_mj, s.temp_c, s.util_pct)
    )
    assert math.isnan(s.sm_clock_mhz) and math.isnan(s.mem_clock_mhz) and math.isnan(s.draw_w)
    assert s.pstate is None and s.clock_event_bits is None


def test_the_stable_margin_is_the_profiles_within_its_spread() -> None:
    p = get_profile("rtx4090-air")
    margins = {stable_margin_mhz(p, seed, 0) for seed in range(30)}
    assert all(200.0 <= m <= 250.0 and m == round(m) for m in margins) and len(margins) > 5
    assert stable_margin_mhz(p, 9, 1) == stable_margin_mhz(p, 9, 1)
    assert stable_margin_mhz(get_profile("h100-sxm"), 9, 0) == 0.0  # no offset, no margin


def test_each_reset_is_reported_once_as_xid_79() -> None:
    bus = BusState(0)
    assert bus.take_xids() == ()
    bus.reset(10.0)
    bus.reset(20.0)
    assert bus.take_xids() == (XID_FALLEN_OFF_BUS, XID_FALLEN_OFF_BUS) == (79, 79)
    assert bus.take_xids() == ()
