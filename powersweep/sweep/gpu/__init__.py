"""GPU backends: the :class:`Gpu` protocol every backend implements, and one module per vendor.

``protocol`` holds the interface and its value types (re-exported here); ``nvml`` names the
NVIDIA backend (``nvidia/``, whose ``api`` is the only module of powersweep that imports
``pynvml``). A backend may import the base modules (``powersweep.errors``,
``powersweep.clock``) and nothing else of the package.
"""

from powersweep.sweep.gpu.protocol import (
    CLOCK_EVENT_APP_CLOCKS,
    CLOCK_EVENT_DISPLAY_CLOCKS,
    CLOCK_EVENT_GPU_IDLE,
    CLOCK_EVENT_HW_POWER_BRAKE,
    CLOCK_EVENT_HW_SLOWDOWN,
    CLOCK_EVENT_HW_THERMAL,
    CLOCK_EVENT_SW_POWER_CAP,
    CLOCK_EVENT_SW_THERMAL,
    CLOCK_EVENT_SYNC_BOOST,
    MAX_CARD_W,
    MAX_CLOCK_MHZ,
    NAN,
    POWER_EVENT_MASK,
    THERMAL_EVENT_MASK,
    ClockOffset,
    Gpu,
    GpuBackend,
    GpuIdentity,
    GpuProcess,
    GpuSample,
    LockedClocks,
    LockResult,
    PowerEnvelope,
    SetLimitResult,
    SupportedClocks,
)

__all__ = [
    "CLOCK_EVENT_APP_CLOCKS",
    "CLOCK_EVENT_DISPLAY_CLOCKS",
    "CLOCK_EVENT_GPU_IDLE",
    "CLOCK_EVENT_HW_POWER_BRAKE",
    "CLOCK_EVENT_HW_SLOWDOWN",
    "CLOCK_EVENT_HW_THERMAL",
    "CLOCK_EVENT_SW_POWER_CAP",
    "CLOCK_EVENT_SW_THERMAL",
    "CLOCK_EVENT_SYNC_BOOST",
    "MAX_CARD_W",
    "MAX_CLOCK_MHZ",
    "NAN",
    "POWER_EVENT_MASK",
    "THERMAL_EVENT_MASK",
    "ClockOffset",
    "Gpu",
    "GpuBackend",
    "GpuIdentity",
    "GpuProcess",
    "GpuSample",
    "LockResult",
    "LockedClocks",
    "PowerEnvelope",
    "SetLimitResult",
    "SupportedClocks",
]
