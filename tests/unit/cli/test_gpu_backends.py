"""powersweep.cli.gpu_backends: the GPU backends the composition root builds rigs on. ``--backend``
opens one library or, with ``auto``, those that see cards (NVIDIA's first, one error naming both
causes when neither starts, the unused library closed); a simulated rig must be driven by its
cards' vendor; simulated AMD cards go behind the amdsmi backend, numbered after the NVIDIA ones.
(Two libraries with cards each are in ``test_apply_amd.py``.)"""

from __future__ import annotations

from typing import Any

import pytest

from powersweep.cli import gpu_backends
from powersweep.clock import ManualClock
from powersweep.errors import GpuError, UsageError
from powersweep.sim.profiles import get_profile
from powersweep.sim.sim_rig import SimRig
from powersweep.sweep.gpu.amd import AmdsmiBackend
from powersweep.sweep.gpu.combined import CombinedBackend
from powersweep.sweep.gpu.nvml import NvmlBackend
from tests.fakes.fake_amdsmi import FakeAmdsmi, mi300x
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml

NO_NVML = "NVML not available: is the NVIDIA driver installed? (test)"


def _libraries(
    monkeypatch: pytest.MonkeyPatch, nvml: FakeNvml | None, amd: FakeAmdsmi | None
) -> list[Any]:
    """The libraries ``open_backend`` starts (None: it cannot start); the backends it opened."""
    opened: list[Any] = []

    def open_nvml() -> NvmlBackend:
        if nvml is None:
            raise GpuError(NO_NVML)
        opened.append(NvmlBackend(nvml=nvml))
        return opened[-1]

    def open_amd(**kw: Any) -> AmdsmiBackend:
        if amd is None:
            raise GpuError("amdsmi cannot start: is the amdgpu driver loaded? (test)")
        opened.append(AmdsmiBackend(amdsmi=amd, **kw))
        return opened[-1]

    monkeypatch.setattr("powersweep.sweep.gpu.nvml.NvmlBackend", open_nvml)
    monkeypatch.setattr(gpu_backends, "AmdsmiBackend", open_amd)
    return opened


def test_an_unknown_backend_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"^--backend must be auto, nvml or amdsmi, not 'cuda'$"):
        gpu_backends.open_backend("cuda")


def test_a_named_library_is_opened_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    amd = FakeAmdsmi([mi300x()])
    opened = _libraries(monkeypatch, FakeNvml(devices=[FakeDevice()]), amd)
    backend, kind = gpu_backends.open_backend("amdsmi")
    assert kind == "amdsmi" and isinstance(backend, AmdsmiBackend) and len(opened) == 1
    backend.close()
    backend, kind = gpu_backends.open_backend("nvml")
    assert kind == "nvml" and isinstance(backend, NvmlBackend)
    backend.close()


def test_a_named_library_that_cannot_start_is_its_own_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _libraries(monkeypatch, None, FakeAmdsmi([mi300x()]))
    with pytest.raises(GpuError, match="NVML not available") as caught:
        gpu_backends.open_backend("nvml")
    assert str(caught.value).endswith("add --simulate rtx3090-air to run on the simulated rig)")


def test_auto_without_either_library_names_both_causes(monkeypatch: pytest.MonkeyPatch) -> None:
    _libraries(monkeypatch, None, None)
    with pytest.raises(GpuError) as caught:
        gpu_backends.open_backend("auto")
    assert str(caught.value) == (
        f"no GPU library could start: {NO_NVML}; amdsmi cannot start: is the amdgpu driver "
        "loaded? (test) (no GPU here? add --simulate rtx3090-air to run on the simulated rig)"
    )


def test_auto_with_amdsmi_alone_takes_it_from_index_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    _libraries(monkeypatch, None, FakeAmdsmi([mi300x()]))
    backend, kind = gpu_backends.open_backend("auto")
    assert kind == "amdsmi" and backend.gpu(0).index == 0
    backend.close()


