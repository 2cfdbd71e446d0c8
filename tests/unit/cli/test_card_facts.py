"""Community curves get their context: analyze, plot and compare take the card's facts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from powersweep.cli import main
from tests.paths import SHARED_3090

FACTS = ["--default-limit", "370", "--min-limit", "100", "--max-limit", "390"]


@pytest.fixture
def bare_3090(tmp_path: Path) -> Path:
    if not SHARED_3090.exists():
        pytest.skip(f"measured curve not found at {SHARED_3090}")
    target = tmp_path / "community" / "3090.csv"
    target.parent.mkdir()
    shutil.copy(SHARED_3090, target)
    return target


def test_analyze_uses_the_given_card_facts(
    bare_3090: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(bare_3090), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["sweet_spot"]["pct_of_default"] is None
    code = main(["analyze", str(bare_3090), "--json", "--gpu-name", "RTX 3090 (club-3090)", *FACTS])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    run = result["run"]
    assert run["gpu_name"] == "RTX 3090 (club-3090)"
    assert (run["min_limit_w"], run["default_limit_w"], run["max_limit_w"]) == (100, 370, 390)
    sweet = result["sweet_spot"]
    assert sweet["cap_w"] == 290.0
    assert sweet["pct_of_default"] == pytest.approx(290 / 370 * 100)
    # The published plateau, and no invented region.
    assert [(p["kind"], p["start_w"], p["end_w"]) for p in result["plateaus"]] == [
        ("boost_plateau", 340.0, 370.0)
    ]
    assert sweet["noise_source"] == "typical repeatability (noise unknown)"


def test_boundary_finding_knows_the_given_limits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "low.csv"
    csv.write_text("cap_w,power_w,narr_tps\n200,199,24\n220,219,25\n240,239,26\n")
    assert (
        main(["analyze", str(csv), "--json", "--min-limit", "150", "--default-limit", "300"]) == 0
    )
    result = json.loads(capsys.readouterr().out)
    (finding,) = [f for f in result["findings"] if f["code"] == "sweet_spot_at_low_boundary"]
    assert "150 W" in finding["message"] and "50 W" in finding["message"]


def test_plot_draws_the_default_limit_line(
    bare_3090: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = bare_3090.parent / "charts-out"
    assert main(["plot", str(bare_3090), "--out", str(out), "--format", "svg", *FACTS]) == 0
    svg = (out / "charts" / "efficiency.svg").read_text()
    assert "default limit 370 W" in svg and "78% of default" in svg


def test_compare_pct_tdp_works_on_bare_curves(
    bare_3090: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stem = bare_3090.parent / "cmp"
    code = main(["compare", str(bare_3090), "--x", "pct-tdp", "--out", str(stem), *FACTS])
    assert code == 0
    out = capsys.readouterr().out
    assert "78%" in out
    assert (stem / "compare.png").is_file()


def test_impossible_limits_are_a_usage_error(
    bare_3090: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["analyze", str(bare_3090), "--default-limit", "400", "--max-limit", "390"])
    assert code == 2
    assert "error: the limits must satisfy" in capsys.readouterr().err
    assert main(["analyze", str(bare_3090), "--default-limit", "-5"]) == 2
