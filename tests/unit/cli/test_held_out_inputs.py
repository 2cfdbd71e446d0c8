"""Files nobody planned for, given to ``analyze``: each is one ``error:`` line (exit 2) or a right
answer with its problem named in the findings; never a traceback, never a silently wrong answer.

Every good case is the same three-cap curve (300 W 30 TPS 299 W, 280 W 29.5 TPS 279 W, 260 W 29.4
TPS 259 W) whose best TPS/W is 260 W, written some other way.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest

from powersweep.cli import main

ROWS = [("300", "30", "299"), ("280", "29.5", "279"), ("260", "29.4", "259")]
HEADER = ("cap_w", "narr_tps", "power_w")


def _csv(sep: str = ",", end: str = "\n", rows: list[tuple[str, ...]] | None = None) -> str:
    lines = [sep.join(HEADER), *(sep.join(r) for r in (ROWS if rows is None else rows))]
    return end.join(lines) + end


GOOD = _csv()

# (label, bytes, sweet spot W, finding code that must name the problem or None)
ANSWERS: list[tuple[str, bytes, float, str | None]] = [
    ("no final newline", GOOD.rstrip("\n").encode(), 260.0, None),
    ("CRLF line ends", _csv(end="\r\n").encode(), 260.0, None),
    ("old Mac CR line ends", _csv(end="\r").encode(), 260.0, None),
    ("a UTF-8 BOM", codecs.BOM_UTF8 + GOOD.encode(), 260.0, None),
    (
        "UTF-16 LE with BOM, tabs (Excel Unicode text)",
        _csv("\t", "\r\n").encode("utf-16"),
        260.0,
        None,
    ),
    ("UTF-16 BE with BOM", codecs.BOM_UTF16_BE + GOOD.encode("utf-16-be"), 260.0, None),
    ("semicolons", _csv(";").encode(), 260.0, None),
    ("trailing blank lines", (GOOD + "\n\n  \n").encode(), 260.0, None),
    (
        "quoted fields",
        GOOD.replace("29.4", '"29.4"').replace("cap_w", '"cap_w"').encode(),
        260.0,
        None,
    ),
    (
        "header cells with spaces and capitals",
        GOOD.replace("cap_w,", " Cap_W ,").encode(),
        260.0,
        None,
    ),
    (
        "duplicate header column",
        (b"cap_w,narr_tps,power_w,narr_tps\n300,30,299,99\n280,29.5,279,1\n260,29.4,259,1\n"),
        260.0,
        "input_note",
    ),
    (
        "unknown header column",
        GOOD.replace("power_w", "power_w,note")
        .replace("299", "299,x")
        .replace("279", "279,y")
        .replace("259", "259,z")
        .encode(),
        260.0,
        "input_note",
    ),
    ("a zero-TPS row", (GOOD + "250,0,249\n").encode(), 260.0, "rows_ignored"),
    ("a negative draw", (GOOD + "250,29,-249\n").encode(), 260.0, "rows_ignored"),
    ("NaN and inf cells", (GOOD + "250,nan,240\n240,inf,230\n").encode(), 260.0, "rows_ignored"),
    ("a duplicate cap", (GOOD + "260,29.4,259\n").encode(), 260.0, "duplicate_cap"),
    ("a zero draw", (GOOD + "250,29,0\n").encode(), 260.0, "rows_ignored"),
    ("a draw in mW", (GOOD + "250,40,249000000\n").encode(), 260.0, "implausible_rows"),
]

# (label, bytes or None for a directory, a word of the error line)
ERRORS: list[tuple[str, bytes | None, str]] = [
    ("an empty file", b"", "empty file"),
    ("only white space", b"\n \n", "empty file"),
    ("a header only", b"cap_w,narr_tps,power_w\n", "no data rows"),
    (
        "a Latin-1 file",
        "cap_w,narr_tps,power_w,note\n300,30,299,25°C\n".encode("latin-1"),
        "latin-1",
    ),
    ("UTF-16 without its BOM", GOOD.encode("utf-16-le"), "utf-16"),
    ("UTF-32", GOOD.encode("utf-32"), "utf-32"),
    ("an Excel workbook", b"PK\x03\x04\x14\x00\x06\x00" + bytes(200), "workbook"),
    ("a gzip file", b"\x1f\x8b\x08\x00" + bytes(50), "gzip"),
    ("binary junk", bytes(range(256)) * 4, "binary"),
    ("every TPS zero", b"cap_w,narr_tps,power_w\n300,0,299\n280,0,279\n250,0,249\n", "nothing"),
    ("every draw negative", b"cap_w,narr_tps,power_w\n300,30,-299\n280,29,-279\n", "nothing"),
    ("thousands separators", b'cap_w,narr_tps,power_w\n300,30,"1,299"\n', "thousands"),
    ("decimal commas", b"cap_w;narr_tps;power_w\n300;30;299\n280;29,5;279\n", "decimal point"),
    ("a row with too many fields", b"cap_w,narr_tps,power_w\n300,30,299\n280,29,279,5\n", "line 3"),
    ("a negative cap", b"cap_w,narr_tps,power_w\n-300,30,299\n", "positive"),
    ("no cap column", b"watts,narr_tps,power_w\n300,30,299\n", "cap_w"),
    ("a directory without caps.csv", None, "no caps.csv"),
]


def _analyze(
    path: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> tuple[int, str, dict | None]:
    code = main(["analyze", str(path), "--json", "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, err, json.loads(out) if code == 0 else None


@pytest.mark.parametrize(("label", "data", "best_w", "code"), ANSWERS, ids=[a[0] for a in ANSWERS])
def test_a_file_of_this_kind_gets_the_right_answer_with_its_problem_named(
    label: str,
    data: bytes,
    best_w: float,
    code: str | None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "curve.csv"
    path.write_bytes(data)
    rc, err, result = _analyze(path, capsys, tmp_path)
    assert rc == 0, err
    assert result is not None
    assert result["sweet_spot"]["cap_w"] == best_w, label
    codes = {f["code"] for f in result["findings"]}
    if code is None:
        assert [c["cap_w"] for c in result["caps"]] == [260.0, 280.0, 300.0]
        assert [c["tps"] for c in result["caps"]] == [29.4, 29.5, 30.0]
        assert not codes & {"input_note", "rows_ignored", "implausible_rows", "duplicate_cap"}
    else:
        assert code in codes, result["findings"]


@pytest.mark.parametrize(("label", "data", "needle"), ERRORS, ids=[e[0] for e in ERRORS])
def test_a_file_of_this_kind_is_one_error_line(
    label: str,
    data: bytes | None,
    needle: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "curve"
    if data is None:
        path.mkdir()
    else:
        path.write_bytes(data)
    rc, err, _ = _analyze(path, capsys, tmp_path)
    assert rc == 2, label
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert needle.lower() in lines[0].lower(), lines[0]
    assert not (tmp_path / "out").exists()


def test_the_duplicate_and_unknown_columns_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "curve.csv"
    path.write_text("cap_w,narr_tps,power_w,narr_tps,colour\n300,30,299,99,red\n280,29,279,1,b\n")
    _, _, result = _analyze(path, capsys, tmp_path)
    assert result is not None
    notes = " ".join(f["message"] for f in result["findings"] if f["code"] == "input_note")
    assert "'narr_tps' appears 2 times in the header (columns 2, 4): column 2 is used" in notes
    assert "'colour'" in notes
    # the first copy is the one read, not the later one
    assert result["caps"][1]["tps"] == 30.0


def test_a_curve_of_zeros_gets_no_sweet_spot_and_rows_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the case: a zero-TPS curve had a starred "sweet spot" at 250 W
    path = tmp_path / "zeros.csv"
    path.write_text("cap_w,narr_tps,power_w\n300,0,299\n280,0,279\n250,0,249\n")
    rc, err, _ = _analyze(path, capsys, tmp_path)
    assert rc == 2 and "nothing to analyse" in err
    # some usable: the zero rows are named and left out
    path.write_text("cap_w,narr_tps,power_w\n300,30,299\n280,0,279\n250,28,249\n")
    _, _, result = _analyze(path, capsys, tmp_path)
    assert result is not None
    (ignored,) = [f for f in result["findings"] if f["code"] == "rows_ignored"]
    assert "line 3 (280 W): narr_tps is 0 (not positive)" in ignored["message"]
    assert result["sweet_spot"]["cap_w"] == 250.0


def test_a_curve_whose_every_row_is_set_aside_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "caps.csv"
    path.write_text(
        "cap_w,narr_tps,power_w,status,error\n300,30,299,suspect,a stall\n280,29,279,failed,x\n"
    )
    rc, err, _ = _analyze(path, capsys, tmp_path)
    assert rc == 2
    (line,) = err.strip().splitlines()
    assert "nothing to analyse" in line and "suspect" in line
    assert main(["plot", str(path), "--out", str(tmp_path / "charts")]) == 2
    assert not (tmp_path / "charts").exists()


def test_a_pipe_or_a_device_is_one_error_line_not_a_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    fifo = tmp_path / "caps.csv"
    os.mkfifo(fifo)  # reading it would block until someone writes
    for target in (fifo, Path("/dev/zero")):  # ... or never end
        for command in (["analyze", str(target)], ["import", str(target)]):
            assert main(command) == 2
            (line,) = capsys.readouterr().err.strip().splitlines()
            assert "not a regular file" in line
