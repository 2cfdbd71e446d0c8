"""powersweep.cli._common: what every command shares. One-line warnings and notes on stderr, the
root check, ``--format`` parsing, run labels, the PID probe, and handing what a sudo command
wrote (the files and the folders it created) to the user who typed sudo."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from powersweep.cli._common import (
    Handover,
    first_missing,
    formats,
    info,
    is_root,
    one_line,
    pid_alive,
    run_label,
    warn,
)
from powersweep.errors import UsageError
from powersweep.sweep.records import ownership
from powersweep.sweep.records.ownership import Owner


def test_warn_and_info_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    warn("the cap did not bind")
    info("run directory: x")
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "warning: the cap did not bind\nrun directory: x\n"


def test_root_is_effective_uid_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert is_root()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert not is_root()


def test_one_line_folds_all_white_space() -> None:
    assert one_line("  cannot write\n\tthe  file \r\n") == "cannot write the file"


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("png", ("png",)), ("SVG", ("svg",)), (" png , svg ", ("png", "svg")), ("svg,", ("svg",))],
)
def test_formats_are_png_and_or_svg(text: str, parsed: tuple[str, ...]) -> None:
    assert formats(text) == parsed


@pytest.mark.parametrize("text", ["", ",", "jpg", "png,pdf"])
def test_other_formats_are_a_usage_error_quoting_the_value(text: str) -> None:
    with pytest.raises(UsageError) as refused:
        formats(text)
    assert str(refused.value) == f"--format takes png and/or svg, not {text!r}"


def test_a_runs_label_is_its_directory_name() -> None:
    assert run_label(Path("runs/2025-3090/caps.csv")) == "2025-3090"
    assert run_label(Path("runs/2025-3090")) == "2025-3090"
    assert run_label(Path("community.csv")) == "community.csv"


def test_pid_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(0) and not pid_alive(-5)

    def kill(error: type[OSError]) -> Any:
        def raise_(pid: int, sig: int) -> None:
            raise error()

        return raise_

    monkeypatch.setattr(os, "kill", kill(ProcessLookupError))
    assert not pid_alive(12345)
    monkeypatch.setattr(os, "kill", kill(PermissionError))
    assert pid_alive(12345)  # another user's process: it exists
    monkeypatch.setattr(os, "kill", kill(OSError))
    assert not pid_alive(12345)


def test_first_missing_is_the_topmost_folder_writing_creates(tmp_path: Path) -> None:
    assert first_missing(tmp_path) is None
    assert first_missing(tmp_path / "a" / "b" / "c") == tmp_path / "a"
    (tmp_path / "a").mkdir()
    assert first_missing(tmp_path / "a" / "b" / "c") == tmp_path / "a" / "b"


def _captured_hand_over(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[Path], Any]]:
    calls: list[tuple[list[Path], Any]] = []
    monkeypatch.setattr(
        ownership, "hand_over", lambda paths, owner, warn: calls.append((paths, owner)) or 0
    )
    return calls


def test_under_sudo_the_created_folders_and_written_files_are_handed_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = _captured_hand_over(monkeypatch)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("SUDO_UID", "1000")
    monkeypatch.setenv("SUDO_GID", "1001")
    handover = Handover()
    handover.expect(tmp_path / "out" / "charts", tmp_path / "out" / "more", tmp_path)
    (tmp_path / "out").mkdir()
    written = tmp_path / "out" / "caps.csv"
    handover.hand([written])
    assert calls == [([tmp_path / "out", written], Owner(1000, 1001))]


def test_without_root_nothing_is_handed_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = _captured_hand_over(monkeypatch)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    handover = Handover()
    handover.expect(tmp_path / "new")
    handover.hand([tmp_path / "new" / "x"])
    assert calls == []
