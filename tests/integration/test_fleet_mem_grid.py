"""A fleet of RTX 5090s swept on the memory-lock axis, on a grid of SM x memory locks and on the
SM axis (real simulated sweeps with card-to-card spread): the fleet report's memory lock and
grid pair against each card's own measured best and the simulator's truth, `fleet apply` of
those answers, and `fleet apply --persist`'s boot unit (written to a folder, run as at boot)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import (
    REPO,
    only_run_dir,
    powersweep,
    powersweeps_side_by_side,
    read_json,
)

SPEC = "rtx5090-air~0.05"
NODES = ["node0", "node1", "node2"]
UUID = "GPU-sim-rtx5090-air-0"
DEFAULT_W = 575.0
USER_W = 550.0  # a limit of the user's own, not the default: apply keeps it
MEM_TIERS = [7001.0, 10001.0, 12001.0, 14001.0]
GRID_SMS = "1800,2400,2880"
# each sweep axis, its own options
AXES: dict[str, tuple[str, ...]] = {
    "mem-clock": ("--axis", "mem-clock"),
    # locked clocks under a limit that does not bind: no point waits for its temperature
    "grid": ("--axis", "grid", "--sm-clocks", GRID_SMS, "--thermal-wait-seconds", "0"),
    "sm-clock": ("--axis", "sm-clock", "--sm-clocks", "1800,2400,2880"),
}


def _axis_sweep_args(root: Path, axis: str, node: str) -> list[str]:
    return [
        "--simulate", SPEC, "--sim-node", node, *AXES[axis], "--load-mode", "decode-single",
        "--target-cap-seconds", "4", "--warmup-requests", "1", "--settle-seconds", "1",
        "--quiet", "--cooling", "air", "--no-charts", "--out", str(root / axis / node),
        "--state-dir", str(root / "state" / axis / node),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Path]]]:
    """Every node's card swept on each axis: the root and the run directories by axis, node."""
    root = tmp_path_factory.mktemp("rtx5090-clocks")
    runs = root / "runs"
    jobs = [(axis, node) for axis in AXES for node in NODES]
    done = powersweeps_side_by_side([_axis_sweep_args(runs, a, n) for a, n in jobs], at_once=2)
    for (axis, node), (rc, err) in zip(jobs, done, strict=True):
        assert rc == 0, f"{axis} {node}: {err}"
    return root, {a: {n: only_run_dir(runs / a / n) for n in NODES} for a in AXES}


@pytest.fixture(scope="module")
def report(fleet: tuple[Path, dict[str, dict[str, Path]]]) -> tuple[Path, dict[str, Any]]:
    root, _ = fleet
    out = root / "report"
    done = powersweep("fleet", "report", str(root / "runs"), "--out", str(out), "--no-charts")
    assert done.returncode == 0, done.stderr
    return out, read_json(out / "fleet.json")


def _axis_group(fleet_json: dict[str, Any], axis: str) -> dict[str, Any]:
    (group,) = [g for g in fleet_json["groups"] if g["axis"]["name"] == axis]
    return group


def _true_tpw(run: Path) -> dict[tuple[float | None, float | None], float]:
    """The card's noise-free TPS/W at each (SM lock, memory lock) it measured."""
    truth = read_json(run / "run.json")["simulation"]["ground_truth"]
    return {(p["sm_lock_mhz"], p["mem_lock_mhz"]): p["tps_per_w"] for p in truth["points"]}


def _own_points(run: Path) -> dict[tuple[float | None, float | None], float]:
    """The card's own pooled TPS/W per point, from its analysis.json."""
    points = read_json(run / "analysis.json")["points"]
    return {(p["sm_lock_mhz"], p["mem_lock_mhz"]): p["tps_per_w"] for p in points}


@pytest.mark.slow
def test_fleet_memory_lock_is_a_tier_every_card_runs_near_its_true_best(
    fleet: tuple[Path, dict[str, dict[str, Path]]], report: tuple[Path, dict[str, Any]]
) -> None:
    _, runs = fleet
    out, fleet_json = report
    group = _axis_group(fleet_json, "mem-clock")
    assert group["n_cards"] == len(NODES) and group["axis"]["setting_key"] == "mem_lock_mhz"
    answer = group["fleet_lock"]
    lock = answer["mem_lock_mhz"]
    assert lock in MEM_TIERS and "sm_lock_mhz" not in answer
    assert answer["held_cap_w"] is None  # swept under the limit in force: fleet apply keeps it
    assert lock in answer["within_noise"]["x"] and answer["within_noise"]["resamples"] > 0
    cards = {c["label"]: c for c in group["cards"]}
    assert set(cards) == set(NODES)
    for node, run in runs["mem-clock"].items():
        truth = _true_tpw(run)
        # the fleet's lock is as good as the card's true best within the measurement's noise
        assert truth[(None, lock)] >= 0.985 * max(truth.values()), (node, lock, truth)
        # each card's own best and what the lock costs it, from its own points
        own = _own_points(run)
        c = cards[node]
        best = max(own, key=own.__getitem__)
        assert c["own_best"] == {"mem_lock_mhz": best[1]} and c["sweet_spot_mhz"] == best[1]
        want = (own[(None, lock)] / own[best] - 1) * 100
        assert c["tps_per_w_vs_own_best_pct"] == pytest.approx(want, rel=1e-6, abs=1e-9)
    md = (out / "fleet.md").read_text()
    assert f"**Fleet memory lock: mem {lock:.0f} MHz**" in md


