"""An operating point of a sweep: a power limit, and optionally the clock locks held under it.

Every sweep is a plan of such points (the power axis varies the limit, the clock axes the locks);
one measurement protocol measures any of them (:mod:`powersweep.sweep.measurement`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SweepPoint:
    """One operating point of a sweep: a power limit, and the clock locks held under it.

    Attributes:
        cap_w: Power limit to set (W per GPU); None keeps the limit in force.
        sm_lock_mhz: SM lock (min = max), None: unlocked.
        mem_lock_mhz: Memory lock, None: unlocked.
    """

    cap_w: float | None = None
    sm_lock_mhz: float | None = None
    mem_lock_mhz: float | None = None

    @property
    def locks_clocks(self) -> bool:
        """True when the point locks a clock."""
        return self.sm_lock_mhz is not None or self.mem_lock_mhz is not None

    def label(self) -> str:
        """``SM 1410 MHz / mem 9001 MHz`` (or ``250 W`` for a bare cap)."""
        parts = []
        if self.sm_lock_mhz is not None:
            parts.append(f"SM {self.sm_lock_mhz:g} MHz")
        if self.mem_lock_mhz is not None:
            parts.append(f"mem {self.mem_lock_mhz:g} MHz")
        if not parts:
            return f"{self.cap_w:g} W" if self.cap_w is not None else "limit in force"
        return " / ".join(parts)

    @property
    def key(self) -> tuple[float | None, float | None, float | None]:
        """``(cap_w, sm_lock_mhz, mem_lock_mhz)``: one status and one row history per point."""
        return (self.cap_w, self.sm_lock_mhz, self.mem_lock_mhz)

    @property
    def position(self) -> float:
        """Where the point sits on its axis: the SM lock (or the memory lock) of a clock point,
        the cap of a power point; nearby points' figures are compared by it."""
        for value in (self.sm_lock_mhz, self.mem_lock_mhz, self.cap_w):
            if value is not None:
                return float(value)
        return math.nan

    def to_dict(self) -> dict[str, Any]:
        """``run.json`` form (``points_planned`` / ``points_done``)."""
        return {
            "cap_w": self.cap_w,
            "sm_lock_mhz": self.sm_lock_mhz,
            "mem_lock_mhz": self.mem_lock_mhz,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepPoint:
        """Parse the ``run.json`` form."""

        def num(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, int | float) else None

        return cls(num("cap_w"), num("sm_lock_mhz"), num("mem_lock_mhz"))
