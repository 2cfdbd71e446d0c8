"""The AMD GPUs of a machine through amdsmi: init and shutdown, enumeration, the MI250X dies."""

from __future__ import annotations

import contextlib
from types import ModuleType

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.amd.amd_gpu import AmdsmiGpu
from powersweep.sweep.gpu.amd.amdsmi_api import cause, import_amdsmi


class AmdsmiBackend:
    """AMD GPUs through amdsmi (implements :class:`~powersweep.sweep.gpu.GpuBackend`).

    Initializes amdsmi for AMD GPUs at construction and shuts it down in :meth:`close`.

    Args:
        amdsmi: The module to use; None imports the installed package. Tests and the simulator
            pass their own with the same surface.
        first_index: powersweep's index of the first AMD card (the NVIDIA cards come first on
            a machine with both).

    Raises:
        GpuError: amdsmi is not installed, cannot load ROCm's library, or cannot start.
    """

    def __init__(self, amdsmi: ModuleType | None = None, *, first_index: int = 0) -> None:
        smi = amdsmi if amdsmi is not None else import_amdsmi()
        try:
            smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
        except smi.AmdSmiException as exc:
            raise GpuError(
                f"amdsmi cannot start: is the amdgpu driver loaded?{cause(exc)}"
            ) from exc
        self._smi: ModuleType = smi
        self._closed = False
        self._first = first_index
        self._gpus: dict[int, AmdsmiGpu] = {}
        try:
            self._handles = list(smi.amdsmi_get_processor_handles())
        except smi.AmdSmiException as exc:
            self.close()
            raise GpuError(f"amdsmi cannot list the GPUs{cause(exc)}") from exc

    def __enter__(self) -> AmdsmiBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def device_count(self) -> int:
        """Number of AMD GPUs amdsmi sees.

        Raises:
            GpuError: The backend is closed.
        """
        self._check_open()
        return len(self._handles)

    def gpu(self, index: int) -> AmdsmiGpu:
        """The AMD GPU at ``index`` among amdsmi's (the same object on every call).

        Raises:
            UsageError: No GPU has that index.
            GpuError: The backend is closed.
        """
        self._check_open()
        cached = self._gpus.get(index)
        if cached is not None:
            return cached
        count = len(self._handles)
        if not 0 <= index < count:
            seen = f"AMD GPUs 0-{count - 1}" if count else "no AMD GPU"
            raise UsageError(f"there is no GPU {self._first + index}: amdsmi sees {seen}")
        gpu = AmdsmiGpu(self._smi, self._handles[index], self._first + index)
        self._gpus[index] = gpu
        self._mark_second_die(index, gpu)
        return gpu

    def close(self) -> None:
        """Shut amdsmi down; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        self._gpus.clear()
        smi = self._smi
        # cleanup at the end of a run: nothing a user could do about a failure
        with contextlib.suppress(smi.AmdSmiException):
            smi.amdsmi_shut_down()

    def _mark_second_die(self, index: int, gpu: AmdsmiGpu) -> None:
        """An MI250X is two dies; the second reads 0 W, its draw is in the first's reading."""
        if index % 2 == 0:
            return
        first = self.gpu(index - 1)
        try:
            names = (gpu.identity().name, first.identity().name)
        except GpuError:
            return
        if not all("MI250" in n for n in names):
            return
        if gpu.read_sample().draw_w == 0.0 and first.read_sample().draw_w > 0:
            gpu.power_reported_by = first.index

    def _check_open(self) -> None:
        if self._closed:
            raise GpuError("the amdsmi backend is closed")
