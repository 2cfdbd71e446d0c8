"""The value types of the measurement protocol: how every point is measured, how it settled,
and what the progress callback is told."""

from __future__ import annotations

from dataclasses import dataclass, field

from powersweep.sweep.sampling.thermal import DEFAULT_THERMAL_WAIT_S, ThermalWait
from powersweep.sweep.sampling.windows import WindowPolicy


@dataclass(frozen=True)
class PointProgress:
    """Reported to the progress callback after each point (``label`` names a clock point)."""

    index: int
    total: int
    cap_w: float
    status: str
    tps: float
    power_w: float
    tps_per_w: float
    label: str = ""


@dataclass(frozen=True)
class Protocol:
    """How every point is measured.

    Attributes:
        load_mode: ``decode-single``, ``decode-concurrent`` or ``prefill-heavy``.
        settle_s: Run seconds the card may take to settle at a new point (the most, in auto).
        settle_mode: ``auto`` measures once readings are stable under load; ``fixed`` always
            waits ``settle_s`` (under load too).
        sample_interval_s: Sampler interval, run seconds.
        max_failed: Stop after this many points in a row failed.
        observe_only: Never set anything: measure what is in force.
        thermal_wait_s: The most run seconds to wait, after settling, for the temperature to
            stop drifting (0: no wait).
        windows: How long each point measures (sequential windows).
    """

    load_mode: str
    settle_s: float = 3.0
    settle_mode: str = "auto"
    sample_interval_s: float = 0.5
    max_failed: int = 3
    observe_only: bool = False
    thermal_wait_s: float = DEFAULT_THERMAL_WAIT_S
    windows: WindowPolicy = field(default_factory=WindowPolicy)


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
