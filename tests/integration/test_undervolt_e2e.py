"""The undervolt search end to end on the simulated rig (issue 36).

The simulated card's silicon holds a seeded stable margin; past it the server's greedy answers
diverge, further out the card resets. The search must stop at the first unstable step, refine
the edge on the 15 MHz grid, answer the last stable offset less the margin (in MHz), compare it
with the best cap, and put the user's own limit, locks and offset back on every exit path.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import (
    only_run_dir,
    powersweep,
    powersweep_started,
    read_csv,
    read_json,
    sim_rig,
)

STEP = 30.0
GRID = 15.0
MARGIN = 30.0
USER_LIMIT_W = 350.0


def _uuid(profile: str) -> str:
    return f"GPU-sim-{profile}-0"


def _user_card_rig(
    tmp: Path, profile: str, lock: float | None = None
) -> tuple[Path, dict[str, str]]:
    """The card of ``profile`` at the user's limit (and SM lock): its state file, environment."""
    uuid = _uuid(profile)
    cards: dict[str, Any] = {uuid: USER_LIMIT_W}
    if lock is not None:
        cards[f"{uuid}#locks"] = {"sm": lock}
    state, _, _, env = sim_rig(tmp, cards)
    return state, env


def _limit_lock_offset(state: Path, profile: str) -> tuple[float, Any, float]:
    data = json.loads(state.read_text())
    uuid = _uuid(profile)
    locks = data.get(f"{uuid}#locks") or {}
    return float(data[uuid]), locks.get("sm"), float(data.get(f"{uuid}#sm_offset_mhz", 0.0))


def _args(profile: str, state: Path | None, out: Path, *extra: str) -> list[str]:
    """A quiet undervolt search from the 300 W cap (``state``: the simulated cards' settings
    file; None: they live in memory)."""
    kept = ["--sim-state", str(state)] if state is not None else []
    return [
        *("--simulate", profile, "--axis", "undervolt", "--cap", "300", "--cooling", "air"),
        *("--quiet", "--no-charts", *kept, "--out", str(out), *extra),
    ]


@pytest.mark.parametrize(
    ("profile", "mode"),
    [
        ("rtx3090-air", "decode-single"),
        ("rtx4090-air", "decode-single"),
        ("rtx4090-air", "decode-concurrent"),
        ("rtx4090-air", "prefill-heavy"),
    ],
)
def test_the_search_answers_the_stable_margin_less_the_margin(
    tmp_path: Path, profile: str, mode: str
) -> None:
    state, env = _user_card_rig(tmp_path, profile)
    done = powersweep(*_args(profile, state, tmp_path / "runs", "--load-mode", mode), env=env)
    assert done.returncode == 0, done.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    run = read_json(run_dir / "run.json")
    truth = run["simulation"]["stable_offset_mhz"]["0"]
    analysis = read_json(run_dir / "analysis.json")
    assert analysis["kind"] == "undervolt"
    chosen = analysis["chosen"]
    # the edge to the grid bin: the last stable offset is the truth's bin, the answer the margin
    # below it
    last_ok = math.floor(truth / GRID) * GRID
    assert analysis["last_stable_mhz"] == last_ok
    assert chosen["sm_offset_mhz"] == last_ok - MARGIN
    assert chosen["reason"] == "soak" and chosen["status"] == "ok"
    # the corruption is caught on the first unstable step: the first step past the margin,
    # then the grid bin above the last stable one
    coarse_bad = (math.floor(truth / STEP) + 1) * STEP
    first_bad = last_ok + GRID
    assert analysis["first_unstable_mhz"] == first_bad
    steps = {s["sm_offset_mhz"]: s for s in analysis["steps"]}
    for bad in (coarse_bad, first_bad):
        assert steps[bad]["status"] == "unstable"
        assert steps[bad]["answers_differ"] == steps[bad]["answers_checked"] == 3
    assert max(steps) == coarse_bad  # the coarse search ended there
    assert all(
        s["status"] == "ok" and s["answers_differ"] == 0 for o, s in steps.items() if o <= last_ok
    )
    # beside the best cap, from the same run
    versus = analysis["versus_cap"]
    assert versus["cap_w"] == 300.0 and versus["tps_per_w_gain_pct"] is not None
    summary = (run_dir / "summary.md").read_text()
    assert "Answer beside the best cap" in summary and "300 W cap" in summary
    assert f"{chosen['sm_offset_mhz']:+.0f} MHz offset" in done.stdout  # the closing line
    # the user's own settings are back: no offset left applied, no lock, the limit
    assert _limit_lock_offset(state, profile) == (USER_LIMIT_W, None, 0.0)
    assert run["undervolt"]["chosen_mhz"] == chosen["sm_offset_mhz"]
    # every reading and request says the offset it ran at: the points are told apart
    requests = read_csv(run_dir / "requests.csv")
    measured = {float(r["sm_offset_mhz"]) for r in requests if r["sm_offset_mhz"]}
    assert measured == set(steps) | {chosen["sm_offset_mhz"]}
    samples = read_csv(run_dir / "samples.csv")
    sampled = {float(r["sm_offset_mhz"]) for r in samples if r["sm_offset_mhz"]}
    assert sampled == set(steps) | {chosen["sm_offset_mhz"]}


