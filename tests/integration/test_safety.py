"""Safety on (simulated) hardware: limits always come back, the journal survives SIGKILL,
multi-GPU envelopes, rejected caps, failing servers, credentials, sudo ownership, modes.

The simulated cards keep their limits in a ``--sim-state`` file, like a driver keeps a limit
after the process that set it is gone, so these tests see what a real card would be left at.
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from powersweep.cli import main
from powersweep.runformat import REPEAT_REASONS
from tests.integration.conftest import REPO, only_run_dir, powersweep, read_csv, read_json, sim_rig

UUID = "GPU-sim-rtx3090-air-0"
USER_LIMIT_W = 350.0  # the user's own limit: not the profile's 370 W default
USER_CARD = {UUID: USER_LIMIT_W}
FAST = (
    # two-second windows: four ticks of 0.5 s per prompt, enough for a median of the draw
    "--target-cap-seconds",
    "2",
    "--warmup-requests",
    "0",
    "--settle-seconds",
    "0.5",
    "--quiet",
    "--no-charts",
    "--cooling",
    "air",
)


# paced virtual time: a sweep's figures are those of the unpaced run, but it lasts long enough in
# wall time (10 run s per wall s) for a signal, a kill or a restore to land mid-run
PACED = ("--sim-pace", "10")


def _state_limit(state: Path) -> float:
    return float(json.loads(state.read_text())[UUID])


def _popen(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "powersweep", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _caps_rows(out: Path) -> int:
    runs = list(out.glob("*/caps.csv")) if out.exists() else []
    if not runs:
        return 0
    try:
        text = runs[0].read_text()
    except FileNotFoundError:  # the run's temporary folder was renamed in between: look again
        return 0
    return max(0, len(text.splitlines()) - 1)


def _one_random_signal(
    tmp: Path, sig: signal.Signals, delay_s: float, after_start: bool = False
) -> dict[str, Any]:
    """One sweep, one signal: ``delay_s`` after launch, or after the sweep's first change (its
    journal appears) when ``after_start`` (so a slow start-up cannot make every signal early)."""
    state, out, state_dir, env = sim_rig(tmp, USER_CARD)
    proc = _popen(
        ["--simulate", "rtx3090-air", "--sim-state", str(state), "--out", str(out), *FAST, *PACED],
        env,
    )
    if after_start:
        deadline = time.monotonic() + 60
        journal = state_dir / "journal.json"
        while not journal.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    time.sleep(delay_s)
    proc.send_signal(sig)
    try:
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return {
        "sig": sig,
        "delay": delay_s,
        "rc": proc.returncode,
        "stderr": stderr,
        "limit": _state_limit(state),
        "journal": (state_dir / "journal.json").exists(),
        "out": out,
    }


@pytest.mark.slow
def test_twenty_random_signals_always_restore_and_keep_a_readable_run(tmp_path: Path) -> None:
    rng = random.Random(6)
    jobs = [
        (tmp_path / f"r{i}", rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGHUP]))
        for i in range(20)
    ]
    delays = [rng.uniform(0.2, 3.0) for _ in jobs]
    # every fourth signal counts from the sweep's start, so some always land mid-sweep
    starts = [i % 4 == 3 for i in range(len(jobs))]
    for i, after in enumerate(starts):
        if after:
            delays[i] = rng.uniform(0.0, 0.3)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(
            pool.map(
                lambda a: _one_random_signal(*a[0], a[1], a[2]),
                zip(jobs, delays, starts, strict=True),
            )
        )
    interrupted_mid_sweep = 0
    for r in results:
        what = f"{r['sig'].name} after {r['delay']:.2f} s: rc {r['rc']}\n{r['stderr']}"
        assert r["limit"] == USER_LIMIT_W, what
        assert not r["journal"], what
        assert "Traceback" not in r["stderr"], what
        # 128+sig: handled; -sig: arrived before Python installed handlers (nothing changed)
        assert r["rc"] in (0, 128 + r["sig"], -r["sig"]), what
        runs = [p for p in r["out"].iterdir() if p.is_dir()] if r["out"].exists() else []
        if not runs:
            continue
        (run,) = runs
        meta = read_json(run / "run.json")
        caps = read_csv(run / "caps.csv")
        # caps measured again (ties confirmed, outliers rechecked) follow: each cap done once
        done = list(dict.fromkeys(float(c["cap_w"]) for c in caps))
        assert done == meta["caps_done"], what
        assert all(c["status"] == "ok" and float(c["narr_tps"]) > 0 for c in caps), what
        if meta["status"] == "interrupted":
            interrupted_mid_sweep += 1
            # once the first point was set (a tick read there), the user's own limit went
            # back; a signal before any tick left the idle one may have come before the set,
            # which then changed nothing and has nothing to put back (the limit is checked)
            samples = read_csv(run / "samples.csv")
            put_back = [{"gpu_index": 0, "limit_w": USER_LIMIT_W, "ok": True, "message": ""}]
            if any(r["phase"] != "idle" for r in samples):
                assert meta["restored"] == put_back, what
            else:
                assert meta["restored"] in (put_back, []), what
        else:
            assert meta["status"] in ("running", "complete") and (
                meta["status"] == "complete" or not caps
            ), what
    # start-up takes 1-2 s on a loaded machine, so some timed signals land before the sweep
    # starts; the five counted from the start land in it
    assert interrupted_mid_sweep >= 3


@pytest.mark.slow
def test_sigkill_leaves_a_journal_that_restore_and_force_honour(tmp_path: Path) -> None:
    state, out, state_dir, env = sim_rig(tmp_path, USER_CARD)
    args = ["--simulate", "rtx3090-air", "--sim-state", str(state), "--out", str(out), *FAST]
    proc = _popen([*args, *PACED], env)
    try:
        deadline = time.monotonic() + 60
        while _caps_rows(out) < 1:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no cap finished in time"
            time.sleep(0.05)
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    journal = state_dir / "journal.json"
    assert journal.exists()
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    data = json.loads(journal.read_text())
    assert data["gpus"] == [
        {
            "uuid": UUID,
            "index": 0,
            "name": "NVIDIA GeForce RTX 3090 (simulated)",
            "original_limit_w": USER_LIMIT_W,
        }
    ]
    assert data["backend"]["kind"] == "sim" and data["backend"]["sim_state"] == str(state)
    left_at = _state_limit(state)
    assert left_at != USER_LIMIT_W  # SIGKILL: nothing could restore

    # a new sweep puts the dead sweep's limits back first: the user's limit from its journal,
    # not the killed run's cap, and it is the user's limit this sweep restores at its end
    after = powersweep(*args, "--caps", "300", env=env)
    assert after.returncode == 0, after.stderr
    assert "no longer running" in after.stderr and "restored to 350 W" in after.stderr
    assert _state_limit(state) == USER_LIMIT_W
    assert not journal.exists()

    # restore from a journal left by another kill
    proc = _popen([*args, *PACED], env)
    try:
        deadline = time.monotonic() + 60
        while not journal.exists() or _state_limit(state) == USER_LIMIT_W:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no cap set in time"
            time.sleep(0.02)
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _state_limit(state) != USER_LIMIT_W
    restored = powersweep("restore", env=env)
    assert restored.returncode == 0, restored.stderr
    assert "restored to 350 W" in restored.stderr
    assert _state_limit(state) == USER_LIMIT_W and not journal.exists()
    again = powersweep("restore", env=env)
    assert again.returncode == 0 and "nothing to restore" in again.stderr


def _live_sweep(tmp: Path, *extra: str) -> tuple[subprocess.Popen[str], Path, Path, dict[str, str]]:
    """A sweep in a subprocess, waited for until it owns the card (journal written, a cap set)."""
    state, out, state_dir, env = sim_rig(tmp, USER_CARD)
    args = ["--simulate", "rtx3090-air", "--sim-state", str(state), "--out", str(out), *FAST]
    proc = _popen([*args, *PACED, *extra], env)
    journal = state_dir / "journal.json"
    deadline = time.monotonic() + 60
    while not journal.exists() or _state_limit(state) == USER_LIMIT_W:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no cap set in time"
        time.sleep(0.02)
    return proc, state, journal, env


@pytest.mark.slow
def test_restore_force_never_takes_a_live_sweeps_journal_and_a_kill_leaves_it(
    tmp_path: Path,
) -> None:
    # slow enough that the sweep stays on its first cap while restore is tried twice
    proc, state, journal, env = _live_sweep(
        tmp_path, "--target-cap-seconds", "30", "--sim-pace", "5"
    )
    try:
        before = journal.read_text()
        capped = _state_limit(state)
        for force in ((), ("--force",)):
            taken = powersweep("restore", *force, env=env)
            assert taken.returncode == 2, taken.stderr
            (line,) = taken.stderr.strip().splitlines()
            assert line.startswith("error: ") and f"(PID {proc.pid}) is still running" in line
            assert "--force" not in line  # the refusal no longer suggests forcing it
            assert journal.read_text() == before and _state_limit(state) == capped
        assert proc.poll() is None
    finally:
        proc.kill()  # SIGKILL: nothing in the sweep can restore
        proc.communicate(timeout=30)
    # the journal the forced restore left alone is what puts the card back now
    assert journal.exists() and _state_limit(state) != USER_LIMIT_W
    restored = powersweep("restore", env=env)
    assert restored.returncode == 0, restored.stderr
    assert _state_limit(state) == USER_LIMIT_W and not journal.exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_sweep_whose_journal_is_gone_or_replaced_stops_restores_and_says_so(
    tmp_path: Path, how: str
) -> None:
    proc, state, journal, _ = _live_sweep(tmp_path)
    try:
        if how == "removed":
            journal.unlink()
        else:
            other = json.loads(journal.read_text())
            other.update(pid=1, pid_start="1", created_at="2000-01-01T00:00:00Z")
            # replaced whole, as another writer's rename does: written in place, the sweep could
            # read it half-written and stop on a damaged journal instead (seen once in CI)
            written = journal.with_suffix(".other")
            written.write_text(json.dumps(other))
            os.replace(written, journal)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert f"error: the restore journal {journal} was {how} while this sweep ran" in err
    assert "stops and puts back the limits it set" in err
    assert "power limit restored to 350 W" in err
    assert _state_limit(state) == USER_LIMIT_W
    # another owner's journal is left where it is; a removed one stays removed
    assert journal.exists() == (how == "replaced")
    if how == "replaced":
        assert json.loads(journal.read_text())["pid"] == 1
    run = only_run_dir(tmp_path / "runs")
    meta = read_json(run / "run.json")
    assert meta["status"] == "failed" and how in meta["error"]
    assert meta["restored"][0]["ok"] and meta["restored"][0]["limit_w"] == USER_LIMIT_W


@pytest.mark.slow
def test_two_gpus_with_different_envelopes_clamp_to_intersection_and_sum_draw(
    tmp_path: Path,
) -> None:
    # RTX 3090: 100-390 W, RTX 4090: 150-600 W -> shared 150-390 W
    _, out, _, env = sim_rig(tmp_path, USER_CARD)
    proc = powersweep(
        "--simulate",
        "rtx3090-air+rtx4090-air",
        "--caps",
        "120,300,500",
        "--out",
        str(out),
        *FAST,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "cap 500 W is outside the envelope 150-390 W; using 390 W" in proc.stderr
    assert "cap 120 W is outside the envelope 150-390 W; using 150 W" in proc.stderr
    run = only_run_dir(out)
    # a mixed rig's folder names every card model (it was named after GPU 0 alone)
    assert run.name.split("-", 2)[2] == "rtx-3090+rtx-4090-power-air-decode-single"
    # each cap's own row (a confirm row re-measures a tie; its ticks are marked confirm)
    caps = {
        float(c["cap_w"]): c
        for c in read_csv(run / "caps.csv")
        if c["reason"] not in REPEAT_REASONS
    }
    assert sorted(caps) == [150.0, 300.0, 390.0]
    meta = read_json(run / "run.json")
    assert [g["max_limit_w"] for g in meta["gpus"]] == [390.0, 600.0]
    assert [g["power_source"] for g in meta["gpus"]] == ["simulated", "simulated"]
    assert meta["restored"] == [
        {"gpu_index": 0, "limit_w": 370.0, "ok": True, "message": ""},
        {"gpu_index": 1, "limit_w": 450.0, "ok": True, "message": ""},
    ]
    samples = read_csv(run / "samples.csv")
    assert {s["gpu_index"] for s in samples} == {"0", "1"}
    truth = {c["cap_w"]: c for c in meta["simulation"]["ground_truth"]["caps"]}
    for cap, row in caps.items():
        assert row["n_gpus"] == "2" and row["status"] == "ok"
        # combined draw = per-tick sum over both cards: above either card's share alone
        per_tick: dict[str, float] = {}
        for s in samples:
            own = s["confirm"] == "false" and s["phase"] in ("narr", "code")
            if s["cap_w"] and float(s["cap_w"]) == cap and own:
                per_tick[s["tick"]] = per_tick.get(s["tick"], 0.0) + float(s["power_w"])
        sums = sorted(per_tick.values())
        assert float(row["power_w"]) == pytest.approx(sums[len(sums) // 2], rel=0.05), cap
        assert float(row["power_w"]) == pytest.approx(truth[cap]["power_w"], rel=0.05), cap
        assert float(row["power_w"]) > cap  # two cards at up to `cap` each


@pytest.mark.slow
def test_card_that_keeps_its_limit_marks_low_caps_rejected(tmp_path: Path) -> None:
    state, out, _, env = sim_rig(tmp_path, USER_CARD)
    proc = powersweep(
        "--simulate",
        "rtx3090-air",
        "--sim-state",
        str(state),
        "--sim-rejects-below",
        "300",
        "--caps",
        "250,280,320,350",
        "--out",
        str(out),
        *FAST,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "cap 280 W rejected" in proc.stderr
    run = only_run_dir(out)
    caps = {float(c["cap_w"]): c for c in read_csv(run / "caps.csv")}
    for cap in (250.0, 280.0):
        assert caps[cap]["status"] == "rejected"
        # measured from the top down: the card still holds the last cap it took
        assert f"kept 320 W when asked for {cap:g} W" in caps[cap]["error"]
        # not measured as if set: no TPS, no draw, no samples
        assert caps[cap]["narr_tps"] == "" and caps[cap]["power_w"] == ""
        assert caps[cap]["n_samples"] == "0"
    for cap in (320.0, 350.0):
        assert caps[cap]["status"] == "ok" and float(caps[cap]["narr_tps"]) > 0
    assert not {s["cap_w"] for s in read_csv(run / "samples.csv")} & {"250.0", "280.0"}
    assert "rejected" in (run / "summary.md").read_text()
    assert _state_limit(state) == USER_LIMIT_W


@pytest.mark.slow
def test_failing_server_stops_after_max_failed_caps_and_restores(tmp_path: Path) -> None:
    state, out, state_dir, env = sim_rig(tmp_path, USER_CARD)
    proc = powersweep(
        "--simulate",
        "rtx3090-air",
        "--sim-state",
        str(state),
        "--sim-http-error",
        "500",
        "--caps",
        "250,280,310,340,370",
        "--max-failed-caps",
        "2",
        "--out",
        str(out),
        *FAST,
        env=env,
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 2 caps in a row failed") and "Traceback" not in proc.stderr
    run = only_run_dir(out)
    caps = read_csv(run / "caps.csv")
    assert [(c["cap_w"], c["status"]) for c in caps] == [("370.0", "failed"), ("340.0", "failed")]
    assert all("500" in c["error"] for c in caps)
    meta = read_json(run / "run.json")
    assert meta["status"] == "failed" and "2 caps in a row failed" in meta["error"]
    assert meta["restored"][0]["ok"] and _state_limit(state) == USER_LIMIT_W
    assert not (state_dir / "journal.json").exists()


@pytest.mark.slow
def test_credentials_never_reach_the_run(tmp_path: Path) -> None:
    from powersweep.clock import ScaledClock
    from powersweep.sim.engine import ConstantEngine
    from powersweep.sim.server import SimServer

    _, out, _, env = sim_rig(tmp_path, USER_CARD)
    # the server paces tokens on its own fast clock: a real-time sweep of two caps in seconds
    engine = ConstantEngine(ScaledClock(50.0), decode_tps=100.0)
    with SimServer(engine, flavour="llamacpp") as server:
        port = server.url.rsplit(":", 1)[1].rstrip("/")
        proc = powersweep(
            "--simulate",
            "rtx3090-air",
            "--url",
            f"http://user:SECRET@127.0.0.1:{port}",
            "--api-key",
            "SECRETKEY",
            "--caps",
            "300,350",
            "--target-cap-seconds",
            "1",
            "--warmup-requests",
            "1",
            "--settle-seconds",
            "0",
            # a real-time sweep: the wait for a steady temperature (10 s a point) tests nothing
            # here
            "--thermal-wait-seconds",
            "0",
            "--no-charts",
            "--out",
            str(out),
            "--quiet",
            env=env,
        )
    assert proc.returncode == 0, proc.stderr
    assert "SECRET" not in proc.stderr + proc.stdout
    run = only_run_dir(out)
    files = [p for p in run.rglob("*") if p.is_file()]
    # (the simulated card idles under this engine: no draw, so no summary to check)
    assert {"run.json", "caps.csv", "samples.csv", "requests.csv"} <= {p.name for p in files}
    assert len(read_csv(run / "requests.csv")) >= 3
    for p in files:
        assert b"SECRET" not in p.read_bytes(), p
    meta = read_json(run / "run.json")
    assert meta["server"]["url"] == f"http://127.0.0.1:{port}"
    assert meta["options"]["api_key_given"] is True


def test_sudo_run_is_handed_to_the_invoking_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[str, int, int]] = []
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "lchown", lambda p, u, g: calls.append((p, u, g)))
    monkeypatch.setenv("SUDO_UID", "1234")
    monkeypatch.setenv("SUDO_GID", "5678")
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "state"))
    out = tmp_path / "new" / "runs"
    code = main(["--simulate", "rtx3090-air", "--caps", "300,350", "--out", str(out), *FAST[:-3]])
    assert code == 0, capsys.readouterr().err
    run = only_run_dir(out)
    chowned = {Path(p) for p, _, _ in calls}
    assert {u for _, u, _ in calls} == {1234} and {g for _, _, g in calls} == {5678}
    assert out in chowned and run in chowned
    assert {run / n for n in ("run.json", "caps.csv", "summary.md", "analysis.json")} <= chowned
    assert (run / "charts" / "efficiency.png") in chowned


def test_dry_run_of_a_real_sweep_needs_no_root_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from powersweep.sweep.gpu import nvml
    from tests.fakes.fake_pynvml import FakeDevice, FakeNvml

    fake = FakeNvml(
        devices=[
            FakeDevice(uuid="GPU-a", limit_mw=350_000, default_mw=370_000, max_mw=390_000),
            FakeDevice(uuid="GPU-b", limit_mw=300_000, default_mw=370_000, max_mw=380_000),
        ]
    )
    real = nvml.NvmlBackend
    monkeypatch.setattr(nvml, "NvmlBackend", lambda: real(nvml=fake))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "state"))
    code = main(["--dry-run", "--cooling", "air", "--out", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "sweeping all 2 GPUs" in err
    assert "envelope (shared by the GPUs): 100-380 W" in out
    assert "GPUs picked: 0, 1 (no process runs on any GPU: every GPU)" in out
    assert "caps (20, W per GPU): 380, 370," in out and ", 190\n" in out
    assert "estimated wall time: " in out
    assert not any(name == "nvmlDeviceSetPowerManagementLimit" for name, _ in fake.calls)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "state").exists()


def test_observe_only_measures_at_the_limit_in_force_and_sets_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state, out, state_dir, _ = sim_rig(tmp_path, USER_CARD)
    before = state.stat().st_mtime_ns
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(state_dir))
    code = main(
        ["--simulate", "rtx3090-air", "--sim-state", str(state), "--observe-only", "--out",
         str(out), *FAST]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert state.stat().st_mtime_ns == before and _state_limit(state) == USER_LIMIT_W
    assert not state_dir.exists()
    run = only_run_dir(out)
    caps = read_csv(run / "caps.csv")
    # the limit in force, read again at the end (the run-to-run term): nothing is set for it
    assert [(c["cap_w"], c["status"], c["reason"]) for c in caps] == [
        ("350.0", "ok", "dense"),
        ("350.0", "ok", "reread"),
    ]
    meta = read_json(run / "run.json")
    assert meta["observe_only"] is True and meta["restored"] == []


@pytest.mark.slow
def test_resume_continues_from_the_first_unfinished_cap(tmp_path: Path) -> None:
    state, out, _, env = sim_rig(tmp_path, USER_CARD)
    args = ["--simulate", "rtx3090-air", "--sim-state", str(state), "--out", str(out), *FAST]
    proc = _popen([*args, *PACED, "--caps", "250,270,290,310,330,350"], env)
    try:
        deadline = time.monotonic() + 60
        while _caps_rows(out) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    run = only_run_dir(out)
    first = read_json(run / "run.json")
    assert first["status"] == "interrupted" and 2 <= len(first["caps_done"]) < 6
    resumed = powersweep("--resume", str(run), "--quiet", "--no-charts", env=env)
    assert resumed.returncode == 0, resumed.stderr
    meta = read_json(run / "run.json")
    assert meta["status"] == "complete" and len(meta["resumed_at"]) == 1
    rows = read_csv(run / "caps.csv")
    caps = [float(c["cap_w"]) for c in rows]
    # Every cap once (caps_done), then the caps the confirm phase measured again at the very end
    # (it stops once the rest is separated: of those it planned, the ones it measured), then the
    # resumed run's first settled cap read again (the run-to-run term).
    again_w = [float(c["cap_w"]) for c in rows if c["reason"] == "confirm"]
    assert set(again_w) <= set(meta["confirm"]["caps_w"])
    assert meta["caps_done"] == [350.0, 330.0, 310.0, 290.0, 270.0, 250.0]
    reread = meta["run_to_run"]["reference"]["cap_w"]
    assert reread in meta["caps_done"][len(first["caps_done"]) :]
    # the two sessions' run seconds count from two starts: no drift rate is drawn across them
    assert meta["run_to_run"]["t_ref_s"] is None
    assert caps == [*meta["caps_done"], *again_w, reread]
    assert meta["caps_done"][: len(first["caps_done"])] == first["caps_done"]
    assert _state_limit(state) == USER_LIMIT_W
    again = powersweep("--resume", str(run), env=env)
    assert again.returncode == 2 and "complete" in again.stderr


@pytest.mark.slow
def test_one_sweep_per_card_whatever_the_state_directory(tmp_path: Path) -> None:
    proc, state, journal, env = _live_sweep(
        tmp_path, "--target-cap-seconds", "30", "--sim-pace", "5"
    )
    try:
        capped = _state_limit(state)
        elsewhere = {**env, "POWERSWEEP_STATE_DIR": str(tmp_path / "other-state")}
        args = ["--simulate", "rtx3090-air", "--sim-state", str(state), "--out", str(tmp_path)]
        second = powersweep(*args, *FAST, env=elsewhere)
        applied = powersweep("apply", "--cap", "300", "--gpus", "0", *args[:4], env=elsewhere)
        for refused in (second, applied):
            assert refused.returncode == 2, refused.stderr
            (line,) = [ln for ln in refused.stderr.splitlines() if ln.startswith("error:")]
            assert line.startswith("error: GPU 0") and "one sweep per card" in line
            assert f"is in use by another powersweep sweep (PID {proc.pid}" in line
            assert f"state dir {journal.parent}" in line and "Traceback" not in refused.stderr
        assert _state_limit(state) == capped and proc.poll() is None
        assert not (tmp_path / "other-state" / "journal.json").exists()
    finally:
        proc.kill()  # SIGKILL: its lock goes with it, its journal stays
        proc.communicate(timeout=30)
    # the killed sweep's restore takes the card over
    restored = powersweep("restore", env=env)
    assert restored.returncode == 0, restored.stderr
    assert _state_limit(state) == USER_LIMIT_W and not journal.exists()


@pytest.mark.slow
def test_a_journal_lost_in_the_middle_of_a_long_point_puts_the_card_back_within_seconds(
    tmp_path: Path,
) -> None:
    # one point would measure for 600 run s: the loss must not wait for the next change
    window = ("--target-cap-seconds", "600", "--min-cap-seconds", "600")
    proc, state, journal, _ = _live_sweep(tmp_path, *window)
    try:
        time.sleep(0.5)  # into the point's settle or window
        lost_at = read_json(journal)  # what the sweep wrote, for the run-time check below
        journal.unlink()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert f"error: the restore journal {journal} was removed while this sweep ran" in err
    assert _state_limit(state) == USER_LIMIT_W and lost_at["pid"] == proc.pid
    meta = read_json(only_run_dir(tmp_path / "runs") / "run.json")
    assert meta["restored"][0]["ok"] and meta["restored"][0]["limit_w"] == USER_LIMIT_W
    # in run seconds, far short of the first point's window: the journal was checked within it
    assert meta["timing"]["ended_s"] < 300, meta["timing"]
