"""powersweep.sweep.gpu.amd.amd_reads: one AMD card's readings over the fake amdsmi, each flag
and field on its own. The power source probed once (current, else average, else none), each
violation flag's clock-event bit, a status whose every flag is N/A read as unsupported, a reading
of the wrong shape counted as a failure, the errors counted per sample and in total, and a die
whose draw another die reports never reading energy. (Units, NaN tolerance and the energy
counter's fallback are in ``test_amd.py``.)"""

from __future__ import annotations

import math
from typing import Any

import pytest

from powersweep.sim.amdsmi import AmdCard, FakeAmdsmi
from powersweep.sim.amdsmi_types import (
    AMDSMI_STATUS_NOT_SUPPORTED,
    AMDSMI_STATUS_UNKNOWN_ERROR,
    AmdSmiLibraryException,
)
from powersweep.sweep.gpu.amd.amd_gpu import AmdsmiGpu
from powersweep.sweep.gpu.protocol import (
    CLOCK_EVENT_HW_SLOWDOWN,
    CLOCK_EVENT_HW_THERMAL,
    CLOCK_EVENT_SW_POWER_CAP,
    CLOCK_EVENT_SW_THERMAL,
)
from tests.fakes.fake_amdsmi import mi300x

QUIET = {
    "active_ppt_pwr": False,
    "active_socket_thrm": False,
    "active_prochot_thrm": False,
    "active_vr_thrm": False,
    "active_hbm_thrm": False,
}


def _gpu_3(card: AmdCard | None = None, smi: FakeAmdsmi | None = None) -> tuple[FakeAmdsmi, Any]:
    fake = smi or FakeAmdsmi([card or mi300x()])
    fake.amdsmi_init()
    return fake, AmdsmiGpu(fake, fake.cards[0], 3)


@pytest.mark.parametrize(
    ("flags", "bits"),
    [
        ({}, 0),
        ({"active_ppt_pwr": True}, CLOCK_EVENT_SW_POWER_CAP),
        ({"active_socket_thrm": True}, CLOCK_EVENT_SW_THERMAL),
        ({"active_prochot_thrm": True}, CLOCK_EVENT_HW_THERMAL),
        ({"active_vr_thrm": True}, CLOCK_EVENT_HW_SLOWDOWN),
        ({"active_hbm_thrm": True}, CLOCK_EVENT_HW_SLOWDOWN),
        (
            {"active_ppt_pwr": True, "active_prochot_thrm": True, "active_hbm_thrm": True},
            CLOCK_EVENT_SW_POWER_CAP | CLOCK_EVENT_HW_THERMAL | CLOCK_EVENT_HW_SLOWDOWN,
        ),
        # a flag that reads "N/A" is not set; one boolean flag is enough to trust the others
        ({"active_ppt_pwr": "N/A", "active_socket_thrm": True}, CLOCK_EVENT_SW_THERMAL),
    ],
)
def test_each_violation_flag_sets_its_clock_event_bit(flags: dict[str, Any], bits: int) -> None:
    _, gpu = _gpu_3(mi300x(violation={**QUIET, **flags}))
    assert gpu.read_sample().clock_event_bits == bits


def test_a_violation_status_of_only_na_flags_is_unsupported_and_not_asked_again() -> None:
    na = dict.fromkeys(QUIET, "N/A")
    fake, gpu = _gpu_3(mi300x(violation=na))
    samples = [gpu.read_sample() for _ in range(3)]
    assert all(s.clock_event_bits is None and s.read_errors == 0 for s in samples)
    assert fake.calls_to("amdsmi_get_violation_status") == 1
    assert "clock_events" in gpu.unsupported_fields


def test_the_power_source_is_probed_once_current_first() -> None:
    fake, gpu = _gpu_3(mi300x(current_power_w=None, average_power_w=300))
    assert gpu.power_source == "average"
    probes = fake.calls_to("amdsmi_get_power_info")
    assert probes == 2  # current read N/A, then average
    gpu.read_sample()
    assert fake.calls_to("amdsmi_get_power_info") == probes + 1  # one call a sample


def test_a_card_without_socket_power_is_not_asked_for_it_again() -> None:
    fake, gpu = _gpu_3(mi300x(current_power_w=None, average_power_w=None))
    probes = fake.calls_to("amdsmi_get_power_info")
    s = gpu.read_sample()
    assert math.isnan(s.power_w) and math.isnan(s.power_instant_w) and s.read_errors == 0
    assert fake.calls_to("amdsmi_get_power_info") == probes