@pytest.mark.slow
def test_fleet_grid_answer_is_an_sm_and_memory_lock_pair_near_each_cards_true_best(
    fleet: tuple[Path, dict[str, dict[str, Path]]], report: tuple[Path, dict[str, Any]]
) -> None:
    _, runs = fleet
    out, fleet_json = report
    group = _axis_group(fleet_json, "grid")
    assert group["axis"]["tier_key"] == "mem_lock_mhz" and group["n_cards"] == len(NODES)
    answer = group["fleet_lock"]
    pair = (answer["sm_lock_mhz"], answer["mem_lock_mhz"])
    assert pair[0] in [float(s) for s in GRID_SMS.split(",")] and pair[1] in MEM_TIERS
    # the settings tied with it are of its own memory tier
    assert answer["within_noise"]["tier"] == pair[1] and pair[0] in answer["within_noise"]["x"]
    assert group["sweet_spot_tier_mhz"]["n"] == len(NODES)
    cards = {c["label"]: c for c in group["cards"]}
    for node, run in runs["grid"].items():
        truth = _true_tpw(run)
        assert len(truth) == 3 * len(MEM_TIERS)
        assert truth[pair] >= 0.985 * max(truth.values()), (node, pair)
        own = _own_points(run)
        best = max(own, key=own.__getitem__)
        c = cards[node]
        assert c["own_best"] == {"sm_lock_mhz": best[0], "mem_lock_mhz": best[1]}
        want = (own[pair] / own[best] - 1) * 100
        assert c["tps_per_w_vs_own_best_pct"] == pytest.approx(want, rel=1e-6, abs=1e-9)
    md = (out / "fleet.md").read_text()
    assert f"**Fleet SM lock: SM {pair[0]:.0f} MHz / mem {pair[1]:.0f} MHz**" in md


@pytest.mark.slow
def test_cards_swept_on_several_clock_axes_count_once_in_the_fleet_totals(
    report: tuple[Path, dict[str, Any]],
) -> None:
    """The same cards swept on three clock axes and no power axis: each card is set to one
    answer (the one `fleet apply` picks: the most tokens per joule), so it saves once."""
    _, fleet_json = report
    groups = fleet_json["groups"]
    assert sorted(g["axis"]["name"] for g in groups) == ["grid", "mem-clock", "sm-clock"]
    picked = max(groups, key=lambda g: g["fleet_lock"]["fleet_tps_per_w"])
    saved = [g["savings"]["kw_saved"] for g in groups]
    assert sum(1 for kw in saved if kw > 0.001) >= 2  # more than one group saves: a sum would
    assert fleet_json["totals"]["kw_saved"] == pytest.approx(picked["savings"]["kw_saved"])
    assert fleet_json["totals"]["mwh_per_year_saved"] == pytest.approx(
        picked["savings"]["mwh_per_year_saved"]
    )


def _fleet_apply(report_dir: Path, node: str, state: Path, sd: Path, *extra: str) -> Any:
    return powersweep(
        "fleet", "apply", str(report_dir), "--simulate", SPEC, "--sim-node", node,
        "--sim-state", str(state), "--state-dir", str(sd), *extra,
    )  # fmt: skip


@pytest.mark.slow
def test_fleet_apply_sets_the_memory_lock_or_the_grid_pair_and_keeps_the_users_limit(
    fleet: tuple[Path, dict[str, dict[str, Path]]], report: tuple[Path, dict[str, Any]]
) -> None:
    root, _ = fleet
    out, fleet_json = report
    state, sd = root / "apply-state.json", root / "apply-sd"
    state.write_text(json.dumps({UUID: USER_W}))

    mem = _axis_group(fleet_json, "mem-clock")["fleet_lock"]["mem_lock_mhz"]
    record = root / "mem-record.json"
    done = _fleet_apply(out, "node1", state, sd, "--axis", "mem-clock", "--record", str(record))
    assert done.returncode == 0, done.stderr
    assert f"memory {mem:g} MHz (verified: reads back memory {mem:g} MHz)" in done.stdout
    saved = read_json(state)
    assert saved[f"{UUID}#locks"] == {"sm": None, "mem": mem}
    assert saved[UUID] == USER_W  # a lock alone leaves the limit alone
    (card,) = read_json(record)["cards"]
    assert (card["axis"], card["source"], card["sm_lock_mhz"], card["mem_lock_mhz"]) == (
        "mem-clock", "fleet", None, mem,
    )  # fmt: skip
    assert card["cap_w"] is None and not (sd / "journal.json").exists()

    grid = _axis_group(fleet_json, "grid")["fleet_lock"]
    sm, mem = grid["sm_lock_mhz"], grid["mem_lock_mhz"]
    done = _fleet_apply(out, "node1", state, sd, "--axis", "grid", "--record", str(record))
    assert done.returncode == 0, done.stderr
    # the SM lock a range from the card's idle floor (issue 45)
    assert f"(verified: reads back SM 210-{sm:g} MHz, memory {mem:g} MHz)" in done.stdout
    saved = read_json(state)
    assert saved[f"{UUID}#locks"] == {"sm": sm, "mem": mem, "sm_min": 210.0}
    assert saved[UUID] == USER_W
    (card,) = read_json(record)["cards"]
    assert (card["axis"], card["sm_lock_mhz"], card["mem_lock_mhz"]) == ("grid", sm, mem)

    # without --axis: the group with the most tokens per joule across the fleet
    best = max(fleet_json["groups"], key=lambda g: g["fleet_lock"]["fleet_tps_per_w"])
    done = _fleet_apply(out, "node2", state, sd, "--dry-run", "--record", str(record))
    assert done.returncode == 0, done.stderr
    assert read_json(record)["cards"][0]["axis"] == best["axis"]["name"]


