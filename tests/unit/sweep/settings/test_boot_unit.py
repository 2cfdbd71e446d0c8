"""The boot unit: its keys and ordering (a card with an SM or memory clock offset set by
powersweep, with the driver it was trusted under), systemd-analyze's verdict, install and
removal."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from powersweep.errors import PowersweepError, UsageError
from powersweep.sweep.settings.boot_unit import (
    UNIT_NAME,
    BootCommand,
    BootSetting,
    check_unit_dir,
    install_unit,
    read_unit,
    refuse_untrusted_offsets,
    remove_unit,
    render_unit,
)

UUID_A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
UUID_B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
SETTINGS = [
    BootSetting(UUID_A, "NVIDIA GeForce RTX 3090", 290.0),
    BootSetting(UUID_B, "NVIDIA GeForce RTX 3090", 300.5),
]


def _sections(text: str) -> dict[str, list[tuple[str, str]]]:
    """The unit as systemd reads it: section -> (key, value) in order."""
    out: dict[str, list[tuple[str, str]]] = {}
    section = ""
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out[section] = []
            continue
        key, _, value = line.partition("=")
        out[section].append((key, value))
    return out


def _values(section: list[tuple[str, str]], key: str) -> list[str]:
    return [v for k, v in section if k == key]


def test_nvidia_smi_unit_turns_persistence_on_then_sets_each_card_by_uuid() -> None:
    text = render_unit(SETTINGS, BootCommand("nvidia-smi", ("/usr/bin/nvidia-smi",)), "run-x")
    units = _sections(text)
    assert set(units) == {"Unit", "Service", "Install"}
    unit, service, install = units["Unit"], units["Service"], units["Install"]
    after = " ".join(_values(unit, "After")).split()
    assert "nvidia-persistenced.service" in after and "systemd-modules-load.service" in after
    assert _values(unit, "Wants") == ["nvidia-persistenced.service"]
    assert _values(unit, "PartOf") == ["nvidia-persistenced.service"]
    assert _values(service, "Type") == ["oneshot"]
    assert _values(service, "RemainAfterExit") == ["yes"]
    # '-' on every line: a card that is gone or refuses at boot does not stop the others
    assert _values(service, "ExecStart") == [
        f"-/usr/bin/nvidia-smi -i {UUID_A} --persistence-mode=1",
        f"-/usr/bin/nvidia-smi -i {UUID_A} --power-limit=290",
        f"-/usr/bin/nvidia-smi -i {UUID_B} --persistence-mode=1",
        f"-/usr/bin/nvidia-smi -i {UUID_B} --power-limit=300.5",
    ]
    assert _values(install, "WantedBy") == ["multi-user.target nvidia-persistenced.service"]
    assert "apply --reset --persist" in text  # how to remove it


def test_powersweep_unit_calls_the_absolute_path_and_quotes_what_systemd_would_split() -> None:
    cmd = BootCommand(
        "powersweep", ("/opt/my tools/bin/powersweep", "apply", "--sim-state", "/s/100%.json")
    )
    text = render_unit(SETTINGS[:1], cmd, "--cap 290")
    (line,) = _values(_sections(text)["Service"], "ExecStart")
    assert line == (
        '-"/opt/my tools/bin/powersweep" apply --sim-state /s/100%%.json '
        f"--at-boot --cap 290 --gpus {UUID_A}"
    )


def test_render_refuses_nothing_to_do_and_unusable_uuids() -> None:
    cmd = BootCommand("nvidia-smi", ("/usr/bin/nvidia-smi",))
    with pytest.raises(UsageError):
        render_unit([], cmd, "x")
    with pytest.raises(UsageError, match="UUID"):
        render_unit([BootSetting("", "x", 290)], cmd, "x")


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        if os.environ.get("POWERSWEEP_REQUIRE_SYSTEMD_ANALYZE"):
            pytest.fail("systemd-analyze is required (POWERSWEEP_REQUIRE_SYSTEMD_ANALYZE is set)")
        pytest.skip("systemd-analyze not installed (apt-get install systemd)")
    return found


# clock locks (with and without a cap): -lgc / -lmc lines, or --sm-clock / --mem-clock
CLOCK_SETTINGS = [
    BootSetting(UUID_A, "NVIDIA GeForce RTX 3090", 290.0, 1410.0, 9501.0),
    BootSetting(UUID_B, "NVIDIA GeForce RTX 3090", None, 1395.0, None),
]


@pytest.mark.parametrize("settings", [SETTINGS, CLOCK_SETTINGS], ids=["caps", "clock-locks"])
@pytest.mark.parametrize("kind", ["nvidia-smi", "powersweep"])
def test_systemd_analyze_verify_accepts_the_unit(
    tmp_path: Path, kind: str, settings: list[BootSetting]
) -> None:
    analyze = _systemd_analyze()
    if kind == "nvidia-smi":
        # verify checks that the program exists and is executable
        program = tmp_path / "bin" / "nvidia-smi"
        program.parent.mkdir()
        program.write_text("#!/bin/sh\nexit 0\n")
        program.chmod(0o755)
        cmd = BootCommand("nvidia-smi", (str(program),))
    else:
        cmd = BootCommand("powersweep", (sys.executable, "-m", "powersweep", "apply"))
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    text = render_unit(settings, cmd, "run-x")
    if settings is CLOCK_SETTINGS:
        locks = ("-lgc 1410,1410", "-lmc 9501,9501", "-lgc 1395,1395")
        if kind == "powersweep":
            locks = ("--sm-clock 1410 --mem-clock 9501", f"--sm-clock 1395 --gpus {UUID_B}")
        assert all(lock in text for lock in locks), text
    path = install_unit(text, unit_dir, None)
    done = subprocess.run(
        [analyze, "verify", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    # warnings (unknown keys, bad values) exit 0 too: they must not appear either
    assert UNIT_NAME not in done.stderr, done.stderr


def test_verify_would_catch_a_broken_unit(tmp_path: Path) -> None:
    analyze = _systemd_analyze()
    broken = tmp_path / UNIT_NAME
    text = render_unit(SETTINGS, BootCommand("nvidia-smi", ("/nonexistent/nvidia-smi",)), "x")
    broken.write_text(text.replace("-/nonexistent", "/nonexistent"))
    done = subprocess.run([analyze, "verify", str(broken)], capture_output=True, text=True)
    assert done.returncode != 0 and "not executable" in done.stderr


def test_install_writes_only_the_unit_with_mode_0644_and_enables_it(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    old = os.umask(0o077)
    try:
        path = install_unit("[Unit]\n", tmp_path, lambda args: calls.append(list(args)))
    finally:
        os.umask(old)
    assert path == tmp_path / UNIT_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.stat().st_uid == os.geteuid()
    if os.geteuid() == 0:
        assert (path.stat().st_uid, path.stat().st_gid) == (0, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [UNIT_NAME]
    assert calls == [["daemon-reload"], ["enable", UNIT_NAME]]


def test_read_and_remove_the_unit(tmp_path: Path) -> None:
    assert not read_unit(tmp_path).installed
    assert remove_unit(tmp_path, None) is None
    text = render_unit(SETTINGS, BootCommand("nvidia-smi", ("/usr/bin/nvidia-smi",)), "x")
    install_unit(text, tmp_path, None)
    status = read_unit(tmp_path)
    assert status.installed and status.ours and status.enabled is False
    assert [(s.uuid, s.power_limit_w) for s in status.settings] == [
        (UUID_A, 290.0),
        (UUID_B, 300.5),
    ]
    calls: list[list[str]] = []
    assert remove_unit(tmp_path, lambda a: calls.append(list(a))) == tmp_path / UNIT_NAME
    assert calls == [["disable", UNIT_NAME], ["daemon-reload"]]
    assert list(tmp_path.iterdir()) == []


def test_a_unit_powersweep_did_not_write_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / UNIT_NAME).write_text("[Unit]\nDescription=someone else's\n")
    with pytest.raises(PowersweepError, match="not written by powersweep"):
        remove_unit(tmp_path, None)
    assert (tmp_path / UNIT_NAME).exists()


def test_a_unit_directory_that_cannot_take_the_unit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        check_unit_dir(tmp_path / "missing")
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(UsageError, match="is not a directory"):
        check_unit_dir(afile)
    with pytest.raises(PowersweepError, match="cannot write"):
        install_unit("[Unit]\n", tmp_path / "missing", None)


def test_a_failed_enable_keeps_the_unit_and_says_how_to_enable_it(tmp_path: Path) -> None:
    def systemctl(args: list[str]) -> None:
        if args[0] == "enable":
            raise PowersweepError("systemctl enable failed: Access denied")

    with pytest.raises(PowersweepError, match=r"wrote .*enabling it failed.*systemctl enable"):
        install_unit("[Unit]\n", tmp_path, systemctl)
    assert (tmp_path / UNIT_NAME).exists()


def test_merge_settings_replaces_adds_and_drops_by_uuid() -> None:
    from powersweep.sweep.settings.boot_unit import merge_settings

    a2 = BootSetting(UUID_A, "NVIDIA GeForce RTX 3090", 250.0, source="--cap 250")
    c = BootSetting("GPU-c", "NVIDIA GeForce RTX 4090", 400.0)
    assert merge_settings(SETTINGS, [a2, c]) == [a2, SETTINGS[1], c]
    assert merge_settings(SETTINGS, drop=[UUID_A]) == [SETTINGS[1]]
    assert merge_settings(SETTINGS, drop=[UUID_A, UUID_B]) == []
    # each card's line says where its values came from; the marker carries it back
    text = render_unit([a2, SETTINGS[1]], BootCommand("nvidia-smi", ("/usr/bin/nvidia-smi",)), "x")
    assert f"# {UUID_A} (NVIDIA GeForce RTX 3090): 250 W, from --cap 250" in text


# --- an SM clock offset (an undervolt run's answer): powersweep sets that card -------------

UNDERVOLT = BootSetting(
    UUID_A, "NVIDIA GeForce RTX 4090", 450.0, 2790.0, None, "run-uv (undervolt)", "nvidia", 180.0
)
NVIDIA_SMI = BootCommand("nvidia-smi", ("/usr/bin/nvidia-smi",))
POWERSWEEP = BootCommand("powersweep", ("/opt/ps/bin/powersweep", "apply"))


def test_an_offset_round_trips_through_the_marker_and_an_older_marker_has_none(
    tmp_path: Path,
) -> None:
    assert UNDERVOLT.to_dict()["sm_offset_mhz"] == 180.0
    assert BootSetting.from_dict(UNDERVOLT.to_dict()) == UNDERVOLT
    older = {k: v for k, v in SETTINGS[0].to_dict().items() if k != "sm_offset_mhz"}
    assert BootSetting.from_dict(older) == SETTINGS[0]
    install_unit(render_unit([UNDERVOLT, SETTINGS[1]], POWERSWEEP, "x"), tmp_path, None)
    assert read_unit(tmp_path).settings == (UNDERVOLT, SETTINGS[1])
    assert UNDERVOLT.describe() == "450 W, SM 2790 MHz +180 MHz offset"


def test_the_offset_card_is_set_by_powersweep_and_the_others_by_nvidia_smi() -> None:
    text = render_unit(
        [UNDERVOLT, SETTINGS[1]], {"nvidia": NVIDIA_SMI, "powersweep": POWERSWEEP}, "x"
    )
    assert _values(_sections(text)["Service"], "ExecStart") == [
        # limit, lock and offset in one call: the offset goes on only once the lock holds
        f"-/opt/ps/bin/powersweep apply --at-boot --cap 450 --sm-clock 2790 --sm-offset=180 "
        f"--gpus {UUID_A}",
        f"-/usr/bin/nvidia-smi -i {UUID_B} --persistence-mode=1",
        f"-/usr/bin/nvidia-smi -i {UUID_B} --power-limit=300.5",
    ]
    assert f"# {UUID_A} (NVIDIA GeForce RTX 4090): 450 W, SM 2790 MHz +180 MHz offset" in text
    negative = BootSetting(UUID_A, "x", None, 1500.0, sm_offset_mhz=-50.0)
    (line,) = _values(_sections(render_unit([negative], POWERSWEEP, "x"))["Service"], "ExecStart")
    assert line.endswith(f"--sm-clock 1500 --sm-offset=-50 --gpus {UUID_A}")


@pytest.mark.parametrize("command", [NVIDIA_SMI, {"nvidia": NVIDIA_SMI}])
def test_an_offset_without_a_powersweep_command_is_refused(
    command: BootCommand | dict[str, BootCommand],
) -> None:
    with pytest.raises(UsageError) as info:
        render_unit([UNDERVOLT], command, "x")
    assert str(info.value) == (
        f"the SM clock offset of {UUID_A} can be set at boot only by powersweep (nvidia-smi has "
        "no option for it), and the unit was given no powersweep command"
    )


def test_systemd_analyze_verify_accepts_the_undervolt_unit(tmp_path: Path) -> None:
    analyze = _systemd_analyze()
    cmd = BootCommand("powersweep", (sys.executable, "-m", "powersweep", "apply"))
    path = install_unit(render_unit([UNDERVOLT], cmd, "run-uv"), tmp_path, None)
    done = subprocess.run(
        [analyze, "verify", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and UNIT_NAME not in done.stderr, done.stderr


# --- a memory clock offset (issue 45), and the driver the offsets are trusted under ----------

MEM_SHIFTED = BootSetting(
    UUID_A, "NVIDIA GeForce RTX 4090", 450.0, 2790.0, None, "run-uv (undervolt)", "nvidia", 180.0,
    mem_offset_mhz=1000.0, offset_driver="570.133.07",
)  # fmt: skip


def test_a_memory_offset_and_its_driver_round_trip_and_an_older_marker_has_neither(
    tmp_path: Path,
) -> None:
    data = MEM_SHIFTED.to_dict()
    assert (data["mem_offset_mhz"], data["offset_driver"]) == (1000.0, "570.133.07")
    assert BootSetting.from_dict(data) == MEM_SHIFTED
    older = {k: v for k, v in data.items() if k not in ("mem_offset_mhz", "offset_driver")}
    assert BootSetting.from_dict(older) == UNDERVOLT
    install_unit(render_unit([MEM_SHIFTED], POWERSWEEP, "x"), tmp_path, None)
    assert read_unit(tmp_path).settings == (MEM_SHIFTED,)
    assert MEM_SHIFTED.describe() == (
        "450 W, SM 2790 MHz +180 MHz offset, +1000 MHz memory offset, offsets under driver "
        "570.133.07 only"
    )


def test_a_memory_offset_card_is_set_by_powersweep_with_the_driver_it_was_trusted_under() -> None:
    mem_only = BootSetting(UUID_B, "x", 300.0, mem_offset_mhz=-500.0, offset_driver="570.1")
    text = render_unit(
        [MEM_SHIFTED, mem_only, SETTINGS[0]], {"nvidia": NVIDIA_SMI, "powersweep": POWERSWEEP}, "x"
    )
    assert _values(_sections(text)["Service"], "ExecStart") == [
        f"-/opt/ps/bin/powersweep apply --at-boot --cap 450 --sm-clock 2790 --sm-offset=180 "
        f"--mem-offset=1000 --offset-driver=570.133.07 --gpus {UUID_A}",
        # a memory offset needs no SM lock; "=": a negative one must not read as an option
        f"-/opt/ps/bin/powersweep apply --at-boot --cap 300 --mem-offset=-500 "
        f"--offset-driver=570.1 --gpus {UUID_B}",
        f"-/usr/bin/nvidia-smi -i {UUID_A} --persistence-mode=1",
        f"-/usr/bin/nvidia-smi -i {UUID_A} --power-limit=290",
    ]
    with pytest.raises(UsageError) as info:
        render_unit([mem_only], NVIDIA_SMI, "x")
    assert str(info.value) == (
        f"the memory clock offset of {UUID_B} can be set at boot only by powersweep (nvidia-smi "
        "has no option for it), and the unit was given no powersweep command"
    )


def test_persisting_an_offset_is_refused_without_trust_offset_naming_each_offset() -> None:
    with pytest.raises(UsageError) as info:
        refuse_untrusted_offsets([SETTINGS[0], MEM_SHIFTED], trusted=False)
    assert str(info.value) == (
        f"--persist would set {UUID_A}'s SM clock offset +180 MHz, {UUID_A}'s memory clock offset "
        "+1000 MHz at every boot, but a driver update moves the voltage/frequency curve and the "
        "memory training, so an offset stable today may not be after one: pass --trust-offset to "
        "persist it (the unit then skips the offsets at a boot under another driver), or apply "
        "it without --persist; nothing was changed"
    )
    refuse_untrusted_offsets([SETTINGS[0], MEM_SHIFTED], trusted=True)
    refuse_untrusted_offsets(SETTINGS, trusted=False)  # no offset: nothing to trust
