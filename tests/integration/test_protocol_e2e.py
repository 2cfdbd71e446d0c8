"""Issue 21 end to end: one measurement protocol for every point, in windows truly time-bounded.

Each test runs the CLI as a user does against the simulated rig. A misbehaving server no other
test uses (the whole server paused mid-sweep: no stream sends a token, nothing catches up) must
be caught on every axis and load mode, the disturbed point measured again and named; every
point's window must end where ``--target-cap-seconds`` says, also against a server that ignores
``max_tokens``; and the dry run's estimate must be what the sweep then takes.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from powersweep.runformat import REPEAT_REASONS
from powersweep.sweep.estimate import estimate_run_s
from powersweep.sweep.options import SweepOptions
from tests.integration.conftest import (
    only_run_dir,
    powersweep,
    powersweep_started,
    read_csv,
    read_json,
    sweep_run_dir,
)

QUIET = ("--cooling", "air", "--quiet", "--no-charts")


def _faults_by_kind(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["kind"]: f for f in meta.get("faults", [])}


def _faults_line(run: Path) -> str:
    """The summary's finding of the faults the run met."""
    summary = (run / "summary.md").read_text().splitlines()
    (line,) = [ln for ln in summary if ln.startswith("- **warning**") and "met faults" in ln]
    return line


# The pause meets the first request that arrives at 310 W. Without the wait for a steady
# temperature that is a measured one; with it, it may be one of the load that keeps the card
# busy meanwhile, a pause no window sees (the card idles in the wait: a gap the closing note
# names).
NO_WAIT = ("--thermal-wait-seconds", "0")
PAUSES = {
    "decode-single": ("--caps", "350,330,310,290,270", "--sim-fault", "pause-once@310", *NO_WAIT),
    "decode-concurrent": (
        "--load-mode",
        "decode-concurrent",
        "--concurrency",
        "4",
        "--caps",
        "350,330,310,290,270",
        "--sim-fault",
        "pause-once@310",
        *NO_WAIT,
    ),
}


CLOCKS = {"virtual": (), "paced": ("--sim-pace", "60")}


@pytest.mark.slow
@pytest.mark.parametrize("clock", sorted(CLOCKS))
@pytest.mark.parametrize("mode", sorted(PAUSES))
def test_a_paused_server_is_caught_measured_again_and_named(
    tmp_path: Path, mode: str, clock: str
) -> None:
    # The server stops for 6 run seconds, 2 s into the first request at 310 W: at any pace (the
    # checks judge run seconds, never wall seconds) the point is caught and measured again.
    run = sweep_run_dir(
        tmp_path, *QUIET, "--simulate", "rtx3090-air", *CLOCKS[clock], "--target-cap-seconds", "6",
        *PAUSES[mode],
    )  # fmt: skip
    meta = read_json(run / "run.json")
    remeasured = _faults_by_kind(meta)["remeasured"]
    assert remeasured["count"] == 1 and remeasured["examples"][0].startswith("310 W: ")
    assert "suspect" not in _faults_by_kind(meta)
    caps = read_csv(run / "caps.csv")
    assert all(c["status"] == "ok" for c in caps)
    # every figure a user reads is in line with the others: both prompts' rates at each point
    # agree, and the pause left no low reading behind
    for c in caps:
        if c["reason"] not in REPEAT_REASONS:
            assert float(c["code_tps"]) == pytest.approx(float(c["narr_tps"]), rel=0.05), c
    truth = {t["cap_w"]: t["tps"] for t in meta["simulation"]["ground_truth"]["caps"]}
    for c in caps:
        assert float(c["narr_tps"]) == pytest.approx(truth[float(c["cap_w"])], rel=0.06), c
    # the disturbed attempt stays on record, used by no figure
    requests = read_csv(run / "requests.csv")
    assert any(r["prompt_kind"].startswith("discarded-") for r in requests)
    faults = _faults_line(run)
    assert "1 point(s) looked disturbed" in faults and "310 W:" in faults


