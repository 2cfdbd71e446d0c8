"""Input that cannot be trusted is named: options, CSV rows, journals, stalls."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from powersweep.analysis import analyze, load_curve
from powersweep.cli import main
from powersweep.errors import PowersweepError, UsageError
from powersweep.sim.faults import ServerFault, parse_fault
from powersweep.sweep.records.journal import (
    Journal,
    JournalEntry,
    JournalGpu,
    JournalLost,
    owner_alive,
    owner_refusal,
    owner_state,
    process_start,
)
from powersweep.sweep.sampling.consistency import (
    is_stall,
    lost_time_s,
    ratio_reason,
    stall_reason,
)
from powersweep.sweep.verdict import FaultLog, judge

SIM = ("--simulate", "rtx3090-air", "--cooling", "air")

BAD_OPTIONS = [
    (["--target-cap-seconds", "inf"], "--target-cap-seconds"),
    (["--target-cap-seconds", "nan"], "--target-cap-seconds"),
    (["--target-cap-seconds", "1e9"], "--target-cap-seconds"),
    (["--settle-seconds", "inf"], "--settle-seconds"),
    (["--sample-interval", "0.0001"], "--sample-interval"),
    (["--step-size", "inf"], "--step-size"),
    (["--step-size", "0.5"], "plans"),
    (["--time-scale", "inf"], "--time-scale"),
    (["--time-scale", "nan"], "--time-scale"),
    (["--warmup-requests", "1000000"], "--warmup-requests"),
    (["--max-failed-caps", "1000000"], "--max-failed-caps"),
    (["--load-mode", "decode-concurrent", "--concurrency", "100000"], "at most 256"),
    (["--load-mode", "decode-concurrent", "--max-concurrency-probe", "5000"], "probe"),
    (["--load-mode", "decode-concurrent", "--load-target", "nan"], "--load-target"),
    (["--load-mode", "prefill-heavy", "--target-prefill-seconds", "inf"], "prefill"),
    (["--caps", ",".join(str(100 + i) for i in range(400))], "--caps"),
    (["--caps", "inf"], "--caps"),
    (["--url", "http://:80", "--time-scale", "1"], "not an http"),
    (["--url", "http://localhost:99999", "--time-scale", "1"], "bad port"),
    (["--url", "http://local host:8080", "--time-scale", "1"], "URL"),
    (["--sim-fault", "meltdown"], "--sim-fault"),
    (["--sim-fault", "stall-first"], "@CAP"),
    (["--sim-fault", "stall", "--url", "http://127.0.0.1:9", "--time-scale", "1"], "drop --url"),
]


@pytest.mark.parametrize(
    ("args", "word"), BAD_OPTIONS, ids=[" ".join(a)[:40] for a, _ in BAD_OPTIONS]
)
def test_absurd_options_are_one_line_usage_errors(
    args: list[str], word: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main([*SIM, "--out", str(tmp_path / "runs"), *args])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert lines[-1].startswith("error: ") and word in lines[-1], err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def _status_caps_csv(path: Path, rows: list[str]) -> Path:
    path.write_text("cap_w,narr_tps,power_w,status\n" + "\n".join(rows) + "\n")
    return path


def test_ignored_rows_are_each_named(tmp_path: Path) -> None:
    path = _status_caps_csv(
        tmp_path / "caps.csv",
        [
            "350,34,340,ok",
            "330,33,nan,ok",
            "310,inf,300,ok",
            "290,32,0,ok",
            "270,31,-5,ok",
            "250,30,245,ok",
        ],
    )
    result = analyze(load_curve(path), bootstrap=0).to_json()
    (f,) = [f for f in result["findings"] if f["code"] == "rows_ignored"]
    assert f["message"].startswith("4 row(s)")
    for line in ("line 3", "line 4", "line 5", "line 6"):
        assert line in f["message"]
    assert "power_w is 0" in f["message"] and "narr_tps is inf" in f["message"]
    assert {c["cap_w"] for c in result["caps"] if c.get("status") == "ok"} >= {250.0, 350.0}


def test_implausible_draws_are_left_out_and_named(tmp_path: Path) -> None:
    path = _status_caps_csv(
        tmp_path / "caps.csv",
        ["350,34,340,ok", "300,33,0.2,ok", "250,30,245,ok", "200,29,90000,ok"],
    )
    result = analyze(load_curve(path), bootstrap=0).to_json()
    (f,) = [f for f in result["findings"] if f["code"] == "implausible_rows"]
    assert "line 3 (300 W)" in f["message"] and "line 5 (200 W)" in f["message"]
    assert result["sweet_spot"]["cap_w"] not in (300.0, 200.0)


def test_duplicate_caps_say_which_row_was_kept(tmp_path: Path) -> None:
    path = _status_caps_csv(
        tmp_path / "caps.csv",
        ["350,34,340,ok", "300,40,310,ok", "300,33,300,ok", "250,,,failed", "250,30,245,ok"],
    )
    result = analyze(load_curve(path), bootstrap=0).to_json()
    dups = [f for f in result["findings"] if f["code"] == "duplicate_cap"]
    by_cap = {("300 W" in f["message"]): f for f in dups}
    assert "kept line 4" in by_cap[True]["message"] and by_cap[True]["severity"] == "warning"
    assert "kept line 6" in by_cap[False]["message"] and by_cap[False]["severity"] == "info"
    spot = result["sweet_spot"]
    assert spot["cap_w"] != 300.0 or spot["tps"] == pytest.approx(33)


def test_confirm_rows_are_pooled_not_ignored(tmp_path: Path) -> None:
    # 300 W: a failed attempt, its reading, then two confirm-phase readings; 250 W: a retry
    path = tmp_path / "caps.csv"
    path.write_text(
        "cap_w,narr_tps,power_w,status,reason,window_s\n"
        "350,34,340,ok,dense,10\n300,,,failed,dense,10\n300,33,300,ok,retry,10\n"
        "250,29,245,ok,dense,10\n250,30,245,ok,retry,10\n"
        "300,32,300,ok,confirm,10\n300,34,300,ok,confirm,10\n"
    )
    result = analyze(load_curve(path), bootstrap=0).to_json()
    (pooled,) = [f for f in result["findings"] if f["code"] == "confirm_pooled"]
    assert pooled["severity"] == "info"
    assert "300 W appears in 4 rows" in pooled["message"]
    assert "lines 4, 7, 8 are pooled" in pooled["message"]
    assert "line(s) 3 were set aside" in pooled["message"]
    # the figures are the pooled ones, as the finding says
    row = next(c for c in result["caps"] if c["cap_w"] == 300.0)
    assert row["tps"] == pytest.approx(33.0) and row["n_measurements"] == 3
    # a plain repeat still says which row counts
    (dup,) = [f for f in result["findings"] if f["code"] == "duplicate_cap"]
    assert "250 W" in dup["message"] and "kept line 6" in dup["message"]


def test_suspect_caps_stay_out_of_the_sweet_spot(tmp_path: Path) -> None:
    path = tmp_path / "caps.csv"
    path.write_text(
        "cap_w,narr_tps,power_w,status,error\n350,34,340,ok,\n300,60,200,suspect,a stall\n"
        "250,30,245,ok,\n"
    )
    result = analyze(load_curve(path), bootstrap=0).to_json()
    assert result["sweet_spot"]["cap_w"] != 300.0
    (f,) = [f for f in result["findings"] if f["code"] == "suspect_caps"]
    assert "a stall" in f["message"]
    assert not any(f["code"] == "caps_not_measured" for f in result["findings"])


def test_a_cut_last_row_is_dropped_with_a_note(tmp_path: Path) -> None:
    # the run's own record says the 300 W row was being written when it died
    path = tmp_path / "caps.csv"
    path.write_text("cap_w,narr_tps,power_w\n350,34,340\n300,40,1")
    (tmp_path / "run.json").write_text(
        json.dumps({"status": "running", "caps_done": [350.0], "rows_written": {"caps.csv": 1}})
    )
    curve = load_curve(path)
    assert curve.caps["cap_w"].to_list() == [350.0]
    assert any("cut short" in n for n in curve.notes)


def test_a_last_line_without_its_line_end_is_kept_unless_the_run_says_it_was_cut(
    tmp_path: Path,
) -> None:
    text = "cap_w,narr_tps,power_w\n300,30,299\n280,29.5,279\n260,29.4,259"
    bare = tmp_path / "bare.csv"
    bare.write_text(text)  # an editor's file: no final newline, nothing cut
    result = analyze(load_curve(bare), bootstrap=0).to_json()
    assert [c["cap_w"] for c in result["caps"]] == [260.0, 280.0, 300.0]
    assert result["sweet_spot"]["cap_w"] == 260.0
    assert not any("cut short" in f["message"] for f in result["findings"])
    # a run that counted all three rows wrote them whole: the line end alone was lost
    run = tmp_path / "run"
    run.mkdir()
    (run / "caps.csv").write_text(text)
    meta = {"status": "running", "caps_done": [300.0, 280.0, 260.0], "rows_written": {}}
    meta["rows_written"] = {"caps.csv": 3}
    (run / "run.json").write_text(json.dumps(meta))
    assert load_curve(run).caps["cap_w"].to_list() == [260.0, 280.0, 300.0]
    # counted two: the third was being written when the run died
    meta.update(rows_written={"caps.csv": 2}, caps_done=[300.0, 280.0])
    (run / "run.json").write_text(json.dumps(meta))
    curve = load_curve(run)
    assert curve.caps["cap_w"].to_list() == [280.0, 300.0]
    assert any("cut short" in n for n in curve.notes)
    # a cap measured again (the confirm phase): caps_done lists it, the count still tells
    meta["caps_done"] = [300.0, 280.0, 260.0]
    (run / "run.json").write_text(json.dumps(meta))
    assert load_curve(run).caps["cap_w"].to_list() == [280.0, 300.0]
    # an older run without counts: a complete run keeps it, a crashed one drops an unlisted cap
    (run / "run.json").write_text(json.dumps({"status": "complete", "caps_done": [300.0]}))
    assert load_curve(run).caps.height == 3
    (run / "run.json").write_text(json.dumps({"status": "running", "caps_done": [300.0, 280.0]}))
    assert load_curve(run).caps.height == 2


def test_import_accepts_a_utf8_bom(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md = tmp_path / "table.md"
    md.write_bytes(
        b"\xef\xbb\xbf| Cap (W/card) | Narr TPS | Power (W) |\n|---|---|---|\n"
        b"| 300 | 30 | 290 |\n| 250 | 28 | 245 |\n"
    )
    out = tmp_path / "caps.csv"
    assert main(["import", str(md), "--out", str(out)]) == 0, capsys.readouterr().err
    assert out.read_text().count("\n") == 3


@dataclass(frozen=True)
class _Req:
    token_times_s: tuple[float, ...]
    t_end_s: float
    finish_reason: str = "length"
    ok: bool = True
    prompt_kind: str = "narr"


def _steady(n: int, dt: float, t0: float = 0.0) -> list[float]:
    return [t0 + i * dt for i in range(n)]


def test_a_long_gap_between_tokens_is_a_stall() -> None:
    times = tuple(_steady(10, 0.03) + _steady(300, 0.03, 0.3 + 45))
    reason = stall_reason([_Req(times, times[-1])])
    assert "stopped for" in reason and "a stall" in reason
    assert lost_time_s(times) > 35.0
    steady = tuple(_steady(300, 0.03))
    assert stall_reason([_Req(steady, steady[-1])]) == ""
    assert lost_time_s(steady) == pytest.approx(0.0, abs=0.05)


def test_work_in_bursts_is_its_rhythm_not_a_stall() -> None:
    # issue 44: a bursty load (--sim-world bursty-draw: bursts of 0.35 s and gaps of 0.15 s on
    # average, each within +-50%; four streams at 140 tokens/s together) streams in that rhythm.
    # Slices shorter than a cycle read the bursts' rate as the window's and its gaps as lost
    # (0.8-1.3 s of 7 s): a fifth of decode-concurrent's points came out "suspect: the server
    # paused". A window's own rhythm is the bursts and gaps together.
    for seed in range(5):
        rng, times, t = random.Random(seed), [], 0.0
        while t < 7.0:
            burst, gap = 0.35 * rng.uniform(0.5, 1.5), 0.15 * rng.uniform(0.5, 1.5)
            times += [t + i / 140.0 for i in range(int(burst * 140))]
            t += burst + gap
        assert not is_stall(lost_time_s([0.0, *times], 7.0), 7.0), seed
        # the same window with a 1.5 s pause in it is still a stall
        paused = [x for x in times if x < 3.0] + [x + 1.5 for x in times if x >= 3.0]
        assert is_stall(lost_time_s([0.0, *paused], 8.5), 8.5), seed


def test_a_stall_that_outlasts_the_request_is_seen_at_the_cut() -> None:
    times = tuple(_steady(200, 0.03))
    assert "stopped for" in stall_reason([_Req(times, 31.0, "deadline")])
    # a window cut mid-flow is not a stall
    assert stall_reason([_Req(times, times[-1] + 0.03, "deadline")]) == ""


def test_a_gap_made_up_by_a_burst_lost_nothing() -> None:
    # The client was not scheduled for 3 s (or read late): the tokens generated meanwhile
    # arrive in one burst afterwards. Nothing was lost, whatever the clock's scale.
    before = _steady(150, 0.03)
    burst = [before[-1] + 3.0 + 1e-4 * i for i in range(100)]
    after = _steady(150, 0.03, burst[-1] + 0.03)
    times = tuple(before + burst + after)
    assert lost_time_s(times) == pytest.approx(0.0, abs=0.2)
    assert stall_reason([_Req(times, times[-1])]) == ""
    # the same pause with no burst after it: the server stopped
    stalled = tuple(before + _steady(250, 0.03, before[-1] + 3.0))
    assert lost_time_s(stalled) == pytest.approx(3.0, abs=0.3)
    assert "a stall" in stall_reason([_Req(stalled, stalled[-1])])


def test_short_pauses_are_not_stalls_and_thresholds_are_run_seconds() -> None:
    # 0.5 s lost: under the 1 s floor
    times = tuple(_steady(100, 0.03) + _steady(100, 0.03, 3.0 + 0.5))
    assert stall_reason([_Req(times, times[-1])]) == ""
    # 1.5 s of a 60 s stream: under a tenth of it, barely moves the rate
    long = tuple(_steady(1000, 0.03) + _steady(1000, 0.03, 30.0 + 1.5))
    assert stall_reason([_Req(long, long[-1])]) == ""
    # the same stream on a clock 30 times faster (run seconds scaled alike) reads the same
    fast = tuple(t for t in times)
    assert stall_reason([_Req(fast, fast[-1])]) == stall_reason([_Req(times, times[-1])])


def test_narrative_and_code_rates_that_disagree() -> None:
    assert ratio_reason(30.0, 29.0, [0.97, 0.96, 0.98]) == ""
    assert "off" in ratio_reason(30.0, 6.0, [0.97, 0.96, 0.98])
    assert ratio_reason(30.0, 6.0, [0.97, 0.96]) == ""  # too few others to judge
    assert ratio_reason(30.0, 6.0, []) == ""


def test_sim_fault_specs() -> None:
    assert parse_fault("stall-once@300") == ServerFault("stall", 300.0, once=True)
    assert parse_fault("long-line-first@250").first_visit
    with pytest.raises(UsageError):
        parse_fault("stall@abc")


def _pid_entry(pid: int, start: str | None) -> JournalEntry:
    return JournalEntry(
        backend={"kind": "sim"},
        gpus=(JournalGpu("GPU-a", 0, "card", 350.0),),
        pid=pid,
        created_at="2026-01-01T00:00:00Z",
        pid_start=start,
    )


def test_journal_owner_is_a_live_process_with_its_start_time(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = process_start(child.pid)
        assert start is not None
        assert owner_alive(_pid_entry(child.pid, start))
        assert not owner_alive(_pid_entry(child.pid, str(int(start) + 1)))  # PID reused
        assert "another sweep (PID" in owner_refusal(_pid_entry(child.pid, start), tmp_path)
        assert "GPU 0" in owner_refusal(_pid_entry(child.pid, start), tmp_path)
    finally:
        child.kill()
        child.wait()
    assert not owner_alive(_pid_entry(child.pid, start))
    assert not owner_alive(_pid_entry(os.getpid(), None))  # a journal this process left earlier


def test_restore_takes_a_journal_only_from_an_owner_that_is_gone_or_unknowable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "sim.json"
    state.write_text(json.dumps({"GPU-sim-rtx3090-air-0": 300.0}))
    backend = {"kind": "sim", "profiles": ["rtx3090-air"], "sim_state": str(state), "seed": 0}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    journal = Journal(tmp_path / "state")

    def write(start: str | None) -> None:
        journal.write(
            JournalEntry(
                backend=backend,
                gpus=(JournalGpu("GPU-sim-rtx3090-air-0", 0, "card", 350.0),),
                pid=child.pid,
                created_at="2026-01-01T00:00:00Z",
                pid_start=start,
            )
        )

    def restore(*extra: str) -> tuple[int, str]:
        code = main(["restore", "--state-dir", str(journal.state_dir), *extra])
        return code, capsys.readouterr().err

    try:
        start = process_start(child.pid)
        write(start)  # alive: never taken, --force or not
        for extra in ((), ("--force",)):
            code, err = restore(*extra)
            assert code == 2 and "is still running on GPU 0" in err and journal.exists()
        assert owner_state(_pid_entry(child.pid, start)).alive is True
        write(None)  # an older journal: the PID runs, nothing tells it from a reused one
        code, err = restore()
        (line,) = err.strip().splitlines()
        assert code == 2 and "cannot tell whether" in line and "records no start time" in line
        assert "restore --force" in line and journal.exists()
        with monkeypatch.context() as m:  # a start time that cannot be read now: also a doubt
            m.setattr("powersweep.sweep.records.owner.process_start", lambda _pid: None)
            assert owner_state(_pid_entry(child.pid, start)).alive is None
        code, err = restore("--force")
        assert code == 0 and "restoring anyway (--force)" in err and "restored to 350 W" in err
        assert json.loads(state.read_text())["GPU-sim-rtx3090-air-0"] == 350.0
        assert not journal.exists()
        write(str(int(start or 0) + 1))  # the PID now belongs to a later process: gone
        code, err = restore()
        assert code == 0 and not journal.exists()
    finally:
        child.kill()
        child.wait()


def test_apply_never_sets_a_card_a_live_sweep_owns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "sim.json"
    state.write_text(json.dumps({"GPU-sim-rtx3090-air-0": 300.0}))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    journal = Journal(tmp_path / "state")
    try:
        journal.write(_pid_entry(child.pid, process_start(child.pid)))
        sim = ["--simulate", "rtx3090-air", "--sim-state", str(state)]
        for extra in ((), ("--force",)):
            code = main(
                ["apply", "--cap", "250", *sim, "--state-dir", str(journal.state_dir), *extra]
            )
            (line,) = capsys.readouterr().err.strip().splitlines()
            assert code == 2 and f"a sweep is running (PID {child.pid})" in line
            assert json.loads(state.read_text())["GPU-sim-rtx3090-air-0"] == 300.0
    finally:
        child.kill()
        child.wait()
    # its owner gone, --force applies over the journal as before
    code = main(["apply", "--cap", "250", *sim, "--state-dir", str(journal.state_dir), "--force"])
    assert code == 0, capsys.readouterr().err
    assert json.loads(state.read_text())["GPU-sim-rtx3090-air-0"] == 250.0


def test_a_claimed_journal_that_is_removed_or_replaced_is_lost_and_left_alone(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    journal.ensure_owned()  # nothing claimed yet: nothing to check
    mine = _pid_entry(os.getpid(), process_start(os.getpid()))
    journal.claim(mine)
    journal.ensure_owned()
    journal.record_outcome({"status": "complete", "restored": []})
    journal.ensure_owned()  # its own outcome is still its own journal
    journal.path.unlink()
    with pytest.raises(JournalLost, match="was removed while this sweep ran"):
        journal.ensure_owned()
    other = _pid_entry(4242, "7")
    Journal(tmp_path).write(other)
    with pytest.raises(JournalLost, match=r"was replaced .* PID 4242"):
        journal.ensure_owned()
    with pytest.raises(PowersweepError, match="another owner"):
        journal.record_outcome({"status": "complete"})
    journal.remove()  # not ours: left where it is
    assert Journal(tmp_path).read() == other


def test_journal_keeps_pid_start_and_outcome(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.write(_pid_entry(4242, "123"))
    j.record_outcome({"status": "complete", "restored": [{"ok": True}]})
    data = json.loads(j.path.read_text())
    assert data["pid_start"] == "123" and data["outcome"]["status"] == "complete"
    read = j.read()
    assert read is not None and read.outcome == data["outcome"]


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        (["ok"] * 10, "complete"),
        (["ok"] * 9 + ["failed"], "complete"),
        (["ok", "ok", "ok", "rejected", "rejected"], "complete"),
        (["ok"], "complete"),  # observe-only: one cap planned
        (["ok", "ok", "suspect"], "partial"),
        (["ok", "ok", "failed", "failed", "suspect"], "partial"),
        (["failed", "failed"], "failed"),
        (["rejected"], "failed"),
        ([], "failed"),
    ],
)
def test_a_run_is_complete_only_when_enough_caps_answer(statuses: list[str], expected: str) -> None:
    status, reason = judge(statuses)
    assert status == expected
    assert (reason is None) == (expected == "complete")


def test_fault_log_counts_what_the_client_recognised() -> None:
    @dataclass(frozen=True)
    class R:
        ok: bool
        finish_reason: str | None
        prompt_kind: str = "narr"
        chunk_tokens: int = 5
        warnings: tuple[str, ...] = ()
        error: str = ""

    log = FaultLog()
    log.requests(
        [
            R(True, "deadline", warnings=("ignored_max_tokens",)),
            R(True, "deadline", prompt_kind="warmup", warnings=("ignored_max_tokens",)),
            R(True, "length", warnings=("usage_untrusted",)),
            R(False, None, error="HTTP 503: loading (still busy after 6 retries)"),
        ]
    )
    kinds = {f["kind"]: f["count"] for f in log.to_list()}
    assert kinds == {"cut_at_deadline": 1, "usage_untrusted": 1, "server_busy": 1}
    # a request cut at its window's end within its max_tokens is the time bound at work
    routine = FaultLog()
    routine.requests([R(True, "deadline")])
    assert routine.to_list() == []


def test_failed_requests_reach_the_faults_finding_with_their_cause_in_words(
    tmp_path: Path,
) -> None:
    @dataclass(frozen=True)
    class R:
        ok: bool
        error: str
        finish_reason: str | None = None
        prompt_kind: str = "narr"
        chunk_tokens: int = 0
        warnings: tuple[str, ...] = ()

    log = FaultLog()
    log.requests(
        [
            R(False, "connection reset by the server while reading the answer, after 3 tokens"),
            R(False, "read timeout: server sent nothing for 60 s"),
            R(False, "ReadError: "),
            R(False, "HTTP 503: loading (still busy after 6 retries)"),  # server_busy: not again
            R(True, ""),
        ]
    )
    (failed,) = [f for f in log.to_list() if f["kind"] == "request_failed"]
    assert failed == {
        "kind": "request_failed",
        "count": 3,
        "examples": [
            "connection reset by the server (x2)",
            "read timeout (the server went silent) (x1)",
        ],
    }
    run = tmp_path / "run"
    run.mkdir()
    (run / "caps.csv").write_text("cap_w,narr_tps,power_w\n300,30,299\n280,29,279\n")
    meta = {"schema_version": 1, "status": "complete", "faults": log.to_list()}
    (run / "run.json").write_text(json.dumps(meta))
    (finding,) = [
        f
        for f in analyze(load_curve(run), bootstrap=0).to_json()["findings"]
        if f["code"] == "run_faults"
    ]
    assert (
        "3 request(s) failed: connection reset by the server (x2); read timeout"
        in finding["message"]
    )
    # a run of an older version: run.json has no request_failed, requests.csv keeps the errors
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "status": "complete"}))
    (run / "requests.csv").write_text(
        "cap_w,prompt_kind,ok,error\n300,narr,false,ReadError: \n300,code,true,\n"
        "280,narr,false,ReadError: \n280,narr,false,HTTP 500: boom\n280,code,false,HTTP 503: busy\n"
    )
    (finding,) = [
        f
        for f in analyze(load_curve(run), bootstrap=0).to_json()["findings"]
        if f["code"] == "run_faults"
    ]
    assert finding["message"] == (
        "the run met faults: 3 request(s) failed: connection reset by the server (x2); "
        "HTTP 500 from the server (x1)"
    )


def test_rows_without_a_finite_cap_are_noted_blank_lines_are_not(tmp_path: Path) -> None:
    path = tmp_path / "caps.csv"
    path.write_text("cap_w,narr_tps,power_w\nnan,30,290\ninf,28,245\n\n300,30,290\n250,28,245\n")
    curve = load_curve(path)
    assert curve.caps["cap_w"].to_list() == [250.0, 300.0]
    (note,) = curve.notes
    assert "2 row(s) without a finite cap_w" in note and "line 2, 3" in note


def test_claim_refuses_a_live_owner_and_replaces_a_dead_one(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    mine = _pid_entry(os.getpid(), process_start(os.getpid()))
    j.claim(mine)  # none there: created
    assert json.loads(j.path.read_text())["pid"] == os.getpid()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        j.write(_pid_entry(child.pid, process_start(child.pid)))
        with pytest.raises(UsageError, match=f"another sweep \\(PID {child.pid}\\)"):
            j.claim(mine)
        assert json.loads(j.path.read_text())["pid"] == child.pid  # left alone
    finally:
        child.kill()
        child.wait()
    j.claim(mine)  # its owner is gone: replaced
    assert json.loads(j.path.read_text())["pid"] == os.getpid()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".journal-")]


def test_a_cap_without_a_figure_says_why_truthfully() -> None:
    from powersweep.sweep.sampling.measure import cap_row

    @dataclass(frozen=True)
    class R:
        ok: bool
        prompt_kind: str = "narr"
        completion_tokens: int | None = 1
        prompt_tokens: int | None = 5
        t_start_s: float = 0.0
        t_first_token_s: float = 1.0
        t_last_token_s: float = 1.0
        error: str = ""

    def error_of(requests: list[R]) -> str:
        row = cap_row(
            cap_w=300.0,
            load_mode="decode-single",
            rows=[],
            requests=requests,
            n_gpus=1,
            settle_s=0.0,
            window_s=1.0,
        )
        assert row["status"] == "failed"
        return str(row["error"])

    assert "2 request(s) completed but none gave a rate" in error_of([R(True), R(True)])
    assert error_of([]) == "no request was sent"


def test_a_row_added_by_hand_to_a_finished_run_is_kept(tmp_path: Path) -> None:
    (tmp_path / "caps.csv").write_text(
        "cap_w,narr_tps,power_w\n300,30,299\n280,29.5,279\n260,29.4,259"
    )
    meta = {"status": "complete", "caps_done": [300.0, 280.0], "rows_written": {"caps.csv": 2}}
    (tmp_path / "run.json").write_text(json.dumps(meta))
    curve = load_curve(tmp_path)
    assert curve.caps["cap_w"].to_list() == [260.0, 280.0, 300.0]
    assert not any("cut short" in n for n in curve.notes)


def test_rows_no_card_can_show_are_named_and_never_picked(tmp_path: Path) -> None:
    # a row cut mid-write to a 2 W draw, a TPS of 1e308, a draw far over its cap: each would be
    # the sweet spot by its TPS/W
    path = tmp_path / "caps.csv"
    path.write_text(
        "cap_w,narr_tps,power_w\n200,20,199\n220,22,219\n240,23.5,2\n260,25,259\n"
        "280,26,279\n300,1e308,299\n320,27,500\n340,27.5,339\n"
    )
    result = analyze(load_curve(path)).to_json()
    rows = {r["cap_w"]: r for r in result["caps"]}
    # the draw over its cap is no reading of a card that holds its limit; the 2 W draw and the
    # 1e308 TPS stand apart from both neighbours, which the curve's physics forbids
    for cap, status, why in (
        (240.0, "outlier", "draw (W) 2 at 240 W stands below its neighbours"),
        (300.0, "outlier", "narr_tps 1e+308 at 300 W stands above its neighbours"),
        (320.0, "implausible", "over its 320.0 W cap beyond the sensor's 5% tolerance"),
    ):
        assert rows[cap]["status"] == status and why in rows[cap]["error"], cap
    assert result["sweet_spot"]["cap_w"] not in (240.0, 300.0, 320.0)
    (found,) = [f for f in result["findings"] if f["code"] == "implausible_rows"]
    assert "1 cap(s) implausible" in found["message"]
    (found,) = [f for f in result["findings"] if f["code"] == "outlier_caps"]
    assert "2 cap(s) outlier, kept in the table and left out of every pick" in found["message"]


def test_the_fleets_one_scan_sets_aside_the_same_rows(tmp_path: Path) -> None:
    from powersweep.analysis.fleet_load import load_curves

    good = "cap_w,narr_tps,power_w,status\n200,20,199,ok\n220,22,219,ok\n240,23.5,239,ok\n"
    bad = "cap_w,narr_tps,power_w,status\n200,20,199,ok\n220,22,219,ok\n240,23.5,2,ok\n"
    for name, text in (("a", good), ("b", bad)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "caps.csv").write_text(text)
    curves, failed = load_curves([tmp_path / "a", tmp_path / "b"])
    assert not failed
    statuses = {c.out_dir.name: c.caps["status"].to_list() for c in curves}
    # each run judged by its own physics: run a keeps every row, run b loses its 2 W row
    assert statuses == {"a": ["ok", "ok", "ok"], "b": ["ok", "ok", "outlier"]}