def test_a_card_that_resets_at_the_first_unstable_step_ends_cleanly_and_says_so(
    tmp_path: Path,
) -> None:
    profile = "rtx3090-air"
    state, env = _user_card_rig(tmp_path, profile)
    done = powersweep(
        *_args(profile, state, tmp_path / "runs", "--sim-vf-reset-beyond-mhz", "0"), env=env
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "was reset by this offset; it came back" in done.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    analysis = read_json(run_dir / "analysis.json")
    assert "gpu_reset" in [f["code"] for f in analysis["findings"]]
    bad = [s for s in analysis["steps"] if s["status"] != "ok"]
    assert len(bad) == 1 and "reset" in bad[0]["error"]
    assert "Xid 79 (fallen off the bus)" in bad[0]["error"]
    assert analysis["chosen"]["status"] == "ok"  # soaked after the card came back
    assert _limit_lock_offset(state, profile) == (USER_LIMIT_W, None, 0.0)


def test_dry_run_shows_the_steps_and_the_warning(tmp_path: Path) -> None:
    done = powersweep(
        "--simulate", "rtx3090-air", "--axis", "undervolt", "--dry-run", "--max-offset", "120"
    )
    assert done.returncode == 0, done.stderr
    assert "SM clock offsets (MHz): +0, +30, +60, +90, +120 up to +120" in done.stdout
    assert "can corrupt answers, raise GPU errors or reset the GPU" in done.stderr


PACED = ("--sim-pace", "20", "--warmup-requests", "0", "--target-cap-seconds", "4")


def _wait_until(proc: subprocess.Popen[str], ready: Callable[[], bool], what: str) -> None:
    """Poll ``ready`` every 20 ms while the sweep runs (at most 90 s)."""
    deadline = time.monotonic() + 90
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no {what} set in time"
        time.sleep(0.02)


def _wait_for_an_offset(
    proc: subprocess.Popen[str], state: Path, profile: str, at_least: float = 1.0
) -> None:
    _wait_until(proc, lambda: _limit_lock_offset(state, profile)[2] >= at_least, "offset")


@pytest.mark.slow
def test_sigterm_mid_search_puts_offset_locks_and_limit_back(tmp_path: Path) -> None:
    profile = "rtx3090-air"
    state, env = _user_card_rig(tmp_path, profile, lock=1500.0)
    proc = powersweep_started(*_args(profile, state, tmp_path / "runs", *PACED), env=env)
    try:
        _wait_for_an_offset(proc, state, profile)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    assert _limit_lock_offset(state, profile) == (USER_LIMIT_W, 1500.0, 0.0)
    assert "SM clock offset put back to 0 MHz" in stderr
    assert not (tmp_path / "state" / "journal.json").exists()


@pytest.mark.slow
def test_sigterm_in_the_memory_phase_puts_both_offsets_back(tmp_path: Path) -> None:
    # issue 45: every phase's settings come back, the memory offset's included
    profile = "rtx4090-air"
    state, env = _user_card_rig(tmp_path, profile)
    quick = ("--max-offset", "60", "--soak-seconds", "0", "--mem-offset-step", "500")
    # paced faster than PACED: the memory phase comes after the SM search (a memory step still
    # lasts about 80 ms of wall time, for the 20 ms poll to catch)
    faster = [("50" if a == "20" else a) for a in PACED]
    proc = powersweep_started(*_args(profile, state, tmp_path / "runs", *faster, *quick), env=env)
    key = f"{_uuid(profile)}#mem_offset_mhz"
    try:
        _wait_until(proc, lambda: json.loads(state.read_text()).get(key, 0.0) > 0, "memory offset")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    assert _limit_lock_offset(state, profile) == (USER_LIMIT_W, None, 0.0)
    assert json.loads(state.read_text())[key] == 0.0
    assert "memory clock offset put back to 0 MHz" in stderr
    assert not (tmp_path / "state" / "journal.json").exists()


@pytest.mark.slow
def test_sigkill_mid_search_is_undone_by_restore(tmp_path: Path) -> None:
    profile = "rtx3090-air"
    state, env = _user_card_rig(tmp_path, profile, lock=1500.0)
    proc = powersweep_started(*_args(profile, state, tmp_path / "runs", *PACED), env=env)
    try:
        _wait_for_an_offset(proc, state, profile)
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    journal = tmp_path / "state" / "journal.json"
    (gpu,) = json.loads(journal.read_text())["gpus"]
    assert gpu["offset_set"] and gpu["original_sm_offset_mhz"] == 0.0
    assert _limit_lock_offset(state, profile)[2] > 0  # SIGKILL: nothing could put it back
    restored = powersweep("restore", env=env)
    assert restored.returncode == 0, restored.stderr
    assert _limit_lock_offset(state, profile) == (USER_LIMIT_W, 1500.0, 0.0)
    assert not journal.exists()


@pytest.mark.slow
def test_a_search_killed_under_an_offset_resumes_and_never_tries_it_again(tmp_path: Path) -> None:
    # issue 45: a search cut by a reset or a kill goes on (--resume) from its last stable step,
    # the offset set when it died counted unstable
    profile = "rtx3090-air"
    state, env = _user_card_rig(tmp_path, profile)
    proc = powersweep_started(*_args(profile, state, tmp_path / "runs", *PACED), env=env)
    try:
        _wait_for_an_offset(proc, state, profile, at_least=60.0)
        killed_at = _limit_lock_offset(state, profile)[2]
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert powersweep("restore", env=env).returncode == 0
    run_dir = only_run_dir(tmp_path / "runs")
    record = read_json(run_dir / "run.json")["undervolt"]
    assert record["in_flight"] == {"sm_offset_mhz": killed_at, "reason": "search"}
    resumed = powersweep("--resume", str(run_dir), "--quiet", "--no-charts", env=env)
    assert resumed.returncode == 0, resumed.stderr
    run = read_json(run_dir / "run.json")
    assert run["status"] == "complete"
    again = run["undervolt"]
    assert again["resumed_from"]["killed_at_mhz"] == killed_at
    assert again["first_unstable_mhz"] <= killed_at
    rows = read_csv(run_dir / "caps.csv")
    tried = [float(r["sm_offset_mhz"]) for r in rows if r["sm_offset_mhz"]]
    assert tried.count(killed_at) == 0  # never measured: it was set when the run died
    analysis = read_json(run_dir / "analysis.json")
    # on from the last step that held before it: the grid below it, the margin below that
    assert again["resumed_from"]["last_stable_mhz"] == killed_at - STEP
    assert analysis["chosen"]["sm_offset_mhz"] == analysis["last_stable_mhz"] - MARGIN
    assert analysis["last_stable_mhz"] < killed_at
    assert _limit_lock_offset(state, profile) == (USER_LIMIT_W, None, 0.0)


def test_the_memory_phase_finds_the_cards_margin_and_apply_sets_it(tmp_path: Path) -> None:
    # issue 45: at the SM answer the memory offset climbs while TPS rises beyond noise (past
    # the seeded margin the simulated GDDR6X replays, so TPS stops rising), backs off, soaks
    profile, step = "rtx4090-air", 500.0
    state, env = _user_card_rig(tmp_path, profile)
    args = _args(profile, state, tmp_path / "runs", "--mem-offset-step", f"{step:g}")
    done = powersweep(*args, env=env)
    assert done.returncode == 0, done.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    run = read_json(run_dir / "run.json")
    truth = run["simulation"]["stable_mem_offset_mhz"]["0"]
    memory = read_json(run_dir / "analysis.json")["memory"]
    # the best within one step of the seeded margin, the answer one margin below it
    assert abs(memory["best_mhz"] - truth) <= step
    assert memory["chosen"]["mem_offset_mhz"] == max(0.0, memory["best_mhz"] - step)
    assert memory["chosen"]["reason"] == "soak" and memory["chosen"]["status"] == "ok"
    sm = read_json(run_dir / "analysis.json")["chosen"]["sm_offset_mhz"]
    assert memory["chosen"]["sm_offset_mhz"] == sm  # at the SM answer
    assert memory["versus_cap"]["cap_w"] == 300.0 and memory["versus_sm"]["tps_change_pct"] > 0
    summary = (run_dir / "summary.md").read_text()
    assert "Memory phase, at the SM answer" in summary and "| change with memory |" in summary
    assert f"with memory {memory['chosen']['mem_offset_mhz']:+.0f} MHz" in done.stdout
    # the card's own memory offset is back, as every other setting
    assert _limit_lock_offset(state, profile) == (USER_LIMIT_W, None, 0.0)
    assert json.loads(state.read_text()).get(f"{_uuid(profile)}#mem_offset_mhz", 0.0) == 0.0
    applied = powersweep("apply", str(run_dir), "--simulate", profile, "--sim-state", str(state))
    assert applied.returncode == 0, applied.stderr
    mem = memory["chosen"]["mem_offset_mhz"]
    assert f"memory clock offset +0 MHz -> {mem:+g} MHz (verified" in applied.stdout
    assert json.loads(state.read_text())[f"{_uuid(profile)}#mem_offset_mhz"] == mem
    # an analysis.json edited to the step that stopped the phase is refused
    analysis = read_json(run_dir / "analysis.json")
    analysis["memory"]["chosen"]["mem_offset_mhz"] = memory["stopped_mhz"]
    (run_dir / "analysis.json").write_text(json.dumps(analysis))
    edited = powersweep("apply", str(run_dir), "--simulate", profile, "--sim-state", str(state))
    assert edited.returncode == 2 and "but its caps.csv and run.json give memory" in edited.stderr


def test_a_card_set_takes_one_offset_that_its_weakest_card_holds(tmp_path: Path) -> None:
    done = powersweep(*_args("rtx3090-air+rtx3090-air", None, tmp_path))
    assert done.returncode == 0, done.stderr
    run_dir = only_run_dir(tmp_path)
    truths = read_json(run_dir / "run.json")["simulation"]["stable_offset_mhz"]
    assert len(set(truths.values())) == 2  # two different pieces of silicon
    weakest = min(truths.values())
    analysis = read_json(run_dir / "analysis.json")
    last_ok = math.floor(weakest / GRID) * GRID
    assert analysis["first_unstable_mhz"] == last_ok + GRID
    assert analysis["chosen"]["sm_offset_mhz"] == last_ok - MARGIN
    assert "GPU 1: SM clock offset put back to 0 MHz" in done.stderr


def test_a_coarse_first_step_already_unstable_is_refined_from_zero(tmp_path: Path) -> None:
    # issue 45: the back-off counted steps, so a coarse step past the margin answered +0
    profile = "rtx3090-air"
    state, env = _user_card_rig(tmp_path, profile)
    # the 3090's margin is 175 +-25 MHz: a first step of 210 is past it on every card
    done = powersweep(*_args(profile, state, tmp_path / "runs", "--offset-step", "210"), env=env)
    assert done.returncode == 0, done.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    run = read_json(run_dir / "run.json")
    truth = run["simulation"]["stable_offset_mhz"]["0"]
    analysis = read_json(run_dir / "analysis.json")
    last_ok = math.floor(truth / GRID) * GRID
    assert analysis["last_stable_mhz"] == last_ok
    assert analysis["first_unstable_mhz"] == last_ok + GRID
    assert analysis["chosen"]["sm_offset_mhz"] == last_ok - MARGIN
    assert run["undervolt"]["refined_between_mhz"] == [0.0, 210.0]
    summary = (run_dir / "summary.md").read_text()
    assert "offset stepped by 210 MHz from 0, then by 15 MHz from +15 to" in summary
    assert "held 300 s under the load, then measured and checked" in summary
    assert _limit_lock_offset(state, profile) == (USER_LIMIT_W, None, 0.0)


def test_a_margin_past_every_stable_offset_answers_offset_zero_and_completes(
    tmp_path: Path,
) -> None:
    profile = "rtx3090-air"
    state, env = _user_card_rig(tmp_path, profile)
    done = powersweep(*_args(profile, state, tmp_path / "runs", "--offset-margin", "600"), env=env)
    assert done.returncode == 0, done.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    assert read_json(run_dir / "run.json")["status"] == "complete"
    analysis = read_json(run_dir / "analysis.json")
    assert analysis["chosen"]["sm_offset_mhz"] == 0.0 and analysis["soaks"] == []
    assert "no_undervolt" in [f["code"] for f in analysis["findings"]]
    summary = (run_dir / "summary.md").read_text()
    assert "offset 0, the card's own curve (no soak needed)" in summary
    assert "was soaked" not in summary
    assert _limit_lock_offset(state, profile) == (USER_LIMIT_W, None, 0.0)
