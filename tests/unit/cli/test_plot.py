"""powersweep.cli.plot: ``powersweep plot`` draws a run's charts from its CSVs alone into
``charts/`` (beside the run, or under ``--out``), prints each path, writes no analysis, and
refuses a bad format or a curve without an answer in one line before drawing anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import run_cli as run

CURVE = "cap_w,power_w,narr_tps\n200,199,20\n250,249,27\n300,295,31\n350,330,33\n"


def test_the_charts_go_under_out_and_each_path_is_printed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    csv = tmp_path / "caps.csv"
    csv.write_text(CURVE)
    out_dir = tmp_path / "elsewhere"
    code, out, err = run(capsys, "plot", str(csv), "--out", str(out_dir), "--format", "svg")
    assert code == 0, err
    charts = out_dir / "charts"
    assert out.splitlines() == [str(charts / "efficiency.svg"), str(charts / "power.svg")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["caps.csv", "elsewhere"]
    assert sorted(p.name for p in out_dir.iterdir()) == ["charts"]  # no analysis.json


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--format", "jpg"], "error: --format takes png and/or svg, not 'jpg'"),
        (["--default-limit", "-5"], "error: --default-limit must be positive watts"),
    ],
)
def test_bad_options_are_one_error_line_and_nothing_is_drawn(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], needle: str
) -> None:
    csv = tmp_path / "caps.csv"
    csv.write_text(CURVE)
    code, out, err = run(capsys, "plot", str(csv), *args)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [err.strip()] and err.startswith(needle)
    assert not (tmp_path / "charts").exists()


def test_a_curve_without_an_answer_is_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    csv = tmp_path / "caps.csv"
    csv.write_text("cap_w,power_w,narr_tps,status\n200,199,20,failed\n250,249,27,failed\n")
    code, out, err = run(capsys, "plot", str(csv), "--format", "svg")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and "nothing to analyse" in err
    assert "Traceback" not in err
    assert not list((tmp_path / "charts").glob("*.svg"))
