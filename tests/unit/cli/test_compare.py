"""powersweep.cli.compare: ``powersweep compare`` prints every run's sweet spot as a table first
(the answer even when no chart can be written), each run named by its GPU, cooling, axis and
load, then draws the overlay (or, past a few runs, the band view) and writes the table into a
folder it names or ``--out`` names, never into a non-empty one without ``--force``; clock-lock
runs and bad formats are one error line."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from powersweep.cli import compare
from powersweep.cli.compare import CHART_STEM
from tests.helpers.cli import run_cli as run


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
    assert lines[0].startswith("| run | sweet spot |") and len(lines) == 4
    # bare curves (no run.json) keep their file's name
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| run0.csv", "| run1.csv"]
    chart, table = out_dir / f"{CHART_STEM}.svg", out_dir / f"{CHART_STEM}.md"
    assert err.splitlines() == [f"chart: {chart}", f"table: {table}"] and chart.is_file()
    written = table.read_text()
    assert out.strip() in written and f"- run1.csv: `{tmp_path / 'run1.csv'}`" in written


def _run_dir(tmp_path: Path, name: str, **facts: object) -> str:
    run = tmp_path / name
    run.mkdir()
    (run / "caps.csv").write_text("cap_w,power_w,narr_tps\n200,199,20\n250,249,27\n300,295,31\n")
    gpu = {"index": 0, "name": "NVIDIA GeForce RTX 3090", "default_limit_w": 350.0}
    meta = {"gpus": [gpu], "load_mode": "decode-single", **facts}
    (run / "run.json").write_text(json.dumps(meta))
    return str(run)


def test_runs_are_named_by_gpu_cooling_axis_and_load_in_table_and_legend(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    air = _run_dir(tmp_path, "a", cooling="air", started_at="2026-05-01T10:00:00Z")
    water = _run_dir(tmp_path, "b", cooling="water", started_at="2026-05-01T11:00:00Z")
    again = _run_dir(tmp_path, "c", cooling="air", started_at="2026-05-02T09:30:00Z")
    out_dir = tmp_path / "cmp"
    code, out, err = run(
        capsys, "compare", air, water, again, "--out", str(out_dir), "--format", "svg"
    )
    assert code == 0, err
    names = [line.split(" | ")[0].removeprefix("| ") for line in out.strip().splitlines()[2:]]
    assert names == [
        "RTX 3090, air, power, decode-single, 2026-05-01 10:00:00",  # equal to the third's
        "RTX 3090, water, power, decode-single",
        "RTX 3090, air, power, decode-single, 2026-05-02 09:30:00",
    ]
    svg = (out_dir / f"{CHART_STEM}.svg").read_text()
    for name in names:  # the legend names each run by its label, not its folder
        assert f"<!-- {name}: " in svg
    assert "<!-- a" not in svg


def test_a_default_folder_is_named_and_never_reused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(compare, "_now", lambda: datetime(2026, 5, 1, 10, 0, 0, tzinfo=UTC))
    curves = _curves(tmp_path, 1)
    first = tmp_path / "powersweep-compare-20260501-100000"
    for folder in (first, first.with_name(first.name + "-2")):
        code, _, err = run(capsys, "compare", *curves)
        assert code == 0, err
        assert f"chart: {folder.name}/compare.png" in err and (folder / "compare.md").is_file()


def test_an_existing_non_empty_out_is_refused_without_force(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "cmp"
    out_dir.mkdir()
    (out_dir / "notes.txt").write_text("mine")
    code, out, err = run(capsys, "compare", *_curves(tmp_path), "--out", str(out_dir))
    assert code == 2 and out == ""  # refused before any work
    assert err.strip() == (
        f"error: {out_dir} exists and is not empty; pass --force to write into it (its "
        "compare chart and table replaced) or give a new --out"
    )
    assert sorted(p.name for p in out_dir.iterdir()) == ["notes.txt"]
    code, _, err = run(capsys, "compare", *_curves(tmp_path), "--out", str(out_dir), "--force")
    assert code == 0, err
    assert sorted(p.name for p in out_dir.iterdir()) == ["compare.md", "compare.png", "notes.txt"]


def test_an_out_that_names_a_file_is_refused_with_the_folder_to_give(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "compare", *_curves(tmp_path), "--out", str(tmp_path / "c.png"))
    assert code == 2
    assert err.strip() == (
        f"error: --out {tmp_path / 'c.png'} names a file; compare writes its chart and table "
        f"into a folder (e.g. --out {tmp_path / 'c'})"
    )
    code, _, err = run(capsys, "compare", *_curves(tmp_path), "--out", _curves(tmp_path)[0])
    assert code == 2 and "is a file; give a folder" in err


def test_a_bad_format_comes_after_the_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stem = tmp_path / "cmp"
    code, out, err = run(
        capsys, "compare", *_curves(tmp_path), "--out", str(stem), "--format", "gif"
    )
    assert code == 2
    assert out.startswith("| run | sweet spot |")
    assert err.strip().splitlines() == ["error: --format takes png and/or svg, not 'gif'"]
    assert not list(tmp_path.glob("cmp*"))  # no folder made


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
    first, chart, _ = err.strip().splitlines()
    assert first.startswith("2 runs: drawing the band view (median, IQR and min-max per GPU")
    assert first.endswith("(--x and --normalize apply to the overlay only)")
    assert chart == f"chart: {stem / CHART_STEM}.svg" and (stem / "compare.svg").is_file()


def test_labels_add_the_time_then_the_folder_only_where_two_would_be_equal() -> None:
    from powersweep.analysis.result_types import RunFacts
    from powersweep.plots import compare_labels

    def facts(cooling: str | None, date: str | None, n: int = 1) -> RunFacts:
        name = "NVIDIA GeForce RTX 4090"
        return RunFacts(
            gpu_name=name, n_gpus=n, cooling=cooling, load_mode="prefill-heavy", date=date
        )

    same = "2026-05-01T10:00:00Z"
    labels = compare_labels(
        [
            ("r1", facts("air", same), "power"),
            ("r2", facts("air", same), "power"),  # same time too: its folder tells it apart
            ("r3", facts("unspecified", None), "power"),  # no cooling word for "unspecified"
            ("r4", facts("air", None, n=2), "power"),
            ("bare.csv", RunFacts(), "power"),  # nothing known: the file's name
            ("bare.csv", RunFacts(), "power"),  # the same file twice: numbered
        ]
    )
    assert labels == [
        "RTX 4090, air, power, prefill-heavy, 2026-05-01 10:00:00, r1",
        "RTX 4090, air, power, prefill-heavy, 2026-05-01 10:00:00, r2",
        "RTX 4090, power, prefill-heavy",
        "2x RTX 4090, air, power, prefill-heavy",
        "bare.csv, #5",
        "bare.csv, #6",
    ]
