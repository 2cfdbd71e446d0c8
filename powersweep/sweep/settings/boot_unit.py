"""The systemd unit that puts the settings back at every boot: render, install, remove, read.

``powersweep-apply.service`` is a oneshot unit that sets each card's power limit and clock locks
(clock offsets only with ``--trust-offset``), found by UUID, through tools named by absolute
path, so it never depends on ``PATH``.

The reasoning: docs/apply.md, "powersweep.sweep.settings.boot_unit".
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from powersweep.errors import PowersweepError, UsageError
from powersweep.runformat import JsonMap, JsonObject
from powersweep.safe_files import write_atomic

UNIT_NAME = "powersweep-apply.service"
SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
UNIT_DIR_ENV = "POWERSWEEP_UNIT_DIR"
# sd_booted(3): systemd is the init system when this directory exists.
SYSTEMD_RUNTIME_DIR = Path("/run/systemd/system")
UNIT_MODE = 0o644
_MARKER = "# powersweep-settings: "
_WANTED_BY = ("multi-user.target", "nvidia-persistenced.service")

# Runs ``systemctl ARGS``; raises PowersweepError when it fails.
Systemctl = Callable[[Sequence[str]], None]


@dataclass(frozen=True)
class BootSetting:
    """What the unit sets on one GPU at boot.

    Attributes:
        uuid: The card (UUIDs survive reboots; indices may not).
        name: Its name, for the comment.
        power_limit_w: The power limit, W (None: the driver's default stays).
        sm_clock_mhz: The SM clock lock, MHz (None: not locked).
        mem_clock_mhz: The memory clock lock, MHz (None: not locked).
        source: Where this card's values came from (a run directory, ``--cap 290``).
        vendor: ``nvidia`` or ``amd``: which vendor tool sets the card.
        sm_offset_mhz: The SM clock offset, MHz (None: the card's own curve); set through
            ``powersweep``, which no vendor tool can stand in for.
        sm_clock_min_mhz: The SM lock's bottom, MHz (an idle card clocks down to it); None:
            min = max (a unit written before lock ranges).
        mem_offset_mhz: The memory clock offset, MHz in NVML's unit (None: none), the same.
        offset_driver: The driver version the offsets were trusted under (``--trust-offset``):
            at a boot under another one they are skipped (None: no offset, or a unit written
            before the check, whose offsets are set whatever the driver).
    """

    uuid: str
    name: str
    power_limit_w: float | None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    source: str = ""
    vendor: str = "nvidia"
    sm_offset_mhz: float | None = None
    sm_clock_min_mhz: float | None = None
    mem_offset_mhz: float | None = None
    offset_driver: str | None = None

    @classmethod
    def from_dict(cls, data: JsonMap) -> BootSetting:
        """The inverse of :meth:`to_dict` (a unit written before offsets existed has none).

        Raises:
            KeyError: No ``uuid``.
            TypeError, ValueError: A value that is not a number where one belongs.
        """
        return cls(
            str(data["uuid"]),
            str(data.get("name", "")),
            _opt_float(data.get("power_limit_w")),
            _opt_float(data.get("sm_clock_mhz")),
            _opt_float(data.get("mem_clock_mhz")),
            str(data.get("source") or ""),
            str(data.get("vendor") or "nvidia"),
            _opt_float(data.get("sm_offset_mhz")),
            _opt_float(data.get("sm_clock_min_mhz")),
            _opt_float(data.get("mem_offset_mhz")),
            None if data.get("offset_driver") is None else str(data["offset_driver"]),
        )

    def to_dict(self) -> JsonObject:
        """The JSON form (the unit's marker line, ``powersweep status --json``)."""
        return {
            "uuid": self.uuid,
            "name": self.name,
            "power_limit_w": self.power_limit_w,
            "sm_clock_mhz": self.sm_clock_mhz,
            "mem_clock_mhz": self.mem_clock_mhz,
            "source": self.source,
            "vendor": self.vendor,
            "sm_offset_mhz": self.sm_offset_mhz,
            "sm_clock_min_mhz": self.sm_clock_min_mhz,
            "mem_offset_mhz": self.mem_offset_mhz,
            "offset_driver": self.offset_driver,
        }

    def offsets(self) -> list[tuple[str, float]]:
        """``[("SM clock offset", 180.0), ("memory clock offset", 1000.0)]``: those it sets."""
        named = (
            ("SM clock offset", self.sm_offset_mhz),
            ("memory clock offset", self.mem_offset_mhz),
        )
        return [(what, mhz) for what, mhz in named if mhz is not None]

    def describe(self) -> str:
        """``290 W, SM 1410 MHz`` or ``450 W, SM 2790 MHz +180 MHz offset``: what the unit
        sets on this card."""
        parts = [f"{self.power_limit_w:g} W"] if self.power_limit_w is not None else []
        offset = f" {self.sm_offset_mhz:+g} MHz offset" if self.sm_offset_mhz is not None else ""
        if self.sm_clock_mhz is not None:
            low = self.sm_clock_min_mhz
            span = f"{low:g}-" if low is not None and low < self.sm_clock_mhz else ""
            parts.append(f"SM {span}{self.sm_clock_mhz:g} MHz{offset}")
        elif offset:
            parts.append(f"SM clock{offset}")
        if self.mem_clock_mhz is not None:
            parts.append(f"memory {self.mem_clock_mhz:g} MHz")
        if self.mem_offset_mhz is not None:
            parts.append(f"{self.mem_offset_mhz:+g} MHz memory offset")
        if self.offset_driver is not None:
            parts.append(f"offsets under driver {self.offset_driver} only")
        return ", ".join(parts) or "persistence mode only"


@dataclass(frozen=True)
class BootCommand:
    """The program the unit runs.

    Attributes:
        kind: ``nvidia-smi``, ``amd-smi`` or ``powersweep``.
        argv: The absolute program path and any fixed arguments before the settings (for
            ``powersweep``: ``apply`` and, on a simulated rig, its ``--simulate`` options).
    """

    kind: Literal["nvidia-smi", "amd-smi", "powersweep"]
    argv: tuple[str, ...]


@dataclass(frozen=True)
class UnitStatus:
    """Whether the unit is installed, and what it applies.

    Attributes:
        path: Where it would be.
        installed: The file exists.
        enabled: It is linked into ``multi-user.target.wants`` (None when unknown).
        settings: The settings its marker line carries (empty when none or unreadable).
        ours: The file carries powersweep's marker line.
        error: Why it could not be read, else None.
    """

    path: Path
    installed: bool
    enabled: bool | None
    settings: tuple[BootSetting, ...]
    ours: bool
    error: str | None = None

    def to_dict(self) -> JsonObject:
        """The JSON form (``powersweep status --json``)."""
        return {
            "path": str(self.path),
            "installed": self.installed,
            "enabled": self.enabled,
            "written_by_powersweep": self.ours,
            "settings": [s.to_dict() for s in self.settings],
            "error": self.error,
        }


def merge_settings(
    installed: Sequence[BootSetting],
    new: Sequence[BootSetting] = (),
    drop: Sequence[str] = (),
) -> list[BootSetting]:
    """The settings of one unit for every card: the installed unit's, updated by UUID.

    Args:
        installed: What the installed unit sets (its order is kept).
        new: This apply's settings: each replaces the installed line of its card, or is added.
        drop: UUIDs whose lines go (``apply --reset --persist`` on those cards).

    Returns:
        One setting per card, none of the dropped ones.
    """
    by_uuid = {s.uuid: s for s in installed}
    for s in new:
        by_uuid[s.uuid] = s
    gone = set(drop)
    return [s for s in by_uuid.values() if s.uuid not in gone]


def systemd_running(runtime_dir: Path = SYSTEMD_RUNTIME_DIR) -> bool:
    """True when systemd is the init system (as ``sd_booted`` tells)."""
    return runtime_dir.is_dir()


def render_unit(
    settings: Sequence[BootSetting],
    command: BootCommand | Mapping[str, BootCommand],
    source: str,
) -> str:
    """The unit's text.

    Args:
        settings: One entry per GPU.
        command: The program that applies them, or one per vendor (``{"nvidia": ...,
            "amd": ...}``) on a machine with both, with ``"powersweep"`` for the cards with an
            SM clock offset when the vendors' programs are vendor tools.
        source: Where the values come from (a run directory, ``--cap 290``), for the comment.

    Raises:
        UsageError: No settings, a value the unit cannot carry, or no program for a vendor.
    """
    if not settings:
        raise UsageError("no GPU to write a boot unit for")
    marker = json.dumps(
        {"version": 1, "gpus": [s.to_dict() for s in settings]}, separators=(",", ":")
    )
    # the NVIDIA driver's persistence daemon: with AMD cards alone there is none to follow
    nvidia = any(s.vendor != "amd" for s in settings)
    lines = [
        f"# Written by `powersweep apply --persist` from {_one_line(source)}.",
        "# Remove it with: sudo powersweep apply --reset --persist (--gpus N: that card's lines)",
        *(
            f"# {s.uuid} ({_one_line(s.name) or 'GPU'}): {s.describe()}"
            + (f", from {_one_line(s.source)}" if s.source else "")
            for s in settings
        ),
        f"{_MARKER}{marker}",
        "[Unit]",
        "Description=Apply the GPU power limits and clock locks chosen with powersweep",
    ]
    if nvidia:
        # The driver's persistence daemon starts once the driver is up; a driver reload
        # restarts it, and PartOf + WantedBy run this unit again then.
        lines += [
            "After=systemd-modules-load.service nvidia-persistenced.service",
            "Wants=nvidia-persistenced.service",
            "PartOf=nvidia-persistenced.service",
        ]
    else:
        lines.append("After=systemd-modules-load.service")
    lines += ["", "[Service]", "Type=oneshot", "RemainAfterExit=yes"]
    lines += [f"ExecStart={line}" for line in _exec_lines(settings, command)]
    wanted = _WANTED_BY if nvidia else _WANTED_BY[:1]
    lines += ["", "[Install]", f"WantedBy={' '.join(wanted)}", ""]
    return "\n".join(lines)


def _exec_lines(
    settings: Sequence[BootSetting], command: BootCommand | Mapping[str, BootCommand]
) -> list[str]:
    for s in settings:
        if not s.uuid or any(c.isspace() for c in s.uuid):
            raise UsageError(
                f"cannot write a boot unit for a GPU without a usable UUID ({s.uuid!r})"
            )
    lines = []
    for s in settings:
        cmd = _command_for(s, command)
        if cmd.kind == "nvidia-smi":
            lines += _nvidia_smi_lines(cmd, s)
        elif cmd.kind == "amd-smi":
            lines += _amd_smi_lines(cmd, s)
        else:
            lines.append(_quote([*cmd.argv, "--at-boot", *_at_boot_args(s)]))
    # '-': a line that fails (a card gone, one that refuses a value or persistence mode) is
    # logged and the next runs: one card must not keep the others from their settings
    return ["-" + line for line in lines]


def _command_for(s: BootSetting, command: BootCommand | Mapping[str, BootCommand]) -> BootCommand:
    """The program that sets one card: ``powersweep`` when it has an SM or memory clock offset
    (no vendor tool sets one), else its vendor's.

    Raises:
        UsageError: No program for its vendor, or none that can set its offset.
    """
    if s.offsets():
        cmd = command if isinstance(command, BootCommand) else command.get("powersweep")
        if cmd is None or cmd.kind != "powersweep":
            what = " and ".join(what for what, _ in s.offsets())
            raise UsageError(
                f"the {what} of {s.uuid} can be set at boot only by powersweep "
                "(nvidia-smi has no option for it), and the unit was given no powersweep command"
            )
        return cmd
    cmd = command if isinstance(command, BootCommand) else command.get(s.vendor)
    if cmd is None:
        raise UsageError(f"no program sets the {s.vendor} card {s.uuid} at boot")
    return cmd


def _nvidia_smi_lines(cmd: BootCommand, s: BootSetting) -> list[str]:
    card = [*cmd.argv, "-i", s.uuid]
    lines = [_quote([*card, "--persistence-mode=1"])]
    if s.power_limit_w is not None:
        lines.append(_quote([*card, f"--power-limit={s.power_limit_w:g}"]))
    # a lock is a range: the SM clock's from its bottom (an idle card clocks down to it) to the
    # clock, the memory clock's min = max
    if s.sm_clock_mhz is not None:
        lines.append(_quote([*card, "-lgc", _mhz_range(s.sm_clock_mhz, s.sm_clock_min_mhz)]))
    if s.mem_clock_mhz is not None:
        lines.append(_quote([*card, "-lmc", _mhz_range(s.mem_clock_mhz)]))
    return lines


def _amd_smi_lines(cmd: BootCommand, s: BootSetting) -> list[str]:
    """``amd-smi set -g UUID ...``: one setting per call (``--power-cap`` applies to the last
    ``-g`` only), whole watts and MHz; a lock is the level MANUAL, then max and min."""
    card = [*cmd.argv, "set", "-g", s.uuid]
    lines = []
    if s.power_limit_w is not None:
        lines.append(_quote([*card, "-o", f"{round(s.power_limit_w)}"]))
    locks = [
        (k, v, low)
        for k, v, low in (
            ("sclk", s.sm_clock_mhz, s.sm_clock_min_mhz),
            ("mclk", s.mem_clock_mhz, None),
        )
        if v
    ]
    if locks:
        lines.append(_quote([*card, "-l", "MANUAL"]))
    for clk, mhz, low in locks:
        # the top first: a new top below the card's bottom would be refused
        lines.append(_quote([*card, "-L", clk, "max", f"{round(mhz)}"]))
        lines.append(_quote([*card, "-L", clk, "min", f"{round(mhz if low is None else low)}"]))
    return lines


def _mhz_range(mhz: float, min_mhz: float | None = None) -> str:
    """``MIN,MAX`` in whole MHz, as nvidia-smi (like NVML) takes them (min = max without one)."""
    return f"{round(mhz if min_mhz is None else min_mhz)},{round(mhz)}"


def _at_boot_args(s: BootSetting) -> list[str]:
    args = []
    if s.power_limit_w is not None:
        args += ["--cap", f"{s.power_limit_w:g}"]
    if s.sm_clock_mhz is not None:
        args += ["--sm-clock", f"{s.sm_clock_mhz:g}"]
        if s.sm_clock_min_mhz is not None:
            args += ["--sm-clock-min", f"{s.sm_clock_min_mhz:g}"]
    if s.mem_clock_mhz is not None:
        args += ["--mem-clock", f"{s.mem_clock_mhz:g}"]
    if s.sm_offset_mhz is not None:
        # "=": a negative offset must not read as an option
        args.append(f"--sm-offset={s.sm_offset_mhz:g}")
    if s.mem_offset_mhz is not None:
        args.append(f"--mem-offset={s.mem_offset_mhz:g}")
    if s.offset_driver is not None:
        args.append(f"--offset-driver={s.offset_driver}")
    return [*args, "--gpus", s.uuid]


def refuse_untrusted_offsets(settings: Sequence[BootSetting], trusted: bool) -> None:
    """``--persist`` of a clock offset without ``--trust-offset`` (issue 45).

    A driver update moves the voltage/frequency curve and the memory training: an offset set at
    every boot would go on unchecked under a driver it was never found stable with. With
    ``--trust-offset`` the unit records the driver (``offset_driver``) and skips the offsets at a
    boot under another.

    Raises:
        UsageError: A card's setting holds an offset and ``trusted`` is False (nothing changed).
    """
    held = [f"{s.uuid}'s {what} {mhz:+g} MHz" for s in settings for what, mhz in s.offsets()]
    if held and not trusted:
        raise UsageError(
            f"--persist would set {', '.join(held)} at every boot, but a driver update moves the "
            "voltage/frequency curve and the memory training, so an offset stable today may not "
            "be after one: pass --trust-offset to persist it (the unit then skips the offsets "
            "at a boot under another driver), or apply it without --persist; nothing was changed"
        )


def _quote(argv: Sequence[str]) -> str:
    """A command line as systemd parses ExecStart (quotes, and % and $ doubled)."""
    out = []
    for arg in argv:
        text = arg.replace("%", "%%").replace("$", "$$")
        if not text or any(c.isspace() or c in "\"'\\;" for c in text):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out.append(text)
    return " ".join(out)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def check_unit_dir(unit_dir: Path) -> None:
    """Refuse a unit directory that cannot take the unit, before any setting changes.

    Raises:
        UsageError: It does not exist, is not a directory or is not writable.
    """
    if unit_dir.exists() and not unit_dir.is_dir():
        raise UsageError(
            f"the unit directory {unit_dir} is not a directory (--unit-dir / {UNIT_DIR_ENV}): "
            "nothing was changed"
        )
    if not unit_dir.is_dir():
        raise UsageError(
            f"the unit directory {unit_dir} does not exist (--unit-dir / {UNIT_DIR_ENV}): "
            "nothing was changed"
        )
    if not os.access(unit_dir, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot write to the unit directory {unit_dir} (re-run with sudo, or choose "
            f"--unit-dir / {UNIT_DIR_ENV}): nothing was changed"
        )


def install_unit(text: str, unit_dir: Path, systemctl: Systemctl | None = None) -> Path:
    """Write the unit (mode 0644, atomically), and enable it when ``systemctl`` is given.

    Raises:
        PowersweepError: It cannot be written, or enabling it failed (see :func:`enable_unit`).
    """
    path = unit_dir / UNIT_NAME
    # root-owned whatever the directory's group (a setgid unit directory)
    owner = (0, 0) if os.geteuid() == 0 else None
    try:
        write_atomic(path, text, mode=UNIT_MODE, owner=owner)
    except OSError as exc:
        raise PowersweepError(
            f"cannot write {path}: {exc.strerror or exc} (--unit-dir / {UNIT_DIR_ENV})"
        ) from None
    if systemctl is not None:
        enable_unit(path, systemctl)
    return path


def enable_unit(path: Path, systemctl: Systemctl) -> None:
    """Make systemd read the unit and enable it.

    Raises:
        PowersweepError: systemctl failed; the message says the unit is written and how to
            enable it by hand.
    """
    try:
        systemctl(["daemon-reload"])
        systemctl(["enable", UNIT_NAME])
    except PowersweepError as exc:
        raise PowersweepError(
            f"wrote {path}, but enabling it failed ({exc}): run `systemctl daemon-reload && "
            f"systemctl enable {UNIT_NAME}`"
        ) from exc


def remove_unit(unit_dir: Path, systemctl: Systemctl | None, *, force: bool = False) -> Path | None:
    """Disable and delete the unit; None when none is installed.

    Raises:
        PowersweepError: A file of that name that powersweep did not write (without ``force``),
            or it cannot be deleted.
    """
    status = read_unit(unit_dir)
    if not status.installed:
        return None
    if not status.ours and not force:
        raise PowersweepError(
            f"{status.path} was not written by powersweep: left alone (pass --force to remove it)",
            exit_code=2,
        )
    if systemctl is not None:
        systemctl(["disable", UNIT_NAME])
    try:
        status.path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise PowersweepError(f"cannot delete {status.path}: {exc.strerror or exc}") from None
    if systemctl is not None:
        systemctl(["daemon-reload"])
    return status.path


def read_unit(unit_dir: Path) -> UnitStatus:
    """What is installed at ``unit_dir`` (never raises)."""
    path = unit_dir / UNIT_NAME
    wants = unit_dir / f"{_WANTED_BY[0]}.wants" / UNIT_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return UnitStatus(path, False, None, (), False)
    except (OSError, UnicodeDecodeError) as exc:
        installed = _exists(path)
        return UnitStatus(path, bool(installed), None, (), False, f"cannot read: {exc}")
    settings: list[BootSetting] = []
    ours = False
    for line in text.splitlines():
        if line.startswith(_MARKER):
            ours = True
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                data = json.loads(line[len(_MARKER) :])
                settings = [BootSetting.from_dict(g) for g in data["gpus"]]
    return UnitStatus(path, True, _exists(wants), tuple(settings), ours)


def _opt_float(value: object) -> float | None:
    """A unit's number, None where null.

    Raises:
        TypeError, ValueError: Not a number, nor text that reads as one.
    """
    if value is None:
        return None
    if isinstance(value, int | float | str):
        return float(value)
    raise TypeError(f"not a number: {value!r}")


def _exists(path: Path) -> bool | None:
    try:
        return path.exists()
    except OSError:
        return None


def run_systemctl(args: Sequence[str]) -> None:
    """Run ``systemctl ARGS``.

    Raises:
        PowersweepError: systemctl is missing or failed (with its message).
    """
    try:
        done = subprocess.run(
            ["systemctl", *args], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PowersweepError(f"systemctl {' '.join(args)} failed: {exc}") from None
    if done.returncode != 0:
        detail = _one_line(done.stderr or done.stdout) or f"exit code {done.returncode}"
        raise PowersweepError(f"systemctl {' '.join(args)} failed: {detail}")