@pytest.mark.slow
def test_fleet_apply_persist_writes_a_boot_unit_that_sets_the_grid_pair_again_at_boot(
    fleet: tuple[Path, dict[str, dict[str, Path]]], report: tuple[Path, dict[str, Any]]
) -> None:
    root, _ = fleet
    out, fleet_json = report
    grid = _axis_group(fleet_json, "grid")["fleet_lock"]
    sm, mem = grid["sm_lock_mhz"], grid["mem_lock_mhz"]
    state, sd, units = root / "persist-state.json", root / "persist-sd", root / "units"
    units.mkdir()
    state.write_text(json.dumps({UUID: USER_W}))
    done = _fleet_apply(
        out, "node0", state, sd, "--axis", "grid", "--persist", "--unit-dir", str(units)
    )
    assert done.returncode == 0, done.stderr
    assert "persistence mode off -> on" in done.stdout
    path = units / "powersweep-apply.service"
    assert f"wrote {path} (mode 0644" in done.stdout
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    # the cards are set now
    saved = read_json(state)
    assert saved[f"{UUID}#locks"] == {"sm": sm, "mem": mem, "sm_min": 210.0}  # a range
    assert saved[UUID] == USER_W
    assert saved[f"{UUID}:persistence_mode"] is True

    # the unit sets both locks and keeps the user's limit (not the default) at every boot
    unit = path.read_text()
    marker = next(ln for ln in unit.splitlines() if ln.startswith("# powersweep-settings: "))
    (setting,) = json.loads(marker.split(": ", 1)[1])["gpus"]
    assert setting["uuid"] == UUID and setting["source"] == f"{out.resolve()} (fleet)"
    assert (setting["power_limit_w"], setting["sm_clock_mhz"], setting["mem_clock_mhz"]) == (
        USER_W, sm, mem,
    )  # fmt: skip
    (line,) = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    argv = shlex.split(line.removeprefix("ExecStart=-"))  # "-": one failure does not stop boot
    assert Path(argv[0]).is_absolute() and argv[1] == "apply"
    args = argv[2:]
    assert args[args.index("--simulate") + 1] == SPEC
    assert args[args.index("--sim-state") + 1] == str(state.resolve())
    assert "--at-boot" in args and args[args.index("--gpus") + 1] == UUID
    assert args[args.index("--cap") + 1] == f"{USER_W:g}"
    assert args[args.index("--sm-clock") + 1] == f"{sm:g}"
    assert args[args.index("--mem-clock") + 1] == f"{mem:g}"
    shown = powersweep("status", "--simulate", SPEC, "--sim-state", str(state), "--json",
                       "--unit-dir", str(units))  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    unit_status = json.loads(shown.stdout)["unit"]
    assert unit_status["installed"] and unit_status["written_by_powersweep"]
    assert unit_status["settings"][0]["sm_clock_mhz"] == sm

    # a reboot forgets the locks and the limit; the unit's command sets them again
    state.write_text(json.dumps({UUID: DEFAULT_W}))
    env = {**os.environ, "POWERSWEEP_STATE_DIR": str(sd)}
    booted = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert booted.returncode == 0, booted.stderr
    saved = read_json(state)
    assert saved[f"{UUID}#locks"] == {"sm": sm, "mem": mem, "sm_min": 210.0}  # a range
    assert saved[UUID] == USER_W

    # --reset --persist puts the default back, unlocks the card and removes the unit
    done = powersweep(
        "apply", "--reset", "--persist", "--unit-dir", str(units), "--simulate", SPEC,
        "--sim-state", str(state), "--state-dir", str(sd),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not path.exists()
    saved = read_json(state)
    assert saved[f"{UUID}#locks"] == {"sm": None, "mem": None} and saved[UUID] == DEFAULT_W
