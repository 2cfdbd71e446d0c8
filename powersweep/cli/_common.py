"""What every command shares: one-line messages through tqdm (so a progress bar stays intact),
and small parsers of option values. Each failure is a :class:`UsageError`: ``error: ...``, exit 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated

from tqdm import tqdm

from powersweep.cli.flag_params import shared
from powersweep.errors import UsageError
from powersweep.sweep.options import Backend, CardOptions, SafetyOptions


def warn(message: str) -> None:
    """Print ``warning: message`` on stderr without breaking a progress bar."""
    tqdm.write(f"warning: {message}", file=sys.stderr)


def info(message: str) -> None:
    """Print a message on stderr without breaking a progress bar."""
    tqdm.write(message, file=sys.stderr)


def is_root() -> bool:
    """True when running as root (e.g. under sudo)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def one_line(text: str) -> str:
    """Fold white space so an error stays on one line."""
    return " ".join(text.split())


def formats(text: str) -> tuple[str, ...]:
    """Parse ``--format``: png and/or svg.

    Raises:
        UsageError: Anything else.
    """
    fmts = tuple(f.strip().lower() for f in text.split(",") if f.strip())
    bad = [f for f in fmts if f not in ("png", "svg")]
    if not fmts or bad:
        raise UsageError(f"--format takes png and/or svg, not {text!r}")
    return fmts


def run_label(path: Path) -> str:
    """A run's label in tables and legends: its directory name."""
    return path.parent.name if path.name == "caps.csv" else path.name


def pid_alive(pid: int) -> bool:
    """True when a process with this PID exists (one of another user's counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def first_missing(path: Path) -> Path | None:
    """The topmost folder of ``path`` that does not exist yet (what writing there creates)."""
    top = None
    for p in (path, *path.parents):
        if p.exists():
            break
        top = p
    return top


class Handover:
    """Under sudo, gives what a command writes to the user who typed ``sudo``, not to root.

    Record each folder about to be written into (:meth:`expect`) before writing, then hand the
    written files and the folders the command created (:meth:`hand`).
    """

    def __init__(self) -> None:
        self._created: list[Path] = []

    def expect(self, *folders: Path) -> None:
        """Note the folders a command is about to write into (the missing ones it creates)."""
        for folder in folders:
            top = first_missing(folder)
            if top is not None and top not in self._created:
                self._created.append(top)

    def hand(self, written: Iterable[Path]) -> None:
        """Hand the written files and created folders over (a no-op unless root under sudo)."""
        if not is_root():
            return
        from powersweep.sweep.records.ownership import hand_over, invoking_user

        paths: Sequence[Path] = [*self._created, *written]
        hand_over(list(paths), invoking_user(), warn=warn)


# The flags every command that reads or writes the restore journal, or opens the GPU libraries,
# takes as the sweep declares them
StateDirOpt = Annotated[Path | None, shared(SafetyOptions, "state_dir", None)]
BackendOpt = Annotated[Backend, shared(CardOptions, "backend", None)]
