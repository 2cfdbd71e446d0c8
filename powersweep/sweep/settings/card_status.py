"""A read-only snapshot of every GPU's settings and readings, the restore journal and the unit.

Nothing here changes a setting or needs root. A reading that fails is reported as unknown, never
as an error: ``powersweep status`` must work on the machine where something is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from powersweep.errors import PowersweepError
from powersweep.runformat import JsonObject, as_float
from powersweep.sweep.gpu import (
    ClockOffset,
    GpuBackend,
    GpuIdentity,
    GpuSample,
    LockedClocks,
    PowerEnvelope,
)
from powersweep.sweep.records.journal import Journal
from powersweep.sweep.settings.boot_unit import UnitStatus

# The limit in force counts as the default within this distance.
_SAME_W = 0.5


@dataclass(frozen=True)
class GpuStatus:
    """One GPU's settings and readings now.

    Attributes:
        index: NVML index.
        identity: Who it is (None when it could not be read).
        envelope: Power limits (None when they could not be read).
        envelope_error: Why the limits could not be read, else None.
        persistence_mode: On, off, or None when unknown.
        locked_clocks: Clock locks as far as they can be read.
        sample: Draw, temperature and clocks now.
        clock_offset: The SM clock's voltage/frequency offset and its range (None: not read).
        mem_clock_offset: The memory clock's offset and its range, NVML's unit (None: not read).
    """

    index: int
    identity: GpuIdentity | None
    envelope: PowerEnvelope | None
    envelope_error: str | None
    persistence_mode: bool | None
    locked_clocks: LockedClocks
    sample: GpuSample | None
    clock_offset: ClockOffset | None = None
    mem_clock_offset: ClockOffset | None = None

    @property
    def limit_differs_from_default(self) -> bool | None:
        """The limit in force is not the card's default (None when unknown)."""
        if self.envelope is None:
            return None
        return abs(self.envelope.current_w - self.envelope.default_w) > _SAME_W

    def to_dict(self) -> JsonObject:
        """The JSON form (``powersweep status --json``); unknown values are null."""
        ident, env, lock, s = self.identity, self.envelope, self.locked_clocks, self.sample
        return {
            "index": self.index,
            "name": ident.name if ident else None,
            "uuid": ident.uuid if ident else None,
            "driver_version": ident.driver_version if ident else None,
            "vendor": ident.vendor if ident else None,
            "power_limit": {
                "min_w": env.min_w if env else None,
                "default_w": env.default_w if env else None,
                "max_w": env.max_w if env else None,
                "current_w": env.current_w if env else None,
                "differs_from_default": self.limit_differs_from_default,
                "error": self.envelope_error,
            },
            "locked_clocks": {
                "known": lock.known,
                "sm_mhz": lock.sm_mhz,
                "mem_mhz": lock.mem_mhz,
                "user_clock_setting_active": lock.user_clock_setting_active,
            },
            "clock_offset": None
            if self.clock_offset is None
            else {
                "supported": self.clock_offset.supported,
                "sm_offset_mhz": self.clock_offset.sm_offset_mhz,
                "min_mhz": self.clock_offset.min_mhz,
                "max_mhz": self.clock_offset.max_mhz,
            },
            "mem_clock_offset": None
            if self.mem_clock_offset is None
            else {
                "supported": self.mem_clock_offset.supported,
                "mem_offset_mhz": self.mem_clock_offset.offset_mhz,
                "min_mhz": self.mem_clock_offset.min_mhz,
                "max_mhz": self.mem_clock_offset.max_mhz,
            },
            "persistence_mode": self.persistence_mode,
            "now": None
            if s is None
            else {
                "power_w": as_float(s.draw_w, None),
                "temp_c": as_float(s.temp_c, None),
                "sm_clock_mhz": as_float(s.sm_clock_mhz, None),
                "mem_clock_mhz": as_float(s.mem_clock_mhz, None),
                "util_pct": as_float(s.util_pct, None),
                "pstate": s.pstate,
            },
        }


