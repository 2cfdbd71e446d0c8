"""``powersweep restore``: put back the limits a killed sweep left, from its restore journal."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from powersweep.cli._common import StateDirOpt, info, pid_alive, warn
from powersweep.errors import PowersweepError
from powersweep.sweep.options import Backend


def restore_command(
    state_dir: StateDirOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Restore even if the sweep that wrote it still runs.")
    ] = False,
    backend: Annotated[
        Backend | None,
        typer.Option(
            "--backend",
            help="GPU library to restore through instead of the one the journal names "
            "(auto, nvml, amdsmi).",
            case_sensitive=False,
        ),
    ] = None,
) -> None:
    """Put back the power limits (and clock locks) a killed sweep left (from its journal)."""
    from powersweep.cli.rigs import restore_backend
    from powersweep.sweep.records.journal import Journal, default_state_dir, restore_gpus

    journal = Journal(state_dir or default_state_dir())
    entry = journal.read()
    if entry is None:
        info(f"nothing to restore: no journal at {journal.path}")
        return
    if not force and entry.pid != os.getpid() and pid_alive(entry.pid):
        raise PowersweepError(
            f"the sweep that wrote {journal.path} (pid {entry.pid}) is still running: stop it "
            "(it restores on Ctrl-C/SIGTERM) or pass --force",
            exit_code=2,
        )
    with restore_backend(entry.backend, backend.value if backend else None) as gpus:
        results = restore_gpus(entry, gpus, warn=warn)
    for r in results:
        where = f"GPU {r.index}" if r.index is not None else r.uuid
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
