"""What a user reads at the end of a sweep and from ``analyze`` (issue 47), on the simulated rig:
stdout holds the table of the points, the answer and the files (or ``--json`` the analysis alone),
stderr the progress and the messages; an interrupted run gives no answer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import REPO, only_run_dir, powersweep, read_json

SHORT = ("--caps", "350,300,250,200", "--target-cap-seconds", "3", "--cooling", "air")


def _table(stdout: str) -> list[list[str]]:
    """The table's rows (as many as its title line counts), split in cells."""
    lines = stdout.splitlines()
    n = int(lines[0].rsplit(": ", 1)[1].split()[0])
    return [line.split() for line in lines[2 : 2 + n]]


def _point_cell(cells: list[str]) -> str:
    return cells[1] if cells[0] in ("*", "~") else cells[0]


def test_a_sweep_prints_its_table_answer_and_files_on_stdout_and_progress_on_stderr(
    tmp_path: Path,
) -> None:
    done = powersweep("--simulate", "rtx3090-air", *SHORT, "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run = only_run_dir(tmp_path)
    analysis = read_json(run / "analysis.json")
    spot = analysis["sweet_spot"]
    out = done.stdout
    assert out.splitlines()[0] == "NVIDIA GeForce RTX 3090 (simulated), decode-single, air: 4 caps"
    rows = _table(out)
    assert sorted(float(_point_cell(r)) for r in rows) == [200.0, 250.0, 300.0, 350.0]
    starred = [r for r in rows if r[0] == "*"]
    assert [float(r[1]) for r in starred] == [spot["cap_w"]]
    # the figures as the analysis states them, the cap's own stated half-width beside TPS/W
    cells = starred[0]
    assert cells[4] == f"{spot['tps_per_w']:.4f}"
    assert cells[5] == f"{spot['tps_per_w_u95_pct'][str(spot['cap_w'])]:.2f}%"
    answer = (
        f"sweet spot: {spot['cap_w']:g} W, {spot['tps_per_w']:.4f} TPS/W, {spot['tps']:.1f} TPS"
    )
    assert answer in out.splitlines()
    # the summary stars the same cap
    assert f"| {spot['cap_w']:.0f} ★" in (run / "summary.md").read_text()
    assert f"run:      {run}" in out and f"summary:  {run / 'summary.md'}" in out
    assert "charts/efficiency.png" in out
    assert "\x1b" not in out and len(out.splitlines()) <= 40
    # progress and messages on stderr, the answer not said twice
    err = done.stderr
    assert f"run directory: {run}" in err and "7/7 caps" in err and "restored to 370 W" in err
    assert "sweet spot" not in err


def test_json_prints_the_analysis_alone(tmp_path: Path) -> None:
    done = powersweep(
        "--simulate", "rtx3090-air", *SHORT, "--out", str(tmp_path), "--json", "--no-charts"
    )
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)  # nothing else on stdout
    run = only_run_dir(tmp_path)
    assert printed == read_json(run / "analysis.json")
    assert printed["answer"]["kind"] == "answer" and printed["sweet_spot"]["cap_w"] > 0
    assert "run directory:" in done.stderr


def test_a_dry_run_has_no_json_to_print() -> None:
    done = powersweep("--simulate", "rtx3090-air", "--dry-run", "--json", "--cooling", "air")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: --json prints a sweep's analysis")


def test_a_clock_sweep_and_an_undervolt_search_print_their_own_table(tmp_path: Path) -> None:
    clocks = powersweep(
        "--simulate", "h100-sxm", "--axis", "sm-clock", "--sm-clocks", "1980,1335,705",
        "--cooling", "air", "--out", str(tmp_path / "c"), "--no-charts", "--quiet",
    )  # fmt: skip
    assert clocks.returncode == 0, clocks.stderr
    peak = read_json(only_run_dir(tmp_path / "c") / "analysis.json")["peak"]
    assert clocks.stdout.splitlines()[1].split()[:2] == ["SM", "MHz"]
    assert [r[1] for r in _table(clocks.stdout) if r[0] == "*"] == [f"{peak['sm_lock_mhz']:g}"]
    assert f"efficiency peak: SM {peak['sm_lock_mhz']:g} MHz" in clocks.stdout
    search = powersweep(
        "--simulate", "rtx4090-air", "--axis", "undervolt", "--cap", "350",
        "--offset-step", "60", "--soak-seconds", "30", "--cooling", "air",
        "--out", str(tmp_path / "u"), "--no-charts", "--quiet",
    )  # fmt: skip
    assert search.returncode == 0, search.stderr
    chosen = read_json(only_run_dir(tmp_path / "u") / "analysis.json")["chosen"]
    rows = _table(search.stdout)
    assert rows[0][:3] == ["350", "W", "cap"]
    assert ["*", f"{chosen['sm_offset_mhz']:+g}", "soak"] in [r[:3] for r in rows]
    assert "unstable" in {r[-1] for r in rows}
    assert search.stdout.count("\nundervolt: SM 2640 MHz") == 1


def test_analyze_prints_the_same_view_full_the_summary_json_the_analysis(
    tmp_path: Path,
) -> None:
    swept = powersweep("--simulate", "rtx3090-air", *SHORT, "--out", str(tmp_path), "--quiet")
    assert swept.returncode == 0, swept.stderr
    run = only_run_dir(tmp_path)
    view = powersweep("analyze", str(run))
    assert view.returncode == 0, view.stderr
    # the sweep's own closing view, but for the charts analyze does not draw
    assert view.stdout == swept.stdout.replace(
        ", charts/efficiency.png, charts/power.png,\n"
        "          charts/clocks.png, charts/timeline.png",
        "",
    )
    full = powersweep("analyze", str(run), "--full")
    assert full.returncode == 0, full.stderr
    assert full.stdout.removesuffix("\n") == (run / "summary.md").read_text()
    assert full.stdout.startswith("## powersweep: NVIDIA GeForce RTX 3090 (simulated)")
    as_json = powersweep("analyze", str(run), "--json")
    assert json.loads(as_json.stdout) == read_json(run / "analysis.json")


@pytest.mark.slow
def test_an_interrupted_sweep_says_so_on_stdout_and_gives_no_answer(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "powersweep", "--simulate", "rtx3090-air", "--cooling", "air",
            "--out", str(out), "--quiet", "--no-charts", "--sim-pace", "20",
            "--target-cap-seconds", "2", "--warmup-requests", "1",
            "--sim-state", str(tmp_path / "sim-state.json"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "POWERSWEEP_STATE_DIR": str(tmp_path / "state")},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            caps = list(out.glob("*/caps.csv")) if out.exists() else []
            if caps and len(caps[0].read_text().splitlines()) >= 4:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        else:
            pytest.fail("the sweep did not finish three caps in time")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    run = only_run_dir(out)
    lines = stdout.splitlines()
    assert lines[0].endswith(", run interrupted")
    assert not any(line.startswith(("* ", "~ ")) for line in lines)
    words = " ".join(stdout.split())
    assert "no answer: interrupted after " in words and "(not an answer)" in words
    assert f"`powersweep --resume {run}` measures the rest" in words
    assert "sweet spot:" not in stdout
    assert f"summary:  {run / 'summary.md'}" in lines
    assert "interrupted: partial run kept in" in stderr