@pytest.mark.slow
def test_a_paused_server_in_an_sm_clock_sweep_is_caught_too(tmp_path: Path) -> None:
    # clock points share one cap: the pause starts 2 s after the first request 40 run seconds
    # in, past the warm-up, while one of the points is measured
    run = sweep_run_dir(
        tmp_path, *QUIET, "--simulate", "h100-sxm", "--axis", "sm-clock", "--sm-clocks",
        "1185,1425,1665,1980", "--target-cap-seconds", "6", "--min-cap-seconds", "6",
        "--sim-fault", "pause-once@+40",
    )  # fmt: skip
    meta = read_json(run / "run.json")
    remeasured = _faults_by_kind(meta)["remeasured"]
    assert remeasured["count"] == 1 and remeasured["examples"][0].startswith("SM ")
    caps = read_csv(run / "caps.csv")
    assert all(c["status"] == "ok" for c in caps)
    for c in caps:
        if c["reason"] not in REPEAT_REASONS:
            assert float(c["code_tps"]) == pytest.approx(float(c["narr_tps"]), rel=0.05), c
    truth = {p["sm_lock_mhz"]: p["tps"] for p in meta["simulation"]["ground_truth"]["points"]}
    for c in caps:
        assert float(c["narr_tps"]) == pytest.approx(truth[float(c["sm_lock_mhz"])], rel=0.06)
    faults = _faults_line(run)
    assert "1 point(s) looked disturbed" in faults
    assert remeasured["examples"][0].split(":")[0] in faults


@pytest.mark.slow
def test_clock_points_get_the_serving_check_and_the_warmup_record(tmp_path: Path) -> None:
    run = sweep_run_dir(
        tmp_path, *QUIET, "--simulate", "h100-sxm", "--axis", "sm-clock", "--sm-clocks",
        "1185,1665", "--target-cap-seconds", "3",
    )  # fmt: skip
    meta = read_json(run / "run.json")
    assert meta["gpu_selection"]["confirmed"] is True
    assert meta["gpu_selection"]["warmup_util_pct"]["0"] > 50
    assert meta["warmup"]["requests"] >= 2 and meta["warmup"]["duration_s"] <= 3 * 3 + 1.5


WINDOWED = {
    "plain": (),
    "ignores-max-tokens": ("--sim-ignore-max-tokens",),
    "endless": ("--sim-fault", "endless"),
}


@pytest.mark.slow
@pytest.mark.parametrize("server", sorted(WINDOWED))
def test_every_window_ends_at_its_target(tmp_path: Path, server: str) -> None:
    run = sweep_run_dir(
        tmp_path, *QUIET, "--simulate", "rtx3090-air", "--target-cap-seconds", "3", "--caps",
        "350,300,250", *WINDOWED[server],
    )  # fmt: skip
    meta = read_json(run / "run.json")
    caps = read_csv(run / "caps.csv")
    assert caps and all(c["status"] == "ok" for c in caps)
    for c in caps:
        # two prompts of 3 s, each request allowed 10% of its window past it
        assert float(c["window_s"]) <= 7.5, c
    requests = read_csv(run / "requests.csv")
    for r in requests:
        if r["prompt_kind"] in ("narr", "code"):
            assert float(r["t_end_s"]) - float(r["t_start_s"]) <= 3.0 + 0.3 + 0.2, r
    codes = {f["code"] for f in read_json(run / "analysis.json")["findings"]}
    if server == "endless":
        # a server that never ends a stream is cut at each window's end and named
        assert "cut_at_deadline" in _faults_by_kind(meta)
        assert {r["finish_reason"] for r in requests if r["prompt_kind"] == "narr"} == {"deadline"}
    if server == "ignores-max-tokens":
        # it streams 10% past what it is asked for: the requests still end in the margin
        assert "request_ignored_max_tokens" in codes
    warmup = [r for r in requests if r["prompt_kind"] == "warmup"]
    assert warmup and meta["warmup"]["duration_s"] <= 3 * 3 + 1.5


REALTIME_TEST = "test_a_two_cap_sweep_in_real_time_takes_well_under_two_minutes"


