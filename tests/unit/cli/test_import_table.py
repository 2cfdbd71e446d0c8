"""powersweep.cli.import_table: ``powersweep import`` turns a pasted power-cap-sweep.sh summary
table into a run folder (caps.csv, and run.json with the GPU, load mode and what else the header
says) beside the summary or where ``--out`` says, and prints its path; a file without a table is
one error line. (test_import_headers.py covers every header the script had.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli as run
from tests.helpers.files import read_csv as _rows

TABLE = "\n".join(
    [
        "# Power-cap sweep — NVIDIA GeForce RTX 3090",
        "",
        "| Cap (W) | Narr wall TPS | Code wall TPS | Actual power (W) | GPU temp (°C) "
        "| TPS/W (narr) |",
        "|--------:|--------------:|--------------:|-----------------:|--------------:|-------------:|",
        "| 300 | 30.50 | 31.20 | 296.4 | 70 | 0.1029 |",
        "| 250 | 28.10 | 28.90 | 248.9 | 66 | 0.1129 |",
        "",
    ]
)


def test_a_run_folder_goes_beside_the_summary_by_default(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    summary = tmp_path / "sweep.md"
    summary.write_text(TABLE, encoding="utf-8")
    code, out, err = run(capsys, "import", str(summary))
    assert code == 0, err
    folder = tmp_path / "sweep-imported"
    assert out == f"{folder}\n" and err == ""
    assert json.loads((folder / "run.json").read_text()) == {
        "schema_version": 1,
        "imported_from": str(summary),
        "gpus": [{"index": 0, "name": "NVIDIA GeForce RTX 3090"}],  # the script's title
    }
    rows = _rows(folder / "caps.csv")
    assert sorted((r["cap_w"], r["narr_tps"], r["power_w"]) for r in rows) == [
        ("250.0", "28.1", "248.9"),
        ("300.0", "30.5", "296.4"),
    ]


def test_out_names_the_file_and_its_folder_is_made(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    summary = tmp_path / "sweep.md"
    summary.write_text(TABLE, encoding="utf-8")
    target = tmp_path / "curves" / "3090.csv"
    code, out, err = run(capsys, "import", str(summary), "--out", str(target))
    assert code == 0, err
    assert out == f"{target}\n" and len(_rows(target)) == 2
    assert not (tmp_path / "sweep-imported").exists() and not (target.parent / "run.json").exists()
    # no run.json is read beside a file not named caps.csv: the header's facts would be lost
    assert err.strip() == (
        f"warning: {target} has no run.json beside it to hold what the header says (GPU): give "
        "--out DIR (or DIR/caps.csv) to keep it"
    )


@pytest.mark.parametrize(
    ("text", "needle"),
    [("no table here\n", "no power-cap table found"), (None, "cannot read")],
    ids=["no table", "missing file"],
)
def test_a_summary_without_a_table_is_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str | None, needle: str
) -> None:
    summary = tmp_path / "sweep.md"
    if text is not None:
        summary.write_text(text, encoding="utf-8")
    code, out, err = run(capsys, "import", str(summary))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert needle in err
    assert not (tmp_path / "sweep-imported").exists()


SUMMARY_HEADER = "\n".join(
    [
        "## powersweep: 2 x NVIDIA H100 80GB HBM3",
        "",
        "| | |",
        "|---|---|",
        "| GPU | 2 x NVIDIA H100 80GB HBM3 |",
        "| Power envelope | 200 W min / 700 W default / 700 W max (shared by the cards) |",
        "| Cooling | water |",
        "| Model / engine | qwen\\|27b / vllm |",
        "| Load mode | decode-concurrent |",
        "| Metric | concurrent\\_tps |",
        "| Date | 2026-05-01T10:00:00Z |",
        "| Tool version | 0.2.0 |",
        "",
        "| Cap (W) | Power (W) | Narr TPS |",
        "|---|---|---|",
        "| 500 | 980 | 60 |",
        "| 400 | 790 | 55 |",
        "",
    ]
)


def test_a_summarys_header_table_travels_into_run_json_and_the_analysis(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from powersweep.analysis import analyze, load_curve

    summary = tmp_path / "pasted.md"
    summary.write_text(SUMMARY_HEADER, encoding="utf-8")
    out = tmp_path / "runs" / "h100"
    code, printed, err = run(capsys, "import", str(summary), "--out", str(out))
    assert code == 0, err
    assert printed == f"{out}\n"
    meta = json.loads((out / "run.json").read_text())
    assert meta["gpus"] == [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in (0, 1)]
    assert meta["load_mode"] == "decode-concurrent" and meta["cooling"] == "water"
    assert meta["server"] == {"model": "qwen|27b", "engine": "vllm"}  # the \\| unescaped
    assert meta["started_at"] == "2026-05-01T10:00:00Z"
    facts = analyze(load_curve(out), bootstrap=0).to_json()["run"]
    assert facts["gpu_name"] == "NVIDIA H100 80GB HBM3" and facts["n_gpus"] == 2
    assert (facts["load_mode"], facts["cooling"]) == ("decode-concurrent", "water")
    # importing again over its own import is fine; over a sweep's run folder it is refused
    assert run(capsys, "import", str(summary), "--out", str(out))[0] == 0
    (out / "run.json").write_text(json.dumps({"status": "complete"}))
    code, _, err = run(capsys, "import", str(summary), "--out", str(out / "caps.csv"))
    assert code == 2
    assert err.strip() == (
        f"error: {out / 'run.json'} is a sweep's own record, not an import's: give another --out"
    )
