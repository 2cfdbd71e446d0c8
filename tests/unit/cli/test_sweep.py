"""powersweep.cli.sweep: the sweep command's quick paths (the profile list, a dry run, refused
option combinations) and the pieces around a sweep: the progress bar, the restored-limit lines
and the closing report (on stdout: the table, the sweet spot and the files, or ``--json`` the
analysis; the account of a run without an answer)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from powersweep.cli.sweep import AFTER_PLAN, _finish_report, _print_restored, _Progress
from powersweep.sim.profiles import OUTLIERS, profile_names
from powersweep.sim.synthetic_fleet import synthetic_fleet
from powersweep.sweep.planning.points import SweepPoint
from tests.helpers.cli import run_cli as run


def test_list_profiles_names_every_profile_and_the_other_forms(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "--list-profiles")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[: len(profile_names())]] == profile_names()
    assert lines[0].startswith("rtx3090-air      RTX 3090")
    assert [line.split()[0] for line in lines[len(profile_names()) :]] == [
        "replay:PATH",
        "A+B",
        "NAME~SPREAD",
        "NAME~S~OUTLIER",
    ]
    assert all(f"{name} ({text})" in lines[-1] for name, text in OUTLIERS.items())


def test_a_dry_run_prints_the_plan_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    code, out, err = run(
        capsys,
        "--simulate", "rtx3090-air", "--dry-run", "--caps", "300,250", "--cooling", "air",
        "--sim-state", str(state), "--out", str(tmp_path / "runs"),
    )  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[0] == "dry run: nothing will be changed"
    assert "caps (2, W per GPU): 300, 250" in out
    assert not state.exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--simulate", "rtx3090-air", "--dry-run", "--resume", "x"],
            "error: --dry-run does not combine with --resume",
        ),
        (["--seed", "3", "--cooling", "air"], "error: --seed works only with --simulate"),
        (
            ["--simulate", "rtx3090-air", "--tariff", "-1"],
            "error: --tariff must be a price per kWh from 0 to",
        ),
    ],
)
def test_refused_combinations_are_one_error_line(
    capsys: pytest.CaptureFixture[str], args: list[str], error: str
) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith(error), err


def _point(**changes: object) -> SimpleNamespace:
    base: dict[str, object] = {
        "total": 3,
        "index": 0,
        "label": None,
        "cap_w": 300.0,
        "status": "ok",
        "tps": 30.04,
        "power_w": 280.4,
        "tps_per_w": 0.10714,
        "reason": "dense",
    }
    return SimpleNamespace(**{**base, **changes})


def test_the_progress_bar_says_each_point_and_only_grows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bar = _Progress(quiet=False)
    bar.on_progress(_point())  # before the plan: no bar, nothing happens
    bar.on_plan(tmp_path, [300.0, 250.0, 200.0])
    assert bar.bar.total == 3 + AFTER_PLAN  # the confirm phase and the re-read counted ahead
    bar.on_progress(_point(index=0))
    assert bar.bar.postfix == "300 W: 30.0 TPS, 280 W, 0.1071 TPS/W"
    share = bar.bar.n / bar.bar.total
    bar.on_progress(_point(index=1, total=8, cap_w=250.0))  # an adaptive plan grew past it
    assert bar.bar.desc == "2/9 caps" and bar.bar.n == 2
    assert bar.bar.n / bar.bar.total > share  # the growth was not taken from what is done
    share = bar.bar.n / bar.bar.total
    bar.on_progress(_point(index=0, total=1, label="recheck 250 W", status="failed"))
    assert bar.bar.desc == "3/9 caps" and bar.bar.postfix == "recheck 250 W: failed"
    assert bar.bar.n / bar.bar.total > share
    bar.close()
    bar.close()  # twice is harmless
    err = capsys.readouterr().err
    assert f"run directory: {tmp_path}\n" in err
    assert "caps: 3 from 300 W down to 200 W\n" in err


def test_a_quiet_progress_has_no_bar_but_says_the_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bar = _Progress(quiet=True)
    bar.on_points(tmp_path, [SweepPoint(None, 1800.0)])
    bar.on_progress(_point())
    assert bar.bar is None
    assert capsys.readouterr().err.splitlines() == [
        f"run directory: {tmp_path}",
        "clock points: 1, from SM 1800 MHz down",
    ]


def test_an_undervolt_search_says_what_it_will_do(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _Progress(quiet=True).on_points(tmp_path, [SweepPoint(300.0, sm_offset_mhz=0.0)])
    assert capsys.readouterr().err.splitlines()[1] == (
        "undervolt search: the 300 W cap, then the SM clock offset up from 0 at a locked clock "
        "until a step is unstable"
    )


def test_a_restored_offset_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    _print_restored(
        [
            {
                "gpu_index": 0,
                "limit_w": 370.0,
                "ok": True,
                "offset": "SM clock offset put back to 0 MHz",
            }
        ]
    )
    assert capsys.readouterr().err.splitlines()[-1] == "GPU 0: SM clock offset put back to 0 MHz"


def test_restored_limits_and_clocks_are_said_per_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    _print_restored(
        [
            {"gpu_index": 0, "limit_w": 370.0, "ok": True},
            {"gpu_index": 1, "limit_w": 350.5, "ok": False, "clocks": "clock locks reset"},
            {"gpu_index": 2, "limit_w": None, "ok": True},
        ]
    )
    assert capsys.readouterr().err.splitlines() == [
        "GPU 0: power limit restored to 370 W",
        "GPU 1: power limit NOT restored to 350.5 W",
        "GPU 1: clock locks reset",
    ]


def test_the_closing_report_prints_the_table_the_sweet_spot_and_the_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (card,) = synthetic_fleet(tmp_path, "rtx3090-air", 1, step_w=25.0)
    _finish_report(card.run_dir, charts=False)
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[1].split()[:2] == ["cap", "W"]
    (answer,) = [line for line in lines if line.startswith("sweet spot: ")]
    assert " W, " in answer and "TPS/W" in answer
    assert lines[-3:] == [
        f"run:      {card.run_dir}",
        f"summary:  {card.run_dir / 'summary.md'}",
        "files:    analysis.json",
    ]
    assert (card.run_dir / "summary.md").is_file()
    assert err == ""  # the answer is on stdout, nothing said twice


def test_the_closing_report_with_json_prints_the_analysis_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (card,) = synthetic_fleet(tmp_path, "rtx3090-air", 1, step_w=25.0)
    _finish_report(card.run_dir, charts=False, as_json=True)
    out = capsys.readouterr().out
    assert out == (card.run_dir / "analysis.json").read_text()
    assert json.loads(out)["sweet_spot"]["cap_w"] > 0


def test_a_run_whose_points_all_failed_has_no_sweet_spot_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (card,) = synthetic_fleet(tmp_path, "rtx3090-air", 1, step_w=100.0)
    caps = card.run_dir / "caps.csv"
    lines = caps.read_text().splitlines()
    status = lines[0].split(",").index("status")
    rows = [line.split(",") for line in lines[1:]]
    for row in rows:
        row[status] = "failed"
    caps.write_text("\n".join([lines[0], *(",".join(r) for r in rows)]) + "\n")
    _finish_report(card.run_dir, charts=False)
    out, err = capsys.readouterr()
    assert err == "" and "sweet spot" not in out
    # every cap in the table, failed, with no figures; the answer says there is none
    table = [line.split() for line in out.splitlines()[2 : 2 + len(rows)]]
    assert all(cells[1:] == ["-", "-", "-", "-", "failed"] for cells in table), out
    assert any(line.startswith("no answer: ") for line in out.splitlines())
    assert f"summary:  {card.run_dir / 'summary.md'}" in out.splitlines()


def test_a_run_that_cannot_be_analysed_gets_the_account_of_what_went_wrong(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (card,) = synthetic_fleet(tmp_path, "rtx3090-air", 1, step_w=100.0)
    (card.run_dir / "caps.csv").unlink()
    _finish_report(card.run_dir, charts=False)
    out, err = capsys.readouterr()
    assert err.startswith("warning: could not analyse the run: ")
    assert out.startswith("no answer:") and "no caps.csv here" in out
    assert out.splitlines()[-2:] == [
        f"run:      {card.run_dir}",
        f"summary:  {card.run_dir / 'summary.md'}",
    ]