@pytest.fixture(scope="module", autouse=True)
def realtime_sweep(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[subprocess.Popen[str], Path, float, list[float]] | None]:
    """The real-time sweep, started with this module's first test: it waits on the wall clock
    (warm-up, settles, windows) and needs almost no CPU, so the module's other tests run while
    it does and the suite does not wait the better part of a minute for it."""
    if not any(item.name == REALTIME_TEST for item in request.session.items):
        yield None
        return
    out = tmp_path_factory.mktemp("realtime")
    # real time (scale 1): the path real hardware takes (threads, sockets, uvloop); the thermal
    # waits and the confirm phase, whose bounds are in run seconds, are checked on virtual time
    args = (
        "--simulate", "rtx3090-air", "--time-scale", "1", "--caps", "300,250",
        "--target-cap-seconds", "2", "--thermal-wait-seconds", "0", "--no-confirm",
    )  # fmt: skip
    started = time.monotonic()
    proc = powersweep_started(*QUIET, "--out", str(out), *args)
    # its own duration: the moment it exits, not the moment the test gets to read it
    ended: list[float] = []

    def wait() -> None:
        proc.wait()
        ended.append(time.monotonic())

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        yield proc, out, started, ended
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        waiter.join()


@pytest.mark.slow
def test_a_two_cap_sweep_in_real_time_takes_well_under_two_minutes(
    realtime_sweep: tuple[subprocess.Popen[str], Path, float, list[float]] | None,
) -> None:
    assert realtime_sweep is not None
    proc, out, started, ended = realtime_sweep
    _, err = proc.communicate(timeout=150)
    took = ended[0] - started if ended else math.inf  # start to exit, whatever ran beside it
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    run = only_run_dir(out)
    assert read_json(run / "run.json")["status"] == "complete"
    # warm-up (at most 3 windows), 2 points of 2 windows and their settles: about 20 s
    assert took < 40, took
    assert all(float(c["window_s"]) <= 2 * 2 + 1.5 for c in read_csv(run / "caps.csv"))


ESTIMATED = {
    # the README's sweep: 10 W apart, the confirm phase runs about half the time (it re-measures
    # two caps of ~190 s of run time or none: 8% either way)
    "readme": (),
    "dense": ("--caps", "390,370,350,330,310,290,270,250"),
    # An adaptive sweep's caps a step apart tie at its peak half the time, and the estimate
    # counts half a confirm phase: one run re-measures two caps or none, 7% either way, which
    # no single run can check. Its planner and thermal waits are checked here, the confirm
    # phase's cost by the dense grids.
    "adaptive": ("--strategy", "adaptive", "--no-confirm"),
    # a few points: a confirm phase would be two of them, which the estimate counts at half
    "concurrent": (
        "--load-mode",
        "decode-concurrent",
        "--concurrency",
        "4",
        "--caps",
        "350,300",
        "--no-confirm",
    ),
    "prefill": ("--load-mode", "prefill-heavy", "--caps", "350,300,250", "--no-confirm"),
    "fixed-settle": ("--settle", "fixed", "--settle-seconds", "2", "--caps", "350,300,250"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(ESTIMATED))
def test_the_dry_run_estimate_is_what_the_sweep_takes(tmp_path: Path, case: str) -> None:
    args = ("--simulate", "rtx3090-air", *ESTIMATED[case])
    dry = powersweep(*QUIET, "--out", str(tmp_path / "dry"), "--dry-run", *args)
    assert dry.returncode == 0, dry.stderr
    # virtual time: the run time is estimated, the wall time is the CPU the run needs
    assert "estimated wall time" not in dry.stdout
    meta = read_json(sweep_run_dir(tmp_path / "runs", *QUIET, *args) / "run.json")
    options = SweepOptions.from_recorded(meta["options"])
    caps = sorted(meta["caps_planned"])
    planned = len(caps) if case != "adaptive" else 21
    steps = sorted(b - a for a, b in itertools.pairwise(caps))
    estimate = estimate_run_s(options, planned, steps[len(steps) // 2] if steps else None)
    assert f"estimated run time: {_duration(estimate)} (virtual time" in dry.stdout
    took = meta["timing"]["ended_s"] - meta["timing"]["started_s"]
    assert took == pytest.approx(estimate, rel=0.15), (took, estimate, meta["confirm"])


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"
