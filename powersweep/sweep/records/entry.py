"""What a restore journal holds: a sweep's GPUs, their original settings, and its owner.

Kept apart from :mod:`.journal` (the file on disk) so that who owns the cards (:mod:`.owner`) and
putting them back (:mod:`.put_back`) read an entry without importing the journal that uses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powersweep.errors import PowersweepError

JOURNAL_VERSION = 1
# The backends a journal can name (``powersweep restore`` rebuilds the one it names).
BACKEND_KINDS = ("nvml", "amdsmi", "auto", "sim")


@dataclass(frozen=True)
class JournalGpu:
    """One GPU whose limit a sweep changes.

    Attributes:
        uuid: Stable identifier (the key used to find the card again).
        index: NVML index at the time of the sweep (informative only).
        name: Marketing name.
        original_limit_w: The limit to put back, W.
        clocks_locked: The sweep locks this GPU's clocks (so restoring puts them back).
        original_sm_lock_mhz: SM lock in force before the sweep (None: unlocked or unknown).
        original_mem_lock_mhz: Memory lock in force before the sweep (None: unlocked or unknown).
        locks_known: Whether the backend could read the locks before (NVML cannot: a reset).
        offset_set: The sweep sets this GPU's SM clock offset (so restoring puts it back).
        original_sm_offset_mhz: The offset in force before the sweep (None: unknown, put back
            to 0).
        mem_offset_set: The sweep sets this GPU's memory clock offset (issue 45; a journal
            written before it has none: nothing to put back).
        original_mem_offset_mhz: The memory offset in force before (NVML's unit; None: unknown,
            put back to 0).
        original_sm_lock_min_mhz: The bottom of that SM lock (None: min = max, or a journal
            from before lock ranges).
    """

    uuid: str
    index: int
    name: str
    original_limit_w: float
    clocks_locked: bool = False
    original_sm_lock_mhz: float | None = None
    original_mem_lock_mhz: float | None = None
    locks_known: bool = True
    offset_set: bool = False
    original_sm_offset_mhz: float | None = None
    mem_offset_set: bool = False
    original_mem_offset_mhz: float | None = None
    original_sm_lock_min_mhz: float | None = None


@dataclass(frozen=True)
class JournalEntry:
    """What a sweep in progress changed and how to rebuild the backend that changed it.

    Attributes:
        backend: ``{"kind": K}`` for real GPUs (K: ``nvml``, ``amdsmi``, or ``auto`` for a
            machine with both) or ``{"kind": "sim", "profiles": [...], "sim_state": PATH,
            "seed": N}``.
        gpus: The GPUs and their original limits.
        pid: Process id of the sweep that wrote it.
        created_at: ISO-8601 UTC.
        run_dir: The run directory of that sweep (may be None).
        pid_start: That process's start time as the kernel counts it (``/proc/PID/stat``), so a
            PID reused by another process after a crash is not taken for the sweep.
        outcome: Set when the sweep ended and restored every limit but could not write its
            final ``run.json``: the journal is then the record of what happened.
    """

    backend: Mapping[str, Any]
    gpus: tuple[JournalGpu, ...]
    pid: int
    created_at: str
    run_dir: str | None = None
    pid_start: str | None = None
    outcome: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "version": JOURNAL_VERSION,
            "pid": self.pid,
            "created_at": self.created_at,
            "run_dir": self.run_dir,
            "pid_start": self.pid_start,
            "outcome": dict(self.outcome) if self.outcome is not None else None,
            "backend": dict(self.backend),
            "gpus": [_gpu_dict(g) for g in self.gpus],
        }

    @property
    def holds_clock_locks(self) -> bool:
        """True when the sweep that wrote it locked clocks (they may still be locked)."""
        return any(g.clocks_locked for g in self.gpus)

    @property
    def holds_clock_offsets(self) -> bool:
        """True when the sweep that wrote it set clock offsets (they may still be set)."""
        return any(g.offset_set or g.mem_offset_set for g in self.gpus)

    @classmethod
    def from_dict(cls, data: Any, source: Path) -> JournalEntry:
        """Parse the JSON form.

        Raises:
            PowersweepError: The file is not a journal this version understands.
        """
        try:
            if not isinstance(data, dict) or data.get("version") != JOURNAL_VERSION:
                raise ValueError("unknown journal version")
            backend = data["backend"]
            if not isinstance(backend, dict) or backend.get("kind") not in BACKEND_KINDS:
                raise ValueError("unknown backend")
            gpus = tuple(
                JournalGpu(
                    uuid=str(g["uuid"]),
                    index=int(g["index"]),
                    name=str(g.get("name", "")),
                    original_limit_w=float(g["original_limit_w"]),
                    clocks_locked=bool(g.get("clocks_locked", False)),
                    original_sm_lock_mhz=_mhz(g.get("original_sm_lock_mhz")),
                    original_mem_lock_mhz=_mhz(g.get("original_mem_lock_mhz")),
                    locks_known=bool(g.get("locks_known", True)),
                    offset_set=bool(g.get("offset_set", False)),
                    original_sm_offset_mhz=_mhz(g.get("original_sm_offset_mhz")),
                    mem_offset_set=bool(g.get("mem_offset_set", False)),
                    original_mem_offset_mhz=_mhz(g.get("original_mem_offset_mhz")),
                    original_sm_lock_min_mhz=_mhz(g.get("original_sm_lock_min_mhz")),
                )
                for g in data["gpus"]
            )
            return cls(
                backend=backend,
                gpus=gpus,
                pid=int(data.get("pid", 0)),
                created_at=str(data.get("created_at", "")),
                run_dir=data.get("run_dir"),
                pid_start=str(data["pid_start"]) if data.get("pid_start") else None,
                outcome=data["outcome"] if isinstance(data.get("outcome"), dict) else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PowersweepError(
                f"the restore journal {source} is damaged ({exc}); restore the limits by hand "
                "(sudo nvidia-smi -i N -pl WATTS, or sudo amd-smi set -g N -o WATTS) and delete it"
            ) from None


def _gpu_dict(g: JournalGpu) -> dict[str, Any]:
    out: dict[str, Any] = {
        "uuid": g.uuid,
        "index": g.index,
        "name": g.name,
        "original_limit_w": g.original_limit_w,
    }
    if g.clocks_locked:
        out.update(
            clocks_locked=True,
            original_sm_lock_mhz=g.original_sm_lock_mhz,
            original_mem_lock_mhz=g.original_mem_lock_mhz,
            locks_known=g.locks_known,
        )
        if g.original_sm_lock_min_mhz is not None:
            out["original_sm_lock_min_mhz"] = g.original_sm_lock_min_mhz
    if g.offset_set:
        out.update(offset_set=True, original_sm_offset_mhz=g.original_sm_offset_mhz)
    if g.mem_offset_set:
        out.update(mem_offset_set=True, original_mem_offset_mhz=g.original_mem_offset_mhz)
    return out


def _mhz(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"bad clock setting {value!r}")
    return float(value)
