"""powersweep.report: a run's derived outputs from its saved CSVs. Where they go (beside the input
or into ``--out``), the analysis shown before anything is written, a curve with no answer refused
in one line naming what set its rows aside, a write that fails told with the directory and the
``--out`` hint, the failed run's summary, the clock-versus-power comparison, and the cross-mode
report's folders and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powersweep.analysis.findings import Finding
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.errors import PowersweepError, UsageError
from powersweep.report import (
    Report,
    _run_name,
    build_clock_comparison,
    build_cross_report,
    build_failed_report,
    build_report,
    no_answer,
    writing_into,
)


def _power_csv_at(tmp_path: Path, name: str = "power", scale: float = 1.0) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    lines = ["cap_w,narr_tps,power_w"]
    for cap, tps, draw in ((200, 80.0, 200.0), (250, 108.0, 240.0), (300, 118.8, 270.0)):
        lines.append(f"{cap},{tps * scale},{draw}")
    (folder / "caps.csv").write_text("\n".join(lines) + "\n")
    return folder / "caps.csv"


def _three_lock_csv(tmp_path: Path) -> Path:
    folder = tmp_path / "clocks"
    folder.mkdir()
    lines = ["sm_lock_mhz,mem_lock_mhz,narr_tps,power_w"]
    lines += ["1200,9501,30,200", "1500,9501,36,220", "1800,9501,38,260"]
    (folder / "caps.csv").write_text("\n".join(lines) + "\n")
    return folder / "caps.csv"


def _finding(code: str, message: str) -> Finding:
    return Finding("warning", code, message)  # type: ignore[arg-type]


def test_no_answer_names_what_set_the_rows_aside_in_one_line() -> None:
    findings = [
        _finding("rows_ignored", "2 rows had no draw"),
        _finding("sweet_spot", "not a reason"),
        _finding("points_failed", "3 points\nfailed"),
    ]
    line = no_answer(Path("run/caps.csv"), findings)
    assert line == (
        "run/caps.csv: nothing to analyse: no cap finished with status ok and a positive finite "
        "TPS and draw (2 rows had no draw; 3 points failed)"
    )
    assert no_answer(Path("x.csv"), []).endswith("positive finite TPS and draw")
    long = no_answer(Path("x.csv"), [_finding("input_note", "word " * 500)])
    assert len(long) == 600 and "\n" not in long


def test_a_failed_write_names_the_directory_and_out_unless_out_was_given(tmp_path: Path) -> None:
    with pytest.raises(PowersweepError) as caught, writing_into(tmp_path, given=False):
        raise PowersweepError("cannot write x")
    assert str(caught.value) == (
        f"cannot write x; give --out DIR to write the outputs somewhere other than "
        f"{tmp_path.resolve()}"
    )
    with (
        pytest.raises(PowersweepError, match=r"^cannot write x$"),
        writing_into(tmp_path, given=True),
    ):
        raise PowersweepError("cannot write x")
    # a usage error is the user's input: no hint
    with pytest.raises(UsageError, match=r"^bad format$"), writing_into(tmp_path, given=False):
        raise UsageError("bad format")


def test_the_outputs_go_beside_the_input_or_into_out(tmp_path: Path) -> None:
    csv = _power_csv_at(tmp_path)
    report = build_report(csv, charts=False)
    assert isinstance(report, Report) and isinstance(report.result, PowerAnalysis)
    assert report.result.sweet_spot is not None and report.result.sweet_spot.cap_w == 250.0
    assert report.paths == (csv.parent / "analysis.json", csv.parent / "summary.md")
    assert json.loads(report.paths[0].read_text()) == report.result.to_json()
    assert report.paths[1].read_text() == report.summary
    out = tmp_path / "out"
    elsewhere = build_report(csv, out_dir=out, charts=False)
    assert [p.parent for p in elsewhere.paths] == [out, out]
    bare = build_report(
        csv.parent, out_dir=tmp_path / "nothing", charts=False, write_analysis=False
    )
    assert bare.paths == () and not (tmp_path / "nothing").exists()


def test_the_analysis_is_shown_before_anything_is_written(tmp_path: Path) -> None:
    csv = _power_csv_at(tmp_path)
    (csv.parent / "analysis.json").mkdir()  # a write that will fail
    seen: list[Report] = []
    with pytest.raises(PowersweepError) as caught:
        build_report(csv, charts=False, on_analysis=seen.append)
    (shown,) = seen
    assert shown.paths == () and shown.result.to_json()["sweet_spot"]["cap_w"] == 250.0
    message = str(caught.value)
    assert message.startswith(f"cannot write the analysis into {csv.parent}: ")
    assert message.endswith(
        f"give --out DIR to write the outputs somewhere other than {csv.parent.resolve()}"
    )


def test_a_curve_without_an_answer_is_refused_only_when_one_is_required(tmp_path: Path) -> None:
    csv = tmp_path / "caps.csv"
    csv.write_text("cap_w,narr_tps,power_w,status\n200,80,200,failed\n")
    with pytest.raises(UsageError, match=r"caps\.csv: nothing to analyse: no cap finished"):
        build_report(csv, charts=False, require_answer=True)
    assert not (tmp_path / "analysis.json").exists()  # nothing written
    report = build_report(csv, charts=False)  # a sweep's own report still says why
    assert isinstance(report.result, PowerAnalysis) and report.result.sweet_spot is None
    assert (tmp_path / "summary.md").exists()


def test_charts_are_drawn_into_the_charts_folder(tmp_path: Path) -> None:
    csv = _power_csv_at(tmp_path)
    report = build_report(csv, formats=("svg",), write_analysis=False)
    assert {p.name for p in report.paths} >= {"efficiency.svg", "power.svg"}
    assert all(p.parent == csv.parent / "charts" for p in report.paths)


def test_a_failed_runs_summary_says_why(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"status": "failed"}))
    path = build_failed_report(run, "every cap failed")
    assert path == run / "summary.md"
    text = path.read_text()
    assert text.startswith("# powersweep: failed, no usable point\n")
    assert "**No recommendation**: every cap failed" in text
    (run / "summary.md").unlink()
    (run / "summary.md").mkdir()
    with pytest.raises(PowersweepError, match=r"^cannot write .*summary\.md: .*--out DIR"):
        build_failed_report(run, "every cap failed")


def test_an_undervolt_search_is_not_set_against_a_power_run(tmp_path: Path) -> None:
    folder = tmp_path / "uv"
    folder.mkdir()
    (folder / "caps.csv").write_text(
        "cap_w,narr_tps,power_w,sm_lock_mhz,sm_offset_mhz\n"
        "300,30,300,,0\n300,30,290,1500,0\n300,30,280,1500,30\n"
    )
    with pytest.raises(UsageError, match=r"not an --axis undervolt one.*analyze it alone"):
        build_clock_comparison([_power_csv_at(tmp_path), folder / "caps.csv"], write=False)


def test_the_clock_comparison_takes_one_run_of_each_axis_and_writes_beside_them(
    tmp_path: Path,
) -> None:
    power, clocks = _power_csv_at(tmp_path), _three_lock_csv(tmp_path)
    with pytest.raises(UsageError, match="one power-axis run and one clock run"):
        build_clock_comparison([power, _power_csv_at(tmp_path, "power2")])
    compared = build_clock_comparison([clocks, power], charts=False)
    assert [p.name for p in compared.paths] == ["clocks-vs-power.json", "clocks-vs-power.md"]
    assert all(p.parent == tmp_path for p in compared.paths)  # the folder holding both runs
    assert json.loads(compared.paths[0].read_text()) == json.loads(
        json.dumps(compared.comparison.to_json())
    )
    assert compared.paths[1].read_text() == compared.markdown
    assert compared.power.sweet_spot is not None and compared.power.sweet_spot.cap_w == 250.0
    assert compared.clocks.peak is not None and compared.clocks.peak.sm_lock_mhz == 1500.0
    unwritten = build_clock_comparison([power, clocks], write=False)
    assert unwritten.paths == ()


def test_a_cross_mode_report_needs_two_runs_and_puts_each_in_its_folder(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="needs at least two runs"):
        build_cross_report([_power_csv_at(tmp_path)])
    a, b = _power_csv_at(tmp_path, "decode"), _power_csv_at(tmp_path, "prefill", scale=10.0)
    out = tmp_path / "out"
    report = build_cross_report([a, b], out_dir=out)
    assert {p.relative_to(out).as_posix() for p in report.paths} == {
        "decode/analysis.json",
        "decode/summary.md",
        "prefill/analysis.json",
        "prefill/summary.md",
        "cross-mode.json",
        "cross-mode.md",
    }
    assert json.loads((out / "cross-mode.json").read_text()) == report.cross.to_json()
    assert build_cross_report([a, b], write=False).paths == ()


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("runs/2024-05-01-rtx3090/caps.csv", "2024-05-01-rtx3090"),
        ("exports/decode.csv", "decode"),
        ("runs/2024-05-01-rtx3090", "2024-05-01-rtx3090"),
    ],
)
def test_a_runs_folder_under_out_is_named_after_the_run(source: str, name: str) -> None:
    assert _run_name(Path(source)) == name
