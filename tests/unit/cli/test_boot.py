"""powersweep.cli._boot: the boot unit of one ``apply --persist``. What it sets on each card (what
this apply sets and what stays in force), which program sets it (each vendor's tool by absolute
path, else this powersweep), where it goes, how it merges with the other cards' lines of an
installed unit, and what is said when it cannot be installed or goes stale."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from powersweep.cli import _boot
from powersweep.cli._boot import BootUnit
from powersweep.cli.rigs import SettingsRig
from powersweep.clock import ManualClock
from powersweep.errors import PowersweepError, UsageError
from powersweep.sim.profiles import get_profile
from powersweep.sim.sim_rig import SimRig
from powersweep.sweep.settings import boot_unit
from powersweep.sweep.settings.applier import apply_all, plan_caps
from powersweep.sweep.settings.boot_unit import BootCommand, BootSetting
from powersweep.sweep.settings.clock_locks import plan_clocks
from powersweep.sweep.settings.clock_offsets import plan_offsets
from powersweep.sweep.settings.targets import Target, select_gpus

UUID = "GPU-sim-rtx3090-air-0"
OTHER = "GPU-other-card"


def _rig(simulated: bool = True) -> SettingsRig:
    backend = SimRig([get_profile("rtx3090-air")], ManualClock())
    return SettingsRig(backend, simulated, ("--simulate", "rtx3090-air"))


def _targets(rig: SettingsRig) -> list[Target]:
    return select_gpus(rig.backend, None, lambda _m: None)


def _unit(
    rig: SettingsRig,
    cap: float | None = None,
    sm: float | None = None,
    unit_dir: Path | None = None,
    *,
    reset: bool = False,
    force: bool = False,
) -> BootUnit:
    targets = _targets(rig)
    caps = plan_caps(targets, cap, strict=False, warn=lambda _m: None) if cap else []
    clocks = plan_clocks(targets, sm, None, strict=False, warn=lambda _m: None) if sm else []
    return BootUnit(rig, targets, caps, clocks, "--cap 250", unit_dir, reset, force)


def _install_ours(unit_dir: Path, *settings: BootSetting) -> Path:
    marker = {"version": 1, "gpus": [s.to_dict() for s in settings]}
    path = unit_dir / "powersweep-apply.service"
    path.write_text(f"# powersweep-settings: {json.dumps(marker)}\n[Unit]\n")
    return path


def test_a_lock_alone_keeps_the_limit_in_force_and_a_cap_alone_keeps_the_locks() -> None:
    rig = _rig()
    gpu = rig.backend.gpu(0)
    assert _unit(rig, sm=1395.0).settings() == [
        BootSetting(
            UUID, gpu.identity().name, None, 1395.0, None, "--cap 250", "nvidia", None, 210.0
        )
    ]  # the default limit: the unit leaves it alone
    gpu.set_power_limit(280.0)
    gpu.lock_sm_clock(1500.0)
    (lock_only,) = _unit(rig, sm=1395.0).settings()
    assert (lock_only.power_limit_w, lock_only.sm_clock_mhz) == (280.0, 1395.0)
    (cap_only,) = _unit(rig, cap=250.0).settings()
    assert (cap_only.power_limit_w, cap_only.sm_clock_mhz) == (250.0, 1500.0)


def test_a_simulated_rig_is_set_at_boot_by_this_powersweep_with_its_options() -> None:
    rig = _rig()
    unit = _unit(rig, cap=250.0)
    command = unit.command(unit.settings())
    assert isinstance(command, BootCommand) and command.kind == "powersweep"
    assert command.argv[-3:] == ("apply", "--simulate", "rtx3090-air")


def test_real_cards_are_set_by_each_vendors_tool_else_by_powersweep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = _rig(simulated=False)
    unit = _unit(rig, cap=250.0)
    found = {"nvidia-smi": "/usr/bin/nvidia-smi", "amd-smi": "/opt/rocm/bin/amd-smi"}
    monkeypatch.setattr(shutil, "which", lambda name, path=None: found.get(name))
    both = [BootSetting(UUID, "a", 250.0), BootSetting(OTHER, "b", 300.0, vendor="amd")]
    assert unit.command(both) == {
        "amd": BootCommand("amd-smi", ("/opt/rocm/bin/amd-smi",)),
        "nvidia": BootCommand("nvidia-smi", ("/usr/bin/nvidia-smi",)),
    }
    del found["amd-smi"]  # one vendor's tool missing: powersweep sets every card
    fallback = unit.command(both)
    assert isinstance(fallback, BootCommand) and fallback.kind == "powersweep"


def test_a_vendor_tool_off_path_is_looked_for_where_it_installs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looked: list[tuple[str, str | None]] = []

    def which(name: str, path: str | None = None) -> str | None:
        looked.append((name, path))
        return "/opt/rocm/bin/amd-smi" if path and "/opt/rocm/bin" in path else None

    monkeypatch.setattr(shutil, "which", which)
    assert _boot._vendor_tool("amd") == BootCommand("amd-smi", ("/opt/rocm/bin/amd-smi",))
    assert looked[0] == ("amd-smi", None)  # PATH first
    assert _boot._vendor_tool("nvidia") is None
    assert _boot._vendor_tool("intel") is None


def test_this_powersweep_by_absolute_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    script = tmp_path / "bin" / "powersweep"
    script.parent.mkdir()
    script.write_text("")
    monkeypatch.setattr(sys, "argv", [str(script)])
    assert _boot._own_command() == (str(script),)
    # run some other way: the one beside this Python, else on PATH, else python -m
    monkeypatch.setattr(sys, "argv", ["pytest"])
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    assert _boot._own_command() == (str(script),)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/local/bin/powersweep")
    assert _boot._own_command() == ("/usr/local/bin/powersweep",)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert _boot._own_command() == (str(tmp_path / "python"), "-m", "powersweep")


def test_where_the_unit_goes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(boot_unit, "systemd_running", lambda: False)
    assert _unit(_rig(), cap=250.0).resolve_dir() is None  # no systemd: nowhere
    monkeypatch.setattr(boot_unit, "systemd_running", lambda: True)
    with pytest.raises(UsageError, match="pass --unit-dir DIR"):
        _unit(_rig(), cap=250.0).resolve_dir()  # a simulated rig never goes into the system
    assert _unit(_rig(), cap=250.0, unit_dir=tmp_path).resolve_dir() == tmp_path
    with pytest.raises(UsageError, match="does not exist"):
        _unit(_rig(), cap=250.0, unit_dir=tmp_path / "missing").resolve_dir()


def test_a_unit_powersweep_did_not_write_is_left_alone_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "powersweep-apply.service").write_text("[Unit]\nDescription=someone else's\n")
    with pytest.raises(UsageError, match="was not written by powersweep: left alone"):
        _unit(_rig(), cap=250.0, unit_dir=tmp_path).resolve_dir()
    assert _unit(_rig(), cap=250.0, unit_dir=tmp_path, force=True).resolve_dir() == tmp_path


def test_the_other_cards_lines_are_kept_and_said(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _install_ours(tmp_path, BootSetting(OTHER, "b", 300.0), BootSetting(UUID, "a", 200.0))
    unit = _unit(_rig(), cap=250.0, unit_dir=tmp_path)
    merged = unit.merged(unit.settings(), tmp_path)
    assert [(s.uuid, s.power_limit_w) for s in merged] == [(OTHER, 300.0), (UUID, 250.0)]
    assert capsys.readouterr().err == f"{OTHER}: the unit keeps 300 W at boot\n"
    assert unit.merged(unit.settings(), None) == unit.settings()  # nothing installed to merge


def test_reset_drops_this_cards_lines_and_keeps_the_others(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _install_ours(tmp_path, BootSetting(OTHER, "b", 300.0), BootSetting(UUID, "a", 200.0))
    unit = _unit(_rig(), unit_dir=tmp_path, reset=True)
    assert [s.uuid for s in unit.kept(tmp_path)] == [OTHER]
    unit.dry_run(tmp_path)
    label = _targets(_rig())[0].label
    assert capsys.readouterr().out == (
        f"would update {path}: {label} dropped, the other cards' lines kept\n"
    )
    unit.install(None, tmp_path, ([], []))
    assert capsys.readouterr().out.startswith(f"updated {path}: {label} dropped")
    assert [s.uuid for s in boot_unit.read_unit(tmp_path).settings] == [OTHER]


def test_without_systemd_the_unit_is_printed_for_another_init_system(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _unit(_rig(), cap=250.0).install("[Unit]\n", None, ([], []))
    out, err = capsys.readouterr()
    assert out == "[Unit]\n"
    assert err.startswith("warning: this machine does not run systemd: the boot unit was not")
    _unit(_rig(), reset=True).install(None, None, ([], []))
    assert capsys.readouterr().err == (
        "warning: this machine does not run systemd: there is no powersweep unit to remove\n"
    )


def test_an_installed_unit_that_sets_other_values_is_said_stale(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _install_ours(tmp_path, BootSetting(UUID, "a", 200.0))
    _unit(_rig(), cap=250.0, unit_dir=tmp_path).warn_if_stale()
    assert capsys.readouterr().err == (
        f"warning: {path} still sets other values at boot: add --persist to update it\n"
    )
    _unit(_rig(), cap=200.0, unit_dir=tmp_path).warn_if_stale()  # the same value: not stale
    assert capsys.readouterr().err == ""
    _unit(_rig(), unit_dir=tmp_path, reset=True).warn_if_stale()
    assert capsys.readouterr().err == (
        f"warning: {path} still sets other values at boot: --reset --persist removes it\n"
    )


# --- an SM clock offset (an undervolt run's answer) -----------------------------------------


def _undervolt(rig: SettingsRig, unit_dir: Path | None = None) -> BootUnit:
    targets = _targets(rig)
    clocks = plan_clocks(targets, 1395.0, None, strict=False, warn=lambda _m: None)
    offsets = plan_offsets(targets, 180.0)
    return BootUnit(rig, targets, [], clocks, "run-uv", unit_dir, False, False, offsets)


def test_an_undervolt_sets_its_offset_with_its_lock_at_boot() -> None:
    rig = _rig()
    name = rig.backend.gpu(0).identity().name
    assert _undervolt(rig).settings() == [
        # the driver the offset is trusted under (issue 45): another skips it at boot
        BootSetting(
            UUID, name, None, 1395.0, None, "run-uv", "nvidia", 180.0, 210.0, offset_driver="sim"
        )
    ]


def test_an_offset_in_force_is_kept_with_a_known_lock_and_left_out_without_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rig = _rig()
    gpu = rig.backend.gpu(0)
    gpu.lock_sm_clock(1500.0)
    gpu.set_sm_clock_offset(90.0)
    (cap_only,) = _unit(rig, cap=250.0).settings()
    assert (cap_only.sm_clock_mhz, cap_only.sm_offset_mhz) == (1500.0, 90.0)
    assert capsys.readouterr().err == ""
    gpu.reset_clock_locks()  # an offset with no lock the unit knows of: never raised at boot
    (bare,) = _unit(rig, cap=250.0).settings()
    assert (bare.sm_clock_mhz, bare.sm_offset_mhz) == (None, None)
    label = _targets(rig)[0].label
    assert capsys.readouterr().err == (
        f"warning: {label}: its SM clock offset +90 MHz is not written into the boot unit, which "
        "knows no SM clock lock to go with it: apply the undervolt run again with --persist to "
        "keep both\n"
    )


def test_real_cards_with_an_offset_are_set_by_powersweep_the_others_by_their_tool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unit = _unit(_rig(simulated=False), cap=250.0)
    found = {"nvidia-smi": "/usr/bin/nvidia-smi"}
    monkeypatch.setattr(shutil, "which", lambda name, path=None: found.get(name))
    shifted = BootSetting(UUID, "a", 450.0, 2790.0, sm_offset_mhz=180.0)
    command = unit.command([shifted, BootSetting(OTHER, "b", 300.0)])
    assert isinstance(command, dict) and set(command) == {"nvidia", "powersweep"}
    assert command["nvidia"] == BootCommand("nvidia-smi", ("/usr/bin/nvidia-smi",))
    assert command["powersweep"].kind == "powersweep" and "apply" in command["powersweep"].argv
    # the offset card's line runs powersweep even with every vendor tool installed
    assert f"--sm-offset=180 --gpus {UUID}" in unit.text([shifted, BootSetting(OTHER, "b", 300.0)])


def test_an_installed_unit_with_another_offset_is_said_stale(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _install_ours(tmp_path, BootSetting(UUID, "a", None, 1395.0, sm_offset_mhz=120.0))
    _undervolt(_rig(), unit_dir=tmp_path).warn_if_stale()
    assert capsys.readouterr().err == (
        f"warning: {path} still sets other values at boot: add --persist to update it\n"
    )
    _install_ours(tmp_path, BootSetting(UUID, "a", None, 1395.0, sm_offset_mhz=180.0))
    _undervolt(_rig(), unit_dir=tmp_path).warn_if_stale()
    assert capsys.readouterr().err == ""


def test_a_unit_that_cannot_be_written_puts_the_offset_and_lock_back(tmp_path: Path) -> None:
    rig = _rig()
    unit = _undervolt(rig)
    results = apply_all([], unit.clocks, unit.offsets, lambda _m: None)
    gpu = rig.backend.gpu(0)
    assert (gpu.locked_clocks().sm_mhz, gpu.sm_clock_offset().sm_offset_mhz) == (1395.0, 180.0)
    with pytest.raises(PowersweepError, match=r"; the GPUs already changed were put back$"):
        unit.install("[Unit]\n", tmp_path / "missing", results)
    assert (gpu.locked_clocks().sm_mhz, gpu.sm_clock_offset().sm_offset_mhz) == (None, 0.0)


# --- a memory clock offset (issue 45) -------------------------------------------------------


def test_a_memory_offset_set_or_in_force_is_kept_without_a_lock_with_its_driver() -> None:
    rig = _rig()
    targets = _targets(rig)
    name = rig.backend.gpu(0).identity().name
    offsets = plan_offsets(targets, 1000.0, "mem")
    unit = BootUnit(rig, targets, [], [], "--mem-offset 1000", None, False, False, offsets)
    # a memory offset leaves the SM curve alone: no lock needed to keep it at boot
    assert unit.settings() == [
        BootSetting(
            UUID, name, None, None, None, "--mem-offset 1000", "nvidia",
            mem_offset_mhz=1000.0, offset_driver="sim",
        )
    ]  # fmt: skip
    rig.backend.gpu(0).set_mem_clock_offset(-500.0)  # in force: a cap alone keeps it
    (cap_only,) = _unit(rig, cap=250.0).settings()
    assert (cap_only.power_limit_w, cap_only.mem_offset_mhz, cap_only.sm_offset_mhz) == (
        250.0, -500.0, None
    )  # fmt: skip
    assert cap_only.offset_driver == "sim"
    rig.backend.gpu(0).set_mem_clock_offset(0.0)
    (plain,) = _unit(rig, cap=250.0).settings()
    assert (plain.mem_offset_mhz, plain.offset_driver) == (None, None)  # no offset: no driver


def test_an_installed_memory_offset_that_differs_is_said_stale(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rig = _rig()
    targets = _targets(rig)
    path = _install_ours(tmp_path, BootSetting(UUID, "a", None, mem_offset_mhz=500.0))
    offsets = plan_offsets(targets, 1000.0, "mem")
    BootUnit(rig, targets, [], [], "x", tmp_path, False, False, offsets).warn_if_stale()
    assert capsys.readouterr().err == (
        f"warning: {path} still sets other values at boot: add --persist to update it\n"
    )
    offsets = plan_offsets(targets, 500.0, "mem")
    BootUnit(rig, targets, [], [], "x", tmp_path, False, False, offsets).warn_if_stale()
    assert capsys.readouterr().err == ""
