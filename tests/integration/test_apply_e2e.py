"""status and apply on the simulated rig, from a real (short) simulated sweep to a boot unit."""

from __future__ import annotations

import json
import shlex
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import run_cli, status_json
from tests.integration.conftest import only_run_dir, powersweep, read_json

PROFILE = "rtx3090-air"
UUID = f"GPU-sim-{PROFILE}-0"
DEFAULT_W = 370.0


def _short_sweep(factory: pytest.TempPathFactory, name: str, *args: str) -> tuple[Path, bytes]:
    """One short simulated decode-single sweep (``args``: its axis and timing flags): its run
    directory and the state file it left."""
    base = factory.mktemp(name)
    state = base / "state.json"
    done = powersweep(
        "--simulate", PROFILE, "--cooling", "air", "--load-mode", "decode-single", *args,
        "--no-charts", "-q",
        "--out", str(base / "runs"), "--sim-state", str(state), "--state-dir", str(base / "sd"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return only_run_dir(base / "runs"), state.read_bytes()


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """One short simulated power sweep."""
    return _short_sweep(
        tmp_path_factory, "swept", "--caps", "230,260,290,320,350", "--target-cap-seconds", "2"
    )


@pytest.fixture
def rig(
    swept: tuple[Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, Path]]:
    """A copy of the run and a fresh state file (the sweep restored the original limit)."""
    yield _copy_of(swept, tmp_path, monkeypatch)


def _copy_of(
    swept: tuple[Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path]:
    """A run copied into ``tmp_path``, its rig's state file as the sweep left it, and a private
    state directory and unit directory for apply."""
    run_src, state_bytes = swept
    run = tmp_path / run_src.name
    shutil.copytree(run_src, run)
    state = tmp_path / "state.json"
    state.write_bytes(state_bytes)
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "statedir"))
    monkeypatch.delenv("POWERSWEEP_UNIT_DIR", raising=False)
    return run, state


def sim(state: Path) -> list[str]:
    return ["--simulate", PROFILE, "--sim-state", str(state)]


def test_apply_sets_the_sweet_spot_status_shows_it_and_reset_puts_the_default_back(
    rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run, state = rig
    sweet_w = read_json(run / "analysis.json")["sweet_spot"]["cap_w"]
    assert sweet_w != DEFAULT_W
    before = status_json(capsys, *sim(state))["gpus"][0]["power_limit"]
    assert before["current_w"] == DEFAULT_W and before["differs_from_default"] is False

    code, out, err = run_cli(capsys, "apply", str(run), *sim(state))
    assert code == 0, err
    assert (
        f"power limit {DEFAULT_W:g} W -> {sweet_w:g} W (verified: reads back {sweet_w:g} W)" in out
    )
    after = status_json(capsys, *sim(state))["gpus"][0]
    assert after["uuid"] == UUID
    assert after["power_limit"]["current_w"] == sweet_w
    assert after["power_limit"]["differs_from_default"] is True
    assert after["locked_clocks"] == {
        "known": True, "sm_mhz": None, "mem_mhz": None, "user_clock_setting_active": False
    }  # fmt: skip
    code, text, _ = run_cli(capsys, "status", *sim(state))
    assert code == 0 and f"{sweet_w:g} W in force (differs from the default)" in text

    code, out, err = run_cli(capsys, "apply", "--reset", *sim(state))
    assert code == 0, err
    assert f"{sweet_w:g} W -> {DEFAULT_W:g} W" in out
    assert status_json(capsys, *sim(state))["gpus"][0]["power_limit"]["current_w"] == DEFAULT_W


def test_other_objectives_come_from_the_same_run(
    rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run, state = rig
    near_w = read_json(run / "analysis.json")["near_peak"]["cap_w"]
    code, _, err = run_cli(capsys, "apply", str(run), "--objective", "near-peak", *sim(state))
    assert code == 0, err
    assert status_json(capsys, *sim(state))["gpus"][0]["power_limit"]["current_w"] == near_w
    code, _, err = run_cli(
        capsys, "apply", str(run), "--objective", "cost", "--eta", "1", *sim(state)
    )
    assert code == 0, err
    assert "cost recommendation" in err


def test_dry_run_changes_nothing_byte_for_byte(
    rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run, state = rig
    original = state.read_bytes()
    units = tmp_path / "units"
    units.mkdir()
    for args in (
        ["apply", str(run), "--dry-run"],
        ["apply", "--cap", "250", "--dry-run", "--persist", "--unit-dir", str(units)],
        ["apply", "--reset", "--dry-run"],
        ["apply", str(run), "--persist", "--print-unit"],
    ):
        code, out, err = run_cli(capsys, *args, *sim(state))
        assert code == 0, err
        assert state.read_bytes() == original, args
    assert list(units.iterdir()) == []
    code, out, _ = run_cli(capsys, "apply", "--cap", "250", "--dry-run", *sim(state))
    assert f"{DEFAULT_W:g} W -> 250 W (dry run: nothing changed)" in out


def test_persist_writes_a_verified_unit_that_restores_the_cap_after_a_reboot(
    rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run, state = rig
    sweet_w = read_json(run / "analysis.json")["sweet_spot"]["cap_w"]
    units = tmp_path / "units"
    units.mkdir()
    code, out, err = run_cli(
        capsys, "apply", str(run), "--persist", "--unit-dir", str(units), *sim(state)
    )
    assert code == 0, err
    unit = units / "powersweep-apply.service"
    assert [p.name for p in units.iterdir()] == [unit.name]
    assert stat.S_IMODE(unit.stat().st_mode) == 0o644
    assert "persistence mode off -> on" in out
    shown = status_json(capsys, *sim(state), "--unit-dir", str(units))
    assert shown["gpus"][0]["persistence_mode"] is True
    assert shown["unit"]["installed"] and shown["unit"]["settings"][0]["power_limit_w"] == sweet_w
    analyze = shutil.which("systemd-analyze")
    if analyze:
        done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
        assert done.returncode == 0 and unit.name not in done.stderr, done.stderr

    # A reboot: the driver forgets the limit and persistence mode; the unit's command sets both.
    state.write_text(json.dumps({UUID: DEFAULT_W}))
    (exec_line,) = [ln for ln in unit.read_text().splitlines() if ln.startswith("ExecStart=")]
    argv = shlex.split(exec_line.removeprefix("ExecStart=-"))  # "-": a failure goes on
    assert Path(argv[0]).is_absolute()
    booted = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert booted.returncode == 0, booted.stderr
    again = status_json(capsys, *sim(state))["gpus"][0]
    assert again["power_limit"]["current_w"] == sweet_w and again["persistence_mode"] is True

    code, out, err = run_cli(
        capsys, "apply", "--reset", "--persist", "--unit-dir", str(units), *sim(state)
    )
    assert code == 0, err
    assert "removed" in out and list(units.iterdir()) == []


def test_print_unit_prints_only_the_unit(
    rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run, state = rig
    code, out, err = run_cli(capsys, "apply", str(run), "--print-unit", *sim(state))
    assert code == 0, err
    assert out.startswith("# Written by `powersweep apply --persist`")
    assert "[Service]" in out and "--at-boot" in out and " -> " not in out


def test_no_systemd_says_so_and_prints_the_unit(
    rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from powersweep.sweep.settings import boot_unit as unit

    run, state = rig
    monkeypatch.setattr(unit, "systemd_running", lambda *_a: False)
    code, out, err = run_cli(capsys, "apply", str(run), "--persist", *sim(state))
    assert code == 0, err
    assert "does not run systemd" in err and "[Service]" in out


def test_a_run_from_another_card_is_refused_without_force(
    rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run, state = rig
    meta = read_json(run / "run.json")
    meta["gpus"][0]["uuid"] = "GPU-A"
    (run / "run.json").write_text(json.dumps(meta))
    original = state.read_bytes()
    code, out, err = run_cli(capsys, "apply", str(run), *sim(state))
    assert code == 2 and out == ""
    info_line, error_line = err.strip().splitlines()  # the recommendation, then the error
    assert "tps-per-w recommendation" in info_line
    assert error_line.startswith("error: GPU 0 ") and "not the card the run measured" in error_line
    assert "--force" in error_line
    assert state.read_bytes() == original
    code, _, err = run_cli(capsys, "apply", str(run), "--force", *sim(state))
    assert code == 0 and "applying anyway" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--cap", "250", "--gpus", "3"], "there is no GPU 3"),
        (["--cap", "50", "--strict"], "outside the range"),
        (["--cap", "250", "--persist", "--unit-dir", "/nonexistent/units"], "does not exist"),
        (["--cap", "250", "--reset"], "give a RUN_DIR, --cap W and/or --sm-clock"),
        ([], "give a RUN_DIR, --cap W and/or --sm-clock"),
        (["RUN", "--objective", "best"], "--objective"),
        (["NOANALYSIS"], "no analysis.json"),
        (["NOREC"], "holds no"),
        (["--cap", "250", "--gpus", "x"], "--gpus"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    rig: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: list[str],
    needle: str,
) -> None:
    run, state = rig
    no_analysis = tmp_path / "no-analysis"
    shutil.copytree(run, no_analysis)
    (no_analysis / "analysis.json").unlink()
    no_rec = _without(run, tmp_path / "no-rec", "sweet_spot", "near_peak", "recommendation")
    paths = {"RUN": str(run), "NOANALYSIS": str(no_analysis), "NOREC": str(no_rec)}
    _assert_refused(capsys, state, [paths.get(a, a) for a in args], needle)


def _without(run: Path, copy: Path, *keys: str) -> Path:
    """A copy of ``run`` whose analysis.json holds None for ``keys`` (no recommendation)."""
    shutil.copytree(run, copy)
    analysis = read_json(copy / "analysis.json")
    analysis.update(dict.fromkeys(keys))
    (copy / "analysis.json").write_text(json.dumps(analysis))
    return copy


def _assert_refused(
    capsys: pytest.CaptureFixture[str], state: Path, args: list[str], needle: str
) -> None:
    """``apply args`` exits 2 with one ``error:`` line naming ``needle`` and changes nothing."""
    original = state.read_bytes()
    code, out, err = run_cli(capsys, "apply", *args, *sim(state))
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and needle in last
    assert "Traceback" not in err and out == ""
    assert state.read_bytes() == original


def test_a_journal_of_a_killed_sweep_blocks_apply_until_restored(
    rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, state = rig
    statedir = tmp_path / "statedir"
    statedir.mkdir()
    (statedir / "journal.json").write_text(
        json.dumps(
            {
                "version": 1,
                "pid": 999999999,
                "backend": {"kind": "sim", "profiles": [PROFILE], "sim_state": str(state)},
                "gpus": [{"uuid": UUID, "index": 0, "original_limit_w": DEFAULT_W}],
            }
        )
    )
    original = state.read_bytes()
    code, _, err = run_cli(capsys, "apply", "--cap", "250", *sim(state))
    assert code == 2 and "powersweep restore" in err
    assert state.read_bytes() == original
    code, out, err = run_cli(capsys, "apply", "--cap", "250", "--dry-run", *sim(state))
    assert code == 0 and "apply would refuse" in err and "-> 250 W (dry run" in out
    assert state.read_bytes() == original
    shown = status_json(capsys, *sim(state))
    assert shown["journals"][0]["exists"] is True and shown["journals"][0]["sweep_running"] is False


def test_a_foreign_unit_is_not_replaced_and_a_stale_one_is_pointed_out(
    rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run, state = rig
    units = tmp_path / "units"
    units.mkdir()
    foreign = units / "powersweep-apply.service"
    foreign.write_text("[Unit]\nDescription=mine\n")
    original = state.read_bytes()
    code, _, err = run_cli(
        capsys, "apply", str(run), "--persist", "--unit-dir", str(units), *sim(state)
    )
    assert code == 2 and "not written by powersweep" in err
    assert state.read_bytes() == original and foreign.read_text() == "[Unit]\nDescription=mine\n"

    foreign.unlink()
    code, _, err = run_cli(
        capsys, "apply", "--cap", "300", "--persist", "--unit-dir", str(units), *sim(state)
    )
    assert code == 0, err
    code, _, err = run_cli(capsys, "apply", "--cap", "250", "--unit-dir", str(units), *sim(state))
    assert code == 0 and "still sets other values at boot: add --persist" in err
    code, _, err = run_cli(
        capsys, "apply", "--sm-clock", "1500", "--unit-dir", str(units), *sim(state)
    )
    assert code == 0 and "still sets other values at boot: add --persist" in err
    code, _, err = run_cli(capsys, "apply", "--reset", "--unit-dir", str(units), *sim(state))
    assert code == 0 and "--reset --persist removes it" in err


# --- clock locks (a clock run, --sm-clock / --mem-clock) -----------------------------------


@pytest.fixture(scope="module")
def clock_swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """One short simulated SM-clock sweep under a held 300 W cap."""
    return _short_sweep(
        tmp_path_factory, "clock-swept",
        "--axis", "sm-clock", "--sm-clocks", "1200,1500,1800", "--cap", "300",
        "--target-cap-seconds", "1", "--warmup-requests", "1", "--settle-seconds", "1",
    )  # fmt: skip


@pytest.fixture
def clock_rig(
    clock_swept: tuple[Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, Path]]:
    """A copy of the clock run and a fresh state file (limit and locks as before the sweep)."""
    yield _copy_of(clock_swept, tmp_path, monkeypatch)


UNLOCKED = {"known": True, "sm_mhz": None, "mem_mhz": None, "user_clock_setting_active": False}


def test_apply_a_clock_run_sets_its_locks_and_held_cap_and_reset_unlocks(
    clock_rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run, state = clock_rig
    peak = read_json(run / "analysis.json")["peak"]
    sm = peak["sm_lock_mhz"]
    assert status_json(capsys, *sim(state))["gpus"][0]["locked_clocks"] == UNLOCKED

    code, out, err = run_cli(capsys, "apply", str(run), *sim(state))
    assert code == 0, err
    assert f"tps-per-w recommendation SM {sm:g} MHz at 300 W per GPU" in err
    assert (
        f"clock locks SM unlocked -> SM 210-{sm:g} MHz (verified: reads back SM 210-{sm:g} MHz)"
        in out
    )
    assert f"power limit {DEFAULT_W:g} W -> 300 W" in out
    after = status_json(capsys, *sim(state))["gpus"][0]
    assert after["locked_clocks"]["sm_mhz"] == sm and after["locked_clocks"]["mem_mhz"] is None
    assert after["power_limit"]["current_w"] == 300.0

    code, out, err = run_cli(capsys, "apply", "--reset", *sim(state))
    assert code == 0, err
    assert f"clock locks SM 210-{sm:g} MHz, memory unlocked -> SM unlocked, memory unlocked" in out
    again = status_json(capsys, *sim(state))["gpus"][0]
    assert again["locked_clocks"] == UNLOCKED
    assert again["power_limit"]["current_w"] == DEFAULT_W


def test_named_clock_locks_are_snapped_status_shows_them_and_the_cap_stays(
    clock_rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, state = clock_rig
    code, _, err = run_cli(capsys, "apply", "--cap", "280", *sim(state))
    assert code == 0, err
    code, out, err = run_cli(
        capsys, "apply", "--sm-clock", "1401", "--mem-clock", "9751", *sim(state)
    )
    assert code == 0, err
    assert "snapped to 1395 MHz" in err and "power limit" not in out
    shown = status_json(capsys, *sim(state))["gpus"][0]
    assert (shown["locked_clocks"]["sm_mhz"], shown["locked_clocks"]["mem_mhz"]) == (1395, 9751)
    assert shown["power_limit"]["current_w"] == 280.0  # a lock alone leaves the limit alone
    code, text, _ = run_cli(capsys, "status", *sim(state))
    assert code == 0 and "clock locks   SM 1395 MHz, memory 9751 MHz" in text


def test_a_simulated_runs_dry_run_uses_its_own_rig_and_a_real_apply_names_the_flags(
    rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run, _ = rig  # no --simulate: run.json says the run was simulated, and on which profile
    sweet_w = read_json(run / "analysis.json")["sweet_spot"]["cap_w"]
    code, out, err = run_cli(capsys, "apply", str(run), "--dry-run")
    assert code == 0, err
    assert f"{run} is a simulated run: shown on its own rig (--simulate {PROFILE})" in err
    assert f"GPU 0 (NVIDIA GeForce RTX 3090 (simulated), {UUID})" in out  # the run's own card
    assert f"power limit {DEFAULT_W:g} W -> {sweet_w:g} W (dry run: nothing changed)" in out
    assert "NVML" not in err
    code, out, err = run_cli(capsys, "apply", str(run))
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1] == (
        f"error: {run} was measured on the simulated rig (--simulate {PROFILE}): its answer "
        f"is no real card's; add --dry-run to see what it sets, or --simulate {PROFILE} "
        "--sim-state FILE to set it on the simulated rig"
    )
    replayed = tmp_path / "replayed"
    shutil.copytree(run, replayed)
    meta = read_json(replayed / "run.json")
    meta["simulation"]["profile"] = "replay:caps.csv"
    (replayed / "run.json").write_text(json.dumps(meta))
    code, _, err = run_cli(capsys, "apply", str(replayed), "--dry-run")
    assert code == 2 and "replayed a measured curve (--simulate replay:caps.csv)" in err
    assert "add --simulate PROFILE" in err


def test_clock_dry_runs_change_nothing_byte_for_byte(
    clock_rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run, state = clock_rig
    code, _, err = run_cli(capsys, "apply", "--sm-clock", "1500", *sim(state))
    assert code == 0, err  # something for --reset to undo
    original = state.read_bytes()
    units = tmp_path / "units"
    units.mkdir()
    for args in (
        ["apply", str(run), "--dry-run"],
        ["apply", "--sm-clock", "1200", "--mem-clock", "405", "--dry-run"],
        ["apply", "--sm-clock", "1200", "--dry-run", "--persist", "--unit-dir", str(units)],
        ["apply", "--reset", "--dry-run"],
        ["apply", str(run), "--print-unit"],
    ):
        code, out, err = run_cli(capsys, *args, *sim(state))
        assert code == 0, (args, err)
        assert state.read_bytes() == original, args
    assert list(units.iterdir()) == []
    code, out, _ = run_cli(capsys, "apply", "--reset", "--dry-run", *sim(state))
    assert "SM 210-1500 MHz, memory unlocked -> SM unlocked, memory unlocked (dry run" in out


def test_persist_sets_the_clock_locks_again_after_a_reboot(
    clock_rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run, state = clock_rig
    sm = read_json(run / "analysis.json")["peak"]["sm_lock_mhz"]
    units = tmp_path / "units"
    units.mkdir()
    code, out, err = run_cli(
        capsys, "apply", str(run), "--persist", "--unit-dir", str(units), *sim(state)
    )
    assert code == 0, err
    unit = units / "powersweep-apply.service"
    assert stat.S_IMODE(unit.stat().st_mode) == 0o644
    (setting,) = status_json(capsys, *sim(state), "--unit-dir", str(units))["unit"]["settings"]
    assert (setting["power_limit_w"], setting["sm_clock_mhz"], setting["mem_clock_mhz"]) == (
        300.0, sm, None
    )  # fmt: skip
    analyze = shutil.which("systemd-analyze")
    if analyze:
        done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
        assert done.returncode == 0 and unit.name not in done.stderr, done.stderr

    # A reboot: the limit, the lock and persistence mode are gone; the unit's command sets them.
    state.write_text(json.dumps({UUID: DEFAULT_W}))
    assert status_json(capsys, *sim(state))["gpus"][0]["locked_clocks"] == UNLOCKED
    (exec_line,) = [ln for ln in unit.read_text().splitlines() if ln.startswith("ExecStart=")]
    argv = shlex.split(exec_line.removeprefix("ExecStart=-"))  # "-": a failure goes on
    assert argv[argv.index("--sm-clock") + 1] == f"{sm:g}"
    booted = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert booted.returncode == 0, booted.stderr
    again = status_json(capsys, *sim(state))["gpus"][0]
    assert again["locked_clocks"]["sm_mhz"] == sm and again["power_limit"]["current_w"] == 300.0

    code, out, err = run_cli(
        capsys, "apply", "--reset", "--persist", "--unit-dir", str(units), *sim(state)
    )
    assert code == 0, err
    assert "removed" in out and list(units.iterdir()) == []
    assert status_json(capsys, *sim(state))["gpus"][0]["locked_clocks"]["sm_mhz"] is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--sm-clock", "0"], "--sm-clock takes a positive number of MHz"),
        (["--mem-clock", "-9751"], "--mem-clock takes a positive number of MHz"),
        (["--sm-clock", "5000", "--strict"], "5000 MHz is not a supported SM clock"),
        (["--sm-clock", "1401", "--strict"], "(--strict): nothing was changed"),
        (["--sm-clock", "1500", "--reset"], "got --reset and --sm-clock"),
        (["RUN", "--mem-clock", "9751"], "got RUN_DIR and --mem-clock"),
        (["RUN", "--objective", "cost"], "clock run: it recommends clock locks for"),
        (["NOREC"], "holds no tps-per-w clock recommendation"),
        (["--sm-clock", "1500", "--gpus", "2"], "there is no GPU 2"),
    ],
)
def test_bad_clock_input_is_one_line_and_changes_nothing(
    clock_rig: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: list[str],
    needle: str,
) -> None:
    run, state = clock_rig
    no_rec = _without(run, tmp_path / "no-rec", "peak", "sweet_spot", "near_peak")
    paths = {"RUN": str(run), "NOREC": str(no_rec)}
    _assert_refused(capsys, state, [paths.get(a, a) for a in args], needle)


def test_a_lock_the_card_refuses_puts_the_cap_and_the_other_lock_back(
    clock_rig: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from powersweep.sim.sim_gpu import SimGpu
    from powersweep.sweep.gpu import LockResult

    _, state = clock_rig
    code, _, err = run_cli(capsys, "apply", "--sm-clock", "1200", *sim(state))
    assert code == 0, err
    before = status_json(capsys, *sim(state))["gpus"][0]
    monkeypatch.setattr(
        SimGpu, "lock_mem_clock", lambda self, mhz: LockResult(mhz, False, "refused (test)")
    )
    code, out, err = run_cli(
        capsys, "apply", "--cap", "250", "--sm-clock", "1500", "--mem-clock", "9751", *sim(state)
    )
    assert code != 0 and out == ""
    (line,) = err.strip().splitlines()
    assert line == "error: refused (test); the GPUs already changed were put back"
    after = status_json(capsys, *sim(state))["gpus"][0]
    assert after["locked_clocks"] == before["locked_clocks"]
    assert after["locked_clocks"]["sm_mhz"] == 1200.0
    assert after["power_limit"]["current_w"] == before["power_limit"]["current_w"] == DEFAULT_W


# --- one unit for every card (a mixed two-card rig) ----------------------------------------

PAIR = "rtx3090-air+rtx4090-air"
UUIDS = ("GPU-sim-rtx3090-air-0", "GPU-sim-rtx4090-air-1")
DEFAULTS = {UUIDS[0]: 370.0, UUIDS[1]: 450.0}


def _pair(capsys: pytest.CaptureFixture[str], state: Path, units: Path, *args: str) -> str:
    code, out, err = run_cli(
        capsys, "apply", *args, "--unit-dir", str(units), "--simulate", PAIR,
        "--sim-state", str(state),
    )  # fmt: skip
    assert code == 0, err
    return out


def _at_boot(units: Path) -> dict[str, float | None]:
    from powersweep.sweep.settings.boot_unit import read_unit

    unit = read_unit(units)
    assert unit.installed and unit.ours
    return {s.uuid: s.power_limit_w for s in unit.settings}


def _state_limits(state: Path) -> dict[str, float]:
    return {k: v for k, v in json.loads(state.read_text()).items() if k in UUIDS}


def _boot(units: Path) -> list[int]:
    """Run the unit's lines as systemd does (each '-' line may fail; the next still runs)."""
    lines = [
        ln.removeprefix("ExecStart=")
        for ln in (units / "powersweep-apply.service").read_text().splitlines()
        if ln.startswith("ExecStart=")
    ]
    assert lines and all(ln.startswith("-") for ln in lines)
    return [
        subprocess.run(shlex.split(ln[1:]), capture_output=True, timeout=120).returncode
        for ln in lines
    ]


def test_persist_card_by_card_keeps_one_unit_for_every_card(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "statedir"))
    state, units = tmp_path / "state.json", tmp_path / "units"
    units.mkdir()
    _pair(capsys, state, units, "--cap", "290", "--gpus", "0", "--persist")
    _pair(capsys, state, units, "--cap", "300", "--gpus", "1", "--persist")
    # the issue: the second call left GPU 0 to reset at the next boot
    assert _at_boot(units) == {UUIDS[0]: 290.0, UUIDS[1]: 300.0}
    # a mixed rig: each card its own cap, both back after a reboot
    state.write_text(json.dumps(DEFAULTS))
    assert _boot(units) == [0, 0]
    assert _state_limits(state) == {UUIDS[0]: 290.0, UUIDS[1]: 300.0}

    # setting one card again replaces its line only; --print-unit shows the merged unit
    printed = _pair(capsys, state, units, "--cap", "280", "--gpus", "0", "--print-unit")
    assert f"--cap 280 --gpus {UUIDS[0]}" in printed and f"--cap 300 --gpus {UUIDS[1]}" in printed
    assert _at_boot(units) == {UUIDS[0]: 290.0, UUIDS[1]: 300.0}  # printing changed nothing

    # resetting one card drops its line and leaves the other's
    out = _pair(capsys, state, units, "--reset", "--gpus", "0", "--persist")
    assert "updated" in out and _at_boot(units) == {UUIDS[1]: 300.0}
    assert _state_limits(state)[UUIDS[0]] == 370.0
    # the last card reset: no card left, no unit
    out = _pair(capsys, state, units, "--reset", "--gpus", "1", "--persist")
    assert "removed" in out and list(units.iterdir()) == []


def test_a_card_the_unit_cannot_set_does_not_stop_the_others(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from powersweep.sweep.settings.boot_unit import BootSetting, merge_settings, read_unit

    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "statedir"))
    state, units = tmp_path / "state.json", tmp_path / "units"
    units.mkdir()
    _pair(capsys, state, units, "--cap", "250", "--gpus", "0", "--persist")
    # a card that was in the unit and is gone now (pulled, or another UUID after a swap)
    unit = units / "powersweep-apply.service"
    gone = BootSetting("GPU-sim-gone-9", "gone card", 200.0, source="--cap 200")
    text = unit.read_text()
    marker = next(ln for ln in text.splitlines() if ln.startswith("# powersweep-settings: "))
    data = json.loads(marker.split(": ", 1)[1])
    data["gpus"].insert(0, gone.to_dict())
    unit.write_text(text.replace(marker, "# powersweep-settings: " + json.dumps(data)))
    assert [s.uuid for s in read_unit(units).settings] == ["GPU-sim-gone-9", UUIDS[0]]
    # the next card's --persist keeps the gone card's line (it may come back) and adds its own
    _pair(capsys, state, units, "--cap", "320", "--gpus", "1", "--persist")
    assert _at_boot(units) == {"GPU-sim-gone-9": 200.0, UUIDS[0]: 250.0, UUIDS[1]: 320.0}
    assert merge_settings(read_unit(units).settings, drop=[UUIDS[0]])[0] == gone
    state.write_text(json.dumps(DEFAULTS))
    codes = _boot(units)
    assert codes[0] != 0 and codes[1:] == [0, 0]  # the gone card fails first, the others set
    assert _state_limits(state) == {UUIDS[0]: 250.0, UUIDS[1]: 320.0}


# --- an undervolt run: the cap it held, its SM lock and its SM clock offset ----------------


@pytest.fixture(scope="module")
def undervolt_swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """One short simulated undervolt search (the card's default cap, a locked SM clock)."""
    return _short_sweep(
        tmp_path_factory, "undervolt-swept",
        "--axis", "undervolt", "--target-cap-seconds", "1", "--warmup-requests", "1",
        "--settle-seconds", "1",
    )  # fmt: skip


@pytest.fixture
def undervolt_rig(
    undervolt_swept: tuple[Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, Path]]:
    """A copy of the undervolt run and a fresh state file (offset 0, unlocked, as before)."""
    yield _copy_of(undervolt_swept, tmp_path, monkeypatch)


def _chosen(run: Path) -> tuple[float, float, float]:
    """The cap, SM lock and offset of the run's answer (an offset above 0, or the test is moot)."""
    chosen = read_json(run / "analysis.json")["chosen"]
    assert chosen["sm_offset_mhz"] > 0, chosen
    return chosen["cap_w"], chosen["sm_lock_mhz"], chosen["sm_offset_mhz"]


def test_apply_an_undervolt_run_sets_cap_lock_and_offset_and_reset_puts_them_back(
    undervolt_rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run, state = undervolt_rig
    cap, lock, offset = _chosen(run)
    assert status_json(capsys, *sim(state))["gpus"][0]["clock_offset"]["sm_offset_mhz"] == 0.0

    code, out, err = run_cli(capsys, "apply", str(run), *sim(state))
    assert code == 0, err
    assert (
        f"undervolt recommendation SM {lock:g} MHz {offset:+g} MHz offset at {cap:g} W per GPU"
        in err
    )
    lines = out.splitlines()
    assert lines[-1].endswith(
        f"SM clock offset +0 MHz -> {offset:+g} MHz (verified: reads back {offset:+g} MHz)"
    )
    # the lock first, a range from the card's idle floor so the idle card clocks down
    assert f"clock locks SM unlocked -> SM 210-{lock:g} MHz" in lines[-2]
    after = status_json(capsys, *sim(state))["gpus"][0]
    assert after["locked_clocks"]["sm_mhz"] == lock
    assert read_json(state)[f"{UUID}#locks"]["sm_min"] == 210.0
    assert after["clock_offset"]["sm_offset_mhz"] == offset
    assert after["power_limit"]["current_w"] == cap
    code, text, _ = run_cli(capsys, "status", *sim(state))
    assert code == 0 and f"clock offset  SM {offset:+g} MHz" in text

    code, out, err = run_cli(capsys, "apply", "--reset", *sim(state))
    assert code == 0, err
    assert f"SM clock offset {offset:+g} MHz -> +0 MHz (verified: reads back +0 MHz)" in out
    again = status_json(capsys, *sim(state))["gpus"][0]
    assert again["locked_clocks"] == UNLOCKED and again["clock_offset"]["sm_offset_mhz"] == 0.0


def test_an_undervolt_run_says_its_idle_draw_and_apply_keeps_a_recorded_minimum(
    undervolt_rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run, state = undervolt_rig
    _, lock, _ = _chosen(run)
    idle = read_json(run / "run.json")["idle"]
    assert idle["sm_lock_range_mhz"] == [210.0, lock] and idle["sm_clock_mhz"] == 210.0
    assert 20.0 < idle["power_w"] < 60.0  # the card clocked down: near its 32 W idle
    summary = (run / "summary.md").read_text()
    assert f"Idle at the lock (SM 210-{lock:g} MHz, 5 s with no requests): " in summary
    # a run that recorded --sm-clock-min has apply lock from it
    meta = read_json(run / "run.json")
    meta["options"]["sm_clock_min_mhz"] = 900.0
    (run / "run.json").write_text(json.dumps(meta))
    code, out, err = run_cli(capsys, "apply", str(run), *sim(state))
    assert code == 0, err
    assert f"clock locks SM unlocked -> SM 900-{lock:g} MHz" in out
    assert read_json(state)[f"{UUID}#locks"]["sm_min"] == 900.0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["RUN", "--objective", "near-peak"], "is an undervolt run: its search has one answer"),
        (["RUN", "--objective", "slo", "--max-itl-ms", "50"], "not a slo pick; apply it without"),
        (["NOANSWER"], "undervolt search has no answer: no point at its locked SM clock held"),
        (["RUN", "--sm-offset", "30"], "got RUN_DIR and --sm-offset"),
    ],
)
def test_bad_undervolt_input_is_one_line_and_changes_nothing(
    undervolt_rig: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: list[str],
    needle: str,
) -> None:
    run, state = undervolt_rig
    no_answer = _without(run, tmp_path / "no-answer", "chosen", "versus_cap")
    paths = {"RUN": str(run), "NOANSWER": str(no_answer)}
    _assert_refused(capsys, state, [paths.get(a, a) for a in args], needle)


@pytest.mark.parametrize("edit", ["unstable", "negative", "absurd"])
def test_an_edited_undervolt_answer_is_refused_for_what_the_run_measured(
    undervolt_rig: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    edit: str,
) -> None:
    # issue 45: an analysis.json edited to the step the run marked unstable, to an offset never
    # measured, or to an absurd one was applied (or refused naming --sm-offset)
    run, state = undervolt_rig
    analysis = read_json(run / "analysis.json")
    offset = {
        "unstable": analysis["first_unstable_mhz"],
        "negative": -150.0,
        "absurd": 100000.0,
    }[edit]
    copy = tmp_path / "edited"
    shutil.copytree(run, copy)
    analysis["chosen"]["sm_offset_mhz"] = offset
    (copy / "analysis.json").write_text(json.dumps(analysis))
    _assert_refused(capsys, state, [str(copy)], f"{copy / 'analysis.json'} answers SM ")
    _, _, err = run_cli(capsys, "apply", str(copy), *sim(state))
    assert "--sm-offset" not in err and f"powersweep analyze {copy}` again" in err


def test_a_card_without_an_offset_is_refused_in_one_line(
    undervolt_rig: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from powersweep.sim.sim_gpu import SimGpu
    from powersweep.sweep.gpu import ClockOffset

    run, state = undervolt_rig
    offset = _chosen(run)[2]
    monkeypatch.setattr(
        SimGpu,
        "sm_clock_offset",
        lambda self: ClockOffset(False, message="GPU 0 has no SM clock offset to set (test)"),
    )
    _assert_refused(
        capsys,
        state,
        [str(run)],
        f"GPU 0 has no SM clock offset to set (test): the {offset:+g} MHz SM clock offset cannot "
        "be applied; nothing was changed",
    )


def test_a_refused_offset_puts_the_cap_and_lock_back_and_leaves_no_journal(
    undervolt_rig: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from powersweep.sim.sim_gpu import SimGpu
    from powersweep.sweep.gpu import LockResult

    run, state = undervolt_rig
    code, _, err = run_cli(capsys, "apply", "--cap", "300", *sim(state))
    assert code == 0, err
    real = SimGpu.set_sm_clock_offset
    monkeypatch.setattr(
        SimGpu,
        "set_sm_clock_offset",
        lambda self, mhz: real(self, mhz) if mhz == 0 else LockResult(mhz, False, "refused (test)"),
    )
    code, out, err = run_cli(capsys, "apply", str(run), *sim(state))
    assert code != 0 and out == ""
    assert err.strip().splitlines()[-1] == (
        "error: refused (test); the GPUs already changed were put back"
    )
    after = status_json(capsys, *sim(state))["gpus"][0]
    assert after["power_limit"]["current_w"] == 300.0
    assert after["locked_clocks"] == UNLOCKED and after["clock_offset"]["sm_offset_mhz"] == 0.0
    assert not (tmp_path / "statedir" / "journal.json").exists()


def test_persist_sets_the_undervolt_again_after_a_reboot_and_status_shows_it(
    undervolt_rig: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run, state = undervolt_rig
    cap, lock, offset = _chosen(run)
    units = tmp_path / "units"
    units.mkdir()
    # issue 45: an offset is persisted only when the user trusts it past a driver update
    _assert_refused(
        capsys, state, [str(run), "--persist", "--unit-dir", str(units)], "pass --trust-offset"
    )
    assert not (units / "powersweep-apply.service").exists()
    code, _, err = run_cli(
        capsys, "apply", str(run), "--persist", "--trust-offset", "--unit-dir", str(units),
        *sim(state),
    )  # fmt: skip
    assert code == 0, err
    unit = units / "powersweep-apply.service"
    shown = status_json(capsys, *sim(state), "--unit-dir", str(units))
    (setting,) = shown["unit"]["settings"]
    assert (setting["power_limit_w"], setting["sm_clock_mhz"], setting["sm_offset_mhz"]) == (
        cap, lock, offset
    )  # fmt: skip
    code, text, _ = run_cli(capsys, "status", *sim(state), "--unit-dir", str(units))
    assert code == 0 and f"SM 210-{lock:g} MHz {offset:+g} MHz offset" in text.splitlines()[-1]
    analyze = shutil.which("systemd-analyze")
    if analyze:
        done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
        assert done.returncode == 0 and unit.name not in done.stderr, done.stderr

    # A reboot: the lock and the offset are gone; the unit's one powersweep line sets all three.
    state.write_text(json.dumps({UUID: DEFAULT_W}))
    (exec_line,) = [ln for ln in unit.read_text().splitlines() if ln.startswith("ExecStart=")]
    argv = shlex.split(exec_line.removeprefix("ExecStart=-"))
    assert f"--sm-offset={offset:g}" in argv and "--at-boot" in argv
    assert "--offset-driver=sim" in argv
    booted = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert booted.returncode == 0, booted.stderr
    again = status_json(capsys, *sim(state))["gpus"][0]
    assert again["locked_clocks"]["sm_mhz"] == lock
    assert again["clock_offset"]["sm_offset_mhz"] == offset
    assert again["power_limit"]["current_w"] == cap and again["persistence_mode"] is True


# --- a memory clock offset (issue 45): named, on a card with one to set ---------------------

MEM_PROFILE = "rtx4090-air"
MEM_UUID = f"GPU-sim-{MEM_PROFILE}-0"


def _mem_status(capsys: pytest.CaptureFixture[str], state: Path, *extra: str) -> dict[str, Any]:
    return status_json(capsys, "--simulate", MEM_PROFILE, "--sim-state", str(state), *extra)


def test_a_memory_offset_is_set_shown_restored_on_failure_and_reset(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from powersweep.sim.sim_gpu import SimGpu
    from powersweep.sweep.gpu import LockResult

    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "statedir"))
    state = tmp_path / "state.json"
    rig = ["--simulate", MEM_PROFILE, "--sim-state", str(state)]
    code, out, err = run_cli(capsys, "apply", "--mem-offset", "1000", "--sm-clock", "1995", *rig)
    assert code == 0, err
    assert out.splitlines()[-1].endswith(
        "memory clock offset +0 MHz -> +1000 MHz (verified: reads back +1000 MHz)"
    )
    gpu = _mem_status(capsys, state)["gpus"][0]
    assert gpu["mem_clock_offset"]["mem_offset_mhz"] == 1000.0
    assert gpu["clock_offset"]["sm_offset_mhz"] == 0.0
    code, text, _ = run_cli(capsys, "status", *rig)
    assert code == 0 and "  memory offset +1000 MHz (range " in text

    # a card that refuses the next offset: the lock and the offset in force come back
    real = SimGpu.set_mem_clock_offset
    monkeypatch.setattr(
        SimGpu,
        "set_mem_clock_offset",
        lambda self, mhz: real(self, mhz) if mhz == 1000 else LockResult(mhz, False, "no (test)"),
    )
    code, out, err = run_cli(capsys, "apply", "--mem-offset", "2000", "--sm-clock", "1500", *rig)
    assert code != 0 and out == ""
    assert err.strip().splitlines()[-1] == (
        "error: no (test); the GPUs already changed were put back"
    )
    gpu = _mem_status(capsys, state)["gpus"][0]
    assert (gpu["mem_clock_offset"]["mem_offset_mhz"], gpu["locked_clocks"]["sm_mhz"]) == (
        1000.0, 1995.0
    )  # fmt: skip
    assert not (tmp_path / "statedir" / "journal.json").exists()
    monkeypatch.setattr(SimGpu, "set_mem_clock_offset", real)

    code, out, err = run_cli(capsys, "apply", "--reset", *rig)
    assert code == 0, err
    assert any(
        ln.endswith("memory clock offset +1000 MHz -> +0 MHz (verified: reads back +0 MHz)")
        for ln in out.splitlines()
    )
    gpu = _mem_status(capsys, state)["gpus"][0]
    assert gpu["mem_clock_offset"]["mem_offset_mhz"] == 0.0 and gpu["locked_clocks"] == UNLOCKED


def test_a_persisted_memory_offset_is_set_again_at_boot_only_under_its_driver(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "statedir"))
    state, units = tmp_path / "state.json", tmp_path / "units"
    units.mkdir()
    rig = ["--simulate", MEM_PROFILE, "--sim-state", str(state), "--unit-dir", str(units)]
    named = ["--mem-offset", "1000", "--sm-clock", "1995", "--persist"]
    code, out, err = run_cli(capsys, "apply", *named, *rig)
    assert code == 2 and out == "" and "pass --trust-offset" in err
    assert not state.exists() and not (units / "powersweep-apply.service").exists()
    code, _, err = run_cli(capsys, "apply", *named, "--trust-offset", *rig)
    assert code == 0, err
    (setting,) = _mem_status(capsys, state, "--unit-dir", str(units))["unit"]["settings"]
    assert (setting["mem_offset_mhz"], setting["offset_driver"]) == (1000.0, "sim")
    unit = units / "powersweep-apply.service"
    (exec_line,) = [ln for ln in unit.read_text().splitlines() if ln.startswith("ExecStart=")]
    argv = shlex.split(exec_line.removeprefix("ExecStart=-"))
    assert "--mem-offset=1000" in argv and "--offset-driver=sim" in argv

    # a reboot under the same driver: lock and memory offset set again
    state.unlink()
    booted = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert booted.returncode == 0 and booted.stderr == "", booted.stderr
    gpu = _mem_status(capsys, state)["gpus"][0]
    assert (gpu["mem_clock_offset"]["mem_offset_mhz"], gpu["locked_clocks"]["sm_mhz"]) == (
        1000.0, 1995.0
    )  # fmt: skip

    # a reboot after a driver update: the lock is set, the offset skipped with one warning
    state.unlink()
    moved = [a if not a.startswith("--offset-driver=") else "--offset-driver=550.54" for a in argv]
    booted = subprocess.run(moved, capture_output=True, text=True, timeout=120)
    assert booted.returncode == 0, booted.stderr
    (warning,) = booted.stderr.splitlines()
    assert warning.startswith("warning: ") and "persisted under driver 550.54" in warning
    gpu = _mem_status(capsys, state)["gpus"][0]
    assert (gpu["mem_clock_offset"]["mem_offset_mhz"], gpu["locked_clocks"]["sm_mhz"]) == (
        0.0, 1995.0
    )  # fmt: skip
