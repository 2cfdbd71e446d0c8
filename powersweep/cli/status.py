"""``powersweep status``: every GPU's limits, clock locks, SM and memory clock offsets,
persistence mode and readings, the restore journal and the boot unit. Reads only; needs no
root."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from powersweep.cli._common import BackendOpt, is_root, pid_alive
from powersweep.cli.apply import SimStateOpt, SimulateOpt
from powersweep.cli.help_layout import option
from powersweep.sim.sim_options import SimOptions
from powersweep.sweep.options import CardOptions

# `status --help`'s last lines
EXAMPLES = """Examples:
  powersweep status
  powersweep status --json
  # a simulated card after `apply --simulate ... --sim-state sim.json`
  powersweep status --simulate rtx3090-air --sim-state sim.json"""


def status_command(
    as_json: Annotated[bool, option("--json", help="Print the status as JSON.")] = False,
    state_dir: Annotated[
        Path | None,
        option(
            metavar="DIR",
            envvar="POWERSWEEP_STATE_DIR",
            show_envvar=True,
            help="Restore journal (default: yours and root's).",
            doc="Where the restore journal lives (default: yours and /var/lib/powersweep).",
        ),
    ] = None,
    unit_dir: Annotated[
        Path | None,
        option(
            metavar="DIR",
            envvar="POWERSWEEP_UNIT_DIR",
            show_envvar=True,
            help="Where to look for the boot unit.",
            doc="Where the boot unit is looked for (default /etc/systemd/system).",
        ),
    ] = None,
    simulate: SimulateOpt = None,
    sim_state: SimStateOpt = SimOptions.state,
    backend: BackendOpt = CardOptions.backend,
) -> None:
    """Show each GPU's limits, clock locks, offsets and readings.

    Also its persistence mode, a restore journal left behind and the boot unit; needs no
    root."""
    from powersweep.cli.rigs import build_settings_rig
    from powersweep.sweep.records.journal import ROOT_STATE_DIR, default_state_dir
    from powersweep.sweep.settings.boot_unit import SYSTEM_UNIT_DIR, read_unit
    from powersweep.sweep.settings.card_status import (
        read_gpu_status,
        read_journal_status,
        render_status,
    )

    with build_settings_rig(simulate, sim_state, backend.value) as rig:
        gpus = read_gpu_status(rig.backend)
    # A sudo sweep keeps its journal in /var/lib/powersweep: look there too when not told where.
    dirs = [state_dir] if state_dir else [default_state_dir()]
    if state_dir is None and not is_root() and ROOT_STATE_DIR not in dirs:
        dirs.append(ROOT_STATE_DIR)
    journals = [read_journal_status(d, pid_alive) for d in dirs]
    unit = read_unit(unit_dir or SYSTEM_UNIT_DIR)
    if as_json:
        data = {
            "gpus": [g.to_dict() for g in gpus],
            "journals": [j.to_dict() for j in journals],
            "unit": unit.to_dict(),
            "simulated": rig.simulated,
        }
        typer.echo(json.dumps(data, indent=2, allow_nan=False))
        return
    typer.echo(render_status(gpus, journals, unit))
