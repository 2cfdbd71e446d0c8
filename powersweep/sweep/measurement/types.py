"""The value types of the measurement protocol: how every point is measured, how it settled,
and what the progress callback is told."""

from __future__ import annotations

from dataclasses import dataclass, field

from powersweep.sweep.options import MeasureOptions, SafetyOptions
from powersweep.sweep.sampling.thermal import ThermalWait


@dataclass(frozen=True)
class PointProgress:
    """Reported to the progress callback after each point (``label`` names a clock point,
    ``reason`` why it was measured: ``reread`` is the run's last)."""

    index: int
    total: int
    cap_w: float
    status: str
    tps: float
    power_w: float
    tps_per_w: float
    label: str = ""
    reason: str = ""


@dataclass(frozen=True)
class Protocol:
    """How every point is measured: the option groups as the CLI built them.

    Attributes:
        load_mode: ``decode-single``, ``decode-concurrent`` or ``prefill-heavy``.
        measure: Settling, the wait for a steady temperature, the sampler's interval and the
            windows.
        safety: Whether anything may be set (``observe_only``) and how many points in a row
            may fail before the sweep stops (``max_failed_caps``).
    """

    load_mode: str
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    safety: SafetyOptions = field(default_factory=SafetyOptions)


@dataclass(frozen=True)
class Settled:
    """How a point settled before it was measured.

    Attributes:
        settle_s: Run seconds until draw and clock were stable (``settle_s`` in caps.csv).
        thermal: The wait for a steady temperature after that; None when there was none.
    """

    settle_s: float
    thermal: ThermalWait | None = None

    @property
    def thermal_wait_s(self) -> float:
        """Run seconds waited for a steady temperature (0 when there was no wait)."""
        return self.thermal.waited_s if self.thermal is not None else 0.0
