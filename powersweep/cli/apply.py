"""``powersweep apply``: set what a sweep recommended (or a named cap) on the right GPUs, verify
it, and with ``--persist`` install a systemd unit that sets it again at every boot."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from powersweep.cli._common import StateDirOpt, info, is_root, pid_alive, warn
from powersweep.cli.analyze import Objective
from powersweep.errors import PowersweepError, UsageError

if TYPE_CHECKING:
    from powersweep.cli.rigs import SettingsRig
    from powersweep.sweep.settings.apply import CapChange, CapResult
    from powersweep.sweep.settings.unit import BootCommand

SIMULATION = "Simulation"
PERSIST = "Boot persistence"


# Each option of `powersweep apply` (one alias per option keeps the signature short; status
# shares the rig and unit ones).
RunDirArg = Annotated[
    Path | None,
    typer.Argument(
        metavar="RUN_DIR",
        help="A run directory: set the cap it recommends on the GPUs it measured.",
        show_default=False,
    ),
]
ObjectiveOpt = Annotated[
    Objective | None,
    typer.Option(help="Which recommendation of the run (default: the one its analysis made)."),
]
EtaOpt = Annotated[float, typer.Option(help="cost objective: weight of energy (0-1).")]
CapOpt = Annotated[
    float | None, typer.Option(help="Set this power limit (W per GPU) instead of a run's.")
]
GpusOpt = Annotated[
    str | None,
    typer.Option(help="Which GPUs: NVML indices and/or UUIDs, e.g. 0,1 (default: all)."),
]
ResetOpt = Annotated[
    bool, typer.Option("--reset", help="Put each card's default power limit back.")
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print what would change; change nothing.")
]
StrictOpt = Annotated[
    bool, typer.Option("--strict", help="Refuse a value outside a card's range (no clamping).")
]
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Apply to a card other than the one measured, or while a restore journal exists.",
    ),
]
PersistOpt = Annotated[
    bool,
    typer.Option(
        "--persist",
        help="Also install and enable powersweep-apply.service, which turns persistence mode "
        "on and sets the same values at boot (with --reset: remove it).",
        rich_help_panel=PERSIST,
    ),
]
PrintUnitOpt = Annotated[
    bool,
    typer.Option(
        "--print-unit",
        help="Print the boot unit on stdout instead of installing it; change nothing.",
        rich_help_panel=PERSIST,
    ),
]
UnitDirOpt = Annotated[
    Path | None,
    typer.Option(
        envvar="POWERSWEEP_UNIT_DIR",
        show_envvar=True,
        help="Where the boot unit goes: written there without systemctl (packaging, tests). "
        "Default /etc/systemd/system, then enabled.",
        rich_help_panel=PERSIST,
    ),
]
SimulateOpt = Annotated[
    str | None,
    typer.Option(help="Simulated GPUs (a profile, a+b for two).", rich_help_panel=SIMULATION),
]
SimStateOpt = Annotated[
    Path | None,
    typer.Option(help="File holding the simulated settings.", rich_help_panel=SIMULATION),
]
AtBootOpt = Annotated[bool, typer.Option("--at-boot", hidden=True, help="What the boot unit runs.")]


def apply_command(
    run_dir: RunDirArg = None,
    objective: ObjectiveOpt = None,
    eta: EtaOpt = 0.5,
    cap: CapOpt = None,
    gpus: GpusOpt = None,
    reset: ResetOpt = False,
    dry_run: DryRunOpt = False,
    strict: StrictOpt = False,
    force: ForceOpt = False,
    persist: PersistOpt = False,
    print_unit: PrintUnitOpt = False,
    unit_dir: UnitDirOpt = None,
    state_dir: StateDirOpt = None,
    simulate: SimulateOpt = None,
    sim_state: SimStateOpt = None,
    at_boot: AtBootOpt = False,
) -> None:
    """Set a run's recommended power limit (or --cap W, or --reset) on the right GPUs."""
    from powersweep.cli.rigs import build_settings_rig
    from powersweep.sweep.settings.targets import parse_gpu_selection

    _check_options(
        run_dir, cap, reset, persist, print_unit or dry_run, at_boot, gpus, simulate, sim_state
    )
    if not 0 <= eta <= 1:
        raise UsageError("--eta must be between 0 and 1")
    if reset and print_unit:
        raise UsageError("--reset --persist removes the boot unit; there is no unit to print")
    persist = persist or print_unit
    selection = parse_gpu_selection(gpus) if gpus is not None else None
    changes_nothing = dry_run or print_unit
    with build_settings_rig(simulate, sim_state) as rig:
        if not rig.simulated and not changes_nothing and not is_root():
            raise UsageError(
                'applying GPU settings needs root: re-run with sudo "$(command -v powersweep)" '
                "apply ... (or try --dry-run first)"
            )
        if not at_boot and not print_unit:
            _refuse_if_journal(state_dir, force, dry_run)
        from powersweep.sweep.settings.apply import plan_caps
        from powersweep.sweep.settings.recommendation import read_recommendation
        from powersweep.sweep.settings.targets import match_run_gpus, select_gpus

        source = f"--cap {cap:g}" if cap is not None else "--reset"
        if run_dir is not None:
            rec = read_recommendation(run_dir, objective.value if objective else None, eta=eta)
            extra = f", {rec.tps_per_w:.4g} TPS/W" if rec.tps_per_w is not None else ""
            info(f"{run_dir}: {rec.objective} recommendation {rec.cap_w:g} W per GPU{extra}")
            for note in rec.notes:
                warn(note)
            targets = match_run_gpus(
                rig.backend, rec.gpus, selection=selection, force=force, warn=warn
            )
            cap, source = rec.cap_w, f"{run_dir.resolve()} ({rec.objective})"
        else:
            targets = select_gpus(rig.backend, selection, warn)
        plan = plan_caps(targets, None if reset else cap, strict=strict, warn=warn)
        _Apply(
            rig, plan, source, unit_dir, persist, print_unit, dry_run, reset, at_boot, force
        ).run()


