"""A fleet of H100s swept on the SM-clock axis (where power caps do not bind): six real simulated
sweeps with card-to-card spread, the fleet report's SM lock against each card's own measured best
and the simulator's truth, and `fleet apply` (dry run, a real write, a write killed half way)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import (
    REPO,
    only_run_dir,
    powersweep,
    powersweep_started,
    powersweeps_side_by_side,
    read_csv,
    read_json,
)

SMS = "705,945,1185,1425,1665,1980"
SPEC = "h100-sxm~0.05"
NODES = [f"node{k}" for k in range(6)]
UUID = "GPU-sim-h100-sxm-0"


def _sm_sweep_args(root: Path, node: str, *extra: str) -> list[str]:
    return [
        "--simulate", SPEC, "--sim-node", node, "--axis", "sm-clock", "--sm-clocks", SMS,
        "--load-mode", "decode-single", "--target-cap-seconds", "4",
        "--warmup-requests", "1", "--settle-seconds", "1", "--quiet", "--cooling", "air",
        "--no-charts", "--out", str(root / node), "--state-dir", str(root / "state" / node),
        *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def clock_fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("h100-clocks")
    runs = root / "runs"
    # Side by side: on virtual time a sweep's figures are its seed's and node's whatever else
    # the machine runs, so each card's own best (compared with the fleet's lock a step, 240 MHz,
    # away) reads the same as one sweep alone.
    done = powersweeps_side_by_side([_sm_sweep_args(runs, node) for node in NODES], at_once=2)
    for node, (rc, err) in zip(NODES, done, strict=True):
        assert rc == 0, f"{node}: {err}"
    return root, {node: only_run_dir(runs / node) for node in NODES}


@pytest.fixture(scope="module")
def report(clock_fleet: tuple[Path, dict[str, Path]]) -> tuple[Path, dict[str, Any]]:
    root, _ = clock_fleet
    out = root / "report"
    done = powersweep("fleet", "report", str(root / "runs"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out, read_json(out / "fleet.json")


def _own_best_from_csv(run: Path) -> float:
    """The card's best SM lock straight from its caps.csv: the highest TPS/W of its ok points,
    a point the confirm phase measured again pooled over its readings (TPS by window, draw by
    load samples, as docs/run-format.md says), not its luckiest single reading."""
    sums: dict[float, list[float]] = {}
    for r in read_csv(run / "caps.csv"):
        if r["status"] != "ok":
            continue
        acc = sums.setdefault(float(r["sm_lock_mhz"]), [0.0, 0.0, 0.0, 0.0])
        window, n = float(r["window_s"]), float(r["n_samples"])
        acc[0] += float(r["narr_tps"]) * window
        acc[1] += window
        acc[2] += float(r["power_w"]) * n
        acc[3] += n
    return max(sums, key=lambda sm: (sums[sm][0] / sums[sm][1]) / (sums[sm][2] / sums[sm][3]))


STEPS = [float(s) for s in SMS.split(",")]


def _steps_apart(a: float, b: float) -> int:
    return abs(STEPS.index(a) - STEPS.index(b))


@pytest.mark.slow
def test_fleet_sm_lock_is_within_one_step_of_every_cards_best_and_the_truth(
    clock_fleet: tuple[Path, dict[str, Path]], report: tuple[Path, dict[str, Any]]
) -> None:
    _, runs = clock_fleet
    out, fleet = report
    (group,) = fleet["groups"]
    assert group["axis"]["name"] == "sm-clock" and group["n_cards"] == 6
    assert fleet["unreadable"] == []  # no clock run is left out any more
    lock = group["fleet_lock"]["sm_lock_mhz"]
    assert lock in STEPS
    truths = []
    for node, run in runs.items():
        own = _own_best_from_csv(run)
        assert _steps_apart(lock, own) <= 1, (node, lock, own)
        truth = read_json(run / "run.json")["simulation"]["ground_truth"]["peak"]["sm_lock_mhz"]
        truths.append(truth)
        assert _steps_apart(lock, truth) <= 1, (node, lock, truth)
    # the spread is real (each card its own silicon), and the report shows it
    cards = {c["label"]: c for c in group["cards"]}
    assert set(cards) == set(NODES)
    assert len({c["tps_per_w_at_fleet_lock"] for c in cards.values()}) == 6
    # what the lock costs or gains each card against its own best, from its own points
    for node, run in runs.items():
        c = cards[node]
        # the card's own points (a point measured twice, as the confirm phase does, pooled)
        points = {
            p["sm_lock_mhz"]: p["tps_per_w"] for p in read_json(run / "analysis.json")["points"]
        }
        own = c["sweet_spot_mhz"]
        assert own == max(points, key=points.__getitem__)
        assert c["lock_at_fleet_lock_mhz"] == lock
        want = (points[lock] / points[own] - 1) * 100
        assert c["tps_per_w_vs_own_best_pct"] == pytest.approx(want, rel=1e-6, abs=1e-9)
    noise = group["fleet_lock"]["within_noise"]
    assert lock in noise["x"] and noise["resamples"] > 0
    md = (out / "fleet.md").read_text()
    assert f"**Fleet SM lock: SM {lock:.0f} MHz**" in md and "within noise" in md
    assert "without a usable curve" not in md
    for name in ("fleet-band.png", "fleet-sweet-spots.png"):
        assert (out / "charts" / name).stat().st_size > 10_000


@pytest.mark.slow
def test_fleet_apply_dry_run_says_what_it_would_set_and_changes_nothing(
    clock_fleet: tuple[Path, dict[str, Path]], report: tuple[Path, dict[str, Any]]
) -> None:
    root, _ = clock_fleet
    out, fleet = report
    lock = fleet["groups"][0]["fleet_lock"]["sm_lock_mhz"]
    state = root / "dry-state.json"
    record = root / "dry-record.json"
    done = powersweep(
        "fleet", "apply", str(out), "--dry-run", "--simulate", SPEC, "--sim-node", "node3",
        "--sim-state", str(state), "--record", str(record), "--state-dir", str(root / "sd"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # from the H100's idle floor (its lowest listed SM clock, 345 MHz) to the fleet lock
    assert (
        f"clock locks SM unlocked -> SM 345-{lock:g} MHz (dry run: nothing changed)" in done.stdout
    )
    assert not state.exists() and not (root / "sd" / "journal.json").exists()
    data = read_json(record)
    assert data["dry_run"] is True and data["node"] == "node3"
    (card,) = data["cards"]
    assert (card["uuid"], card["source"], card["sm_lock_mhz"]) == (UUID, "fleet", lock)


@pytest.mark.slow
def test_fleet_apply_sets_the_lock_journals_first_and_a_kill_half_way_is_restored(
    clock_fleet: tuple[Path, dict[str, Path]], report: tuple[Path, dict[str, Any]]
) -> None:
    root, _ = clock_fleet
    out, fleet = report
    lock = fleet["groups"][0]["fleet_lock"]["sm_lock_mhz"]
    state, sd = root / "state.json", root / "apply-sd"
    state.write_text(json.dumps({UUID: 650.0}))  # the user's own limit
    args = [
        "fleet", "apply", str(out), "--simulate", SPEC, "--sim-node", "node2",
        "--sim-state", str(state), "--state-dir", str(sd),
    ]  # fmt: skip
    done = powersweep(*args)
    assert done.returncode == 0, done.stderr
    assert f"SM 345-{lock:g} MHz (verified: reads back SM 345-{lock:g} MHz)" in done.stdout
    assert read_json(state)[f"{UUID}#locks"] == {"sm": lock, "mem": None, "sm_min": 345.0}
    assert read_json(state)[UUID] == 650.0  # a lock alone leaves the limit alone
    assert not (sd / "journal.json").exists()  # done: the new setting is meant to stay
    assert read_json(out / "applied" / "node2.json")["cards"][0]["sm_lock_mhz"] == lock
    status = powersweep("status", "--simulate", SPEC, "--sim-state", str(state), "--json")
    (gpu,) = json.loads(status.stdout)["gpus"]
    assert gpu["locked_clocks"]["sm_mhz"] == lock

    # Killed (SIGKILL) right after the lock was written: the journal, written first, holds
    # the originals, and `powersweep restore` puts them back.
    state.write_text(json.dumps({UUID: 650.0}))
    kill_after_write = (
        "import os, sys\n"
        "import powersweep.sweep.settings.applier as a\n"
        "real = a.write_clocks\n"
        "def write_then_die(*args, **kw):\n"
        "    real(*args, **kw)\n"
        "    os.kill(os.getpid(), 9)\n"
        "a.write_clocks = write_then_die\n"
        "from powersweep.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", kill_after_write, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    assert read_json(state)[f"{UUID}#locks"]["sm"] == lock  # the kill left the lock
    journal = read_json(sd / "journal.json")
    (entry,) = journal["gpus"]
    assert entry["uuid"] == UUID and entry["original_limit_w"] == 650.0
    assert entry["clocks_locked"] is True and entry["original_sm_lock_mhz"] is None
    assert journal["backend"]["kind"] == "sim" and journal["backend"]["node"] == "node2"
    restored = powersweep("restore", "--state-dir", str(sd))
    assert restored.returncode == 0, restored.stderr
    after = read_json(state)
    assert after[UUID] == 650.0 and after[f"{UUID}#locks"] == {"sm": None, "mem": None}
    assert not (sd / "journal.json").exists()


@pytest.mark.slow
def test_a_power_and_a_clock_fleet_of_the_same_cards_are_reported_side_by_side(
    clock_fleet: tuple[Path, dict[str, Path]], tmp_path: Path
) -> None:
    root, _ = clock_fleet
    power = tmp_path / "power"
    # side by side: what is checked here is how the report joins the axes, not how close each
    # card's figures come to the truth
    sweeps = [_sweep_power(power, node) for node in NODES[:3]]
    for node, proc in zip(NODES[:3], sweeps, strict=True):
        _, stderr = proc.communicate(timeout=240)
        assert proc.returncode == 0, f"{node}: {stderr}"
    out = tmp_path / "report"
    done = powersweep("fleet", "report", str(root / "runs"), str(power), "--out", str(out))
    assert done.returncode == 0, done.stderr
    fleet = read_json(out / "fleet.json")
    axes = [g["axis"]["name"] for g in fleet["groups"]]
    assert axes == ["power", "sm-clock"]
    cap, lock = fleet["groups"]
    vs = lock["versus_power"]
    assert vs["fleet_cap_w"] == cap["fleet_cap"]["cap_w"]
    want = (lock["fleet_lock"]["fleet_tps_per_w"] / cap["fleet_cap"]["fleet_tps_per_w"] - 1) * 100
    assert vs["tps_per_w_vs_fleet_cap_pct"] == pytest.approx(want)
    assert math.isfinite(vs["tps_per_card_vs_fleet_cap_pct"])
    md = (out / "fleet.md").read_text()
    assert "**Fleet cap:" in md and "**Fleet SM lock:" in md and "Beside the power axis" in md
    # the same node's two runs keep its name in each group
    assert {c["label"] for c in cap["cards"]} == set(NODES[:3])
    # fleet apply picks, for this H100, the axis with more tokens per joule across the fleet
    best = max(fleet["groups"], key=lambda g: g[g["axis"]["answer_key"]]["fleet_tps_per_w"])
    dry = powersweep(
        "fleet", "apply", str(out), "--dry-run", "--simulate", SPEC, "--sim-node", "node0",
        "--record", str(tmp_path / "r.json"),
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert read_json(tmp_path / "r.json")["cards"][0]["axis"] == best["axis"]["name"]


def _sweep_power(root: Path, node: str) -> subprocess.Popen[str]:
    args = [
        "--simulate", SPEC, "--sim-node", node, "--caps", "300,400,500,600,700",
        "--load-mode", "decode-single", "--target-cap-seconds", "4",
        "--warmup-requests", "1", "--settle-seconds", "1", "--thermal-wait-seconds", "0",
        "--quiet", "--cooling", "air", "--no-charts", "--out", str(root / node),
        "--state-dir", str(root / "state" / node),
    ]  # fmt: skip
    return powersweep_started(*args, stdout=subprocess.DEVNULL)
