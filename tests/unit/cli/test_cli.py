"""The command line: bad input gives one `error:` line and an exit code, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from powersweep.cli import main
from powersweep.sweep.signals import SweepInterrupted
from tests.helpers.cli import run_cli as run
from tests.paths import SHARED_3090

BAD_SWEEP = [
    (["--cooling", "liquid", "--simulate", "rtx3090-air"], "--cooling"),
    (["--load-mode", "decode-everything", "--simulate", "rtx3090-air"], "--load-mode"),
    (["--concurrency", "4", "--simulate", "rtx3090-air"], "decode-concurrent"),
    (
        ["--load-mode", "decode-concurrent", "--concurrency", "0", "--simulate", "rtx3090-air"],
        "--concurrency",
    ),
    (["--strategy", "fast", "--simulate", "rtx3090-air"], "--strategy"),
    (["--sim-server", "tgi", "--simulate", "rtx3090-air"], "--sim-server"),
    (["--simulate", "rtx9090"], "unknown simulation profile"),
    (["--caps", "abc", "--simulate", "rtx3090-air"], "--caps"),
    (["--caps", "-100", "--simulate", "rtx3090-air"], "--caps"),
    (["--caps", ",", "--simulate", "rtx3090-air"], "--caps"),
    (["--step-size", "0", "--simulate", "rtx3090-air"], "--step-size"),
    (["--step-size", "ten", "--simulate", "rtx3090-air"], "step-size"),
    (["--target-cap-seconds", "-1", "--simulate", "rtx3090-air"], "--target-cap-seconds"),
    (["--sample-interval", "0", "--simulate", "rtx3090-air"], "--sample-interval"),
    (["--settle-seconds", "-3", "--simulate", "rtx3090-air"], "--settle-seconds"),
    (["--time-scale", "5"], "--time-scale works only with --simulate"),
    (["--seed", "1"], "--seed works only with --simulate"),
    (["--time-scale", "0", "--simulate", "rtx3090-air"], "--time-scale"),
    (
        ["--simulate", "rtx3090-air", "--url", "http://127.0.0.1:9", "--time-scale", "10"],
        "--time-scale",
    ),
    (["--gpu", "x", "--simulate", "rtx3090-air"], "--gpu"),
    (["--gpu", "3", "--simulate", "rtx3090-air"], "no GPU 3"),
    (["--max-failed-caps", "0", "--simulate", "rtx3090-air"], "--max-failed-caps"),
    (["--no-such-option"], "no such option"),
    (["--simulate"], "requires an argument"),
]


@pytest.mark.parametrize(("args", "needle"), BAD_SWEEP, ids=[" ".join(a) for a, _ in BAD_SWEEP])
def test_bad_sweep_options(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: "), err
    assert needle.lower() in lines[-1].lower()
    assert "Traceback" not in err and out == ""


def test_real_sweep_without_root_says_sudo(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    code, _, err = run(capsys, "--cooling", "air")
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("error: ") and "sudo" in err


def test_simulated_server_down_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(
        capsys,
        "--simulate",
        "rtx3090-air",
        "--url",
        "http://127.0.0.1:9",
        "--out",
        str(tmp_path),
        "--quiet",
    )
    assert code != 0
    assert err.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in err


def test_list_profiles_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--list-profiles")
    assert code == 0 and "rtx3090-air" in out and "h100-sxm" in out
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("powersweep ")


BAD_FILES = [
    ("missing.csv", None),
    ("empty.csv", ""),
    ("nocols.csv", "a,b\n1,2\n"),
    ("garbage.csv", "\x00\x01\x02garbage"),
    ("text.csv", "cap_w,power_w,narr_tps\nabc,def,ghi\n"),
]


@pytest.mark.parametrize(("name", "content"), BAD_FILES, ids=[n for n, _ in BAD_FILES])
@pytest.mark.parametrize("command", ["analyze", "plot"])
def test_bad_csv_inputs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, name: str, content: str | None
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    code, _out, err = run(capsys, command, str(path))
    assert code == 2, err
    assert err.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in err


def test_analyze_json_on_measured_3090(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    if not SHARED_3090.exists():
        pytest.skip("shared/data not beside the repo")
    code, out, err = run(capsys, "analyze", str(SHARED_3090), "--json", "--out", str(tmp_path))
    assert code == 0, err
    data = json.loads(out)  # stdout is the JSON and only it
    assert data["sweet_spot"]["cap_w"] == 290
    boost = [p for p in data["plateaus"] if p["kind"] == "boost_plateau"]
    assert [(p["start_w"], p["end_w"]) for p in boost] == [(340, 370)]
    assert (tmp_path / "analysis.json").exists() and (tmp_path / "summary.md").exists()


def test_plot_regenerates_chart_from_bare_csv(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    csv = tmp_path / "caps.csv"
    csv.write_text("cap_w,power_w,narr_tps\n200,199,20\n250,249,27\n300,295,31\n350,330,33\n")
    code, _out, err = run(capsys, "plot", str(csv), "--format", "png,svg")
    assert code == 0, err
    assert (tmp_path / "charts" / "efficiency.png").exists()
    assert (tmp_path / "charts" / "efficiency.svg").exists()
    code, _, err = run(capsys, "plot", str(csv), "--format", "gif")
    assert code == 2 and "--format" in err


def test_sweep_help_lists_choices_in_panels(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    code, out, _ = run(capsys, "sweep", "--help")
    assert code == 0
    for panel in ("Load", "Points", "Server", "Safety", "Output", "Simulation"):
        assert f"─ {panel} " in out, panel
    for choices in (
        "decode-single|decode-concurrent|prefill-heavy",
        "air|water|aio|unspecified",
        "dense|adaptive",
        "auto|fixed",
        "llamacpp|vllm|sglang|ollama|plain",
    ):
        assert choices in out, choices
    assert "--sim-http-error" not in out  # hidden test switches stay hidden
    # issue 47: Rich took the extra's name for markup and printed `pip install 'powersweep'`
    assert "'powersweep[amd]'" in out


@pytest.mark.parametrize(
    "words",
    ["powersweep sweep --load-mode ", "powersweep --load-mode "],
    ids=["sweep-command", "default-command"],
)
def test_tab_completion_offers_the_load_modes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, words: str
) -> None:
    monkeypatch.setenv("_POWERSWEEP_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", words)
    monkeypatch.setenv("COMP_CWORD", str(len(words.split())))
    with pytest.raises(SystemExit) as done:  # completion answers and exits, as click does
        main([])
    assert done.value.code == 0
    assert capsys.readouterr().out.split() == [
        "decode-single",
        "decode-concurrent",
        "prefill-heavy",
        "serving",
    ]


@pytest.mark.parametrize(
    "command",
    [[], ["sweep"], ["restore"], ["analyze"], ["plot"], ["compare"], ["import"], ["status"],
     ["apply"], ["fleet"], ["fleet", "report"]],
    ids=lambda c: " ".join(c) or "root",
)  # fmt: skip
def test_help_shows_no_value_after_a_flag(
    command: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--help" in out and "<bool>" not in out  # "--dry-run <bool>" read as taking a value
    if command == ["sweep"]:
        # options that take a value still say which (issue 47: by what it is, seconds)
        line = next(ln for ln in out.splitlines() if "--target-cap-seconds" in ln)
        assert "--target-cap-seconds S " in line
        assert "<" not in next(ln for ln in out.splitlines() if "--dry-run" in ln)


def test_the_progress_bar_never_runs_back_however_far_the_plan_grows(tmp_path: Path) -> None:
    """Issue 47: a clock sweep's bar ran back from 91% to 85% when re-measured points came."""
    from powersweep.cli.sweep import AFTER_PLAN, _Progress
    from powersweep.sweep.measurement.point import PointProgress
    from powersweep.sweep.planning.points import SweepPoint

    bar = _Progress(quiet=False)
    bar.on_points(tmp_path, [SweepPoint(None, 1800.0 - 100 * i) for i in range(10)])
    assert bar.bar.total == 10 + AFTER_PLAN
    seen: list[tuple[int, float]] = []

    def report(index: int, total: int, reason: str = "") -> None:
        bar.on_progress(PointProgress(index, total, 300.0, "ok", 30.0, 300.0, 0.1, "", reason))
        seen.append((bar.bar.n, bar.bar.total))

    for i in range(1, 11):  # the planned points
        report(i, 10)
    for phase in ("recheck", "retry", "confirm"):  # more than the headroom: 3 phases of 3
        for i in range(1, 4):
            report(i, 3, phase)
    shares = [n / total for n, total in seen]
    assert shares == sorted(shares) and all(n < total for n, total in seen)
    assert bar.bar.desc == "19/20 points"  # the re-read still to come
    report(1, 1, "reread")
    assert seen[-1] == (20, 20) and bar.bar.desc == "20/20 points"
    bar.close()


