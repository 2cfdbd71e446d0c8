"""``powersweep restore``: put back the limits a killed sweep left, from its restore journal."""

from __future__ import annotations

from typing import Annotated

from powersweep.cli._common import StateDirOpt, info, warn
from powersweep.cli.help_layout import option
from powersweep.errors import PowersweepError, UsageError
from powersweep.sweep.options import Backend, SafetyOptions

# `restore --help`'s last lines
EXAMPLES = """Examples:
  sudo powersweep restore
  sudo powersweep restore --state-dir /tmp/my-journal"""


def restore_command(
    state_dir: StateDirOpt = SafetyOptions.state_dir,
    force: Annotated[
        bool,
        option(
            "--force",
            help="Restore when it cannot be told if the journal's sweep still runs.",
            doc="Restore when it cannot be told whether the sweep that wrote the journal still "
            "runs (never while it does).",
        ),
    ] = False,
    backend: Annotated[
        Backend | None,
        option(
            "--backend",
            help="GPU library to use instead of the journal's.",
            doc="GPU library to restore through instead of the one the journal names "
            "(auto, nvml, amdsmi).",
            case_sensitive=False,
        ),
    ] = None,
) -> None:
    """Put back the settings a killed sweep left (from its journal).

    A journal whose sweep still runs is never taken, --force or not: that sweep owns the cards
    and puts them back itself. --force only overrides a doubt (a PID that runs but cannot be
    told from the sweep's).
    """
    from powersweep.cli.rigs import restore_backend
    from powersweep.sweep.records.cardlock import card_key, locks_for
    from powersweep.sweep.records.journal import (
        Journal,
        default_state_dir,
        owner_state,
        restore_gpus,
    )

    journal = Journal(state_dir or default_state_dir())
    entry = journal.read()
    if entry is None:
        info(f"nothing to restore: no journal at {journal.path}")
        return
    owner = owner_state(entry)
    gpus = ", ".join(str(g.index) for g in entry.gpus)
    if owner.alive:
        raise UsageError(
            f"the sweep that wrote {journal.path} (PID {entry.pid}) is still running on GPU "
            f"{gpus}: it owns the cards and puts them back itself when it ends; stop it with "
            "Ctrl-C or SIGTERM (if it was killed with SIGKILL, run `powersweep restore` again)"
        )
    if owner.alive is None and not force:
        raise UsageError(
            f"cannot tell whether the sweep that wrote {journal.path} still runs: {owner.why}; "
            "if it is gone, `powersweep restore --force` puts the cards back"
        )
    if owner.alive is None:
        warn(f"{owner.why}; restoring anyway (--force)")
    with (
        locks_for("restore", journal.state_dir) as locks,
        restore_backend(entry.backend, backend.value if backend else None) as gpus_backend,
    ):
        # a sweep from another state directory may hold a card now: never write under it
        locks.take((card_key(entry.backend, g.uuid), f"GPU {g.index}") for g in entry.gpus)
        results = restore_gpus(entry, gpus_backend, warn=warn)
    for r in results:
        where = f"GPU {r.index}" if r.index is not None else r.uuid
        if r.offset:
            (info if r.ok else warn)(f"{where} ({r.uuid}): {r.offset}")
        if r.clocks:
            (info if r.ok else warn)(f"{where} ({r.uuid}): {r.clocks}")
        if r.ok:
            info(f"{where} ({r.uuid}): power limit restored to {r.limit_w:g} W")
        else:
            warn(f"{where} ({r.uuid}): NOT restored to {r.limit_w:g} W: {r.message}")
    failed = [r for r in results if not r.ok]
    if failed:
        raise PowersweepError(
            f"{len(failed)} of {len(results)} GPUs not restored; the journal stays at "
            f"{journal.path} (fix the cause and run `powersweep restore` again)"
        )
    journal.remove()
    info(f"journal removed: {journal.path}")
