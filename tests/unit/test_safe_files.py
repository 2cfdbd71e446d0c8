"""No file written through a link (``powersweep/safe_files.py``, issue 46): the helpers, then every
kind of file the tool writes, each with a link planted at its name pointing at a victim file."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from powersweep.analysis.fleet_result_types import FleetReport
from powersweep.analysis.fleet_summary import write_fleet_outputs
from powersweep.analysis.load import write_caps_csv
from powersweep.analysis.result_files import write_analysis
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.cli import main
from powersweep.errors import UsageError
from powersweep.safe_files import append, private_dir, read_bytes, write_atomic
from powersweep.sim.limit_store import LimitStore
from powersweep.sweep.records.cardlock import CardHolder, CardLocks
from powersweep.sweep.records.journal import Journal, JournalEntry, JournalGpu
from powersweep.sweep.records.writer import RunWriter
from powersweep.sweep.settings.boot_unit import UNIT_NAME, install_unit

VICTIM_TEXT = "the victim's own content\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of someone else's that a planted link points at."""
    path = tmp_path / "victim"
    path.write_text(VICTIM_TEXT)
    return path


def _plant(link: Path, victim: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim)
    return link


def _replaced(link: Path, victim: Path) -> None:
    """An atomic write replaced the link itself: a plain file now, the victim untouched."""
    assert not link.is_symlink() and link.is_file()
    assert victim.read_text() == VICTIM_TEXT
    assert not [p for p in link.parent.iterdir() if p.name.endswith(".tmp")]


def _refused(exc: pytest.ExceptionInfo[UsageError], link: Path, victim: Path) -> None:
    line = str(exc.value)
    assert "\n" not in line and str(link) in line and "symbolic link" in line
    assert victim.read_text() == VICTIM_TEXT


# --- the helpers ---


def test_an_append_through_a_link_is_refused_in_one_line(tmp_path: Path, victim: Path) -> None:
    link = _plant(tmp_path / "rows.csv", victim)
    with pytest.raises(UsageError) as exc:
        append(link, b"a,b\r\n")
    _refused(exc, link, victim)


def test_an_append_to_a_hard_link_of_another_file_is_refused(tmp_path: Path, victim: Path) -> None:
    os.link(victim, tmp_path / "rows.csv")
    with pytest.raises(UsageError, match="not a plain file of its own"):
        append(tmp_path / "rows.csv", b"x")
    assert victim.read_text() == VICTIM_TEXT


def test_an_atomic_write_replaces_a_link_and_keeps_its_mode_and_a_dangling_one(
    tmp_path: Path, victim: Path
) -> None:
    link = _plant(tmp_path / "out.json", victim)
    write_atomic(link, "{}\n", mode=0o640)
    _replaced(link, victim)
    assert link.read_text() == "{}\n" and stat.S_IMODE(link.stat().st_mode) == 0o640
    dangling = _plant(tmp_path / "gone", tmp_path / "nowhere")
    write_atomic(dangling, b"x")
    assert not (tmp_path / "nowhere").exists() and dangling.read_bytes() == b"x"


def test_an_exclusive_write_does_not_take_the_place_of_a_link(tmp_path: Path, victim: Path) -> None:
    link = _plant(tmp_path / "journal.json", victim)
    with pytest.raises(FileExistsError):
        write_atomic(link, "new", exclusive=True)
    assert link.is_symlink() and victim.read_text() == VICTIM_TEXT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.json", "victim"]


def test_a_read_through_a_link_is_refused(tmp_path: Path, victim: Path) -> None:
    with pytest.raises(UsageError, match="symbolic link"):
        read_bytes(_plant(tmp_path / "journal.json", victim))


def test_a_private_dir_is_made_0700_and_a_link_or_a_shared_one_is_refused(
    tmp_path: Path,
) -> None:
    made = private_dir(tmp_path / "a" / "locks", fix="set X")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    private_dir(made, fix="set X")  # once more: it is ours
    (tmp_path / "link").symlink_to(made)
    with pytest.raises(UsageError, match=r"link.*is a symbolic link to .*locks \(set X\)"):
        private_dir(tmp_path / "link", fix="set X")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UsageError, match=r"shared: it can be written by others \(mode 0777"):
        private_dir(shared, fix="set X")
    assert private_dir(tmp_path / "missing", fix="x", create=False) == tmp_path / "missing"
    assert not (tmp_path / "missing").exists()


