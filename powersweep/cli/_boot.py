"""``apply --persist``: the one boot unit for every card, merged by UUID.

What this apply sets on its cards replaces their lines in the installed unit and leaves the
other cards' lines; ``--reset --persist`` drops its cards' lines and removes the unit only when
no card is left in it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from powersweep.cli._common import info, warn
from powersweep.errors import PowersweepError, UsageError

if TYPE_CHECKING:
    from powersweep.cli.rigs import SettingsRig
    from powersweep.sweep.settings.applier import CapChange, CapResult
    from powersweep.sweep.settings.boot_unit import BootCommand, BootSetting
    from powersweep.sweep.settings.clock_locks import ClockChange, ClockResult
    from powersweep.sweep.settings.clock_offsets import OffsetChange, OffsetClock, OffsetResult
    from powersweep.sweep.settings.targets import Target

    # What an apply set: limits, locks and (optional, for older callers) SM clock offsets.
    Results = (
        tuple[list[CapResult], list[ClockResult]]
        | tuple[list[CapResult], list[ClockResult], list[OffsetResult]]
    )


@dataclass(frozen=True)
class BootUnit:
    """The boot unit of one ``apply``: its settings, where it goes, and how it is written.

    Attributes:
        rig: The cards' backend (a simulated rig's unit calls powersweep with its options).
        targets: The cards this apply sets.
        caps: Their power limit changes.
        clocks: Their clock lock changes.
        source: Where the values come from (a run directory, ``--cap 290``).
        unit_dir: ``--unit-dir`` (None: the system's, through systemctl).
        reset: ``--reset``: this apply drops its cards' lines.
        force: Replace a unit powersweep did not write.
        offsets: Their SM and memory clock offset changes.
    """

    rig: SettingsRig
    targets: Sequence[Target]
    caps: Sequence[CapChange]
    clocks: Sequence[ClockChange]
    source: str
    unit_dir: Path | None
    reset: bool
    force: bool
    offsets: Sequence[OffsetChange] = ()

    def dry_run(self, unit_dir: Path) -> None:
        from powersweep.sweep.settings.boot_unit import read_unit

        installed = read_unit(unit_dir)
        if not self.reset:
            typer.echo(f"would write {installed.path}")
        elif self.kept(unit_dir):
            typer.echo(f"would update {installed.path}: {self.dropped_text()}")
        elif installed.installed:
            typer.echo(f"would remove {installed.path}")
        else:
            typer.echo(f"no unit installed in {unit_dir}")

    def installed_dir(self) -> Path | None:
        """Where an installed unit would be read from for ``--print-unit`` (None: nowhere)."""
        from powersweep.sweep.settings.boot_unit import SYSTEM_UNIT_DIR

        return self.unit_dir or (None if self.rig.simulated else SYSTEM_UNIT_DIR)

    def merged(self, boot: Sequence[BootSetting], unit_dir: Path | None) -> list[BootSetting]:
        """This apply's settings merged by UUID into what the installed unit sets, so one
        card's ``--persist`` keeps the other cards' lines."""
        from powersweep.sweep.settings.boot_unit import merge_settings, read_unit

        installed = read_unit(unit_dir) if unit_dir is not None else None
        if installed is None or not installed.ours:
            return list(boot)
        mine = {b.uuid for b in boot}
        for other in installed.settings:
            if other.uuid not in mine:
                info(f"{other.uuid}: the unit keeps {other.describe()} at boot")
        return merge_settings(installed.settings, boot)

    def kept(self, unit_dir: Path) -> list[BootSetting]:
        """``--reset --persist``: the installed unit's lines of the cards not reset."""
        from powersweep.sweep.settings.boot_unit import merge_settings, read_unit

        installed = read_unit(unit_dir)
        if not installed.ours:
            return []
        return merge_settings(installed.settings, drop=[t.identity.uuid for t in self.targets])

    def dropped_text(self) -> str:
        return ", ".join(t.label for t in self.targets) + " dropped, the other cards' lines kept"

    def warn_if_stale(self) -> None:
        """An installed unit sets its own values again at the next boot: say so."""
        from powersweep.sweep.settings.boot_unit import SYSTEM_UNIT_DIR, read_unit

        unit = read_unit(self.unit_dir or SYSTEM_UNIT_DIR)
        if not unit.installed:
            return
        at_boot = {s.uuid: s for s in unit.settings}
        stale = (
            [
                c
                for c in self.caps
                if c.target.identity.uuid in at_boot
                and abs((at_boot[c.target.identity.uuid].power_limit_w or 0.0) - c.after_w) > 0.5
            ]
            + [
                c
                for c in self.clocks
                if c.target.identity.uuid in at_boot
                and _boot_locks(at_boot[c.target.identity.uuid], c)
                != [c.after(k) for k in c.kinds()]
            ]
            + [
                o
                for o in self.offsets
                if o.target.identity.uuid in at_boot
                and abs((_boot_offset(at_boot[o.target.identity.uuid], o) or 0.0) - o.after_mhz)
                > 0.5
            ]
        )
        reset_here = self.reset and (
            not at_boot or any(t.identity.uuid in at_boot for t in self.targets)
        )
        if reset_here or stale:
            if not self.reset:
                fix = "add --persist to update it"
            elif {s.uuid for s in unit.settings} <= {t.identity.uuid for t in self.targets}:
                fix = "--reset --persist removes it"
            else:
                fix = "--reset --persist drops these cards' lines"
            warn(f"{unit.path} still sets other values at boot: {fix}")

    def settings(self) -> list[BootSetting]:
        """What the unit sets on each card: what this apply sets, and what it leaves in force
        (so a lock alone does not drop an earlier cap at the next boot, nor a cap a lock)."""
        from powersweep.sweep.settings.boot_unit import BootSetting

        caps = {c.target.identity.uuid: c.after_w for c in self.caps}
        clocks = {c.target.identity.uuid: c for c in self.clocks}
        offsets = {o.target.identity.uuid: o.after_mhz for o in self.offsets if o.clock == "sm"}
        mem_offsets = {
            o.target.identity.uuid: o.after_mhz for o in self.offsets if o.clock == "mem"
        }
        out = []
        for t in self.targets:
            uuid = t.identity.uuid
            cap_w = caps[uuid] if uuid in caps else _limit_in_force(t)
            held = t.gpu.locked_clocks()  # read before the write; None where NVML cannot
            sm, mem, low = held.sm_mhz, held.mem_mhz, held.sm_min_mhz
            change = clocks.get(uuid)
            if change is not None and "sm" in change.kinds():
                sm, low = change.after("sm"), change.sm_min_mhz
            if change is not None:
                mem = change.after("mem") if "mem" in change.kinds() else mem
            offset = offsets[uuid] if uuid in offsets else _offset_in_force(t, sm)
            mem_offset = (
                mem_offsets[uuid] if uuid in mem_offsets else _offset_in_force(t, sm, "mem")
            )
            if mem_offset is not None and abs(mem_offset) <= 0.5:
                mem_offset = None  # offset 0: nothing to set at boot
            setting = BootSetting(
                uuid,
                t.identity.name,
                cap_w,
                sm,
                mem,
                self.source,
                t.identity.vendor,
                offset if offset is not None and abs(offset) > 0.5 else None,
                low if sm is not None else None,
                mem_offset_mhz=mem_offset,
            )
            # the driver the offsets are trusted under: at a boot under another they are skipped
            driver = t.identity.driver_version if setting.offsets() else None
            out.append(replace(setting, offset_driver=driver))
        return out

    def text(self, settings: Sequence[BootSetting]) -> str:
        from powersweep.sweep.settings.boot_unit import render_unit

        return render_unit(settings, self.command(settings), self.source)

    def command(self, settings: Sequence[BootSetting]) -> BootCommand | dict[str, BootCommand]:
        """Each vendor's own tool by absolute path, for every card the unit sets (the merged
        unit's other cards too); this powersweep when one is missing (or on a simulated rig,
        whose cards only powersweep can set)."""
        from powersweep.sweep.settings.boot_unit import BootCommand

        fallback = BootCommand("powersweep", (*_own_command(), "apply", *self.rig.rig_args))
        if self.rig.simulated:
            return fallback
        tools: dict[str, BootCommand] = {}
        for vendor in sorted({s.vendor for s in settings if not s.offsets()}):
            tool = _vendor_tool(vendor)
            if tool is None:
                return fallback
            tools[vendor] = tool
        if any(s.offsets() for s in settings):
            # no vendor tool sets a clock offset: those cards' lines run powersweep
            tools["powersweep"] = fallback
        return tools

    def resolve_dir(self) -> Path | None:
        """Where the unit goes (checked now, before any change); None: no systemd here."""
        from powersweep.sweep.settings.boot_unit import (
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

    def install(
        self,
        text: str | None,
        unit_dir: Path | None,
        results: Results,
    ) -> None:
        from powersweep.sweep.settings.applier import undo_settings
        from powersweep.sweep.settings.boot_unit import (
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
            kept = self.kept(unit_dir)
            if not kept:
                removed = remove_unit(unit_dir, systemctl, force=self.force)
                typer.echo(f"removed {removed}" if removed else f"no unit installed in {unit_dir}")
                return
            path = install_unit(self.text(kept), unit_dir)
            if systemctl is not None:
                enable_unit(path, systemctl)
            typer.echo(f"updated {path}: {self.dropped_text()}")
            return
        assert text is not None
        try:
            path = install_unit(text, unit_dir)
        except PowersweepError as exc:
            caps, clocks, *offsets = results
            undone = undo_settings(caps, clocks, warn, *offsets)
            raise PowersweepError(f"{exc}{undone}") from exc
        if systemctl is not None:
            enable_unit(path, systemctl)  # the settings stay: they are set, the unit is written
        enabled = (
            "enabled" if systemctl else "not enabled (run: systemctl enable " + path.name + ")"
        )
        typer.echo(f"wrote {path} (mode 0644, {enabled}): these settings are set again at boot")


def _boot_locks(setting: BootSetting, c: ClockChange) -> list[float | None]:
    return [setting.sm_clock_mhz if k == "sm" else setting.mem_clock_mhz for k in c.kinds()]


def _offset_in_force(
    t: Target, sm_lock_mhz: float | None, clock: OffsetClock = "sm"
) -> float | None:
    """The SM (or memory) clock offset a card has now, for the unit to keep; an SM one only when
    an SM lock goes with it.

    An SM offset shifts the whole curve: set at boot without a lock, it would let the card boost
    past its stock clocks. Where the unit knows no lock (NVML cannot read one back), the
    offset is left out and the user told how to keep both. A memory offset leaves that curve
    alone, so it is kept without a lock.
    """
    from powersweep.sweep.settings.clock_offsets import read_offset

    offset = read_offset(t.gpu, clock).offset_mhz
    if offset is None or abs(offset) <= 0.5:
        return None
    if clock == "sm" and sm_lock_mhz is None:
        warn(
            f"{t.label}: its SM clock offset {offset:+g} MHz is not written into the boot unit, "
            "which knows no SM clock lock to go with it: apply the undervolt run again with "
            "--persist to keep both"
        )
        return None
    return offset


def _boot_offset(setting: BootSetting, o: OffsetChange) -> float | None:
    return setting.mem_offset_mhz if o.clock == "mem" else setting.sm_offset_mhz


def _limit_in_force(t: Target) -> float | None:
    """The limit a card has now when it differs from its default (None: the default)."""
    try:
        env = t.gpu.envelope()
    except PowersweepError:
        return None  # a card without settable limits: the unit sets only its locks
    return env.current_w if abs(env.current_w - env.default_w) > 0.5 else None


# Where each vendor's tool is looked for when it is not on PATH (sudo's secure_path, ROCm).
_VENDOR_TOOLS = {
    "nvidia": ("nvidia-smi", "/usr/bin:/usr/local/bin:/bin"),
    "amd": ("amd-smi", "/opt/rocm/bin:/usr/bin:/usr/local/bin:/bin"),
}


def _vendor_tool(vendor: str) -> BootCommand | None:
    """``nvidia-smi`` or ``amd-smi`` by absolute path; None when it is not installed."""
    from powersweep.sweep.settings.boot_unit import BootCommand

    name, fallback_path = _VENDOR_TOOLS.get(vendor, ("", ""))
    found = name and (shutil.which(name) or shutil.which(name, path=fallback_path))
    if not found:
        return None
    if vendor == "amd":
        return BootCommand("amd-smi", (os.path.abspath(found),))
    return BootCommand("nvidia-smi", (os.path.abspath(found),))


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
