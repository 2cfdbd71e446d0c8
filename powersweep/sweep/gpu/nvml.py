"""The real GPU backend for NVIDIA cards: NVML, through the ``pynvml`` module of nvidia-ml-py.

The backend lives in :mod:`powersweep.sweep.gpu.nvidia` (``api`` is its only importer of
``pynvml``, lazily, so the package imports on machines without the NVIDIA driver); this module
names its public parts, so callers and tests import ``powersweep.sweep.gpu.nvml`` whatever the
split.

The reasoning: docs/architecture.md, "powersweep.sweep.gpu.nvml".
"""

from __future__ import annotations

from powersweep.sweep.gpu.nvidia.nvml_api import NVML_API_USED
from powersweep.sweep.gpu.nvidia.nvml_backend import NvmlBackend
from powersweep.sweep.gpu.nvidia.nvml_gpu import ACCEPT_TOLERANCE_W, NvmlGpu
from powersweep.sweep.gpu.nvidia.reads import PowerSource
from powersweep.sweep.gpu.protocol import CLOCK_EVENT_APP_CLOCKS

__all__ = [
    "ACCEPT_TOLERANCE_W",
    "CLOCK_EVENT_APP_CLOCKS",
    "NVML_API_USED",
    "NvmlBackend",
    "NvmlGpu",
    "PowerSource",
]