def _owned_by_another(path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Make ``path`` another user's as this process sees it; returns that user's uid."""
    path.mkdir(mode=0o700, exist_ok=True)
    if os.geteuid() == 0:  # root's own directories are accepted: give it away
        os.chown(path, 4322, 4322)
        owner = 4322
    else:
        owner = os.geteuid()
    monkeypatch.setattr("powersweep.safe_files.os.geteuid", lambda: 4321)
    return owner


def test_a_directory_of_another_user_is_refused_naming_it_and_its_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = _owned_by_another(tmp_path / "theirs", monkeypatch)
    with pytest.raises(UsageError) as exc:
        private_dir(tmp_path / "theirs", fix="set X")
    line = str(exc.value)
    assert f"refusing to use {tmp_path / 'theirs'}: it belongs to" in line
    assert f"uid {owner}" in line and "not to uid 4321" in line and line.endswith("(set X)")


# --- every file the tool writes ---


def _locks_in(lock_dir: Path) -> CardLocks:
    return CardLocks(lock_dir, CardHolder(os.getpid(), "sweep", "/state", "2026-01-01T00:00:00Z"))


def test_a_card_lock_planted_as_a_link_is_refused_and_its_target_kept(
    tmp_path: Path, victim: Path
) -> None:
    lock_dir = private_dir(tmp_path / "locks", fix="")
    name = hashlib.sha256(b"gpu:GPU-a").hexdigest()[:24] + ".lock"
    link = _plant(lock_dir / name, victim)
    locks = _locks_in(lock_dir)
    with pytest.raises(UsageError) as exc:
        locks.take([("gpu:GPU-a", "GPU 0")])
    _refused(exc, link, victim)
    assert locks.held == frozenset()


def test_a_lock_directory_shared_or_of_another_user_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "powersweep-1000"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(UsageError, match=r"can be written by others.*POWERSWEEP_LOCK_DIR"):
        _locks_in(shared).take([("gpu:GPU-a", "GPU 0")])
    assert list(shared.iterdir()) == []
    theirs = tmp_path / "theirs"
    owner = _owned_by_another(theirs, monkeypatch)
    with pytest.raises(UsageError, match=rf"{theirs}: it belongs to .*uid {owner}"):
        _locks_in(theirs).take([("gpu:GPU-a", "GPU 0")])


def _own_entry() -> JournalEntry:
    return JournalEntry(
        backend={"kind": "nvml"},
        gpus=(JournalGpu("GPU-a", 0, "card 0", 300.0),),
        pid=os.getpid(),
        created_at="2026-01-01T00:00:00Z",
        run_dir="/runs/x",
    )


def test_the_journal_replaces_a_planted_link_and_a_claim_refuses_one(
    tmp_path: Path, victim: Path
) -> None:
    journal = Journal(private_dir(tmp_path / "state", fix=""))
    link = _plant(journal.path, victim)
    with pytest.raises(UsageError) as exc:
        journal.claim(_own_entry())  # reads what is there first: a link is no journal
    _refused(exc, link, victim)
    journal.write(_own_entry())
    _replaced(link, victim)
    assert journal.read() == _own_entry()


def test_a_state_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "state"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UsageError, match=r"written by others.*--state-dir; no power limit"):
        Journal(shared).write(_own_entry())
    with pytest.raises(UsageError, match="written by others"):
        Journal(shared).read()  # a journal decides what is written to the cards
    assert list(shared.iterdir()) == []


def test_run_directory_csvs_refuse_a_link_and_run_json_replaces_one(
    tmp_path: Path, victim: Path
) -> None:
    run = RunWriter(tmp_path / "out", ["NVIDIA H100"], "decode-single", initial_meta={}).path
    (run / "samples.csv").unlink()
    link = _plant(run / "samples.csv", victim)
    with pytest.raises(UsageError) as exc:
        RunWriter.reopen(run)  # a resumed run appends to its CSVs
    _refused(exc, link, victim)
    link.unlink()
    writer = RunWriter.reopen(run)
    (run / "run.json").unlink()
    run_json = _plant(run / "run.json", victim)
    writer.write_run_json({"status": "complete"})
    _replaced(run_json, victim)
    caps = run / "caps.csv"
    caps.unlink()
    _plant(caps, victim)
    with pytest.raises(UsageError, match="symbolic link"):
        writer.append_cap({"cap_w": 300})
    assert victim.read_text() == VICTIM_TEXT


def test_a_run_directory_is_not_renamed_onto_a_planted_link(tmp_path: Path) -> None:
    out = tmp_path / "out"
    when = datetime(2026, 1, 1, tzinfo=UTC)
    first = RunWriter(out, ["NVIDIA H100"], "decode-single", now=when).path
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _plant(first.with_name(first.name + "-2"), elsewhere)
    second = RunWriter(out, ["NVIDIA H100"], "decode-single", now=when).path
    assert second.name == first.name + "-3" and list(elsewhere.iterdir()) == []


def test_analysis_outputs_replace_a_planted_link(tmp_path: Path, victim: Path) -> None:
    link = _plant(tmp_path / "run" / "summary.md", victim)
    write_analysis(PowerAnalysis.from_json({"schema_version": 1}), "# s\n", tmp_path / "run")
    _replaced(link, victim)
    assert link.read_text() == "# s\n"


def test_fleet_outputs_replace_a_planted_link(tmp_path: Path, victim: Path) -> None:
    link = _plant(tmp_path / "fleet" / "fleet.json", victim)
    fleet = FleetReport.from_json({"schema_version": 1, "groups": []})
    write_fleet_outputs(fleet, tmp_path / "fleet")
    _replaced(link, victim)
    assert json.loads(link.read_text())["groups"] == []


def test_an_imported_caps_csv_replaces_a_planted_link(tmp_path: Path, victim: Path) -> None:
    link = _plant(tmp_path / "imported" / "caps.csv", victim)
    write_caps_csv(pl.DataFrame({"cap_w": [300.0]}), link)
    _replaced(link, victim)
    assert link.read_text().startswith("cap_w")


def test_a_chart_replaces_a_planted_link(tmp_path: Path, victim: Path) -> None:
    from matplotlib.figure import Figure

    from powersweep.plots._style import save_figure

    link = _plant(tmp_path / "charts" / "curve.svg", victim)
    save_figure(Figure(), tmp_path / "charts" / "curve", ["svg"])
    _replaced(link, victim)
    assert "<svg" in link.read_text()


def test_the_boot_unit_replaces_a_planted_link(tmp_path: Path, victim: Path) -> None:
    link = _plant(tmp_path / UNIT_NAME, victim)
    install_unit("[Unit]\n", tmp_path)
    _replaced(link, victim)
    assert stat.S_IMODE(link.stat().st_mode) == 0o644


def test_the_sim_state_replaces_a_planted_link(tmp_path: Path, victim: Path) -> None:
    link = _plant(tmp_path / "sim.json", victim)
    LimitStore(link).put("GPU-a", 250.0)
    _replaced(link, victim)
    assert LimitStore(link).get("GPU-a") == 250.0


def test_the_fleet_apply_record_replaces_a_planted_link(tmp_path: Path, victim: Path) -> None:
    from powersweep.cli.fleet_apply import _write_record

    link = _plant(tmp_path / "record.json", victim)
    _write_record(link, "node1", tmp_path / "fleet.json", True, [])
    _replaced(link, victim)
    assert json.loads(link.read_text())["node"] == "node1"


def test_the_command_line_says_error_and_exits_2_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "state"
    shared.mkdir()
    shared.chmod(0o777)
    code = main(["restore", "--state-dir", str(shared)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: refusing to use {shared}: it can be written")
    assert "Traceback" not in err and err.count("\n") == 1
