"""Plans nobody can mean, and numbers out of range, in every command: one ``error:`` line.

One bound for every plan, whatever its axis: a plan whose run time may pass a day (the dry run's
bound at real speed, every point measured to its maximum window) is refused, the dry run
included; each numeric option is finite and within a sane range.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from powersweep.cli import main
from powersweep.errors import UsageError
from powersweep.sweep.axes import AXES
from powersweep.sweep.estimate import MAX_PLAN_S, bound_wall_s, check_plan_time, estimate_wall_s
from powersweep.sweep.options import Axis, PointOptions, SweepOptions

SIM = ["--simulate", "rtx3090-air", "--cooling", "air"]
SM_100 = ",".join(str(600 + 15 * i) for i in range(100))
MEM_100 = ",".join(str(5000 + 50 * i) for i in range(100))

SWEEPS: list[tuple[str, list[str], str]] = [
    ("a 10,000-point grid", ["--axis", "grid", "--sm-clocks", SM_100, "--mem-clocks", MEM_100],
     "10000 points"),
    ("an hour per prompt at 21 caps", ["--target-cap-seconds", "3600"], "more than a day"),
    ("a 1e-9 s window", ["--target-cap-seconds", "1e-9"], "--target-cap-seconds"),
    ("a half-second window", ["--target-cap-seconds", "0.5"], "--target-cap-seconds"),
    ("a 1e-9 s prefill", ["--load-mode", "prefill-heavy", "--target-prefill-seconds", "1e-9"],
     "--target-prefill-seconds"),
    ("a clock 1e300 times slower than real", ["--time-scale", "1e-300"], "--time-scale"),
    ("a clock a thousand times slower", ["--time-scale", "0.001"], "--time-scale"),
    ("a precision goal of 0", ["--precision", "0"], "--precision"),
    ("a first window of 0.1 s", ["--min-cap-seconds", "0.1"], "--min-cap-seconds"),
    ("a cap of a gigawatt", ["--caps", "1e9"], "--caps"),
    ("a held cap of 9 kW", ["--axis", "sm-clock", "--cap", "9000"], "--cap"),
    ("an SM lock of 1 THz", ["--axis", "sm-clock", "--sm-clocks", "1e6"], "--sm-clocks"),
    ("a memory lock of 1 THz", ["--axis", "mem-clock", "--mem-clocks", "1e6"], "--mem-clocks"),
]  # fmt: skip


@pytest.mark.parametrize("dry", [False, True], ids=["sweep", "dry-run"])
@pytest.mark.parametrize(("label", "args", "word"), SWEEPS, ids=[s[0] for s in SWEEPS])
def test_a_plan_nobody_means_is_refused_in_one_line(
    label: str,
    args: list[str],
    word: str,
    dry: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "state"))
    extra = ["--dry-run"] if dry else []
    code = main([*SIM, "--out", str(tmp_path / "runs"), "--quiet", *args, *extra])
    out, err = capsys.readouterr()
    assert code == 2, label
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ") and word in line, line
    assert "Traceback" not in out + err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "state").exists()


def test_the_bound_is_the_dry_runs_bound_at_real_speed() -> None:
    options = SweepOptions(
        points=PointOptions(axis=Axis.GRID, sm_clocks=(1000.0,), mem_clocks=(9000.0,))
    )
    fits = 1
    while bound_wall_s(options, fits + 1, 1.0) <= MAX_PLAN_S:
        fits += 1
    # the expected time of the same plan is shorter: sequential windows stop early
    assert estimate_wall_s(options, fits, 1.0) < bound_wall_s(options, fits, 1.0)
    grid = AXES["grid"]
    grid.check_time(options, fits, None)  # up to a day is taken
    with pytest.raises(
        UsageError,
        match=rf"measures {fits + 1} points .*\(more than a day.*fewer points \(--sm-clocks",
    ):
        grid.check_time(options, fits + 1, None)
    with pytest.raises(UsageError, match=r"measures \d+ caps .*fewer caps \(--caps, a larger"):
        check_plan_time(options, fits + 1, None, noun="caps", fewer="--caps, a larger --step-size")
    # a simulated rig runs faster, but refuses what real hardware would take a day for
    assert bound_wall_s(options, 10_000, 30.0) < MAX_PLAN_S < bound_wall_s(options, 10_000)


def test_the_longest_plan_a_day_allows_is_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*SIM, "--axis", "grid", "--sm-clocks", SM_100, "--mem-clocks", "9751,9501",
                 "--dry-run"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "200 points" in out


def _runs_root(tmp: Path) -> Path:
    run = tmp / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "caps.csv").write_text("cap_w,narr_tps,power_w\n300,30,299\n280,29,279\n260,28,259\n")
    return tmp / "runs"


OTHERS: list[tuple[str, list[str], str]] = [
    ("fleet tariff inf", ["fleet", "report", "{runs}", "--tariff", "inf"], "--tariff"),
    ("fleet tariff nan", ["fleet", "report", "{runs}", "--tariff", "nan"], "--tariff"),
    ("fleet tariff negative", ["fleet", "report", "{runs}", "--tariff", "-0.3"], "--tariff"),
    ("fleet tariff absurd", ["fleet", "report", "{runs}", "--tariff", "1e12"], "--tariff"),
    ("fleet duty 0", ["fleet", "report", "{runs}", "--duty", "0"], "--duty"),
    ("fleet duty inf", ["fleet", "report", "{runs}", "--duty", "inf"], "--duty"),
    ("fleet duty 2", ["fleet", "report", "{runs}", "--duty", "2"], "--duty"),
    ("fleet max-tps-loss nan", ["fleet", "report", "{runs}", "--max-tps-loss", "nan"], "loss"),
    ("fleet max-tps-loss 100", ["fleet", "report", "{runs}", "--max-tps-loss", "100"], "loss"),
    ("analyze max-tps-loss -1", ["analyze", "{csv}", "--max-tps-loss", "-1"], "loss"),
    ("analyze eta inf", ["analyze", "{csv}", "--eta", "inf"], "--eta"),
    ("analyze default-limit inf", ["analyze", "{csv}", "--default-limit", "inf"], "--default"),
    ("analyze min-limit 1e308", ["analyze", "{csv}", "--min-limit", "1e308"], "--min-limit"),
    ("plot max-limit nan", ["plot", "{csv}", "--max-limit", "nan"], "--max-limit"),
    ("compare default-limit 0", ["compare", "{csv}", "--default-limit", "0"], "--default"),
    ("apply cap 1e308", ["apply", "--cap", "1e308", "{sim}"], "power limit"),
    ("apply cap nan", ["apply", "--cap", "nan", "{sim}"], "power limit"),
    ("apply sm-clock 1e6", ["apply", "--sm-clock", "1e6", "{sim}"], "--sm-clock"),
    ("apply mem-clock -1", ["apply", "--mem-clock", "-1", "{sim}"], "--mem-clock"),
    ("apply eta nan", ["apply", "{runs}/r1", "--objective", "cost", "--eta", "nan", "{sim}"],
     "--eta"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "args", "word"), OTHERS, ids=[o[0] for o in OTHERS])
def test_every_numeric_option_of_every_command_is_finite_and_in_range(
    label: str,
    args: list[str],
    word: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "state"))
    runs = _runs_root(tmp_path)
    sim = ["--simulate", "rtx3090-air", "--sim-state", str(tmp_path / "sim.json")]
    argv: list[str] = []
    for a in args:
        if a == "{sim}":
            argv += sim
        else:
            argv.append(a.format(runs=runs, csv=runs / "r1" / "caps.csv"))
    before = sorted(p.name for p in tmp_path.iterdir())
    code = main([*argv, "--out", str(tmp_path / "out")] if args[0] != "apply" else argv)
    out, err = capsys.readouterr()
    assert code == 2, (label, err)
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("error: ") and word in lines[-1], err
    assert "Traceback" not in out + err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, nothing set
