"""The NVIDIA backend: the machine's GPUs through NVML (implements ``GpuBackend``)."""

from __future__ import annotations

import contextlib
from types import ModuleType

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.nvidia.nvml_api import load_pynvml
from powersweep.sweep.gpu.nvidia.nvml_gpu import NvmlGpu


class NvmlBackend:
    """NVIDIA GPUs through NVML (implements :class:`~powersweep.sweep.gpu.GpuBackend`).

    Initializes NVML at construction and shuts it down in :meth:`close`. Usable as a context
    manager.

    Args:
        nvml: The ``pynvml`` module to use; None imports the installed nvidia-ml-py. Tests pass
            a fake with the same surface.

    Raises:
        GpuError: nvidia-ml-py is missing, or NVML cannot start (no driver, no library).
    """

    def __init__(self, nvml: ModuleType | None = None) -> None:
        if nvml is None:
            nvml = load_pynvml()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise GpuError(f"NVML not available: is the NVIDIA driver installed? ({exc})") from exc
        self._nvml: ModuleType = nvml
        self._closed = False
        self._gpus: dict[int, NvmlGpu] = {}

    def __enter__(self) -> NvmlBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def device_count(self) -> int:
        """Number of GPUs NVML sees.

        Raises:
            GpuError: The backend is closed or NVML failed.
        """
        self._check_open()
        nvml = self._nvml
        try:
            return int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            raise GpuError(f"cannot count GPUs: NVML error: {exc}") from exc

    def gpu(self, index: int) -> NvmlGpu:
        """Return the GPU at NVML ``index`` (the same object on every call).

        Raises:
            UsageError: No GPU has that index.
            GpuError: The backend is closed or NVML failed.
        """
        cached = self._gpus.get(index)
        if cached is not None:
            self._check_open()
            return cached
        count = self.device_count()
        if not 0 <= index < count:
            seen = f"GPUs 0-{count - 1}" if count > 0 else "no GPU"
            raise UsageError(f"there is no GPU {index}: NVML sees {seen}")
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            raise GpuError(f"cannot open GPU {index}: NVML error: {exc}") from exc
        gpu = NvmlGpu(nvml, handle, index)
        self._gpus[index] = gpu
        return gpu

    def close(self) -> None:
        """Free the cards' event sets and shut NVML down; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        # Each card's Xid event set is NVML's to free, so it goes before the shutdown.
        for gpu in self._gpus.values():
            gpu.close()
        self._gpus.clear()
        nvml = self._nvml
        # Shutting down is cleanup at the end of a run: nothing a user could do about a failure.
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()

    def _check_open(self) -> None:
        if self._closed:
            raise GpuError("the NVML backend is closed")