@pytest.mark.parametrize(
    ("program", "env", "expected"),
    [
        ("powersweep", {}, "1"),  # the command: one BLAS thread
        ("powersweep", {"OPENBLAS_NUM_THREADS": "3"}, "3"),  # the user's own setting kept
        ("some-program", {}, None),  # a program importing the CLI: its environment untouched
    ],
)
def test_the_command_runs_blas_on_one_thread_before_numpy_loads(
    program: str, env: dict[str, str], expected: str | None
) -> None:
    """OpenBLAS spins a thread per core after each call: CPU the measured server needs."""
    code = (
        f"import sys; sys.argv = [{program!r}]\n"
        "import json, os, powersweep.cli, numpy\n"
        "print(json.dumps(os.environ.get('OPENBLAS_NUM_THREADS')))\n"
    )
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == expected


@pytest.mark.parametrize(
    ("raised", "rc", "said"),
    [
        (KeyboardInterrupt(), 130, "error: interrupted"),
        (SweepInterrupted(signal.SIGTERM), 128 + signal.SIGTERM, "interrupted by SIGTERM"),
    ],
)
def test_a_signal_python_wraps_mid_import_still_ends_as_that_signal(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    raised: BaseException,
    rc: int,
    said: str,
) -> None:
    """A signal landing while a module is imported late (a class being created) reaches main()
    wrapped in a RuntimeError ("Error calling __set_name__"): it still ends as the signal."""

    class Command:
        def main(self, **_: object) -> int:
            try:
                raise raised
            except BaseException as exc:
                raise RuntimeError("Error calling __set_name__ on 'Field' instance") from exc

    monkeypatch.setattr(typer.main, "get_command", lambda _app: Command())
    monkeypatch.setattr("powersweep.cli._flags_take_no_value", lambda _c: None)
    assert main(["analyze", "x"]) == rc
    err = capsys.readouterr().err
    assert said in err and "internal error" not in err


