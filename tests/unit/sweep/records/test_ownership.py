"""Files a sudo run writes go to the user who typed ``sudo`` (``sweep/records/ownership.py``):
who that is, and handing over files and trees without following links."""

from __future__ import annotations

from pathlib import Path

import pytest

from powersweep.sweep.records.ownership import Owner, hand_over, invoking_user


@pytest.mark.parametrize(
    ("env", "owner"),
    [
        ({"SUDO_UID": "1000", "SUDO_GID": "1001"}, Owner(1000, 1001)),
        ({"SUDO_UID": "0", "SUDO_GID": "0"}, Owner(0, 0)),
        ({}, None),
        ({"SUDO_UID": "1000"}, None),
        ({"SUDO_UID": "1000", "SUDO_GID": ""}, None),
        ({"SUDO_UID": "-1", "SUDO_GID": "1000"}, None),
        ({"SUDO_UID": "alice", "SUDO_GID": "1000"}, None),
        ({"SUDO_UID": " 1000", "SUDO_GID": "1000"}, None),
    ],
)
def test_the_invoking_user_only_from_well_formed_sudo_ids(
    env: dict[str, str], owner: Owner | None
) -> None:
    assert invoking_user(env) == owner


def test_the_invoking_user_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUDO_UID", "501")
    monkeypatch.setenv("SUDO_GID", "20")
    assert invoking_user() == Owner(501, 20)


class _Chown:
    def __init__(self, fail_at: int | None = None) -> None:
        self.calls: list[tuple[str, int, int]] = []
        self.fail_at = fail_at

    def __call__(self, path: str, uid: int, gid: int) -> None:
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise PermissionError(1, "Operation not permitted")
        self.calls.append((path, uid, gid))


def test_nobody_to_hand_to_changes_nothing(tmp_path: Path) -> None:
    chown = _Chown()
    assert hand_over([tmp_path], None, chown=chown) == 0
    assert chown.calls == []


def test_a_tree_is_handed_over_whole_and_missing_paths_are_skipped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "charts").mkdir(parents=True)
    (run / "caps.csv").write_text("x")
    (run / "charts" / "a.png").write_bytes(b"")
    lone = tmp_path / "summary.md"
    lone.write_text("x")
    chown = _Chown()
    changed = hand_over([run, tmp_path / "missing", lone], Owner(1000, 1000), chown=chown)
    assert changed == 5
    assert sorted(Path(p).relative_to(tmp_path).as_posix() for p, _, _ in chown.calls) == [
        "run",
        "run/caps.csv",
        "run/charts",
        "run/charts/a.png",
        "summary.md",
    ]
    assert {(u, g) for _, u, g in chown.calls} == {(1000, 1000)}


def test_a_linked_directory_is_handed_over_as_the_link_only(tmp_path: Path) -> None:
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    (elsewhere / "shadow").write_text("x")
    link = tmp_path / "run-link"
    link.symlink_to(elsewhere, target_is_directory=True)
    chown = _Chown()
    assert hand_over([link], Owner(1000, 1000), chown=chown) == 1
    assert chown.calls == [(str(link), 1000, 1000)]


def test_a_failure_is_one_warning_and_stops_the_hand_over(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("a", "b", "c"):
        (run / name).write_text("x")
    chown = _Chown(fail_at=2)
    warnings: list[str] = []
    changed = hand_over([run], Owner(1000, 1000), chown=chown, warn=warnings.append)
    assert changed == 2
    (warning,) = warnings
    assert warning.startswith(f"cannot hand {run}/") and warning.endswith(
        "to uid 1000: Operation not permitted"
    )
