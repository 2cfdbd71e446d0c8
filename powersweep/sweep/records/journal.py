"""The restore journal: the original power limits (and clock locks) of a sweep's GPUs, on disk.

A signal handler cannot run after SIGKILL, a power cut or a kernel OOM kill, so before a sweep
changes the first limit it writes every GPU's original limit to a root-only file. The file is
removed only after every limit was put back; while it exists a new sweep refuses to start and
``powersweep restore`` puts the limits back from it.

GPUs are keyed by UUID because NVML indices can change between boots (or with
``CUDA_VISIBLE_DEVICES``-style reordering by other tools).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powersweep.errors import PowersweepError, UsageError
from powersweep.sweep.gpu import Gpu, GpuBackend

JOURNAL_VERSION = 1
JOURNAL_NAME = "journal.json"
STATE_DIR_ENV = "POWERSWEEP_STATE_DIR"
ROOT_STATE_DIR = Path("/var/lib/powersweep")
# The backends a journal can name (``powersweep restore`` rebuilds the one it names).
BACKEND_KINDS = ("nvml", "amdsmi", "auto", "sim")


class _Taken(Exception):
    """Internal: an exclusive write found a journal already there."""


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
    """

    uuid: str
    index: int
    name: str
    original_limit_w: float
    clocks_locked: bool = False
    original_sm_lock_mhz: float | None = None
    original_mem_lock_mhz: float | None = None
    locks_known: bool = True


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
    return out


def _mhz(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"bad clock lock {value!r}")
    return float(value)


def default_state_dir(environ: Mapping[str, str] | None = None, euid: int | None = None) -> Path:
    """Where the journal lives when neither ``--state-dir`` nor the env variable says.

    ``/var/lib/powersweep`` for root (a sudo run must find the journal of another sudo run,
    whatever the invoking user's environment), else ``$XDG_STATE_HOME/powersweep`` (default
    ``~/.local/state/powersweep``).
    """
    env = os.environ if environ is None else environ
    if env.get(STATE_DIR_ENV):
        return Path(env[STATE_DIR_ENV])
    uid = euid if euid is not None else (os.geteuid() if hasattr(os, "geteuid") else 1)
    if uid == 0:
        return ROOT_STATE_DIR
    xdg = env.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path(env.get("HOME") or Path.home()) / ".local" / "state"
    return base / "powersweep"


