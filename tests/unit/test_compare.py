"""powersweep.cli.compare: ``powersweep compare`` prints every run's sweet spot as a table first
(the answer even when no chart can be written), then draws the overlay (or, past a few runs,
the band view) where ``--out`` says; clock-lock runs and bad formats are one error line."""

from __future__ import annotations

from pathlib import Path

import pytest

from powersweep.cli import compare, main
from powersweep.cli.compare import DEFAULT_STEM, _stem


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _curves(tmp_path: Path, n: int = 2) -> list[str]:
    paths = []
    for i in range(n):
        path = tmp_path / f"run{i}.csv"
        path.write_text(f"cap_w,power_w,narr_tps\n200,199,2{i}\n250,249,27\n300,295,31\n")
        paths.append(str(path))
    return paths


def test_the_table_then_the_overlay_in_the_given_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "charts"
    out_dir.mkdir()
    code, out, err = run(
        capsys, "compare", *_curves(tmp_path), "--out", str(out_dir), "--format", "svg"
    )
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].startswith("| run | GPU |") and len(lines) == 4
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| run0.csv", "| run1.csv"]
    chart = out_dir / f"{DEFAULT_STEM}.svg"
    assert err.splitlines() == [f"chart: {chart}"] and chart.is_file()


def test_where_the_chart_goes(tmp_path: Path) -> None:
    assert _stem(None) == Path(DEFAULT_STEM)
    assert _stem(tmp_path) == tmp_path / DEFAULT_STEM  # an existing folder holds it
    assert _stem(tmp_path / "cmp.PNG") == tmp_path / "cmp"  # the format's suffix goes
    assert _stem(tmp_path / "cmp.svg") == tmp_path / "cmp"
    assert _stem(tmp_path / "cmp.v2") == tmp_path / "cmp.v2"  # any other is part of the stem
    assert _stem(tmp_path / "new" / "cmp") == tmp_path / "new" / "cmp"


def test_a_bad_format_comes_after_the_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stem = tmp_path / "cmp"
    code, out, err = run(
        capsys, "compare", *_curves(tmp_path), "--out", str(stem), "--format", "gif"
    )
    assert code == 2
    assert out.startswith("| run | GPU |")
    assert err.strip().splitlines() == ["error: --format takes png and/or svg, not 'gif'"]
    assert not list(tmp_path.glob("cmp*"))


def test_a_clock_lock_run_is_refused_with_what_to_use_instead(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    clocks = tmp_path / "clocks.csv"
    clocks.write_text("cap_w,power_w,narr_tps,sm_lock_mhz\n300,250,25,1500\n300,280,28,1800\n")
    code, out, err = run(capsys, "compare", *_curves(tmp_path, 1), str(clocks))
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: {clocks} is an --axis sm-clock run: compare overlays power")
    assert "powersweep analyze RUN_POWER RUN_CLOCKS" in line


def test_an_undervolt_run_is_refused_and_pointed_at_its_own_summary(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    uv = tmp_path / "uv.csv"
    uv.write_text(
        "cap_w,power_w,narr_tps,sm_lock_mhz,sm_offset_mhz\n300,300,30,,0\n300,290,30,1500,0\n"
        "300,280,30,1500,30\n"
    )
    code, _, err = run(capsys, "compare", *_curves(tmp_path, 1), str(uv))
    assert code == 2
    assert f"{uv} is an --axis undervolt run" in err and "in its summary.md" in err


def test_past_the_overlay_limit_the_band_view_is_drawn(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compare, "MAX_OVERLAY_RUNS", 1)
    stem = tmp_path / "band"
    code, _, err = run(
        capsys,
        "compare", *_curves(tmp_path), "--out", str(stem), "--format", "svg", "--normalize",
    )  # fmt: skip
    assert code == 0, err
    first, chart = err.strip().splitlines()
    assert first.startswith("2 runs: drawing the band view (median, IQR and min-max per GPU")
    assert first.endswith("(--x and --normalize apply to the overlay only)")
    assert chart == f"chart: {stem}.svg" and (tmp_path / "band.svg").is_file()
