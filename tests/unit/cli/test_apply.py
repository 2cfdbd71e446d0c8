"""powersweep.cli.apply: ``powersweep apply`` on a simulated rig. Named caps and clock locks set,
verified and said per card; values outside a card's range clamped (or refused with --strict);
--dry-run and --print-unit change nothing; --reset puts the defaults back; contradictory options,
a killed sweep's journal and a running sweep are refused in one ``error:`` line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from powersweep.sim.limit_store import LimitStore
from powersweep.sweep.records.owner import process_start
from tests.helpers.cli import run_cli as run

UUID = "GPU-sim-rtx3090-air-0"
LABEL = f"GPU 0 (NVIDIA GeForce RTX 3090 (simulated), {UUID})"


def sim(tmp_path: Path) -> list[str]:
    return [
        "--simulate", "rtx3090-air", "--sim-state", str(tmp_path / "sim.json"),
        "--state-dir", str(tmp_path / "sd"),
    ]  # fmt: skip


def _limit(tmp_path: Path) -> float | None:
    return LimitStore(tmp_path / "sim.json").get(UUID)


def test_a_named_cap_is_set_verified_and_said(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "apply", "--cap", "250", *sim(tmp_path))
    assert code == 0, err
    assert out == f"{LABEL}: power limit 370 W -> 250 W (verified: reads back 250 W)\n"
    assert err.startswith("warning: persistence mode is off on GPU 0: ")
    assert _limit(tmp_path) == 250.0
    assert not (tmp_path / "sd" / "journal.json").exists()  # apply's own journal is gone


def test_a_cap_outside_the_range_is_clamped_or_with_strict_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "apply", "--cap", "500", "--strict", *sim(tmp_path))
    assert code == 2 and out == ""
    assert err.strip() == (
        f"error: 500 W is outside the range of {LABEL}, 100-390 W (--strict): nothing was changed"
    )
    assert _limit(tmp_path) is None
    code, out, err = run(capsys, "apply", "--cap", "500", *sim(tmp_path))
    assert code == 0
    assert err.splitlines()[0] == (
        f"warning: 500 W is outside the range of {LABEL}, 100-390 W: clamped to 390 W"
    )
    assert out.startswith(f"{LABEL}: power limit 370 W -> 390 W")
    assert _limit(tmp_path) == 390.0


def test_a_clock_lock_is_snapped_to_a_supported_clock(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "apply", "--sm-clock", "1400", *sim(tmp_path))
    assert code == 0, err
    assert "1400 MHz is not a supported SM clock" in err and "snapped to 1395 MHz" in err
    assert out == (
        f"{LABEL}: clock locks SM unlocked -> SM 210-1395 MHz (verified: reads back SM "
        "210-1395 MHz)\n"
    )
    assert LimitStore(tmp_path / "sim.json").get_locks(UUID).sm_mhz == 1395.0


def test_a_dry_run_and_a_printed_unit_change_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "apply", "--cap", "300", "--dry-run", *sim(tmp_path))
    assert code == 0
    assert out == f"{LABEL}: power limit 370 W -> 300 W (dry run: nothing changed)\n"
    code, out, err = run(
        capsys, "apply", "--cap", "300", "--print-unit", "--unit-dir", str(tmp_path), *sim(tmp_path)
    )
    assert code == 0, err
    assert err.splitlines() == [f"{LABEL}: the unit sets 300 W at boot"]
    assert out.startswith("# Written by `powersweep apply --persist` from --cap 300.\n")
    (exec_start,) = [line for line in out.splitlines() if line.startswith("ExecStart=")]
    assert exec_start.endswith(
        f"apply --simulate rtx3090-air --sim-state {tmp_path / 'sim.json'} "
        f"--at-boot --cap 300 --gpus {UUID}"
    )
    assert _limit(tmp_path) is None and not (tmp_path / "powersweep-apply.service").exists()
    # --simulate without --sim-state is fine when nothing is changed
    code, _, err = run(capsys, "apply", "--cap", "300", "--dry-run", "--simulate", "rtx3090-air")
    assert code == 0, err


def test_persist_writes_the_unit_and_reset_persist_removes_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    unit = tmp_path / "powersweep-apply.service"
    args = ["--unit-dir", str(tmp_path), *sim(tmp_path)]
    code, out, err = run(capsys, "apply", "--cap", "300", "--persist", *args)
    assert code == 0, err
    assert out.splitlines()[1:] == [
        f"{LABEL}: persistence mode off -> on",
        f"wrote {unit} (mode 0644, not enabled (run: systemctl enable powersweep-apply.service)): "
        "these settings are set again at boot",
    ]
    assert oct(unit.stat().st_mode & 0o777) == "0o644"
    code, out, err = run(capsys, "apply", "--reset", "--persist", *args)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{LABEL}: power limit 300 W -> 370 W (verified: reads back 370 W)"
    assert lines[-1] == f"removed {unit}"
    assert not unit.exists() and _limit(tmp_path) == 370.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "error: give a RUN_DIR, --cap W and/or --sm-clock / --mem-clock / --sm-offset / "
         "--mem-offset MHZ, or --reset (got nothing)"),
        (["--cap", "250", "--reset"], "(got --reset and --cap)"),
        (["run-dir", "--cap", "250"], "(got RUN_DIR and --cap)"),
        (["--sm-clock", "-5"], "error: --sm-clock"),
        (["--cap", "250", "--eta", "2"], "error: --eta must be between 0 and 1"),
        (["--cap", "250", "--max-itl-ms", "50"], "error: --max-ttft-ms and --max-itl-ms choose "
         "a run's point: use them with RUN_DIR --objective slo"),
        (["--reset", "--print-unit"], "error: --reset --persist removes the boot unit; there is "
         "no unit to print"),
        (["--cap", "250", "--at-boot"], "error: --at-boot is what the boot unit runs: it takes "
         "--cap, --sm-clock, --mem-clock, --sm-offset, --mem-offset, --offset-driver and --gpus "
         "only"),
        (["--mem-offset", "nan"], "error: --mem-offset takes a number of MHz"),
        (["--mem-offset", "1000", "--reset"], "(got --reset and --mem-offset)"),
        (["--mem-offset", "7000"], "error: +7000 MHz is outside the memory clock offsets of "
         f"{LABEL} (-2000 to +6000 MHz); nothing was changed"),
        (["--mem-offset", "1000", "--persist"], f"error: --persist would set {UUID}'s memory "
         "clock offset +1000 MHz at every boot, but a driver update moves the voltage/frequency "
         "curve and the memory training, so an offset stable today may not be after one: pass "
         "--trust-offset to persist it (the unit then skips the offsets at a boot under another "
         "driver), or apply it without --persist; nothing was changed"),
        (["--sm-offset", "90", "--sm-clock", "1500", "--mem-offset", "1000", "--print-unit"],
         f"error: --persist would set {UUID}'s SM clock offset +90 MHz, {UUID}'s memory clock "
         "offset +1000 MHz at every boot"),
        (["--mem-offset", "1000", "--trust-offset"], "error: --trust-offset lets --persist keep "
         "a clock offset: give --persist too"),
        (["--cap", "250", "--offset-driver", "550.1"], "error: --offset-driver is what the boot "
         "unit passes with --at-boot"),
        (["--sm-offset", "100"], "error: --sm-offset shifts the whole voltage/frequency curve, so "
         "without an SM clock lock the card would boost past its stock clocks: give --sm-clock "
         "MHZ with it"),
        (["--sm-offset", "nan", "--sm-clock", "1500"], "error: --sm-offset takes a number of MHz"),
        (["--sm-offset", "100", "--sm-clock", "1500", "--reset"], "(got --reset and --sm-clock "
         "and --sm-offset)"),
        (["--sm-offset", "1200", "--sm-clock", "1500"], "error: +1200 MHz is outside the SM "
         f"clock offsets of {LABEL} (-200 to +1000 MHz); nothing was changed"),
    ],
)  # fmt: skip
def test_contradictory_options_are_refused_before_anything_changes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    code, out, err = run(capsys, "apply", *args, *sim(tmp_path))
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert not (tmp_path / "sim.json").exists()


def test_a_named_offset_goes_on_after_its_lock_and_reset_takes_it_off_first(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "apply", "--sm-clock", "1500", "--sm-offset", "60", *sim(tmp_path))
    assert code == 0, err
    assert out.splitlines() == [
        f"{LABEL}: clock locks SM unlocked -> SM 210-1500 MHz (verified: reads back SM "
        "210-1500 MHz)",
        f"{LABEL}: SM clock offset +0 MHz -> +60 MHz (verified: reads back +60 MHz)",
    ]
    assert LimitStore(tmp_path / "sim.json").get_sm_offset(UUID) == 60.0
    code, out, err = run(capsys, "apply", "--reset", *sim(tmp_path))
    assert code == 0, err
    lines = out.splitlines()
    offset = lines.index(
        f"{LABEL}: SM clock offset +60 MHz -> +0 MHz (verified: reads back +0 MHz)"
    )
    unlock = next(i for i, ln in enumerate(lines) if "clock locks SM 210-1500 MHz" in ln)
    assert offset < unlock  # off before the unlock: never a raised curve on a free clock
    assert LimitStore(tmp_path / "sim.json").get_sm_offset(UUID) == 0.0
    code, out, _ = run(capsys, "apply", "--reset", *sim(tmp_path))
    assert code == 0 and "SM clock offset" not in out  # already 0: nothing to put back


def test_a_simulated_apply_needs_a_state_file_to_hold_what_it_sets(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "apply", "--cap", "250", "--simulate", "rtx3090-air")
    assert code == 2
    assert err.strip() == "error: --simulate needs --sim-state FILE to hold what apply sets"


def _journal(tmp_path: Path, **changes: object) -> Path:
    entry = {
        "version": 1,
        "pid": os.getpid(),
        "created_at": "2025-01-01T00:00:00Z",
        "backend": {"kind": "sim", "profiles": ["rtx3090-air"]},
        "gpus": [{"uuid": UUID, "index": 0, "name": "x", "original_limit_w": 370.0}],
        **changes,
    }
    (tmp_path / "sd").mkdir(exist_ok=True)
    path = tmp_path / "sd" / "journal.json"
    path.write_text(json.dumps(entry))
    return path


def test_a_killed_sweeps_journal_is_refused_unless_forced(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    journal = _journal(tmp_path)
    code, _, err = run(capsys, "apply", "--cap", "250", *sim(tmp_path))
    assert code == 2
    assert err.strip() == (
        f"error: a killed sweep left a restore journal ({journal}); `powersweep restore` would "
        "overwrite this setting: run `powersweep restore` first, or pass --force"
    )
    assert _limit(tmp_path) is None
    code, _, err = run(capsys, "apply", "--cap", "250", "--dry-run", *sim(tmp_path))
    assert code == 0 and "apply would refuse (run `powersweep restore` first" in err
    code, _, err = run(capsys, "apply", "--cap", "250", "--force", *sim(tmp_path))
    assert code == 0, err
    assert "; applying anyway (--force)" in err.splitlines()[0]
    assert _limit(tmp_path) == 250.0
    assert json.loads(journal.read_text())["gpus"][0]["original_limit_w"] == 370.0  # kept


def test_a_running_sweep_keeps_its_cards_even_with_force(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    parent = os.getppid()
    _journal(tmp_path, pid=parent, pid_start=process_start(parent))
    code, _, err = run(capsys, "apply", "--cap", "250", "--force", *sim(tmp_path))
    assert code == 2
    assert err.strip() == (
        f"error: a sweep is running (PID {parent}) and will put its original limits back when "
        "it ends: wait for it to end (--force does not override a live sweep)"
    )
    assert _limit(tmp_path) is None


# --- a memory clock offset (issue 45) -------------------------------------------------------


def _mem_offset(tmp_path: Path) -> float:
    return LimitStore(tmp_path / "sim.json").get_mem_offset(UUID)


def test_a_named_memory_offset_is_set_verified_and_reset_without_an_sm_lock(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "apply", "--mem-offset", "1000", *sim(tmp_path))
    assert code == 0, err
    assert out.splitlines() == [
        f"{LABEL}: memory clock offset +0 MHz -> +1000 MHz (verified: reads back +1000 MHz)"
    ]
    assert _mem_offset(tmp_path) == 1000.0
    code, out, err = run(capsys, "status", "--simulate", "rtx3090-air", "--sim-state",
                         str(tmp_path / "sim.json"), "--json")  # fmt: skip
    assert json.loads(out)["gpus"][0]["mem_clock_offset"]["mem_offset_mhz"] == 1000.0
    code, out, err = run(capsys, "apply", "--reset", *sim(tmp_path))
    assert code == 0, err
    assert f"{LABEL}: memory clock offset +1000 MHz -> +0 MHz (verified: reads back +0 MHz)" in (
        out.splitlines()
    )
    assert _mem_offset(tmp_path) == 0.0


def test_the_memory_offset_goes_on_after_the_sm_offset_and_comes_off_before_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ["--sm-clock", "1500", "--sm-offset", "90", "--mem-offset", "1000", *sim(tmp_path)]
    code, out, err = run(capsys, "apply", *args, "--dry-run")
    assert code == 0, err
    dry = [ln.split(": ", 1)[1] for ln in out.splitlines()]
    assert [ln.split(" ", 2)[:2] for ln in dry] == [["clock", "locks"], ["SM", "clock"],
                                                    ["memory", "clock"]]  # fmt: skip
    code, out, err = run(capsys, "apply", *args)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[-2].endswith("SM clock offset +0 MHz -> +90 MHz (verified: reads back +90 MHz)")
    assert lines[-1].endswith(
        "memory clock offset +0 MHz -> +1000 MHz (verified: reads back +1000 MHz)"
    )
    code, out, err = run(capsys, "apply", "--reset", *sim(tmp_path))
    assert code == 0, err
    said = [ln for ln in out.splitlines() if "offset" in ln or "clock locks" in ln]
    assert [ln.split(": ", 1)[1].split(" ", 2)[:2] for ln in said] == [
        ["memory", "clock"],
        ["SM", "clock"],
        ["clock", "locks"],
    ]


def test_persist_with_trust_offset_records_the_driver_and_a_boot_under_another_skips_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    unit = tmp_path / "powersweep-apply.service"
    args = ["--unit-dir", str(tmp_path), *sim(tmp_path)]
    code, _, err = run(capsys, "apply", "--cap", "300", "--mem-offset", "1000", "--persist", *args)
    assert code == 2 and "pass --trust-offset" in err and not unit.exists()
    assert _mem_offset(tmp_path) == 0.0  # refused before any write
    code, _, err = run(
        capsys, "apply", "--cap", "300", "--mem-offset", "1000", "--persist", "--trust-offset",
        *args,
    )  # fmt: skip
    assert code == 0, err
    exec_line = next(ln for ln in unit.read_text().splitlines() if ln.startswith("ExecStart="))
    assert exec_line.endswith(
        f"--at-boot --cap 300 --mem-offset=1000 --offset-driver=sim --gpus {UUID}"
    )

    # a reboot under another driver: the cap is set, the offset skipped with one warning
    (tmp_path / "sim.json").unlink()
    boot = ["--at-boot", "--cap", "300", "--mem-offset=1000", "--gpus", UUID, *sim(tmp_path)]
    code, _, err = run(capsys, "apply", *boot, "--offset-driver=570.1")
    assert code == 0, err
    assert err.splitlines() == [
        f"warning: {LABEL}: the clock offsets were persisted under driver 570.1, not this driver "
        "sim: skipped at this boot (the power limit and clock locks are set); check them again "
        "and re-run apply --persist --trust-offset"
    ]
    assert (_limit(tmp_path), _mem_offset(tmp_path)) == (300.0, 0.0)
    # under the driver it was trusted under, the offset is set again
    code, _, err = run(capsys, "apply", *boot, "--offset-driver=sim")
    assert code == 0 and err == ""
    assert (_limit(tmp_path), _mem_offset(tmp_path)) == (300.0, 1000.0)


def test_a_runs_memory_offset_is_applied_with_the_rest_of_its_recommendation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from powersweep.sweep.settings import recommendation
    from powersweep.sweep.settings.recommendation import MeasuredGpu, Recommendation

    rec = Recommendation(
        tmp_path, "undervolt", 300.0, None, None, (MeasuredGpu(0, "x", UUID),),
        sm_clock_mhz=1500.0, mem_offset_mhz=1000.0,
    )  # fmt: skip
    monkeypatch.setattr(recommendation, "read_recommendation", lambda *_a, **_k: rec)
    code, out, err = run(capsys, "apply", str(tmp_path), *sim(tmp_path))
    assert code == 0, err
    assert "recommendation SM 1500 MHz, +1000 MHz memory offset at 300 W per GPU" in err
    assert out.splitlines()[-1] == (
        f"{LABEL}: memory clock offset +0 MHz -> +1000 MHz (verified: reads back +1000 MHz)"
    )
    assert (_limit(tmp_path), _mem_offset(tmp_path)) == (300.0, 1000.0)