class Journal:
    """The journal file in one state directory.

    Args:
        state_dir: Directory holding ``journal.json`` (created 0700 on first write).
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / JOURNAL_NAME

    def exists(self) -> bool:
        """True when a journal is on disk."""
        return self.path.exists()

    def read(self) -> JournalEntry | None:
        """The journal on disk, or None when there is none.

        Raises:
            PowersweepError: It exists but cannot be read or parsed.
        """
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PowersweepError(
                f"cannot read the restore journal {self.path}: {exc.strerror or exc} "
                "(run with sudo?)"
            ) from None
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        return JournalEntry.from_dict(data, self.path)

    def claim(self, entry: JournalEntry) -> None:
        """Write a new sweep's journal, unless another sweep that still runs owns the cards.

        A journal of a dead sweep is replaced (its limits were put back, or this sweep restores
        them); when none exists the file is created only if it still does not, so two sweeps
        starting at once cannot both own the cards.

        Raises:
            UsageError: A live sweep owns the journal ("another sweep (PID N) is running...").
            PowersweepError: It cannot be written (then no limit may be changed).
        """
        for _ in range(3):
            existing = self.read()
            if existing is not None:
                if existing.pid != entry.pid and owner_alive(existing):
                    raise UsageError(owner_refusal(existing, self.path))
                self.write(entry)
                return
            try:
                self.write(entry, exclusive=True)
                return
            except _Taken:
                continue  # created meanwhile: look at its owner
        raise PowersweepError(
            f"the restore journal {self.path} keeps changing: is a sweep starting?"
        )

    def write(self, entry: JournalEntry, *, exclusive: bool = False) -> None:
        """Write the journal atomically, readable by its owner only (mode 0600).

        Args:
            entry: What to write.
            exclusive: Create it only if no journal exists (raises ``_Taken`` otherwise).

        Raises:
            PowersweepError: It cannot be written (then no limit may be changed).
        """
        try:
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            # mkstemp creates the file 0600 under a random name: no window with a wider mode
            fd, tmp = tempfile.mkstemp(dir=self.state_dir, prefix=".journal-", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(entry.to_dict(), f, indent=2, allow_nan=False)
                    f.write("\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(tmp, 0o600)
                if exclusive:
                    try:
                        os.link(tmp, self.path)  # fails if the journal exists: no overwrite
                    except FileExistsError:
                        raise _Taken from None
                    os.unlink(tmp)
                else:
                    os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            _fsync_dir(self.state_dir)
        except (OSError, ValueError) as exc:
            raise PowersweepError(
                f"cannot write the restore journal {self.path}: "
                f"{getattr(exc, 'strerror', None) or exc} (choose another --state-dir); "
                "no power limit was changed"
            ) from None

    def remove(self) -> None:
        """Delete the journal (after every limit was put back); missing is fine.

        Raises:
            PowersweepError: It exists and cannot be deleted.
        """
        try:
            self.path.unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise PowersweepError(
                f"cannot delete the restore journal {self.path}: {exc.strerror or exc}"
            ) from None
        with contextlib.suppress(OSError):
            _fsync_dir(self.state_dir)

    def record_outcome(self, outcome: Mapping[str, Any]) -> None:
        """Add the sweep's outcome to the journal (its final run.json could not be written).

        Raises:
            PowersweepError: The journal cannot be read or written.
        """
        entry = self.read()
        if entry is None:
            raise PowersweepError(f"the restore journal {self.path} is gone: cannot record")
        self.write(dataclasses.replace(entry, outcome=dict(outcome)))

    def refuse_if_present(self) -> None:
        """Refuse to start a sweep while a journal from an unfinished one exists.

        Raises:
            UsageError: A journal exists (one line pointing at ``powersweep restore``).
        """
        if self.exists():
            raise UsageError(
                f"a previous sweep did not restore its power limits (journal {self.path}): "
                "run `powersweep restore` first, or pass --force"
            )

    def refuse_if_locked(self) -> None:
        """Refuse to start, even with --force, while the journal holds clock locks.

        A forced sweep takes the journal's original limits over, but locks it would reset or
        relock could not be told apart from the killed sweep's: only ``powersweep restore``
        (which knows the originals) puts them back.

        Raises:
            UsageError: The journal holds clock locks.
            PowersweepError: It exists and cannot be read.
        """
        entry = self.read()
        if entry is not None and entry.holds_clock_locks:
            raise UsageError(
                f"a previous sweep left clock locks (journal {self.path}): run "
                "`powersweep restore` first (--force does not override locks)"
            )


def process_start(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (None when unknown: no /proc, gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: fields start after the last ")"
    fields = text[text.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def owner_alive(entry: JournalEntry) -> bool:
    """True while the sweep that wrote ``entry`` still runs (another process, same start)."""
    pid = entry.pid
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    except OSError:
        return False
    if entry.pid_start is None:
        return True
    now = process_start(pid)
    return now is None or now == entry.pid_start


def owner_refusal(entry: JournalEntry, path: Path) -> str:
    """The one-line refusal while another sweep owns the cards."""
    gpus = ", ".join(str(g.index) for g in entry.gpus)
    word = "GPU" if len(entry.gpus) == 1 else "GPUs"
    return (
        f"another sweep (PID {entry.pid}) is running on {word} {gpus}: wait for it to end or "
        f"stop it (its journal {path} is left alone; --force does not override a live sweep)"
    )


def _fsync_dir(path: Path) -> None:
    # the rename is durable only once the directory entry is on disk
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class RestoreResult:
    """What ``restore`` did for one GPU of the journal (``clocks``: what happened to its
    clock locks, empty when the sweep locked none)."""

    uuid: str
    index: int | None
    limit_w: float
    ok: bool
    message: str
    clocks: str = ""


def put_back_locks(
    gpu: Gpu, sm_mhz: float | None, mem_mhz: float | None, known: bool = True
) -> str:
    """Reset a GPU's clock locks, then relock the ones it had before the sweep.

    Returns:
        What was done, for the user (``clocks unlocked``, ``clocks locked back to ...``).

    Raises:
        PowersweepError: The driver refused (the caller reports it and keeps the journal).
    """
    gpu.reset_clock_locks(sm=True, mem=True)
    if not known:
        return "clocks unlocked (the locks before the sweep could not be read)"
    back = []
    if sm_mhz is not None:
        r = gpu.lock_sm_clock(sm_mhz)
        if not r.accepted:
            raise PowersweepError(f"could not lock SM back to {sm_mhz:g} MHz: {r.message}")
        back.append(f"SM {sm_mhz:g} MHz")
    if mem_mhz is not None:
        r = gpu.lock_mem_clock(mem_mhz)
        if not r.accepted:
            raise PowersweepError(f"could not lock memory back to {mem_mhz:g} MHz: {r.message}")
        back.append(f"memory {mem_mhz:g} MHz")
    return "clocks locked back to " + " / ".join(back) if back else "clocks unlocked"


def restore_gpus(
    entry: JournalEntry, backend: GpuBackend, warn: Callable[[str], None] = lambda _m: None
) -> list[RestoreResult]:
    """Put back every journalled limit on the backend's GPUs, found by UUID.

    Never raises for one GPU: a failure is a result with ``ok`` False, so the others still get
    their limit back.
    """
    by_uuid: dict[str, Gpu] = {}
    for i in range(backend.device_count()):
        try:
            gpu = backend.gpu(i)
            by_uuid[gpu.identity().uuid] = gpu
        except PowersweepError as exc:
            warn(f"cannot open GPU {i}: {exc}")
    results = []
    for g in entry.gpus:
        found = by_uuid.get(g.uuid)
        if found is None:
            results.append(RestoreResult(g.uuid, None, g.original_limit_w, False, "GPU not found"))
            continue
        clocks = ""
        if g.clocks_locked:
            # clocks first: a lock left in place would skew whatever runs next
            try:
                clocks = put_back_locks(
                    found, g.original_sm_lock_mhz, g.original_mem_lock_mhz, g.locks_known
                )
            except PowersweepError as exc:
                clocks = f"clock locks NOT put back: {exc}"
        try:
            r = found.set_power_limit(g.original_limit_w)
            ok, message = r.accepted, r.message
        except PowersweepError as exc:
            ok, message = False, str(exc)
        ok = ok and not clocks.startswith("clock locks NOT")
        results.append(RestoreResult(g.uuid, found.index, g.original_limit_w, ok, message, clocks))
    return results
