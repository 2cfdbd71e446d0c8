"""An operating point of a sweep: a power limit, and optionally the clock locks held under it
and the SM clock's voltage/frequency offset.

Every sweep is a plan of such points (the power axis varies the limit, the clock axes the locks,
the undervolt axis the offset); one measurement protocol measures any of them
(:mod:`powersweep.sweep.measurement`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from powersweep.runformat import as_float


@dataclass(frozen=True)
class SweepPoint:
    """One operating point of a sweep: a power limit, and the clock locks held under it.

    Attributes:
        cap_w: Power limit to set (W per GPU); None keeps the limit in force.
        sm_lock_mhz: SM lock (min = max), None: unlocked.
        mem_lock_mhz: Memory lock, None: unlocked.
        sm_offset_mhz: SM clock offset on the voltage/frequency curve (the undervolt axis);
            None: the offset in force is left alone.
        mem_offset_mhz: Memory clock offset, NVML's unit (the undervolt search's memory
            phase); None: the offset in force is left alone.
    """

    cap_w: float | None = None
    sm_lock_mhz: float | None = None
    mem_lock_mhz: float | None = None
    sm_offset_mhz: float | None = None
    mem_offset_mhz: float | None = None

    @property
    def locks_clocks(self) -> bool:
        """True when the point locks a clock."""
        return self.sm_lock_mhz is not None or self.mem_lock_mhz is not None

    def label(self) -> str:
        """``SM 1410 MHz / mem 9001 MHz`` (or ``250 W`` for a bare cap); an offset point
        adds it: ``SM 1695 MHz +120 MHz offset``."""
        parts = []
        if self.sm_lock_mhz is not None:
            parts.append(f"SM {self.sm_lock_mhz:g} MHz")
        if self.mem_lock_mhz is not None:
            parts.append(f"mem {self.mem_lock_mhz:g} MHz")
        if self.sm_offset_mhz is not None:
            if not parts and self.cap_w is not None:
                parts.append(f"{self.cap_w:g} W,")
            parts.append(f"{self.sm_offset_mhz:+g} MHz offset")
            if self.mem_offset_mhz is not None:
                parts.append(f"memory {self.mem_offset_mhz:+g} MHz")
            return " ".join(parts)
        if not parts:
            return f"{self.cap_w:g} W" if self.cap_w is not None else "limit in force"
        return " / ".join(parts)

    @property
    def key(self) -> tuple[float | None, ...]:
        """``(cap_w, sm_lock_mhz, mem_lock_mhz[, sm_offset_mhz[, mem_offset_mhz]])``: one
        status and one row history per point."""
        base = (self.cap_w, self.sm_lock_mhz, self.mem_lock_mhz)
        if self.mem_offset_mhz is not None:
            return (*base, self.sm_offset_mhz, self.mem_offset_mhz)
        return base if self.sm_offset_mhz is None else (*base, self.sm_offset_mhz)

    @property
    def position(self) -> float:
        """Where the point sits on its axis: the SM lock (or the memory lock) of a clock point,
        the cap of a power point; nearby points' figures are compared by it."""
        for value in (self.sm_lock_mhz, self.mem_lock_mhz, self.cap_w):
            if value is not None:
                return float(value)
        return math.nan

    def to_dict(self) -> dict[str, Any]:
        """``run.json`` form (``points_planned`` / ``points_done``; the offset only when set)."""
        out: dict[str, Any] = {
            "cap_w": self.cap_w,
            "sm_lock_mhz": self.sm_lock_mhz,
            "mem_lock_mhz": self.mem_lock_mhz,
        }
        if self.sm_offset_mhz is not None:
            out["sm_offset_mhz"] = self.sm_offset_mhz
        if self.mem_offset_mhz is not None:
            out["mem_offset_mhz"] = self.mem_offset_mhz
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepPoint:
        """Parse the ``run.json`` form."""
        return cls(
            as_float(data.get("cap_w"), None),
            as_float(data.get("sm_lock_mhz"), None),
            as_float(data.get("mem_lock_mhz"), None),
            as_float(data.get("sm_offset_mhz"), None),
            as_float(data.get("mem_offset_mhz"), None),
        )
