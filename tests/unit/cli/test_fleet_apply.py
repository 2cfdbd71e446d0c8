"""powersweep.cli.fleet_apply: ``powersweep fleet apply REPORT_DIR`` through ``main`` on simulated
H100s. Each card gets its group's fleet cap, a named outlier its own best, a card of no group is
left alone and said; the per-node record (where, what, why, dry or not); the node named by
``--sim-node`` or the environment; and its bad input in one line: an unknown axis, a simulated
apply with nowhere to keep what it sets, a record that cannot be written. (The choice per card is
``test_fleet_targets.py``'s.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from powersweep.cli import main
from powersweep.cli.rigs import build_settings_rig

H100 = "NVIDIA H100 80GB HBM3 (simulated)"
SPEC = "h100-sxm+h100-sxm+rtx4090-air"


def _report(tmp_path: Path, outlier_host: str = "n1") -> Path:
    outlier = {
        "label": outlier_host,
        "host": outlier_host,
        "gpus": [{"uuid": "GPU-sim-h100-sxm-1", "name": H100}],
        "causes": [{"code": "hot", "message": "runs hot"}],
        "own_best": {"cap_w": 450.0},
        "apply": "own_best",
    }
    group = {
        "gpu_name": H100,
        "load_mode": "decode-single",
        "model": "m",
        "axis": {
            "name": "power",
            "setting_key": "cap_w",
            "tier_key": None,
            "answer_key": "fleet_cap",
        },
        "fleet_cap": {"cap_w": 500.0, "fleet_tps_per_w": 0.1},
        "outliers": [outlier],
        "cards": [],
    }
    report = tmp_path / "report"
    report.mkdir()
    (report / "fleet.json").write_text(json.dumps({"groups": [group]}))
    return report


@pytest.fixture(autouse=True)
def _state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "journal"))
    monkeypatch.delenv("POWERSWEEP_SIM_NODE", raising=False)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["fleet", "apply", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _limits(state: Path) -> list[float]:
    with build_settings_rig(SPEC, state, sim_node="n1") as rig:
        return [rig.backend.gpu(i).envelope().current_w for i in range(3)]


def test_each_card_gets_its_groups_cap_or_its_own_best_and_the_node_a_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, state = _report(tmp_path), tmp_path / "state.json"
    args = [str(report), "--simulate", SPEC, "--sim-node", "n1", "--sim-state", str(state)]
    code, out = _run(capsys, *args)
    assert code == 0, out
    assert _limits(state) == [500.0, 450.0, 450.0]  # the RTX 4090 kept its default
    assert f"GPU 0 ({H100}, GPU-sim-h100-sxm-0): 500 W (the group's fleet cap)" in out
    assert f"GPU 1 ({H100}, GPU-sim-h100-sxm-1): 450 W (outlier: runs hot)" in out
    assert (
        "GPU 2 (NVIDIA GeForce RTX 4090 (simulated), GPU-sim-rtx4090-air-2): no group of the "
        "report has this GPU model; left alone"
    ) in out
    record = json.loads((report / "applied" / "n1.json").read_text())
    assert (record["node"], record["report"], record["dry_run"]) == (
        "n1",
        str(report.resolve()),
        False,
    )
    assert [(c["index"], c["source"], c["cap_w"]) for c in record["cards"]] == [
        (0, "fleet", 500.0),
        (1, "own_best", 450.0),
    ]
    assert record["at"].endswith("Z") and len(record["at"]) == len("2026-01-01T00:00:00Z")


def test_a_dry_run_changes_nothing_and_records_what_would_be_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, state = _report(tmp_path), tmp_path / "state.json"
    record = tmp_path / "elsewhere" / "n1.json"
    args = [str(report), "--dry-run", "--simulate", SPEC, "--sim-node", "n1"]
    code, out = _run(capsys, *args, "--sim-state", str(state), "--record", str(record))
    assert code == 0, out
    assert not state.exists() and not (report / "applied").exists()
    saved = json.loads(record.read_text())
    assert saved["dry_run"] is True and [c["cap_w"] for c in saved["cards"]] == [500.0, 450.0]
    # a dry run of simulated cards needs no state file
    code, out = _run(capsys, str(report), "--dry-run", "--simulate", SPEC, "--sim-node", "n1")
    assert code == 0, out


def test_the_node_is_the_simulated_one_named_in_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the outlier lives on n2: on n1 the same UUID is another card and gets the fleet's cap
    report = _report(tmp_path, outlier_host="n2")
    monkeypatch.setenv("POWERSWEEP_SIM_NODE", "n1")
    code, out = _run(capsys, str(report), "--dry-run", "--simulate", SPEC)
    assert code == 0, out
    saved = json.loads((report / "applied" / "n1.json").read_text())
    assert [c["source"] for c in saved["cards"]] == ["fleet", "fleet"]
    code, out = _run(capsys, str(report), "--dry-run", "--simulate", SPEC, "--sim-node", "n2")
    assert code == 0, out
    saved = json.loads((report / "applied" / "n2.json").read_text())
    assert [c["source"] for c in saved["cards"]] == ["fleet", "own_best"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--axis", "volts", "--dry-run"],
            "error: --axis must be one of power, sm-clock, mem-clock, grid, not 'volts'",
        ),
        ([], "error: --simulate needs --sim-state FILE to hold what fleet apply sets"),
    ],
)
def test_bad_input_is_one_error_line_before_anything_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    # the report does not even exist: the flags are refused first
    code, out = _run(capsys, str(tmp_path / "none"), "--simulate", SPEC, *args)
    assert code == 2
    assert out.strip() == message


def test_a_record_that_cannot_be_written_says_what_was_set_all_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, state = _report(tmp_path), tmp_path / "state.json"
    blocker = tmp_path / "file"
    blocker.write_text("")
    args: list[Any] = [str(report), "--simulate", SPEC, "--sim-node", "n1"]
    code, out = _run(capsys, *args, "--sim-state", str(state), "--record", str(blocker / "r.json"))
    assert code == 1
    (error,) = [line for line in out.splitlines() if line.startswith("error: ")]
    assert error.startswith(f"error: cannot write the record {blocker / 'r.json'}: ")
    assert error.endswith("(what was set is above)")
    assert _limits(state)[:2] == [500.0, 450.0]  # the settings are in force
    code, out = _run(capsys, *args, "--dry-run", "--record", str(blocker / "r.json"))
    assert code == 1 and "(what would be set is above)" in out