def _check_options(
    run_dir: Path | None,
    cap: float | None,
    reset: bool,
    persist: bool,
    changes_nothing: bool,
    at_boot: bool,
    gpus: str | None,
    simulate: str | None,
    sim_state: Path | None,
) -> None:
    """Refuse contradictory options before anything is read or changed."""
    asked = [n for n, v in (("RUN_DIR", run_dir), ("--cap", cap), ("--reset", reset)) if v]
    if len(asked) != 1:
        what = " and ".join(asked) if asked else "nothing"
        raise UsageError(f"give a RUN_DIR, --cap W or --reset (got {what})")
    if at_boot and (cap is None or gpus is None or persist or changes_nothing):
        raise UsageError("--at-boot is what the boot unit runs: it takes --cap and --gpus only")
    if simulate is not None and sim_state is None and not changes_nothing:
        raise UsageError("--simulate needs --sim-state FILE to hold what apply sets")


def _refuse_if_journal(state_dir: Path | None, force: bool, dry_run: bool) -> None:
    """A sweep running now, or a killed one's journal, would overwrite what apply sets."""
    from powersweep.sweep.records.journal import Journal, default_state_dir

    journal = Journal(state_dir or default_state_dir())
    if not journal.exists():
        return
    try:
        entry = journal.read()
    except PowersweepError:
        entry = None  # damaged: still a sweep that did not finish
    if entry is not None and pid_alive(entry.pid):
        why = f"a sweep is running (pid {entry.pid}) and will put its original limits back"
    else:
        why = (
            f"a killed sweep left a restore journal ({journal.path}); `powersweep restore` "
            "would overwrite this setting"
        )
    if dry_run and not force:
        warn(f"{why}: apply would refuse (run `powersweep restore` first, or pass --force)")
    elif not force:
        raise UsageError(f"{why}: run `powersweep restore` first, or pass --force")
    else:
        warn(f"{why}; applying anyway (--force)")


