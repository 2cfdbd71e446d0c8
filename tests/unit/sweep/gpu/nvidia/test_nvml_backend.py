"""The NVIDIA backend's machine-wide part (``sweep/gpu/nvidia/nvml_backend.py``): NVML's start
and shutdown, counting and opening cards, one object per card, and one-line errors."""

from __future__ import annotations

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.nvidia import nvml_backend
from powersweep.sweep.gpu.nvidia.nvml_backend import NvmlBackend
from powersweep.sweep.gpu.nvidia.nvml_gpu import NvmlGpu
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml


def test_without_a_module_the_installed_pynvml_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml()
    monkeypatch.setattr(nvml_backend, "load_pynvml", lambda: fake)
    backend = NvmlBackend()
    assert fake.init_count == 1
    assert backend.device_count() == 1


def test_init_failure_names_the_driver_and_nvmls_reason() -> None:
    fake = FakeNvml(fail={"nvmlInit": fake_pynvml.NVML_ERROR_DRIVER_NOT_LOADED})
    with pytest.raises(GpuError) as info:
        NvmlBackend(nvml=fake)
    assert str(info.value) == (
        "NVML not available: is the NVIDIA driver installed? (Driver Not Loaded)"
    )


def test_each_card_is_opened_once_and_the_same_object_is_handed_out() -> None:
    fake = FakeNvml([FakeDevice(uuid="GPU-a"), FakeDevice(uuid="GPU-b")])
    backend = NvmlBackend(nvml=fake)
    first = backend.gpu(1)
    assert isinstance(first, NvmlGpu) and first.index == 1
    assert backend.gpu(1) is first
    assert fake.calls_to("nvmlDeviceGetHandleByIndex") == 1
    assert backend.gpu(0) is not first
    assert first.identity().uuid == "GPU-b"


@pytest.mark.parametrize(
    ("devices", "index", "seen"),
    [(2, 2, "GPUs 0-1"), (2, -1, "GPUs 0-1"), (0, 0, "no GPU")],
)
def test_an_index_nvml_does_not_see_is_a_usage_error(devices: int, index: int, seen: str) -> None:
    backend = NvmlBackend(nvml=FakeNvml([FakeDevice() for _ in range(devices)]))
    with pytest.raises(UsageError, match=rf"^there is no GPU {index}: NVML sees {seen}$"):
        backend.gpu(index)


def test_nvml_failures_while_counting_or_opening_are_gpu_errors() -> None:
    fake = FakeNvml(fail={"nvmlDeviceGetCount": fake_pynvml.NVML_ERROR_UNKNOWN})
    with pytest.raises(GpuError, match=r"^cannot count GPUs: NVML error: Unknown Error$"):
        NvmlBackend(nvml=fake).device_count()
    fake = FakeNvml(fail={"nvmlDeviceGetHandleByIndex": fake_pynvml.NVML_ERROR_GPU_IS_LOST})
    with pytest.raises(GpuError, match=r"^cannot open GPU 0: NVML error: GPU is lost$"):
        NvmlBackend(nvml=fake).gpu(0)


def test_a_closed_backend_refuses_even_a_card_it_had_opened() -> None:
    fake = FakeNvml()
    backend = NvmlBackend(nvml=fake)
    backend.gpu(0)
    backend.close()
    for call in (backend.device_count, lambda: backend.gpu(0)):
        with pytest.raises(GpuError, match="the NVML backend is closed"):
            call()
    backend.close()
    assert fake.shutdown_calls == 1


def test_a_failing_shutdown_is_swallowed_and_the_context_manager_closes() -> None:
    fake = FakeNvml(fail={"nvmlShutdown": fake_pynvml.NVML_ERROR_UNKNOWN})
    with NvmlBackend(nvml=fake) as backend:
        assert backend.device_count() == 1
    assert fake.calls_to("nvmlShutdown") == 1
    with pytest.raises(GpuError, match="closed"):
        backend.device_count()
