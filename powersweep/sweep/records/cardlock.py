"""One sweep per card on the whole machine: a lock file per card, whatever the state directory.

The restore journal lives in a state directory, so two sweeps given two ``--state-dir`` would
each own "their" journal and both change one card; the second then takes the first's cap for
the user's own limit and puts it back at the end.

The reasoning: docs/architecture.md, "powersweep.sweep.records.cardlock".
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from powersweep.errors import PowersweepError, UsageError
from powersweep.safe_files import open_no_follow, private_dir
from powersweep.sweep.records.owner import process_start

LOCK_DIR_ENV = "POWERSWEEP_LOCK_DIR"
ROOT_LOCK_DIR = Path("/run/powersweep")


@dataclass(frozen=True)
class CardHolder:
    """Who holds a card (written into its lock file, read by the refused).

    Attributes:
        pid: The holding process.
        command: What it runs (``sweep``, ``apply``, ``restore``).
        state_dir: Its state directory (where its restore journal is).
        started_at: When it took the card (UTC, ISO 8601).
        pid_start: Its start time as the kernel counts it (None where unknown).
    """

    pid: int
    command: str
    state_dir: str
    started_at: str
    pid_start: str | None = None


def default_lock_dir(environ: Mapping[str, str] | None = None, euid: int | None = None) -> Path:
    """The machine-wide directory of card locks.

    ``$POWERSWEEP_LOCK_DIR`` when set; ``/run/powersweep`` for root (every sudo run, whatever
    its ``--state-dir``: only root changes a real card's limits); else a per-user runtime
    directory (a user's simulated cards). Whichever it is must be private (``safe_files``).
    """
    env = os.environ if environ is None else environ
    if env.get(LOCK_DIR_ENV):
        return Path(env[LOCK_DIR_ENV])
    uid = euid if euid is not None else os.geteuid()
    if uid == 0:
        return ROOT_LOCK_DIR
    runtime = env.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "powersweep" if runtime else Path(f"/tmp/powersweep-{uid}")


def card_key(backend: Mapping[str, object], uuid: str) -> str | None:
    """The machine-wide name of one card (None: the card lives in this process only).

    Args:
        backend: The restore journal's backend record (``kind``; ``sim_state`` for a
            simulated rig).
        uuid: The card's UUID.
    """
    if backend.get("kind") != "sim":
        return f"gpu:{uuid}"
    state = backend.get("sim_state")
    return f"sim:{state}:{uuid}" if state else None


class CardLocks:
    """The card locks one process holds (released on :meth:`release`, or when it dies).

    Args:
        lock_dir: The machine-wide lock directory.
        holder: What this process writes into each lock it takes.
    """

    def __init__(self, lock_dir: Path, holder: CardHolder) -> None:
        self.lock_dir = lock_dir
        self.holder = holder
        self._fds: dict[str, int] = {}

    @property
    def held(self) -> frozenset[str]:
        """The keys this process holds."""
        return frozenset(self._fds)

    def take(self, cards: Iterable[tuple[str | None, str]]) -> None:
        """Take every card's lock, or none of those asked for here.

        Args:
            cards: ``(key, label)`` per card (a None key needs no lock; the label, e.g.
                ``GPU 0``, names the card in the refusal).

        Raises:
            UsageError: Another process holds a card (one line naming it); the locks taken
                by this call are released.
            PowersweepError: The lock directory cannot be used.
        """
        taken: list[str] = []
        try:
            for key, label in sorted({(k, lb) for k, lb in cards if k is not None}):
                if key in self._fds:
                    continue
                self._take_one(key, label)
                taken.append(key)
        except BaseException:
            for key in taken:
                self._drop(key)
            raise

    def release(self) -> None:
        """Release every lock this process holds (the files stay: a lock is the open file)."""
        for key in list(self._fds):
            self._drop(key)

    def __enter__(self) -> CardLocks:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def _take_one(self, key: str, label: str) -> None:
        path = self.lock_dir / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".lock")
        # A private directory and no link followed: another user cannot plant a link that
        # makes this process truncate a file of its choosing.
        private_dir(self.lock_dir, fix=f"set {LOCK_DIR_ENV} to a directory of your own")
        try:
            fd = open_no_follow(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise PowersweepError(
                f"cannot open the card lock {path}: {exc.strerror or exc} (set "
                f"{LOCK_DIR_ENV} to a directory you can write); nothing was changed"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = _read_holder(fd)
            os.close(fd)
            raise UsageError(_refusal(label, other, path)) from None
        except OSError as exc:
            os.close(fd)
            raise PowersweepError(f"cannot lock {path}: {exc.strerror or exc}") from None
        text = json.dumps({**asdict(self.holder), "card": key}).encode()
        with contextlib.suppress(OSError):  # the lock holds without its note
            os.ftruncate(fd, 0)
            os.pwrite(fd, text, 0)
        self._fds[key] = fd

    def _drop(self, key: str) -> None:
        fd = self._fds.pop(key, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the open file releases its flock


def holder_for(command: str, state_dir: Path, started_at: str | None = None) -> CardHolder:
    """This process as a card's holder (``started_at`` defaults to now)."""
    pid = os.getpid()
    when = started_at or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return CardHolder(pid, command, str(state_dir), when, process_start(pid))


def locks_for(command: str, state_dir: Path) -> CardLocks:
    """This process's card locks in the default lock directory (none taken yet)."""
    return CardLocks(default_lock_dir(), holder_for(command, state_dir))


def _read_holder(fd: int) -> Mapping[str, object]:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _refusal(label: str, other: Mapping[str, object], path: Path) -> str:
    if not other.get("pid"):
        who = "another powersweep process (it has not said which yet)"
    else:
        who = (
            f"another powersweep {other.get('command') or 'process'} (PID {other['pid']}, "
            f"state dir {other.get('state_dir') or 'unknown'}, since "
            f"{other.get('started_at') or 'an unknown time'})"
        )
    return (
        f"{label} is in use by {who}: one sweep per card; wait for it to end or stop it "
        f"(lock {path})"
    )
