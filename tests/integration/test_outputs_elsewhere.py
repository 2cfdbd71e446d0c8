"""Read-only runs: analyze/plot/compare print what they found, and write into --out; under sudo
every command hands what it writes to the invoking user."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from powersweep.analysis.synthetic import NoiseModel, synthesize_run
from powersweep.cli import main
from powersweep.sim.profiles import get_profile
from powersweep.sim.sim_rig import ground_truth
from powersweep.sweep.gpu import PowerEnvelope
from powersweep.sweep.planning.caps import default_caps

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
EXACT = NoiseModel(power_rel=0.0, tps_rel=0.0, request_tps_rel=0.0, temp_sd_c=0.0)


def _exact_3090_run(root: Path, mode: str = "decode-single") -> Path:
    p = get_profile("rtx3090-air")
    env = PowerEnvelope(p.min_limit_w, p.default_limit_w, p.max_limit_w, p.user_limit_w)
    truth = ground_truth([p], mode, default_caps(env)).to_dict()
    gpu: dict[str, Any] = {
        "name": p.gpu_name,
        "min_limit_w": p.min_limit_w,
        "default_limit_w": p.default_limit_w,
        "max_limit_w": p.max_limit_w,
        "slowdown_temp_c": p.slowdown_temp_c,
    }
    return synthesize_run(truth, gpu, root / mode, seed=1, noise=EXACT, raw_files=False)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temp folder another user can enter (pytest's own is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="powersweep-ro-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for dirpath, _, _ in os.walk(path):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(path, ignore_errors=True)


def _read_only(path: Path) -> None:
    for dirpath, _, files in os.walk(path):
        for name in files:
            os.chmod(Path(dirpath) / name, 0o444)
        os.chmod(dirpath, 0o555)


def _as_user(*args: str, home: Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """The CLI as an unprivileged user (root ignores file modes, so tests as root drop to
    nobody); as a normal user, as that user."""
    cmd = [sys.executable, "-m", "powersweep", *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot make a directory read-only")
        drop = [setpriv, "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
        probe = subprocess.run(
            [*drop, sys.executable, "-c", "import powersweep"], cwd=REPO, capture_output=True
        )
        if probe.returncode != 0:
            pytest.skip("the checkout or its interpreter is private to root: cannot run as nobody")
        cmd = [*drop, *cmd]
    env = {**os.environ, "HOME": str(home), "MPLCONFIGDIR": str(home)}
    env["PYTHONPATH"] = str(REPO)  # the package, wherever the command runs
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=env, cwd=cwd, check=False
    )


def _writable_by_user(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o777)
    return path


@pytest.mark.slow
def test_analyze_a_read_only_run(shared_tmp: Path) -> None:
    run = _exact_3090_run(shared_tmp / "runs")
    _read_only(shared_tmp / "runs")
    home = _writable_by_user(shared_tmp / "home")

    proc = _as_user("analyze", str(run), "--json", home=home)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["sweet_spot"]["cap_w"] > 0  # the analysis is still shown
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: ") and str(run) in line and "--out" in line
    assert "Traceback" not in proc.stderr

    out = shared_tmp / "home" / "elsewhere"
    proc = _as_user("analyze", str(run), "--json", "--out", str(out), home=home)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert json.loads((out / "analysis.json").read_text())["sweet_spot"] == data["sweet_spot"]
    assert (out / "summary.md").is_file() and not (run / "analysis.json").exists()


@pytest.mark.slow
def test_plot_and_compare_of_read_only_runs(shared_tmp: Path) -> None:
    run = _exact_3090_run(shared_tmp / "runs")
    _read_only(shared_tmp / "runs")
    home = _writable_by_user(shared_tmp / "home")

    proc = _as_user("plot", str(run), home=home)
    assert proc.returncode == 1 and str(run) in proc.stderr and "--out" in proc.stderr
    proc = _as_user("plot", str(run), "--out", str(home / "p"), home=home)
    assert proc.returncode == 0, proc.stderr
    assert (home / "p" / "charts" / "efficiency.png").is_file()

    # compare writes into the working directory by default: here, the read-only folder of runs
    proc = _as_user("compare", str(run), home=home, cwd=shared_tmp / "runs")
    assert proc.returncode == 1 and "--out" in proc.stderr and "runs" in proc.stderr
    assert "300" in proc.stdout or "|" in proc.stdout  # the table is printed first
    proc = _as_user("compare", str(run), "--out", str(home / "cmp"), home=home)
    assert proc.returncode == 0, proc.stderr
    assert (home / "cmp" / "compare.png").is_file()


@pytest.mark.skipif(os.geteuid() != 0, reason="handing files over needs root")
def test_every_command_under_sudo_hands_its_files_to_the_user(
    shared_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SUDO_UID", str(NOBODY))
    monkeypatch.setenv("SUDO_GID", str(NOBODY))
    run = _exact_3090_run(shared_tmp / "runs")
    second = _exact_3090_run(shared_tmp / "runs", "prefill-heavy")
    table = shared_tmp / "pasted.md"
    table.write_text(
        "| Cap (W) | Power (W) | Narr TPS |\n|---|---|---|\n"
        "| 300 | 290 | 30 |\n| 250 | 245 | 28 |\n"
    )

    def owner(path: Path) -> int:
        return path.lstat().st_uid

    assert main(["analyze", str(run)]) == 0
    assert owner(run / "analysis.json") == owner(run / "summary.md") == NOBODY
    assert main(["analyze", str(run), str(second), "--out", str(shared_tmp / "x" / "y")]) == 0
    for path in (shared_tmp / "x").rglob("*"):
        assert owner(path) == NOBODY, path
    assert owner(shared_tmp / "x") == NOBODY
    assert main(["plot", str(run), "--out", str(shared_tmp / "plots")]) == 0
    assert {owner(p) for p in (shared_tmp / "plots").rglob("*")} == {NOBODY}
    assert owner(shared_tmp / "plots") == NOBODY
    (shared_tmp / "cmp").mkdir()
    assert main(["compare", str(run), "--out", str(shared_tmp / "cmp")]) == 0
    assert owner(shared_tmp / "cmp" / "compare.png") == NOBODY
    assert owner(shared_tmp / "cmp" / "compare.md") == NOBODY
    assert owner(shared_tmp / "cmp") == 0  # the user's own folder (here root's) stays theirs
    assert main(["compare", str(run), "--out", str(shared_tmp / "new" / "cmp")]) == 0
    assert owner(shared_tmp / "new") == owner(shared_tmp / "new" / "cmp" / "compare.png") == NOBODY
    assert main(["import", str(table), "--out", str(shared_tmp / "imp" / "caps.csv")]) == 0
    assert owner(shared_tmp / "imp") == owner(shared_tmp / "imp" / "caps.csv") == NOBODY
    assert owner(shared_tmp / "imp" / "run.json") == NOBODY
    assert owner(run / "caps.csv") == 0  # what the command did not write stays as it was
    # fleet report: fleet.md, fleet.json, the charts and the folders made for them
    fleet = shared_tmp / "fleet" / "out"
    assert main(["fleet", "report", str(shared_tmp / "runs"), "--out", str(fleet)]) == 0
    assert {p.name for p in fleet.rglob("*")} >= {"fleet.md", "fleet.json", "charts"}
    assert {owner(p) for p in fleet.rglob("*")} == {NOBODY}
    assert owner(fleet) == owner(shared_tmp / "fleet") == NOBODY
    # a simulated rig's --sim-state file, replaced by every write, is the user's again
    state = shared_tmp / "sim.json"
    sim = ["--simulate", "rtx3090-air", "--sim-state", str(state)]
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(shared_tmp / "statedir"))
    assert main(["apply", "--cap", "300", *sim]) == 0
    assert owner(state) == NOBODY
    capsys.readouterr()
