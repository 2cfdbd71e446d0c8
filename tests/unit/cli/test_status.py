"""powersweep.cli.status: ``powersweep status`` reads every card's limits, clock locks,
persistence mode and readings, the restore journals (yours and root's when not told where) and
the boot unit, as text or JSON, and changes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from powersweep.sim.limit_store import LimitStore
from powersweep.sim.physics import Locks
from powersweep.sweep.records.journal import ROOT_STATE_DIR
from tests.helpers.cli import run_cli as run


def _status(capsys: pytest.CaptureFixture[str], tmp_path: Path, *extra: str) -> dict[str, Any]:
    code, out, err = run(
        capsys,
        "status", "--json", "--simulate", "rtx3090-air+h100-sxm",
        "--sim-state", str(tmp_path / "sim.json"), "--unit-dir", str(tmp_path), *extra,
    )  # fmt: skip
    assert code == 0, err
    return json.loads(out)


def test_each_cards_settings_as_the_simulated_state_holds_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = LimitStore(tmp_path / "sim.json")
    store.put("GPU-sim-rtx3090-air-0", 300.0)
    store.put_locks("GPU-sim-rtx3090-air-0", Locks(1410.0, None))
    store.put_value("GPU-sim-h100-sxm-1:persistence_mode", True)
    before = (tmp_path / "sim.json").read_text()
    data = _status(capsys, tmp_path, "--state-dir", str(tmp_path / "sd"))
    assert data["simulated"] is True
    first, second = data["gpus"]
    assert (first["index"], first["uuid"]) == (0, "GPU-sim-rtx3090-air-0")
    limit = first["power_limit"]
    assert (limit["current_w"], limit["default_w"], limit["differs_from_default"]) == (
        300.0,
        370.0,
        True,
    )
    assert (first["locked_clocks"]["sm_mhz"], first["locked_clocks"]["mem_mhz"]) == (1410.0, None)
    assert (first["persistence_mode"], second["persistence_mode"]) == (False, True)
    assert second["power_limit"]["differs_from_default"] is False
    assert (tmp_path / "sim.json").read_text() == before  # read only


def test_the_journal_and_the_unit_where_they_were_asked_for(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = _status(capsys, tmp_path, "--state-dir", str(tmp_path / "sd"))
    (journal,) = data["journals"]
    assert (journal["path"], journal["exists"]) == (str(tmp_path / "sd" / "journal.json"), False)
    assert data["unit"]["path"] == str(tmp_path / "powersweep-apply.service")
    assert data["unit"]["installed"] is False
    marker = {"gpus": [{"uuid": "GPU-sim-rtx3090-air-0", "name": "x", "power_limit_w": 280}]}
    (tmp_path / "powersweep-apply.service").write_text(
        f"# powersweep-settings: {json.dumps(marker)}\n[Unit]\n"
    )
    unit = _status(capsys, tmp_path, "--state-dir", str(tmp_path / "sd"))["unit"]
    assert (unit["installed"], unit["written_by_powersweep"]) == (True, True)
    assert unit["settings"][0]["power_limit_w"] == 280.0


def test_without_a_state_dir_a_user_also_sees_roots_journal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POWERSWEEP_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    paths = [j["path"] for j in _status(capsys, tmp_path)["journals"]]
    assert paths == [
        str(tmp_path / "xdg" / "powersweep" / "journal.json"),
        str(ROOT_STATE_DIR / "journal.json"),
    ]
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    paths = [j["path"] for j in _status(capsys, tmp_path)["journals"]]
    assert paths == [str(ROOT_STATE_DIR / "journal.json")]  # root's own, once


def test_the_text_form_has_a_block_per_card_then_journal_and_unit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(
        capsys,
        "status", "--simulate", "rtx3090-air", "--sim-state", str(tmp_path / "sim.json"),
        "--state-dir", str(tmp_path / "sd"), "--unit-dir", str(tmp_path),
    )  # fmt: skip
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "GPU 0  NVIDIA GeForce RTX 3090 (simulated)  GPU-sim-rtx3090-air-0"
    assert lines[1].strip().startswith("power limit   370 W in force (the default)")
    assert f"restore journal: none ({tmp_path / 'sd' / 'journal.json'})" in lines
    assert f"boot unit:       not installed ({tmp_path / 'powersweep-apply.service'})" in lines


def test_an_unknown_profile_is_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "status", "--simulate", "rtx9090", "--unit-dir", str(tmp_path))
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("error: unknown simulation profile 'rtx9090'")
