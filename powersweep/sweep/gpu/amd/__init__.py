"""The AMD backend: AMD GPUs (Instinct, Radeon) through ``amdsmi``, the Python wrapper of
ROCm's libamd_smi.

The reasoning: docs/amd.md, "powersweep.sweep.gpu.amd".
"""

from powersweep.sweep.gpu.amd.amd_backend import AmdsmiBackend
from powersweep.sweep.gpu.amd.amd_gpu import AmdsmiGpu
from powersweep.sweep.gpu.amd.amdsmi_api import AMDSMI_API_USED, INSTALL_HINT, import_amdsmi

__all__ = ["AMDSMI_API_USED", "INSTALL_HINT", "AmdsmiBackend", "AmdsmiGpu", "import_amdsmi"]
