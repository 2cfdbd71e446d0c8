"""Who owns the cards: whether the sweep that wrote a restore journal still runs.

A PID alone cannot say it (PIDs are reused after a crash), so a journal records its process's
start time as the kernel counts it, and a PID that runs with another start time is another
process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from powersweep.sweep.records.entry import JournalEntry


@dataclass(frozen=True)
class OwnerState:
    """Whether the sweep that wrote a journal still runs.

    Attributes:
        alive: True (that very process runs), False (gone: no such process, or its PID now
            belongs to a process started later) or None (cannot tell: the PID runs but the
            journal or the system gives no start time to tell it from a reused PID).
        why: The reason, in words.
    """

    alive: bool | None
    why: str


def process_start(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (None when unknown: no /proc, gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: fields start after the last ")"
    fields = text[text.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def owner_state(entry: JournalEntry) -> OwnerState:
    """Whether the sweep that wrote ``entry`` still runs, and why it is judged so."""
    pid = entry.pid
    if pid <= 0:
        return OwnerState(False, "the journal names no process")
    if pid == os.getpid():
        return OwnerState(False, f"PID {pid} is this process now: the sweep is gone")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return OwnerState(False, f"no process has PID {pid} any more")
    except PermissionError:
        pass  # it exists, under another user
    except OSError as exc:
        return OwnerState(None, f"PID {pid} cannot be looked up ({exc.strerror or exc})")
    if entry.pid_start is None:
        return OwnerState(
            None,
            f"PID {pid} runs, and the journal (an older powersweep's) records no start time to "
            "tell the sweep from a process that reused its PID",
        )
    now = process_start(pid)
    if now is None:
        return OwnerState(
            None, f"PID {pid} runs, but its start time cannot be read (/proc/{pid}/stat)"
        )
    if now != entry.pid_start:
        return OwnerState(False, f"PID {pid} now belongs to a process started after the sweep")
    return OwnerState(True, f"PID {pid} is the sweep that wrote the journal, still running")


def owner_alive(entry: JournalEntry) -> bool:
    """True while the sweep that wrote ``entry`` may still run (it does, or no one can tell:
    a sweep never takes cards whose owner might be alive)."""
    return owner_state(entry).alive is not False


def owner_refusal(entry: JournalEntry, path: Path) -> str:
    """The one-line refusal while another sweep owns the cards."""
    gpus = ", ".join(str(g.index) for g in entry.gpus)
    word = "GPU" if len(entry.gpus) == 1 else "GPUs"
    return (
        f"another sweep (PID {entry.pid}) is running on {word} {gpus}: wait for it to end or "
        f"stop it (its journal {path} is left alone; --force does not override a live sweep)"
    )
