"""Settings of simulated GPUs that outlive the process that set them, as a driver's do: power
limits, persistence mode, clock locks and the SM clock offset in one JSON file, written
atomically."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

from powersweep.errors import GpuError
from powersweep.safe_files import write_atomic
from powersweep.sim.physics import UNLOCKED, Locks


class LimitStore:
    """Settings of simulated GPUs kept in a JSON file: ``{uuid: watts}`` for power limits,
    ``{"<uuid>:<setting>": value}`` for other settings (persistence mode) and
    ``{"<uuid>#locks": {"sm": MHz or null, "mem": MHz or null, "sm_min": MHz or null}}`` for
    clock locks (``sm_min``: the SM range's bottom, null for min = max),
    ``{"<uuid>#sm_offset_mhz": MHz}`` for the SM clock offset on the voltage/frequency curve and
    ``{"<uuid>#mem_offset_mhz": MHz}`` for the memory clock offset.

    Args:
        path: The state file; created on first write.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def get(self, uuid: str) -> float | None:
        """The stored limit of a GPU, or None."""
        value = self.get_value(uuid)
        return float(value) if isinstance(value, int | float) else None

    def put(self, uuid: str, watts: float) -> None:
        """Store a GPU's limit atomically.

        Raises:
            GpuError: The file cannot be written.
        """
        self.put_value(uuid, watts)

    def get_value(self, key: str) -> object:
        """The stored value under ``key``, or None."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data.get(key) if isinstance(data, dict) else None

    def put_value(self, key: str, value: object) -> None:
        """Store a value atomically.

        Raises:
            GpuError: The file cannot be written.
        """
        with self._lock:
            try:
                data = json.loads(self.path.read_text()) if self.path.exists() else {}
            except (OSError, ValueError):
                data = {}
            if not isinstance(data, dict):  # a damaged file reads as empty, as get_value says
                data = {}
            data[key] = value
            try:
                write_atomic(self.path, json.dumps(data), sync=False)
            except OSError as exc:
                raise GpuError(f"cannot write simulated GPU state {self.path}: {exc}") from exc

    def get_locks(self, uuid: str) -> Locks:
        """The stored clock locks of a GPU (unlocked when none)."""
        value = self.get_value(f"{uuid}#locks")
        if not isinstance(value, dict):
            return UNLOCKED
        sm, mem, low = value.get("sm"), value.get("mem"), value.get("sm_min")
        return Locks(
            float(sm) if isinstance(sm, int | float) else None,
            float(mem) if isinstance(mem, int | float) else None,
            # a state file from before ranges has none: a single-value lock, as it was set
            float(low) if isinstance(low, int | float) and sm is not None else None,
        )

    def put_locks(self, uuid: str, locks: Locks) -> None:
        """Store a GPU's clock locks atomically.

        Raises:
            GpuError: The file cannot be written.
        """
        value = {"sm": locks.sm_mhz, "mem": locks.mem_mhz}
        if locks.sm_min_mhz is not None:
            value["sm_min"] = locks.sm_min_mhz
        self.put_value(f"{uuid}#locks", value)

    def get_sm_offset(self, uuid: str) -> float:
        """The stored SM clock offset of a GPU, MHz (0, the unshifted curve, when none or not a
        finite number)."""
        value = self.get_value(f"{uuid}#sm_offset_mhz")
        if isinstance(value, bool) or not isinstance(value, int | float):
            return 0.0
        return float(value) if math.isfinite(value) else 0.0

    def put_sm_offset(self, uuid: str, mhz: float) -> None:
        """Store a GPU's SM clock offset atomically.

        Raises:
            GpuError: The file cannot be written.
        """
        self.put_value(f"{uuid}#sm_offset_mhz", float(mhz))

    def get_mem_offset(self, uuid: str) -> float:
        """The stored memory clock offset of a GPU, MHz (0 when none or not a finite number)."""
        value = self.get_value(f"{uuid}#mem_offset_mhz")
        if isinstance(value, bool) or not isinstance(value, int | float):
            return 0.0
        return float(value) if math.isfinite(value) else 0.0

    def put_mem_offset(self, uuid: str, mhz: float) -> None:
        """Store a GPU's memory clock offset atomically.

        Raises:
            GpuError: The file cannot be written.
        """
        self.put_value(f"{uuid}#mem_offset_mhz", float(mhz))
