"""powersweep.sweep.gpu.amd.amd_gpu: one AMD card's identity, power caps and processes over the
fake amdsmi, edge by edge. Caps that cannot be a range (N/A, negative, inverted) and a read that
fails, a guest told why, a cap that cannot be read back, each refusal's one line (root, guest,
not allowed, any other failure), the label without a name, and the process list's odd entries.
(The common paths are in ``test_amd.py``.)"""

from __future__ import annotations

import math
from typing import Any

import pytest

from powersweep.errors import GpuError
from powersweep.sim.amdsmi import AmdCard, FakeAmdsmi
from powersweep.sim.amdsmi_types import (
    AMDSMI_STATUS_NO_PERM,
    AMDSMI_STATUS_NOT_SUPPORTED,
    AMDSMI_STATUS_UNKNOWN_ERROR,
    AmdSmiLibraryException,
    AmdSmiVirtualizationMode,
)
from powersweep.sweep.gpu.amd.amd_gpu import AmdsmiGpu
from tests.fakes.fake_amdsmi import mi300x, rx7900xtx

LABEL = "GPU 0 (AMD Instinct MI300X)"
UNKNOWN = "(amdsmi: AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred)"


def _amdsmi_gpu(
    card: AmdCard | None = None, smi: FakeAmdsmi | None = None
) -> tuple[FakeAmdsmi, Any]:
    fake = smi or FakeAmdsmi([card or mi300x()])
    fake.amdsmi_init()
    return fake, AmdsmiGpu(fake, fake.cards[0], 0)


def test_a_card_that_reports_no_vram_size_reads_zero() -> None:
    class NoVram(FakeAmdsmi):
        def amdsmi_get_gpu_vram_info(self, processor_handle: Any) -> dict[str, Any]:
            return {**super().amdsmi_get_gpu_vram_info(processor_handle), "vram_size": "N/A"}

    _, gpu = _amdsmi_gpu(smi=NoVram([mi300x()]))
    ident = gpu.identity()
    assert ident.vram_mib == 0 and ident.name == "AMD Instinct MI300X" and ident.index == 0


@pytest.mark.parametrize(
    "changes",
    [
        {"min_cap_uw": -1},  # a negative floor
        {"min_cap_uw": 500_000_000, "max_cap_uw": 400_000_000},  # floor above the top
        {"default_cap_uw": 0},  # no default
        {"cap_uw": 0},  # no cap in force
    ],
)
def test_caps_that_are_no_range_are_a_card_without_a_settable_cap(changes: dict[str, Any]) -> None:
    _, gpu = _amdsmi_gpu(mi300x(**changes))
    with pytest.raises(GpuError) as caught:
        gpu.envelope()
    message = str(caught.value)
    assert message.startswith(f"{LABEL} has no settable power cap (caps reported as N/A: [")
    assert message.endswith("uW): powersweep cannot sweep it")


def test_a_cap_read_that_fails_names_the_card_and_the_cause() -> None:
    _, gpu = _amdsmi_gpu(mi300x(fail={"amdsmi_get_power_cap_info": AMDSMI_STATUS_UNKNOWN_ERROR}))
    with pytest.raises(GpuError) as caught:
        gpu.envelope()
    assert str(caught.value) == f"cannot read the power cap of {LABEL} {UNKNOWN}"


def test_a_guest_without_a_cap_is_told_the_host_owns_it() -> None:
    card = mi300x(power_capped=False, virtualization_mode=AmdSmiVirtualizationMode.GUEST)
    _, gpu = _amdsmi_gpu(card)
    with pytest.raises(GpuError) as caught:
        gpu.envelope()
    assert str(caught.value) == (
        f"{LABEL} has no settable power cap (a VM guest: the host owns the cap) "
        "(amdsmi: AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported): powersweep cannot "
        "sweep it"
    )


@pytest.mark.parametrize("critical", [0, None])
def test_no_positive_critical_temperature_is_unknown(critical: int | None) -> None:
    _, gpu = _amdsmi_gpu(mi300x(hotspot_critical_c=critical))
    assert math.isnan(gpu.slowdown_temp_c())


class _CapUnreadableAfterSet(FakeAmdsmi):
    """Takes a cap, then cannot read the cap back."""

    def amdsmi_set_power_cap(self, processor_handle: Any, sensor_ind: int, cap: int) -> None:
        super().amdsmi_set_power_cap(processor_handle, sensor_ind, cap)
        processor_handle.fail["amdsmi_get_power_cap_info"] = AMDSMI_STATUS_UNKNOWN_ERROR


def test_a_cap_that_cannot_be_read_back_is_not_accepted() -> None:
    _, gpu = _amdsmi_gpu(smi=_CapUnreadableAfterSet([mi300x()]))
    result = gpu.set_power_limit(500.0)
    assert not result.accepted and math.isnan(result.readback_w)
    assert result.message == f"{LABEL} took the 500 W request but its cap could not be read back"


def test_a_read_back_within_half_a_watt_is_accepted() -> None:
    class Rounding(FakeAmdsmi):
        def _cap_set(self, card: AmdCard, cap_uw: int) -> None:
            card.cap_uw = cap_uw - 400_000  # the card keeps 0.4 W less

    _, gpu = _amdsmi_gpu(smi=Rounding([mi300x()]))
    result = gpu.set_power_limit(500.0)
    assert result.accepted and result.readback_w == 499.6 and result.message == ""


