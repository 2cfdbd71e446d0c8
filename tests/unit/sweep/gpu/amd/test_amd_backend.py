"""The AMD cards of a machine (``sweep/gpu/amd/amd_backend.py``) against the fake amdsmi:
amdsmi's start and shutdown, global indices after the NVIDIA cards, one object per card, and
the MI250X's second die marked as reported by the first."""

from __future__ import annotations

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.amd import amd_backend
from powersweep.sweep.gpu.amd.amd_backend import AmdsmiBackend
from tests.fakes.fake_amdsmi import (
    AMDSMI_STATUS_NOT_SUPPORTED,
    AMDSMI_STATUS_UNKNOWN_ERROR,
    FakeAmdsmi,
    mi210,
    mi250x_dies,
    mi300x,
)


def test_without_a_module_the_installed_amdsmi_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeAmdsmi([mi300x()])
    monkeypatch.setattr(amd_backend, "import_amdsmi", lambda: fake)
    assert AmdsmiBackend().device_count() == 1
    assert fake.init_count == 1


def test_cards_take_their_global_index_from_first_index() -> None:
    fake = FakeAmdsmi([mi300x(), mi210()])
    backend = AmdsmiBackend(fake, first_index=3)
    second = backend.gpu(1)
    assert second.index == 4
    assert second.identity().index == 4
    assert backend.gpu(1) is second
    with pytest.raises(UsageError, match=r"^there is no GPU 5: amdsmi sees AMD GPUs 0-1$"):
        backend.gpu(2)
    empty = AmdsmiBackend(FakeAmdsmi([]), first_index=2)
    assert empty.device_count() == 0
    with pytest.raises(UsageError, match=r"^there is no GPU 2: amdsmi sees no AMD GPU$"):
        empty.gpu(0)


def test_a_failed_start_names_the_driver() -> None:
    fake = FakeAmdsmi(fail={"amdsmi_init": AMDSMI_STATUS_UNKNOWN_ERROR})
    with pytest.raises(GpuError, match=r"^amdsmi cannot start: is the amdgpu driver loaded\? "):
        AmdsmiBackend(fake)


def test_a_card_list_that_cannot_be_read_shuts_amdsmi_down_again() -> None:
    fake = FakeAmdsmi(fail={"amdsmi_get_processor_handles": AMDSMI_STATUS_NOT_SUPPORTED})
    with pytest.raises(GpuError, match=r"^amdsmi cannot list the GPUs \(amdsmi: AMDSMI_STATUS_NOT"):
        AmdsmiBackend(fake)
    assert fake.shutdown_calls == 1 and fake.init_count == 0


def test_a_closed_backend_refuses_and_closing_twice_shuts_down_once() -> None:
    fake = FakeAmdsmi([mi300x()])
    with AmdsmiBackend(fake) as backend:
        backend.gpu(0)
    for call in (backend.device_count, lambda: backend.gpu(0)):
        with pytest.raises(GpuError, match="the amdsmi backend is closed"):
            call()
    backend.close()
    assert fake.shutdown_calls == 1


def test_the_second_die_is_marked_even_when_it_is_opened_first() -> None:
    backend = AmdsmiBackend(FakeAmdsmi(mi250x_dies()))
    second = backend.gpu(1)  # opens the first die to compare
    assert second.power_reported_by == 0
    assert backend.gpu(0).power_reported_by is None


def test_a_second_die_that_reads_its_own_draw_is_not_marked() -> None:
    first, second = mi250x_dies()
    second.average_power_w = 380
    backend = AmdsmiBackend(FakeAmdsmi([first, second]))
    assert backend.gpu(1).power_reported_by is None


def test_a_die_whose_name_cannot_be_read_is_left_unmarked() -> None:
    first, second = mi250x_dies()
    second.fail["amdsmi_get_gpu_asic_info"] = AMDSMI_STATUS_UNKNOWN_ERROR
    backend = AmdsmiBackend(FakeAmdsmi([first, second]))
    assert backend.gpu(1).power_reported_by is None


def test_cards_at_an_odd_index_that_are_not_mi250_dies_are_not_marked() -> None:
    idle = mi210(average_power_w=0)  # an idle MI210 next to a busy one reads 0 W too
    backend = AmdsmiBackend(FakeAmdsmi([mi210(), idle]))
    assert backend.gpu(1).power_reported_by is None