@dataclass(frozen=True)
class JournalStatus:
    """Whether a restore journal exists in one state directory.

    Attributes:
        path: The journal file.
        exists: True, False, or None when the directory cannot be read.
        pid: The sweep that wrote it (None when none or unreadable).
        sweep_running: That sweep still runs (None when unknown).
        created_at: When it was written.
        run_dir: That sweep's run directory.
        error: Why it could not be read, else None.
    """

    path: Path
    exists: bool | None
    pid: int | None = None
    sweep_running: bool | None = None
    created_at: str | None = None
    run_dir: str | None = None
    error: str | None = None

    def to_dict(self) -> JsonObject:
        """The JSON form."""
        return {
            "path": str(self.path),
            "exists": self.exists,
            "pid": self.pid,
            "sweep_running": self.sweep_running,
            "created_at": self.created_at,
            "run_dir": self.run_dir,
            "error": self.error,
        }


def read_gpu_status(backend: GpuBackend) -> list[GpuStatus]:
    """Every GPU's settings and readings; failed reads become None.

    Raises:
        PowersweepError: The backend cannot count its GPUs.
    """
    out = []
    for i in range(backend.device_count()):
        try:
            gpu = backend.gpu(i)
        except PowersweepError:
            out.append(GpuStatus(i, None, None, "cannot open", None, LockedClocks(False), None))
            continue
        ident: GpuIdentity | None
        try:
            ident = gpu.identity()
        except PowersweepError:
            ident = None
        env: PowerEnvelope | None = None
        env_error = None
        try:
            env = gpu.envelope()
        except PowersweepError as exc:
            env_error = str(exc)
        out.append(
            GpuStatus(
                index=i,
                identity=ident,
                envelope=env,
                envelope_error=env_error,
                persistence_mode=gpu.persistence_mode(),
                locked_clocks=gpu.locked_clocks(),
                sample=gpu.read_sample(),
                clock_offset=gpu.sm_clock_offset(),
                mem_clock_offset=gpu.mem_clock_offset(),
            )
        )
    return out


def read_journal_status(state_dir: Path, pid_alive: Callable[[int], bool]) -> JournalStatus:
    """Whether a killed (or running) sweep left a restore journal in ``state_dir``."""
    journal = Journal(state_dir)
    try:
        if not journal.exists():
            return JournalStatus(journal.path, False)
    except OSError as exc:
        return JournalStatus(journal.path, None, error=f"cannot look: {exc.strerror or exc}")
    try:
        entry = journal.read()
    except PowersweepError as exc:
        return JournalStatus(journal.path, True, error=str(exc))
    if entry is None:
        return JournalStatus(journal.path, False)
    return JournalStatus(
        journal.path,
        True,
        pid=entry.pid,
        sweep_running=pid_alive(entry.pid),
        created_at=entry.created_at,
        run_dir=entry.run_dir,
    )


def render_status(
    gpus: Sequence[GpuStatus], journals: Sequence[JournalStatus], unit: UnitStatus | None
) -> str:
    """The plain-text status: one block per GPU, then the journal and the boot unit."""
    lines: list[str] = []
    for g in gpus:
        lines += _gpu_lines(g)
        lines.append("")
    for j in journals:
        lines.append(f"restore journal: {_journal_text(j)}")
    if unit is not None:
        lines.append(f"boot unit:       {_unit_text(unit)}")
    return "\n".join(lines)


