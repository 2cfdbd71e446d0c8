"""powersweep.analysis.importer: the first power-cap table of a pasted summary found among other
tables, its cells read as numbers (units, thousands separators, missing markers), the cards a
combined draw sums, the TPS a stated load mode means, and its refusals.

(test_summary.py covers the varied headers and extra columns; test_import_headers.py every
header power-cap-sweep.sh printed.)"""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from powersweep.analysis.importer import IMPORT_COLUMNS, import_summary
from powersweep.errors import UsageError


def _md(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "summary.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_first_table_with_cap_power_and_tps_is_taken_and_sorted(tmp_path: Path) -> None:
    path = _md(
        tmp_path,
        "| Model | TPS |\n|---|---|\n| qwen | 3 |\n\n"  # no cap or power column: skipped
        "| Limit | gen tps | W |\n|:--|--:|--|\n"
        "| 350 W | 1,234.5 tok/s | 349.0 |\n| 300 | 30 | 299 |\n| total | 5 | 6 |\n\n"
        "| Cap (W) | TPS | Power (W) |\n|---|---|---|\n| 100 | 1 | 99 |\n",  # a later table
    )
    df = import_summary(path)
    assert df.columns == list(IMPORT_COLUMNS)
    # a row whose cap is no number (a total line) is dropped; rows are sorted by cap
    assert df.select("cap_w", "narr_tps", "power_w").rows() == [
        (300.0, 30.0, 299.0),
        (350.0, 1234.5, 349.0),
    ]


def test_cells_read_as_numbers_and_markers_as_missing(tmp_path: Path) -> None:
    path = _md(
        tmp_path,
        "| Cap (W) | TPS | Power (W) | Code TPS |\n|---|---|---|---|\n"
        "| 250 | .5 | 1e2 | ? |\n| 260 | 12,345 | 259.5 W | — |\n| 270 | n/a | 269 | - |\n"
        "| 280 | 28 | 279 | |\n",
    )
    df = import_summary(path)
    assert df["narr_tps"].to_list() == [0.5, 12345.0, None, 28.0]
    assert df["power_w"].to_list() == [100.0, 259.5, 269.0, 279.0]
    assert df["code_tps"].to_list() == [None, None, None, None]


def test_a_combined_draw_sets_the_cards_it_sums(tmp_path: Path) -> None:
    header = (
        "| Cap (W/card) | Narr decode TPS | Code decode TPS "
        "| Actual power combined (2 cards) (W) | Narr TPS/combined W |\n|---|---|---|---|---|\n"
    )
    df = import_summary(_md(tmp_path, header + "| 300 | 30 | 29 | 598 | 0.05 |\n"))
    assert df.columns == [*IMPORT_COLUMNS, "n_gpus"]
    assert df.row(0) == (300.0, 30.0, 29.0, None, 598.0, 0.05, 2.0)


def test_the_gpus_in_an_older_title_set_the_cards(tmp_path: Path) -> None:
    text = (
        "## power-cap sweep (GPUs 0, 1, 3)\n\n"
        "| Cap (W) | Narr wall TPS | Actual power (W) |\n|---|---|---|\n| 300 | 30 | 899 |\n"
    )
    assert import_summary(_md(tmp_path, text))["n_gpus"].to_list() == [3.0]
    # no word on the cards: no n_gpus column (one card, as caps.csv defaults)
    plain = "| Cap (W) | TPS | Power (W) |\n|---|---|---|\n| 300 | 30 | 299 |\n"
    assert "n_gpus" not in import_summary(_md(tmp_path, plain)).columns


def test_a_prefill_table_reads_its_narrative_column_as_prefill_and_drops_code(
    tmp_path: Path,
) -> None:
    text = (
        "Load mode: prefill-heavy\n\n"
        "| Cap (W) | Narr wall TPS | Code wall TPS | Actual power (W) |\n|---|---|---|---|\n"
        "| 300 | 3000 | 2900 | 299 |\n"
    )
    df = import_summary(_md(tmp_path, text))
    assert df.row(0, named=True) == {
        "cap_w": 300.0,
        "narr_tps": None,
        "code_tps": None,
        "prefill_tps": 3000.0,
        "power_w": 299.0,
        "tps_per_w": None,
    }


def test_a_stated_prefill_column_is_prefill_in_a_decode_table(tmp_path: Path) -> None:
    text = (
        "| Cap (W) | PP tok/s | Code TPS | Power (W) |\n|---|---|---|---|\n"
        "| 300 | 3000 | 20 | 299 |\n"
    )
    df = import_summary(_md(tmp_path, text))
    assert (df["prefill_tps"][0], df["code_tps"][0], df["narr_tps"][0]) == (3000.0, 20.0, None)


def test_escaped_pipes_and_repeated_columns(tmp_path: Path) -> None:
    text = (
        "| Cap (W) | TPS | Power (W) | Power (W) | note |\n|---|---|---|---|---|\n"
        "| 300 | 30 | 299 | 5 | a \\| b |\n"
    )
    # the first power column is used; an escaped pipe does not split a cell
    assert import_summary(_md(tmp_path, text)).row(0)[:5] == (300.0, 30.0, None, None, 299.0)


def test_a_utf16_paste_with_its_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    text = "| Cap (W) | TPS | Power (W) |\r\n|---|---|---|\r\n| 300 | 30 | 299 |\r\n"
    path.write_bytes(codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
    assert import_summary(path)["cap_w"].to_list() == [300.0]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "| Cap | TPS | Power |\n|---|---|---|\n| ? | 30 | 299 |\n| - | 31 | 300 |\n",
            "the power-cap table has no row with a cap",
        ),
        ("| Cap (W) | Power (W) |\n|---|---|\n| 300 | 299 |\n", "no power-cap table found"),
        ("| Cap (W) | TPS |\n|---|---|\n| 300 | 30 |\n", "no power-cap table found"),
        ("just text, no table\n", "no power-cap table found"),
    ],
)
def test_a_file_without_a_usable_table_is_one_usage_error(
    tmp_path: Path, text: str, error: str
) -> None:
    path = _md(tmp_path, text)
    with pytest.raises(UsageError) as exc:
        import_summary(path)
    assert str(exc.value).startswith(f"{path}: {error}")
