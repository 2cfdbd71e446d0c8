"""powersweep.cli.analyze: ``powersweep analyze`` of one run (its table and answer printed, or
``--full`` the summary, or ``--json`` the analysis; analysis.json and summary.md written beside it
or under ``--out``), of runs of one GPU in several load modes (the cross-mode answer), and its
refusals, each one ``error:`` line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powersweep.sim.synthetic_fleet import synthetic_fleet
from tests.helpers.cli import run_cli as run


def _run(root: Path, load_mode: str = "decode-single") -> Path:
    (card,) = synthetic_fleet(root, "rtx3090-air", 1, step_w=25.0, load_mode=load_mode)
    return card.run_dir


def test_one_run_prints_its_table_answer_and_files_and_writes_beside_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_dir = _run(tmp_path)
    code, out, err = run(capsys, "analyze", str(run_dir))
    assert code == 0, err
    analysis = json.loads((run_dir / "analysis.json").read_text())
    spot = analysis["sweet_spot"]
    lines = out.splitlines()
    assert lines[0].startswith("NVIDIA GeForce RTX 3090 (simulated), decode-single")
    assert lines[1].split() == ["cap", "W", "TPS", "draw", "W", "TPS/W", "+-95%", "status"]
    starred = [line for line in lines if line.startswith("*  ")]
    assert len(starred) == 1 and starred[0].split()[1] == f"{spot['cap_w']:g}"
    assert f"sweet spot: {spot['cap_w']:g} W, {spot['tps_per_w']:.4f} TPS/W" in out
    assert f"summary:  {run_dir / 'summary.md'}" in lines
    assert "### " not in out and len(lines) < 40 and max(map(len, lines[:-3])) <= 80


def test_full_prints_the_whole_summary(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    code, out, err = run(capsys, "analyze", str(run_dir), "--full")
    assert code == 0, err
    assert out.startswith("## powersweep: NVIDIA GeForce RTX 3090 (simulated)")
    assert (run_dir / "summary.md").read_text() == out.removesuffix("\n")
    code, out, err = run(capsys, "analyze", str(run_dir), "--full", "--json")
    assert code == 2 and out == "" and err.startswith("error: --json and --full")


def test_json_prints_only_the_analysis_and_out_keeps_the_run_untouched(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_dir = _run(tmp_path / "runs")
    before = sorted(p.name for p in run_dir.iterdir())
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "analyze", str(run_dir), "--json", "--out", str(out_dir))
    assert code == 0, err
    printed = json.loads(out)  # nothing but the JSON on stdout
    assert printed == json.loads((out_dir / "analysis.json").read_text())
    assert sorted(p.name for p in run_dir.iterdir()) == before
    assert (out_dir / "summary.md").is_file()


def test_runs_in_two_load_modes_get_one_cap_for_both(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    decode, prefill = _run(tmp_path / "a"), _run(tmp_path / "b", "prefill-heavy")
    out_dir = tmp_path / "cross"
    code, out, err = run(capsys, "analyze", str(decode), str(prefill), "--out", str(out_dir))
    assert code == 0, err
    assert out.startswith("## Mixed workload: one cap for every load mode")
    assert err.splitlines() == [
        f"wrote {out_dir / 'cross-mode.json'}",
        f"wrote {out_dir / 'cross-mode.md'}",
    ]
    cross = json.loads((out_dir / "cross-mode.json").read_text())
    assert f"**Set {cross['cap_w']:g} W.**" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-tps-loss", "100"], "error: --max-tps-loss must be between 0 and 100"),
        (["--max-tps-loss", "-1"], "error: --max-tps-loss must be between 0 and 100"),
        (["--eta", "1.5"], "error: --eta must be between 0 and 1"),
        (["--tariff", "-0.3"], "error: --tariff must be a price per kWh from 0 to"),
        (["--max-itl-ms", "0"], "error: --max-itl-ms must be a time in ms above 0, not 0"),
        (["--objective", "fastest"], "error: Invalid value for '--objective'"),
    ],
)
def test_bad_options_are_one_error_line_and_write_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str], message: str
) -> None:
    run_dir = _run(tmp_path)
    code, out, err = run(capsys, "analyze", str(run_dir), *extra)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith(message), err
    assert not (run_dir / "analysis.json").exists()


def test_serving_options_analyse_one_run_at_a_time(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a, b = _run(tmp_path / "a"), _run(tmp_path / "b", "prefill-heavy")
    code, out, err = run(capsys, "analyze", str(a), str(b), "--tariff", "0.3")
    assert code == 2 and out == ""
    assert err.strip() == (
        "error: --tariff, --max-ttft-ms and --max-itl-ms analyse one run at a time"
    )


def test_a_clock_run_compares_with_exactly_one_power_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    clocks = tmp_path / "clocks.csv"
    clocks.write_text("cap_w,power_w,narr_tps,sm_lock_mhz\n300,250,25,1500\n300,280,28,1800\n")
    a, b = _run(tmp_path / "a"), _run(tmp_path / "b")
    code, out, err = run(capsys, "analyze", str(a), str(b), str(clocks))
    assert code == 2 and out == ""
    assert err.strip() == (
        "error: a clock-lock run compares with one power-axis run: give RUN_POWER RUN_CLOCKS"
    )
