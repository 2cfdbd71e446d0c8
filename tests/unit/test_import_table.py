"""powersweep.cli.import_table: ``powersweep import`` turns a pasted power-cap-sweep.sh summary
table into a caps.csv, beside the summary or where ``--out`` says, and prints its path; a file
without a table is one error line. (test_import_headers.py covers every header the script had.)"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from powersweep.cli import main

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


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_the_caps_csv_goes_beside_the_summary_by_default(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    summary = tmp_path / "sweep.md"
    summary.write_text(TABLE, encoding="utf-8")
    code, out, err = run(capsys, "import", str(summary))
    assert code == 0, err
    target = tmp_path / "sweep.caps.csv"
    assert out == f"{target}\n"
    rows = _rows(target)
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
    assert not (tmp_path / "sweep.caps.csv").exists()


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
    assert not (tmp_path / "sweep.caps.csv").exists()
