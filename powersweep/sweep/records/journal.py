"""The restore journal: the original power limits (and clock locks) of a sweep's GPUs, on disk.

A signal handler cannot run after SIGKILL, a power cut or a kernel OOM kill, so before a sweep
changes the first limit it writes every GPU's original limit to a root-only file.

The reasoning: docs/architecture.md, "powersweep.sweep.records.journal".
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from powersweep.errors import PowersweepError, UsageError
from powersweep.safe_files import private_dir, read_bytes, write_atomic
from powersweep.sweep.records.entry import BACKEND_KINDS, JOURNAL_VERSION, JournalEntry, JournalGpu

# Who owns the cards (``owner``) and putting cards back (``restore``) live beside the journal;
# callers import them from here with it.
from powersweep.sweep.records.owner import (
    OwnerState,
    owner_alive,
    owner_refusal,
    owner_state,
    process_start,
)
from powersweep.sweep.records.put_back import RestoreResult, put_back_locks, restore_gpus

__all__ = [
    "BACKEND_KINDS",
    "JOURNAL_VERSION",
    "Journal",
    "JournalEntry",
    "JournalGpu",
    "JournalLost",
    "OwnerState",
    "RestoreResult",
    "default_state_dir",
    "owner_alive",
    "owner_refusal",
    "owner_state",
    "process_start",
    "put_back_locks",
    "restore_gpus",
]

JOURNAL_NAME = "journal.json"
STATE_DIR_ENV = "POWERSWEEP_STATE_DIR"
ROOT_STATE_DIR = Path("/var/lib/powersweep")
_FIX = "choose another --state-dir"


class _Taken(Exception):
    """Internal: an exclusive write found a journal already there."""


class JournalLost(PowersweepError):
    """A running sweep's journal was removed or now names another owner.

    Nothing could put the cards back after a crash from then on, so the sweep stops at once
    and restores what it set (its own record of the original limits).
    """


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
        # what :meth:`claim` wrote: this process owns the cards while the file still says so
        self._claimed: JournalEntry | None = None

    def exists(self) -> bool:
        """True when a journal is on disk."""
        return self.path.exists()

    def read(self) -> JournalEntry | None:
        """The journal on disk, or None when there is none.

        Raises:
            PowersweepError: It exists but cannot be read or parsed.
        """
        # a journal decides what root writes to the cards: none from a directory others write
        private_dir(self.state_dir, fix=_FIX, create=False)
        try:
            text = read_bytes(self.path).decode()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeError) as exc:
            raise PowersweepError(
                f"cannot read the restore journal {self.path}: "
                f"{getattr(exc, 'strerror', None) or exc} (run with sudo?)"
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
                self._claimed = entry
                return
            try:
                self.write(entry, exclusive=True)
                self._claimed = entry
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
        # A private state directory, and a new file renamed (or linked) into place: a link
        # planted at the journal's name is replaced, never written through.
        private_dir(self.state_dir, fix=f"{_FIX}; no power limit was changed")
        try:
            text = json.dumps(entry.to_dict(), indent=2, allow_nan=False) + "\n"
            write_atomic(self.path, text, mode=0o600, exclusive=exclusive)
            _fsync_dir(self.state_dir)
        except (OSError, ValueError) as exc:
            if exclusive and isinstance(exc, FileExistsError):
                raise _Taken from None
            raise PowersweepError(
                f"cannot write the restore journal {self.path}: "
                f"{getattr(exc, 'strerror', None) or exc} ({_FIX}); no power limit was changed"
            ) from None

    def ensure_owned(self) -> None:
        """Check that the journal this process claimed is still on disk and still its own.

        A no-op before :meth:`claim`. Called before each change a sweep makes: a journal that
        was removed (``rm``, a forced restore) or replaced would leave a crash with nothing to
        put the cards back.

        Raises:
            JournalLost: It is gone, damaged, or names another owner; the one-line message
                says which and that the sweep stops and restores.
        """
        if self._claimed is None:
            return
        stop = "this sweep stops and puts back the limits it set"
        try:
            entry = self.read()
        except PowersweepError as exc:
            raise JournalLost(f"{exc}; {stop}") from None
        if entry is None:
            raise JournalLost(
                f"the restore journal {self.path} was removed while this sweep ran (a forced "
                f"`powersweep restore`, or by hand): {stop}"
            )
        if not _same_owner(entry, self._claimed):
            raise JournalLost(
                f"the restore journal {self.path} was replaced while this sweep ran (it now "
                f"names PID {entry.pid}, written {entry.created_at or 'at an unknown time'}): "
                f"{stop}"
            )

    def remove(self) -> None:
        """Delete the journal (after every limit was put back); missing is fine.

        After :meth:`claim`, only this process's own journal is deleted: one that another
        process wrote meanwhile is left where it is.

        Raises:
            PowersweepError: It exists and cannot be deleted.
        """
        if self._claimed is not None:
            try:
                on_disk = self.read()
            except PowersweepError:
                return  # damaged: not ours to delete
            if on_disk is None or not _same_owner(on_disk, self._claimed):
                return
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
        if self._claimed is not None and not _same_owner(entry, self._claimed):
            raise PowersweepError(
                f"the restore journal {self.path} now names another owner: cannot record"
            )
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
        """Refuse to start, even with --force, while the journal holds clock locks or offsets.

        A forced sweep takes the journal's original limits over, but locks it would reset or
        relock could not be told apart from the killed sweep's: only ``powersweep restore``
        (which knows the originals) puts them back.

        Raises:
            UsageError: The journal holds clock locks or offsets.
            PowersweepError: It exists and cannot be read.
        """
        entry = self.read()
        if entry is not None and (entry.holds_clock_locks or entry.holds_clock_offsets):
            what = "clock locks" if entry.holds_clock_locks else "clock offsets"
            raise UsageError(
                f"a previous sweep left {what} (journal {self.path}): run "
                f"`powersweep restore` first (--force does not override {what})"
            )


def _same_owner(a: JournalEntry, b: JournalEntry) -> bool:
    return (a.pid, a.pid_start, a.created_at) == (b.pid, b.pid_start, b.created_at)


def _fsync_dir(path: Path) -> None:
    # the rename is durable only once the directory entry is on disk
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
