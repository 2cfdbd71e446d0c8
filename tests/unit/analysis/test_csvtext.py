"""powersweep.analysis.csvtext: a CSV read as text (the header's delimiter, trimmed and case-
folded known names, duplicated, unknown and unnamed columns noted), a last line cut by a crash
told from a hand-made file's, and text cells turned into numbers or one error naming the cell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from powersweep.analysis.csvtext import cut_by_crash, read_text_csv, to_floats
from powersweep.analysis.run_record import RunRecord
from powersweep.errors import UsageError
from tests.helpers.files import write_text as _csv

KNOWN = ("cap_w", "power_w", "narr_tps", "status")


@pytest.mark.parametrize("sep", [",", "\t", ";"])
def test_the_header_decides_the_delimiter(tmp_path: Path, sep: str) -> None:
    path = _csv(
        tmp_path, sep.join(["cap_w", "power_w", "narr_tps"]) + "\n300" + sep + "299.5" + sep + "2\n"
    )
    df = read_text_csv(path)
    assert df.columns == ["cap_w", "power_w", "narr_tps"]
    assert df.row(0) == ("300", "299.5", "2")


def test_a_decimal_comma_stays_in_its_cell_of_a_semicolon_file(tmp_path: Path) -> None:
    # a locale's export: the comma is no delimiter here (to_floats names the cell later)
    df = read_text_csv(_csv(tmp_path, "cap_w;power_w\n300;299,5\n"))
    assert df.row(0) == ("300", "299,5")


def test_header_names_are_trimmed_known_ones_lower_cased_and_all_text(tmp_path: Path) -> None:
    path = _csv(tmp_path, " CAP_W , Power_W ,narr_tps\n300,299.5,30\n")
    notes: list[str] = []
    df = read_text_csv(path, notes, known=KNOWN)
    assert df.columns == ["cap_w", "power_w", "narr_tps"]
    assert df.dtypes == [pl.String] * 3
    assert notes == []


def test_duplicate_unknown_and_unnamed_columns_are_noted(tmp_path: Path) -> None:
    path = _csv(tmp_path, "cap_w,power_w,cap_w,fan_rpm,,\n300,299,310,1200,x,\n")
    notes: list[str] = []
    df = read_text_csv(path, notes, known=KNOWN)
    assert df.columns == [
        "cap_w",
        "power_w",
        "cap_w (copy in column 3)",
        "fan_rpm",
        "(column 5)",
        "(column 6)",
    ]
    assert df["cap_w"].to_list() == ["300"]  # the first copy is used
    assert notes == [
        "caps.csv: column 'cap_w' appears 2 times in the header (columns 1, 3): column 1 is "
        "used, the others are ignored",
        "caps.csv: 1 column(s) not in the run format are ignored: 'fan_rpm'",
        "caps.csv: column 5 has values but no header name and is ignored",
    ]


def test_without_known_names_unknown_columns_are_not_noted(tmp_path: Path) -> None:
    notes: list[str] = []
    read_text_csv(_csv(tmp_path, "cap_w,fan_rpm\n1,2\n"), notes)
    assert notes == []


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "empty file"),
        ("  \n\n", "empty file"),
        ("cap_w,power_w\n300,299,1,2\n", "malformed CSV (line 2 has 4 fields, the header 2)"),
    ],
)
def test_unreadable_csvs_are_one_usage_error(tmp_path: Path, text: str, error: str) -> None:
    path = _csv(tmp_path, text)
    with pytest.raises(UsageError) as exc:
        read_text_csv(path)
    assert str(exc.value) == f"{path}: {error}"


def test_a_last_line_without_its_end_is_kept_in_a_hand_made_file(tmp_path: Path) -> None:
    path = _csv(tmp_path, "cap_w,power_w\n300,299\n310,30")
    notes: list[str] = []
    assert read_text_csv(path, notes)["cap_w"].to_list() == ["300", "310"]
    assert notes == []


def test_a_last_line_cut_by_a_crash_is_dropped_with_a_note(tmp_path: Path) -> None:
    path = _csv(tmp_path, "cap_w,power_w\n300,299\n310,30")
    notes: list[str] = []
    run = RunRecord(status="running", caps_done=[300.0])
    assert read_text_csv(path, notes, run=run)["cap_w"].to_list() == ["300"]
    assert notes == [
        "caps.csv: the last row was cut short (no line end, and run.json does not count it: the "
        "run was interrupted mid-write) and is ignored: '310,30'"
    ]


@pytest.mark.parametrize(
    ("name", "run", "cut"),
    [
        ("caps.csv", None, False),  # no run.json: someone's own file
        ("caps.csv", {"status": "complete"}, False),  # a run that ended wrote whole rows
        ("caps.csv", {"status": "partial", "rows_written": {"caps.csv": 0}}, False),
        ("caps.csv", {"status": "running", "rows_written": {"caps.csv": 1}}, True),
        (
            "caps.csv",
            {"status": "running", "rows_written": {"caps.csv": 2}, "caps_done": [310]},
            False,
        ),
        ("caps.csv", {"status": "running", "caps_done": [300, 310]}, False),  # its cap is done
        ("caps.csv", {"status": "running", "caps_done": [300]}, True),
        ("samples.csv", {"status": "running"}, True),  # an older run: no count at all
        ("samples.csv", {"status": "running", "rows_written": {"samples.csv": 2}}, False),
    ],
)
def test_cut_by_crash_reads_the_runs_own_record(name: str, run: dict | None, cut: bool) -> None:
    # header + one whole row + a last line without its end ("310,30")
    record = RunRecord.from_json(run) if run is not None else None
    assert cut_by_crash(name, "cap_w,power_w\n300,299\n310,30", record) is cut


@pytest.mark.parametrize(
    ("run", "key"),
    [
        ({"status": "running", "caps_done": "300,310"}, r"\$\.caps_done"),
        ({"status": "running", "rows_written": {"samples.csv": True}}, r"\$\.rows_written"),
    ],
)
def test_a_run_record_of_the_wrong_shape_is_refused_naming_the_key(
    run: dict[str, Any], key: str
) -> None:
    """What cut_by_crash once read as no count (a list as text, a bool as a count) is a run.json
    the typed record refuses, with the key that is wrong."""
    with pytest.raises(UsageError, match=r"run\.json does not follow its schema: .*" + key):
        RunRecord.from_json(run)


def test_to_floats_reads_numbers_missing_tokens_and_booleans() -> None:
    df = pl.DataFrame(
        {
            "a": [" 1.5 ", "", "nan", "N/A", "?", "-", "true", "FALSE", "1e3", None],
            "b": ["2"] * 10,
        }
    )
    out = to_floats(Path("x.csv"), df, ["a", "b", "absent"])
    assert list(out) == ["a", "b"]
    assert out["a"].to_list() == [1.5, None, None, None, None, None, 1.0, 0.0, 1000.0, None]
    assert out["a"].dtype == pl.Float64
    assert to_floats(Path("x.csv"), df, ["absent"]) == {}


def test_to_floats_names_the_first_bad_cell_with_its_line() -> None:
    df = pl.DataFrame({"cap_w": ["300", "310"], "power_w": ["1", "abc"], "narr_tps": ["x", "1"]})
    with pytest.raises(UsageError) as exc:
        to_floats(Path("caps.csv"), df, ["cap_w", "power_w", "narr_tps"])
    # power_w comes first in the columns asked for, though narr_tps's bad cell is on line 2
    assert str(exc.value) == "caps.csv line 3: power_w 'abc' is not a number"


def test_a_thousands_separator_gets_a_hint() -> None:
    df = pl.DataFrame({"energy_j": ["1,234"]})
    with pytest.raises(UsageError) as exc:
        to_floats(Path("caps.csv"), df, ["energy_j"])
    assert str(exc.value) == (
        "caps.csv line 2: energy_j '1,234' is not a number (write numbers without thousands "
        "separators, with a decimal point)"
    )