def _gpu_lines(g: GpuStatus) -> list[str]:
    ident = g.identity
    head = f"GPU {g.index}" + (f"  {ident.name}  {ident.uuid}" if ident else "  (identity unknown)")
    env = g.envelope
    if env is None:
        power = f"unknown ({g.envelope_error})"
    else:
        differs = "differs from the default" if g.limit_differs_from_default else "the default"
        power = (
            f"{env.current_w:g} W in force ({differs}); default {env.default_w:g} W, "
            f"range {env.min_w:g}-{env.max_w:g} W"
        )
    persistence = {True: "on", False: "off", None: "unknown"}[g.persistence_mode]
    offset = [] if g.clock_offset is None else [f"  clock offset  {_offset_text(g.clock_offset)}"]
    if g.mem_clock_offset is not None:
        offset.append(f"  memory offset {_offset_text(g.mem_clock_offset, '', ', NVML unit')}")
    return [
        head,
        f"  power limit   {power}",
        f"  clock locks   {_locks_text(g.locked_clocks)}",
        *offset,
        f"  persistence   {persistence}",
        f"  now           {_now_text(g.sample)}",
    ]


def _offset_text(offset: ClockOffset, clock: str = "SM ", unit: str = "") -> str:
    """``SM +180 MHz (range -200 to +1000 MHz)``; ``clock`` names it, ``unit`` says its unit."""
    if not offset.supported:
        return f"not supported ({offset.message})" if offset.message else "not supported"
    now = (
        f"{clock}{offset.offset_mhz:+g} MHz"
        if offset.offset_mhz is not None
        else f"unknown ({offset.message or 'unreadable'})"
    )
    if offset.min_mhz is not None and offset.max_mhz is not None:
        now += f" (range {offset.min_mhz:+g} to {offset.max_mhz:+g} MHz{unit})"
    elif unit and offset.offset_mhz is not None:
        now += f" ({unit.removeprefix(', ')})"
    return now


def _locks_text(lock: LockedClocks) -> str:
    if lock.known:
        sm = f"SM {lock.sm_mhz:g} MHz" if lock.sm_mhz is not None else "SM unlocked"
        mem = f"memory {lock.mem_mhz:g} MHz" if lock.mem_mhz is not None else "memory unlocked"
        return f"{sm}, {mem}"
    held = {
        True: "a user clock setting holds the clocks now",
        False: "no user clock setting holds the clocks now",
        None: "whether a user clock setting holds the clocks is unknown",
    }[lock.user_clock_setting_active]
    return f"unknown (NVML cannot read clock locks); {held}"


def _now_text(s: GpuSample | None) -> str:
    if s is None:
        return "unknown"
    pstate = f"P{s.pstate}" if s.pstate is not None else "P?"
    return (
        f"{_fmt(s.draw_w, 'W', 1)}, {_fmt(s.temp_c, 'C', 0)}, "
        f"SM {_fmt(s.sm_clock_mhz, 'MHz', 0)}, memory {_fmt(s.mem_clock_mhz, 'MHz', 0)}, "
        f"util {_fmt(s.util_pct, '%', 0)}, {pstate}"
    )


def _journal_text(j: JournalStatus) -> str:
    if j.exists is None:
        return f"unknown at {j.path} ({j.error}; try with sudo)"
    if not j.exists:
        return f"none ({j.path})"
    if j.error:
        return f"PRESENT at {j.path}, unreadable ({j.error})"
    if j.sweep_running:
        return f"a sweep is running (pid {j.pid}, {j.path})"
    return f"PRESENT at {j.path}: a killed sweep left limits to put back: run `powersweep restore`"


def _unit_text(u: UnitStatus) -> str:
    if not u.installed:
        return f"not installed ({u.path})"
    if u.error:
        return f"installed at {u.path}, unreadable ({u.error})"
    enabled = {True: "enabled", False: "NOT enabled", None: "enabled state unknown"}[u.enabled]
    what = ", ".join(f"{s.uuid} {s.describe()}" for s in u.settings) or "no powersweep settings"
    return f"installed at {u.path} ({enabled}): {what}"


def _fmt(value: float, unit: str, digits: int) -> str:
    if not math.isfinite(value):
        return f"? {unit}"
    return f"{value:.{digits}f} {unit}"