def test_an_invalid_cap_on_a_card_whose_range_cannot_be_read_has_no_hint() -> None:
    class InvalidThenBlind(FakeAmdsmi):
        def amdsmi_set_power_cap(self, processor_handle: Any, sensor_ind: int, cap: int) -> None:
            processor_handle.fail["amdsmi_get_power_cap_info"] = AMDSMI_STATUS_UNKNOWN_ERROR
            raise AmdSmiLibraryException(1)  # AMDSMI_STATUS_INVAL

    _, gpu = _amdsmi_gpu(smi=InvalidThenBlind([mi300x()]))
    result = gpu.set_power_limit(500.0)
    assert not result.accepted and math.isnan(result.readback_w)
    assert result.message == (
        f"{LABEL} rejected a 500 W cap as invalid (amdsmi: AMDSMI_STATUS_INVAL - Invalid "
        "parameters)"
    )


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            AMDSMI_STATUS_NO_PERM,
            f"setting the power cap of {LABEL} needs root: re-run with sudo (or as root) "
            "(amdsmi: AMDSMI_STATUS_NO_PERM - Permission Denied)",
        ),
        (
            AMDSMI_STATUS_NOT_SUPPORTED,
            f"{LABEL} does not allow setting the power cap (amdsmi: AMDSMI_STATUS_NOT_SUPPORTED "
            "- Feature not supported)",
        ),
        (
            AMDSMI_STATUS_UNKNOWN_ERROR,
            f"setting the power cap of {LABEL} to 500 W failed {UNKNOWN}",
        ),
    ],
)
def test_each_refused_cap_is_one_line_naming_why(code: int, message: str) -> None:
    _, gpu = _amdsmi_gpu(mi300x(fail={"amdsmi_set_power_cap": code}))
    with pytest.raises(GpuError) as caught:
        gpu.set_power_limit(500.0)
    assert str(caught.value) == message


def test_a_card_whose_virtualization_mode_cannot_be_read_is_not_taken_for_a_guest() -> None:
    card = mi300x(
        fail={
            "amdsmi_get_gpu_virtualization_mode": AMDSMI_STATUS_NOT_SUPPORTED,
            "amdsmi_set_power_cap": AMDSMI_STATUS_NO_PERM,
        }
    )
    _, gpu = _amdsmi_gpu(card)
    with pytest.raises(GpuError, match="needs root"):
        gpu.set_power_limit(500.0)


def test_the_label_is_the_index_alone_when_the_name_cannot_be_read() -> None:
    card = rx7900xtx(
        fail={
            "amdsmi_get_gpu_asic_info": AMDSMI_STATUS_UNKNOWN_ERROR,
            "amdsmi_set_power_cap": AMDSMI_STATUS_NOT_SUPPORTED,
        }
    )
    _, gpu = _amdsmi_gpu(card)
    with pytest.raises(GpuError) as caught:
        gpu.set_power_limit(350.0)
    assert str(caught.value).startswith("GPU 0 does not allow setting the power cap (amdsmi:")
    with pytest.raises(GpuError, match=r"^cannot identify GPU 0 \(amdsmi: AMDSMI_STATUS_UNKNOWN"):
        gpu.identity()


def test_the_name_read_for_the_identity_labels_later_messages() -> None:
    fake, gpu = _amdsmi_gpu(rx7900xtx(fail={"amdsmi_set_power_cap": AMDSMI_STATUS_NOT_SUPPORTED}))
    gpu.identity()
    asked = fake.calls_to("amdsmi_get_gpu_asic_info")
    with pytest.raises(GpuError, match=r"^GPU 0 \(AMD Radeon RX 7900 XTX\) does not allow"):
        gpu.set_power_limit(350.0)
    assert fake.calls_to("amdsmi_get_gpu_asic_info") == asked  # the name is kept


def test_processes_skip_entries_without_a_pid_and_read_the_old_memory_key() -> None:
    processes = [
        {"pid": 11, "mem": 512 << 20},  # an older amdsmi: bytes under "mem"
        {"pid": "12", "mem": 1},  # not a pid
        {"name": "no pid"},
        {"pid": 13, "memory_usage": {"vram_mem": "N/A"}},
    ]
    _, gpu = _amdsmi_gpu(mi300x(processes=processes))
    procs = gpu.compute_processes()
    assert procs is not None and [p.pid for p in procs] == [11, 13]
    assert procs[0].used_memory_mib == 512.0 and math.isnan(procs[1].used_memory_mib)


def test_a_card_without_processes_lists_none_rather_than_unknown() -> None:
    _, gpu = _amdsmi_gpu()
    assert gpu.compute_processes() == ()


def test_the_index_given_is_the_cards_index() -> None:
    fake = FakeAmdsmi([mi300x()])
    fake.amdsmi_init()
    gpu = AmdsmiGpu(fake, fake.cards[0], 5)
    assert gpu.index == 5 and gpu.read_sample().gpu_index == 5
    assert gpu.identity().index == 5


def test_an_amd_card_has_no_xids_to_report() -> None:
    _, gpu = _amdsmi_gpu()
    assert gpu.xid_events() is None
