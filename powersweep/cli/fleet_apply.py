"""``powersweep fleet apply REPORT_DIR``: set a fleet report's answer on this node's cards.

Run once per node (the Slurm recipe's last step, or an ``srun``): each card gets its group's
fleet cap or lock, matched by GPU model, or its own best where the report names it an outlier.

The reasoning: docs/fleets.md, "powersweep.cli.fleet_apply".
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from powersweep.cli._common import Handover, info, is_root, warn
from powersweep.cli.apply import (
    CardBackendOpt,
    DryRunOpt,
    ForceOpt,
    GpusOpt,
    PersistOpt,
    SafetyStateDirOpt,
    SimStateOpt,
    SimulateOpt,
    StrictOpt,
    UnitDirOpt,
    _Apply,
    _refuse_if_journal,
    journal_for,
)
from powersweep.cli.flag_params import shared
from powersweep.cli.help_layout import option
from powersweep.errors import PowersweepError, UsageError
from powersweep.flags import SAFETY, SIMULATION
from powersweep.safe_files import write_atomic
from powersweep.sim.sim_options import SimOptions
from powersweep.sweep.options import CardOptions, SafetyOptions

if TYPE_CHECKING:
    from powersweep.sweep.settings.applier import CapChange
    from powersweep.sweep.settings.clock_locks import ClockChange
    from powersweep.sweep.settings.fleet_targets import FleetSetting

GROUP = "Report group"
# `fleet apply --help`'s last lines
EXAMPLES = """Examples:
  # on each node: what would change, then set it, and at every boot
  sudo powersweep fleet apply fleet/ --dry-run
  sudo powersweep fleet apply fleet/ --persist"""

ReportArg = Annotated[
    Path,
    typer.Argument(
        metavar="REPORT_DIR",
        help="A fleet report's folder (fleet.json), as `fleet report` wrote it.",
        show_default=False,
    ),
]
NodeOpt = Annotated[
    str | None,
    option(
        metavar="NAME",
        help="This node's name in the report (default: the short host name).",
        doc="This node's name as the report names its cards (default: the short host name; "
        "simulated: --sim-node).",
        panel=GROUP,
    ),
]
AxisOpt = Annotated[
    str | None,
    option(
        metavar="AXIS",
        help="Only a group swept on this axis: power, sm-clock, mem-clock, grid.",
        doc="Only a group swept on this axis: power, sm-clock, mem-clock or grid (default: "
        "where a card has both, the one with more tokens per joule across the fleet).",
        panel=GROUP,
    ),
]
LoadModeOpt = Annotated[
    str | None,
    option(
        metavar="MODE",
        help="Only a group of this load mode (the report has several).",
        panel=GROUP,
    ),
]
ModelOpt = Annotated[
    str | None,
    option(
        metavar="ID",
        help="Only a group of this served model (the report has several).",
        panel=GROUP,
    ),
]
RecordOpt = Annotated[
    Path | None,
    option(
        metavar="FILE",
        help="This node's record (default REPORT_DIR/applied/NODE.json).",
        doc="Where this node's record goes (JSON: what each card got and why; default "
        "REPORT_DIR/applied/<node>.json).",
        panel=SAFETY,
    ),
]
SimNodeOpt = Annotated[str | None, shared(SimOptions, "node", SIMULATION)]
AXES = ("power", "sm-clock", "mem-clock", "grid")


def fleet_apply_command(
    report: ReportArg,
    node: NodeOpt = None,
    axis: AxisOpt = None,
    load_mode: LoadModeOpt = None,
    model: ModelOpt = None,
    gpus: GpusOpt = None,
    dry_run: DryRunOpt = False,
    strict: StrictOpt = False,
    force: ForceOpt = False,
    persist: PersistOpt = False,
    unit_dir: UnitDirOpt = None,
    record: RecordOpt = None,
    state_dir: SafetyStateDirOpt = SafetyOptions.state_dir,
    simulate: SimulateOpt = None,
    sim_state: SimStateOpt = SimOptions.state,
    sim_node: SimNodeOpt = SimOptions.node,
    backend: CardBackendOpt = CardOptions.backend,
) -> None:
    """Set a fleet report's cap or clock lock on this node's cards.

    Cards are matched by GPU model; an outlier gets its own best. --dry-run and --persist work
    as `apply` has them."""
    from powersweep.cli.rigs import build_settings_rig
    from powersweep.sweep.settings.fleet_targets import choose_settings, read_fleet
    from powersweep.sweep.settings.targets import parse_gpu_selection, select_gpus

    if axis is not None and axis not in AXES:
        raise UsageError(f"--axis must be one of {', '.join(AXES)}, not {axis!r}")
    if simulate is not None and sim_state is None and not dry_run:
        raise UsageError("--simulate needs --sim-state FILE to hold what fleet apply sets")
    fleet = read_fleet(report)
    selection = parse_gpu_selection(gpus) if gpus is not None else None
    who = _node_name(node, simulate, sim_node)
    with build_settings_rig(simulate, sim_state, backend.value, sim_node) as rig:
        if not rig.simulated and not dry_run and not is_root():
            raise UsageError(
                'setting GPU limits needs root: re-run with sudo "$(command -v powersweep)" '
                "fleet apply ... (or try --dry-run first)"
            )
        _refuse_if_journal(state_dir, force, dry_run)
        targets = select_gpus(rig.backend, selection, warn)
        chosen, unmatched = choose_settings(
            fleet, targets, who, axis=axis, load_mode=load_mode, model=model
        )
        for t in unmatched:
            warn(f"{t.label}: no group of the report has this GPU model; left alone")
        if not chosen:
            models = sorted({str(g.gpu_name) for g in fleet.groups})
            raise UsageError(
                f"no card on {who} matches a group of {report} (its GPUs: "
                f"{', '.join(models)}): nothing was changed"
            )
        for c in chosen:
            info(f"{c.target.label}: {c.describe()} ({c.why})")
        caps, clocks = _plan(chosen, strict)
        picked = [c.target for c in chosen]
        _Apply(
            rig, picked, caps, clocks, f"{report.resolve()} (fleet)", unit_dir, persist, False,
            dry_run, False, False, force, None if dry_run else journal_for(state_dir, False),
        ).run()  # fmt: skip
    path = record or report / "applied" / f"{who}.json"
    _write_record(path, who, report, dry_run, chosen)


def _node_name(node: str | None, simulate: str | None, sim_node: str | None) -> str:
    """How the report names this node's cards: a simulated card by its simulated node, a real
    one by its host."""
    if simulate is not None and sim_node:
        return sim_node
    if node:
        return node
    if simulate is not None:
        return os.environ.get("POWERSWEEP_SIM_NODE") or socket.gethostname()
    return socket.gethostname().split(".")[0]


def _plan(
    chosen: Sequence[FleetSetting], strict: bool
) -> tuple[list[CapChange], list[ClockChange]]:
    """Each card's own limit and locks, all checked before any is written (apply's planners,
    card by card, since an outlier's value differs from the others')."""
    from powersweep.sweep.settings.applier import plan_caps
    from powersweep.sweep.settings.clock_locks import plan_clocks

    caps: list[CapChange] = []
    clocks: list[ClockChange] = []
    for c in chosen:
        if c.cap_w is not None:
            caps += plan_caps([c.target], c.cap_w, strict=strict, warn=warn)
        if c.sm_lock_mhz is not None or c.mem_lock_mhz is not None:
            clocks += plan_clocks(
                [c.target], c.sm_lock_mhz, c.mem_lock_mhz, strict=strict, warn=warn
            )
    return caps, clocks


def _write_record(
    path: Path, node: str, report: Path, dry_run: bool, chosen: Sequence[FleetSetting]
) -> None:
    """The per-node record: what each card got (or would get) and why, handed to the sudo user.

    Raises:
        PowersweepError: It cannot be written (the settings are in force all the same).
    """
    data = {
        "node": node,
        "report": str(report.resolve()),
        "dry_run": dry_run,
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cards": [c.to_dict() for c in chosen],
    }
    handover = Handover()
    handover.expect(path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data, indent=1) + "\n")
    except OSError as exc:
        what = "would be set" if dry_run else "was set"
        raise PowersweepError(
            f"cannot write the record {path}: {exc.strerror or exc} (what {what} is above)"
        ) from exc
    handover.hand([path])
    info(f"wrote {path}")