class _FailingCurrent(FakeAmdsmi):
    """A module whose first power read fails (a card still starting), then works."""

    def __init__(self, cards: list[AmdCard]) -> None:
        super().__init__(cards)
        self.failures_left = 1

    def amdsmi_get_power_info(self, processor_handle: Any) -> dict[str, Any]:
        if self.failures_left:
            self.failures_left -= 1
            raise AmdSmiLibraryException(AMDSMI_STATUS_UNKNOWN_ERROR)
        return super().amdsmi_get_power_info(processor_handle)


def test_a_probe_whose_first_read_fails_tries_the_next_source() -> None:
    card = mi300x(current_power_w=520, average_power_w=500)
    _, gpu = _gpu_3(smi=_FailingCurrent([card]))
    assert gpu.power_source == "average"  # the current read failed; the average answered
    s = gpu.read_sample()
    assert (s.power_w, s.power_instant_w) == (500.0, 520.0)  # the sample reads both


def test_a_probe_whose_every_read_failed_is_not_taken_for_a_card_without_power() -> None:
    card = mi300x(current_power_w=520)
    smi = _FailingCurrent([card])
    smi.failures_left = 2  # both the current and the average reads of the probe fail
    _, gpu = _gpu_3(smi=smi)
    assert gpu.power_source == "unknown"
    s = gpu.read_sample()
    assert s.power_w == 520.0 and gpu.power_source == "current"  # probed again, now answered


class _Shapeless(FakeAmdsmi):
    """Answers the clock and activity calls without the keys amdsmi documents."""

    def amdsmi_get_clock_info(self, processor_handle: Any, clock_type: Any) -> dict[str, Any]:
        super().amdsmi_get_clock_info(processor_handle, clock_type)
        return {"cur_clk": 1500}

    def amdsmi_get_gpu_activity(self, processor_handle: Any) -> Any:
        super().amdsmi_get_gpu_activity(processor_handle)
        return None


def test_a_reading_of_the_wrong_shape_is_a_counted_failure_not_a_crash() -> None:
    _, gpu = _gpu_3(smi=_Shapeless([mi300x()]))
    s = gpu.read_sample()
    assert math.isnan(s.sm_clock_mhz) and math.isnan(s.mem_clock_mhz) and math.isnan(s.util_pct)
    assert s.read_errors == 3 and gpu.read_error_count == 3
    assert gpu.unsupported_fields == frozenset({"power_average"})  # failures are not capability
    assert gpu.read_sample().read_errors == 3 and gpu.read_error_count == 6


def test_an_unsupported_call_is_a_capability_and_another_failure_is_counted() -> None:
    fake, gpu = _gpu_3()
    fake.cards[0].fail["amdsmi_get_gpu_activity"] = AMDSMI_STATUS_NOT_SUPPORTED
    fake.cards[0].fail["amdsmi_get_temp_metric"] = AMDSMI_STATUS_UNKNOWN_ERROR
    first = gpu.read_sample()
    assert math.isnan(first.util_pct) and math.isnan(first.temp_c) and first.read_errors == 1
    fake.cards[0].fail.clear()
    second = gpu.read_sample()
    assert second.temp_c == 62.0 and second.read_errors == 0
    assert math.isnan(second.util_pct)  # not asked again
    assert "util" in gpu.unsupported_fields and "temp" not in gpu.unsupported_fields


def test_an_energy_counter_without_its_resolution_is_unsupported() -> None:
    fake, gpu = _gpu_3(mi300x(energy_resolution_uj="N/A"))  # type: ignore[arg-type]
    assert math.isnan(gpu.read_sample().energy_mj)
    assert "energy" in gpu.unsupported_fields and gpu.read_sample().read_errors == 0
    assert fake.calls_to("amdsmi_get_energy_count") == 1


def test_a_die_reported_by_another_never_reads_its_energy() -> None:
    fake, gpu = _gpu_3()
    gpu.power_reported_by = 0
    s = gpu.read_sample()
    assert math.isnan(s.energy_mj) and s.read_errors == 0
    assert fake.calls_to("amdsmi_get_energy_count") == 0


def test_the_sample_carries_the_cards_index_and_no_pstate() -> None:
    _, gpu = _gpu_3()
    s = gpu.read_sample()
    assert s.gpu_index == 3 and s.pstate is None
