"""powersweep.runformat: the run contract's names agree with themselves and with
docs/run-format.md (every column of samples.csv, requests.csv and caps.csv documented in its own
section, every request warning code named), and the typed column lists partition the files'."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
from msgspec import UNSET

from powersweep import runformat as rf
from tests.paths import REPO

DOC = REPO / "docs" / "run-format.md"


def _documented_columns(section: str) -> list[str]:
    """The column names in the first cell of each table row of a ``## section``."""
    text = DOC.read_text(encoding="utf-8")
    body = next(s for s in re.split(r"^## ", text, flags=re.M) if s.startswith(section))
    out: list[str] = []
    for line in body.splitlines():
        if line.startswith("| `"):
            out += re.findall(r"`([a-z0-9_]+)`", line.split("|")[1])
    return out


@pytest.mark.parametrize(
    ("section", "columns"),
    [
        ("samples.csv", rf.SAMPLES_COLUMNS),
        ("requests.csv", rf.REQUESTS_COLUMNS),
        ("caps.csv", rf.CAPS_COLUMNS),
    ],
)
def test_every_column_is_documented_once_in_its_files_section(
    section: str, columns: tuple[str, ...]
) -> None:
    documented = _documented_columns(section)
    assert len(set(columns)) == len(columns)
    assert sorted(documented) == sorted(columns)


def test_the_warnings_column_names_every_request_warning_code() -> None:
    text = DOC.read_text(encoding="utf-8")
    (row,) = [line for line in text.splitlines() if line.startswith("| `warnings` |")]
    assert [c for c in rf.REQUEST_WARNING_CODES if f"`{c}`" not in row] == []


def test_warning_codes_are_distinct_short_codes() -> None:
    codes = rf.REQUEST_WARNING_CODES
    assert len(set(codes)) == len(codes) == 10
    assert all(re.fullmatch(r"[a-z_]+", c) for c in codes)  # no ';' inside a code


@pytest.mark.parametrize(
    ("all_columns", "floats", "others"),
    [
        (rf.CAPS_COLUMNS, rf.CAPS_FLOAT_COLUMNS, rf.CAPS_TEXT_COLUMNS),
        (
            rf.SAMPLES_COLUMNS,
            rf.SAMPLES_FLOAT_COLUMNS,
            ("phase", "throttle_power", "throttle_thermal", "clock_event_bits", "confirm"),
        ),
        (
            rf.REQUESTS_COLUMNS,
            rf.REQUESTS_FLOAT_COLUMNS,
            ("prompt_kind", "token_source", "finish_reason", "ok", "error", "warnings", "confirm"),
        ),
    ],
)
def test_the_float_columns_are_the_others_in_file_order(
    all_columns: tuple[str, ...], floats: tuple[str, ...], others: tuple[str, ...]
) -> None:
    assert set(others) <= set(all_columns)
    assert floats == tuple(c for c in all_columns if c not in others)
    assert not set(floats) & set(others)


def test_clock_lock_columns_are_in_every_file() -> None:
    for columns in (rf.SAMPLES_COLUMNS, rf.REQUESTS_COLUMNS, rf.CAPS_COLUMNS):
        assert set(rf.CLOCK_LOCK_COLUMNS) <= set(columns)
    assert set(rf.CLOCK_LOCK_COLUMNS) <= set(rf.CAPS_FLOAT_COLUMNS)


def test_cut_finishes_are_the_deadline_and_the_reset() -> None:
    assert rf.CUT_FINISHES == (rf.CUT_BY_DEADLINE, rf.CUT_BY_RESET) == ("deadline", "reset")
    assert rf.WARN_CUT_BY_RESET in rf.REQUEST_WARNING_CODES


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, 3.0), (0.5, 0.5), ("2.5", 2.5), (np.float64(1.5), 1.5), (np.int64(7), 7.0)],
)
def test_as_float_reads_a_cell_a_json_number_or_a_field(value: Any, expected: float) -> None:
    out = rf.as_float(value)
    assert out == expected and type(out) is float
    assert rf.as_float(value, None) == expected


@pytest.mark.parametrize(
    "value", [None, UNSET, True, "", "hot", "N/A", [], math.inf, -math.inf, math.nan, "nan", "inf"]
)
def test_as_float_gives_missing_for_what_is_no_finite_number(value: Any) -> None:
    assert math.isnan(rf.as_float(value))
    assert rf.as_float(value, None) is None
    assert rf.as_float(value, -1.0) == -1.0