def test_the_progress_bar_ends_full_when_fewer_points_ran_than_counted(tmp_path: Path) -> None:
    # issue 47: a clock sweep's bar ended at 92% (12/13)
    from powersweep.cli.sweep import _Progress
    from powersweep.sweep.measurement.point import PointProgress

    for finished in (False, True):
        bar = _Progress(quiet=False)
        bar.on_plan(tmp_path, [300.0, 290.0, 280.0])
        inner = bar.bar
        bar.on_progress(PointProgress(1, 3, 300.0, "ok", 30.0, 300.0, 0.1, reason="dense"))
        assert inner.n / inner.total == pytest.approx(1 / 6)  # one of three, and the headroom
        bar.on_progress(PointProgress(2, 3, 290.0, "ok", 30.0, 290.0, 0.1, reason="dense"))
        if finished:  # the loop ended without a re-read (none stood): full
            bar.finish()
            assert (inner.n, inner.total) == (2, 2)
        else:  # cut here (a Ctrl-C): it shows as cut
            assert inner.n / inner.total == pytest.approx(2 / 6)
        bar.close()
    bar = _Progress(quiet=False)
    bar.on_plan(tmp_path, [300.0, 290.0, 280.0])
    inner = bar.bar
    bar.on_progress(PointProgress(1, 3, 300.0, "ok", 30.0, 300.0, 0.1, reason="dense"))
    bar.on_progress(PointProgress(1, 1, 300.0, "ok", 30.0, 300.0, 0.1, reason="reread"))
    assert (inner.n, inner.total) == (2, 2)  # the run's last point: full
    bar.close()
