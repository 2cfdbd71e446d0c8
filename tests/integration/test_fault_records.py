"""Records under faults: a cut caps.csv row, a final run.json that cannot be written, a signal
while the report is written."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from powersweep.cli import main
from powersweep.errors import PowersweepError
from powersweep.sweep.records.writer import RunWriter
from tests.integration.conftest import only_run_dir, powersweep, read_csv, read_json
from tests.integration.test_faults import BASE, USER_LIMIT_W, UUID, Rig


def test_a_cut_last_row_is_dropped_and_resume_measures_its_cap(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    # no confirm phase: the last row must be the 250 W cap's
    proc, _ = rig.run("--caps", "350,300,250", "--no-confirm")
    assert proc.returncode == 0, proc.stderr
    run = only_run_dir(rig.out)
    # as if killed while writing the 250 W row (before the first cap was read again): its power
    # cell cut short, run.json not updated
    text = (run / "caps.csv").read_text()
    text, reread = text.rstrip("\n").rsplit("\n", 1)
    assert ",reread," in reread
    head, last = text.rsplit("\n", 1)
    cells = last.split(",")
    cut = ",".join(cells[:4]) + "," + cells[4][:1]
    (run / "caps.csv").write_text(head + "\n" + cut)
    meta = read_json(run / "run.json")
    meta.update(status="interrupted", caps_done=[350.0, 300.0])
    (run / "run.json").write_text(json.dumps(meta))

    analyzed = powersweep("analyze", str(run))
    assert analyzed.returncode == 0, analyzed.stderr
    analysis = read_json(run / "analysis.json")
    assert [c["cap_w"] for c in analysis["caps"]] == [300.0, 350.0]
    assert any("cut short" in f["message"] for f in analysis["findings"])

    resumed = powersweep("--resume", str(run), "--quiet", "--no-charts", env=rig.env)
    assert resumed.returncode == 0, resumed.stderr
    assert "dropped a half-written last row" in resumed.stderr
    caps = read_csv(run / "caps.csv")
    # the resumed run reads its first point (250 W) again at its end
    assert [(float(c["cap_w"]), c["reason"]) for c in caps] == [
        (350.0, "dense"),
        (300.0, "dense"),
        (250.0, "dense"),
        (250.0, "reread"),
    ]
    assert all(c["status"] == "ok" and float(c["power_w"]) > 100 for c in caps)
    assert rig.limit_w == USER_LIMIT_W


def _sweep_in_process(rig: Rig, *extra: str) -> int:
    return main([*rig.args("--caps", "350,300", *extra)])


def test_final_write_failure_still_reports_the_restore_and_the_journal_tells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rig = Rig(tmp_path)
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(rig.state_dir))
    real = RunWriter.write_run_json

    def failing(self: RunWriter, data: Any) -> None:
        if data.get("status") not in (None, "running"):
            raise PowersweepError(f"cannot write {self.path / 'run.json'}: No space left on device")
        real(self, data)

    monkeypatch.setattr(RunWriter, "write_run_json", failing)
    code = _sweep_in_process(rig)
    err = capsys.readouterr().err
    assert code == 1
    assert "GPU 0: power limit restored to 350 W" in err
    assert "No space left on device" in err.strip().splitlines()[-1]
    assert rig.limit_w == USER_LIMIT_W
    journal = json.loads(rig.journal.read_text())
    outcome = journal["outcome"]
    assert outcome["status"] == "complete" and outcome["restored"][0]["ok"] is True
    assert "No space left" in outcome["record_error"]

    monkeypatch.setattr(RunWriter, "write_run_json", real)
    code = _sweep_in_process(rig)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "restored its limits, but could not record it" in err
    assert not rig.journal.exists() and rig.limit_w == USER_LIMIT_W


def test_a_signal_while_the_report_is_written_ends_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rig = Rig(tmp_path)
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(rig.state_dir))
    import powersweep.report

    def interrupted(*_a: Any, **_k: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        raise AssertionError("the signal did not arrive")

    monkeypatch.setattr(powersweep.report, "build_report", interrupted)
    t0 = time.monotonic()
    code = _sweep_in_process(rig)
    err = capsys.readouterr().err
    assert time.monotonic() - t0 < 60
    assert code == 128 + signal.SIGTERM
    assert "GPU 0: power limit restored to 350 W" in err
    assert "while writing the report" in err and "powersweep analyze" in err
    assert "Traceback" not in err
    assert rig.limit_w == USER_LIMIT_W
    meta = read_json(only_run_dir(rig.out) / "run.json")
    assert meta["status"] == "complete"


def test_chart_files_are_renamed_into_place(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    args = [a for a in rig.args("--caps", "350,300") if a != "--no-charts"]
    proc = powersweep(*args, env=rig.env)
    assert proc.returncode == 0, proc.stderr
    charts = only_run_dir(rig.out) / "charts"
    names = [p.name for p in charts.iterdir()]
    assert names and not [n for n in names if n.startswith(".")], names
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in charts.glob("*.png"))


assert BASE and UUID  # shared with test_faults


def test_resume_retries_a_cap_that_failed_before_and_judges_every_cap(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    # no confirm phase: its re-measured rows (when noise ties caps) would follow 250 W's, and
    # the resumed run (which keeps the run's options) would add more
    proc, _ = rig.run("--caps", "350,300,250", "--no-confirm")
    assert proc.returncode == 0, proc.stderr
    run = only_run_dir(rig.out)
    # as if 250 W had failed and the sweep was interrupted before 200 W (and before its first cap
    # was read again)
    rows = [r for r in read_csv(run / "caps.csv") if r["reason"] != "reread"]
    header = list(rows[0])
    rows[-1].update(narr_tps="", code_tps="", tps_per_w="", status="failed", error="boom")
    lines = [",".join(header)] + [",".join(r[c] for c in header) for r in rows]
    (run / "caps.csv").write_text("\n".join(lines) + "\n")
    meta = read_json(run / "run.json")
    meta.update(status="interrupted", caps_planned=[350.0, 300.0, 250.0, 200.0])
    (run / "run.json").write_text(json.dumps(meta))

    resumed = powersweep("--resume", str(run), "--quiet", "--no-charts", env=rig.env)
    assert resumed.returncode == 0, resumed.stderr
    caps = read_csv(run / "caps.csv")
    assert [(float(c["cap_w"]), c["status"]) for c in caps] == [
        (350.0, "ok"),
        (300.0, "ok"),
        (250.0, "failed"),
        (200.0, "ok"),
        (250.0, "ok"),
        (200.0, "ok"),
    ]
    # the retry, then a point of the resumed run read again
    assert [c["reason"] for c in caps[-2:]] == ["retry", "reread"]
    meta = read_json(run / "run.json")
    assert meta["status"] == "complete"
    assert {f["kind"] for f in meta["faults"]} == {"cap_retried"}
    assert rig.limit_w == USER_LIMIT_W