@dataclass(frozen=True)
class _Apply:
    """The steps after the plan: print, write, verify, persist (each a short method)."""

    rig: SettingsRig
    plan: Sequence[CapChange]
    source: str
    unit_dir: Path | None
    persist: bool
    print_unit: bool
    dry_run: bool
    reset: bool
    at_boot: bool
    force: bool

    def run(self) -> None:
        unit_text = None if self.reset or not self.persist else self._unit_text()
        if self.print_unit:
            assert unit_text is not None
            for c in self.plan:
                info(f"{c.target.label}: the unit sets {c.after_w:g} W at boot")
            typer.echo(unit_text, nl=False)
            return
        unit_dir = self._unit_dir() if self.persist else None
        if self.dry_run:
            for c in self.plan:
                typer.echo(f"{self._line(c)} (dry run: nothing changed)")
            if self.persist and unit_dir is not None:
                self._dry_run_unit(unit_dir)
            return
        results = self._write()
        if self.at_boot or (self.persist and not self.reset):
            self._persistence_on()
        if self.persist:
            self._unit(unit_text, unit_dir, results)
        elif not self.at_boot:
            self._warn_if_not_persistent()
            self._warn_about_boot_unit()

    def _dry_run_unit(self, unit_dir: Path) -> None:
        from powersweep.sweep.settings.unit import read_unit

        installed = read_unit(unit_dir)
        if not self.reset:
            typer.echo(f"would write {installed.path}")
        elif installed.installed:
            typer.echo(f"would remove {installed.path}")
        else:
            typer.echo(f"no unit installed in {unit_dir}")

    @staticmethod
    def _line(c: CapChange, readback_w: float | None = None) -> str:
        line = f"{c.target.label}: power limit {c.before_w:g} W -> {c.after_w:g} W"
        if readback_w is not None:
            line += f" (verified: reads back {readback_w:g} W)"
        return line

    def _write(self) -> list[CapResult]:
        from powersweep.sweep.settings.apply import apply_caps

        results = apply_caps(self.plan, warn)
        for r in results:
            typer.echo(self._line(r.change, r.readback_w))
            if r.note:
                warn(r.note)
        return results

    def _persistence_on(self) -> None:
        from powersweep.sweep.settings.apply import enable_persistence

        for t, before, after in enable_persistence([c.target for c in self.plan], warn):
            if before is not True and after is True:
                typer.echo(f"{t.label}: persistence mode off -> on")

    def _warn_if_not_persistent(self) -> None:
        off = [c.target for c in self.plan if c.target.gpu.persistence_mode() is False]
        if off:
            which = ", ".join(f"GPU {t.identity.index}" for t in off)
            warn(
                f"persistence mode is off on {which}: the driver may drop the limit when no "
                "program uses the card, and a reboot always does; --persist keeps it"
            )

    def _warn_about_boot_unit(self) -> None:
        """An installed unit sets its own values again at the next boot: say so."""
        from powersweep.sweep.settings.unit import SYSTEM_UNIT_DIR, read_unit

        unit = read_unit(self.unit_dir or SYSTEM_UNIT_DIR)
        if not unit.installed:
            return
        at_boot = {s.uuid: s.power_limit_w for s in unit.settings}
        stale = [
            c
            for c in self.plan
            if c.target.identity.uuid in at_boot
            and abs(at_boot[c.target.identity.uuid] - c.after_w) > 0.5
        ]
        if self.reset or stale:
            fix = "--reset --persist removes it" if self.reset else "add --persist to update it"
            warn(f"{unit.path} still sets other limits at boot: {fix}")

    def _unit_text(self) -> str:
        from powersweep.sweep.settings.unit import BootSetting, render_unit

        settings = [
            BootSetting(c.target.identity.uuid, c.target.identity.name, c.after_w)
            for c in self.plan
        ]
        return render_unit(settings, self._boot_command(), self.source)

    def _boot_command(self) -> BootCommand:
        from powersweep.sweep.settings.unit import BootCommand

        if not self.rig.simulated:
            smi = shutil.which("nvidia-smi") or shutil.which(
                "nvidia-smi", path="/usr/bin:/usr/local/bin:/bin"
            )
            if smi:
                return BootCommand("nvidia-smi", (os.path.abspath(smi),))
        return BootCommand("powersweep", (*_own_command(), "apply", *self.rig.rig_args))

    def _unit_dir(self) -> Path | None:
        """Where the unit goes (checked now, before any change); None: no systemd here."""
        from powersweep.sweep.settings.unit import (
            SYSTEM_UNIT_DIR,
            check_unit_dir,
            read_unit,
            systemd_running,
        )

        if self.unit_dir is not None:
            unit_dir = self.unit_dir
        elif not systemd_running():
            return None
        elif self.rig.simulated:
            raise UsageError(
                "a simulated rig's boot unit does not go into the system: pass --unit-dir DIR"
            )
        else:
            unit_dir = SYSTEM_UNIT_DIR
        check_unit_dir(unit_dir)
        existing = read_unit(unit_dir)
        if existing.installed and not existing.ours and not self.force:
            raise UsageError(
                f"{existing.path} exists and was not written by powersweep: left alone (pass "
                "--force to replace it); nothing was changed"
            )
        return unit_dir

    def _unit(self, text: str | None, unit_dir: Path | None, results: list[CapResult]) -> None:
        from powersweep.sweep.settings.apply import undo
        from powersweep.sweep.settings.unit import (
            enable_unit,
            install_unit,
            remove_unit,
            run_systemctl,
        )

        systemctl = run_systemctl if self.unit_dir is None else None
        if unit_dir is None:
            if self.reset:
                warn("this machine does not run systemd: there is no powersweep unit to remove")
                return
            warn(
                "this machine does not run systemd: the boot unit was not installed; here it "
                "is, for your init system"
            )
            typer.echo(text, nl=False)
            return
        if self.reset:
            removed = remove_unit(unit_dir, systemctl, force=self.force)
            typer.echo(f"removed {removed}" if removed else f"no unit installed in {unit_dir}")
            return
        assert text is not None
        try:
            path = install_unit(text, unit_dir)
        except PowersweepError as exc:
            raise PowersweepError(f"{exc}{undo([r.change for r in results], warn)}") from exc
        if systemctl is not None:
            enable_unit(path, systemctl)  # the limits stay: they are set, the unit is written
        enabled = (
            "enabled" if systemctl else "not enabled (run: systemctl enable " + path.name + ")"
        )
        typer.echo(f"wrote {path} (mode 0644, {enabled}): these limits are set again at boot")


def _own_command() -> tuple[str, ...]:
    """This powersweep by absolute path (sudo's secure_path may not reach a virtualenv)."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "powersweep" and argv0.exists():
        return (str(argv0.absolute()),)
    beside = Path(sys.executable).parent / "powersweep"
    if beside.exists():
        return (str(beside.absolute()),)
    found = shutil.which("powersweep")
    if found:
        return (os.path.abspath(found),)
    return (os.path.abspath(sys.executable), "-m", "powersweep")