def test_auto_with_nvml_alone_closes_amdsmi_again(monkeypatch: pytest.MonkeyPatch) -> None:
    amd = FakeAmdsmi([])
    _libraries(monkeypatch, FakeNvml(devices=[FakeDevice()]), amd)
    backend, kind = gpu_backends.open_backend("auto")
    assert kind == "nvml" and backend.device_count() == 1
    assert amd.init_count == 0 and amd.shutdown_calls == 1
    backend.close()


def test_auto_with_two_libraries_but_no_card_keeps_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml, amd = FakeNvml(devices=[]), FakeAmdsmi([])
    _libraries(monkeypatch, nvml, amd)
    backend, kind = gpu_backends.open_backend("auto")
    # neither sees a card: NVML's (empty) backend says so later, amdsmi is shut down
    assert kind == "nvml" and backend.device_count() == 0 and amd.init_count == 0
    backend.close()


def test_auto_numbers_the_amd_cards_after_the_nvidia_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml(devices=[FakeDevice(), FakeDevice(uuid="GPU-b")])
    _libraries(monkeypatch, nvml, FakeAmdsmi([mi300x()]))
    backend, kind = gpu_backends.open_backend("auto")
    assert kind == "auto" and isinstance(backend, CombinedBackend)
    assert backend.gpu(2).index == 2 and backend.gpu(2).identity().vendor == "amd"
    backend.close()


@pytest.mark.parametrize(
    ("kind", "names", "refused"),
    [
        ("nvml", ["rtx4090-air", "mi300x"], "mi300x"),
        ("amdsmi", ["rtx4090-air", "mi300x"], "rtx4090-air"),
        ("amdsmi", ["h100-sxm", "rtx3090-air"], "h100-sxm, rtx3090-air"),
    ],
)
def test_a_simulated_card_of_the_other_vendor_is_refused_by_name(
    kind: str, names: list[str], refused: str
) -> None:
    with pytest.raises(UsageError) as caught:
        gpu_backends.check_sim_backend(kind, [get_profile(n) for n in names])
    assert str(caught.value) == (
        f"--backend {kind} cannot drive the simulated {refused}: drop --backend (auto) or "
        "simulate cards of that vendor"
    )


def test_a_simulated_rig_of_its_backends_vendor_or_auto_passes() -> None:
    gpu_backends.check_sim_backend("nvml", [get_profile("h100-sxm")])
    gpu_backends.check_sim_backend("amdsmi", [get_profile("mi300x"), get_profile("rx7900xtx")])
    gpu_backends.check_sim_backend("auto", [get_profile("h100-sxm"), get_profile("mi300x")])


def _rig(*names: str) -> tuple[SimRig, ManualClock]:
    clock = ManualClock()
    return SimRig([get_profile(n) for n in names], clock), clock


def test_simulated_nvidia_cards_are_the_rig_itself() -> None:
    rig, clock = _rig("rtx3090-air", "rtx4090-air")
    assert gpu_backends.vendor_backend(rig, clock) is rig


def test_simulated_amd_cards_are_read_through_the_amdsmi_backend() -> None:
    rig, clock = _rig("mi300x")
    backend = gpu_backends.vendor_backend(rig, clock)
    assert isinstance(backend, AmdsmiBackend)
    ident = backend.gpu(0).identity()
    assert ident.vendor == "amd" and backend.gpu(0).index == 0
    backend.close()


def test_a_mixed_rig_numbers_its_amd_cards_after_the_nvidia_ones() -> None:
    rig, clock = _rig("rtx4090-air", "mi300x", "rx7900xtx")
    backend = gpu_backends.vendor_backend(rig, clock)
    assert isinstance(backend, CombinedBackend) and backend.device_count() == 3
    assert [backend.gpu(i).identity().vendor for i in range(3)] == ["nvidia", "amd", "amd"]
    assert [backend.gpu(i).index for i in range(3)] == [0, 1, 2]
    assert backend.gpu(0) is rig.gpu(0)  # the NVIDIA card is the rig's own
    backend.close()


def test_an_amd_card_listed_before_an_nvidia_one_is_refused() -> None:
    rig, clock = _rig("mi300x", "rtx4090-air")
    with pytest.raises(UsageError, match=r"list the NVIDIA cards before the AMD ones .*mi300x$"):
        gpu_backends.vendor_backend(rig, clock)
