"""``powersweep import``: turn a power-cap table pasted by users of the bash script into caps rows.

The script prints a table like::

    | Cap (W/card) | Narr TPS | Code TPS | Prefill TPS | Power (W) | TPS/combined W |
    |---|---|---|---|---|---|
    | 290 | 32.26 | 32.17 | ? | 289.55 | 0.111 |

Column names vary between versions and hand edits, so columns are matched by keywords, and cells
may carry units (``290 W``) or ``?`` / ``-`` / nothing for a missing value. Every column the table
has that caps.csv knows is kept (temperature, SM and memory clock, P-state, throttle %,
utilization), and the load mode the text states decides what a plain "TPS" column is: prefill TPS
in a prefill table, decode TPS otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from powersweep.errors import UsageError

IMPORT_COLUMNS: tuple[str, ...] = (
    "cap_w",
    "narr_tps",
    "code_tps",
    "prefill_tps",
    "power_w",
    "tps_per_w",
)
# Kept when the table has them (caps.csv names).
EXTRA_COLUMNS: tuple[str, ...] = (
    "temp_max_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "util_pct",
    "pwr_throttle_pct",
    "thermal_throttle_pct",
    "pstate",
)
_PREFILL_MODE = re.compile(r"(load[\s_-]*mode|mode)\W{0,6}[^\n|]*prefill", re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SEPARATOR = re.compile(r"^\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")


def import_summary(md_path: Path) -> pl.DataFrame:
    """Parse the first power-cap table of a markdown file.

    Args:
        md_path: The pasted summary (markdown or plain text).

    Returns:
        Caps rows with columns ``cap_w, narr_tps, code_tps, prefill_tps, power_w, tps_per_w``
        and any of ``EXTRA_COLUMNS`` the table has (Float64, null where missing), sorted by cap.

    Raises:
        UsageError: The file cannot be read, or holds no table with a cap column, a power column
            and a TPS column, or no row with a cap.
    """
    try:
        # utf-8-sig: a BOM from a Windows editor would glue itself to the first header cell
        text = Path(md_path).read_text(encoding="utf-8-sig", errors="replace")
    except OSError as exc:
        raise UsageError(f"{md_path}: cannot read: {exc.strerror or exc}") from exc

    prefill = _PREFILL_MODE.search(text) is not None
    for table in _tables(text):
        mapping = _map_header(table[0], prefill=prefill)
        if not {"cap_w", "power_w"} <= set(mapping.values()):
            continue
        if not {"narr_tps", "prefill_tps", "code_tps"} & set(mapping.values()):
            continue
        rows = [_parse_row(cells, mapping) for cells in table[1:]]
        rows = [r for r in rows if r["cap_w"] is not None]
        if not rows:
            raise UsageError(f"{md_path}: the power-cap table has no row with a cap")
        columns = [*IMPORT_COLUMNS, *(c for c in EXTRA_COLUMNS if c in mapping.values())]
        df = pl.DataFrame(
            {c: [r.get(c) for r in rows] for c in columns},
            schema=dict.fromkeys(columns, pl.Float64),
        )
        return df.sort("cap_w", maintain_order=True)
    raise UsageError(
        f"{md_path}: no power-cap table found (need a markdown table with Cap, Power and TPS "
        "columns)"
    )


def _cells(line: str) -> list[str]:
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def _tables(text: str) -> list[list[list[str]]]:
    """Markdown tables as lists of rows of cells (header first, separator rows dropped)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        # Quoted pastes ("> | ... |") are common in discussions.
        while line.startswith(">"):
            line = line[1:].strip()
        if line.startswith("|") and line.count("|") >= 2:
            if not _SEPARATOR.match(line):
                current.append(_cells(line))
            continue
        if current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def _map_header(header: list[str], *, prefill: bool = False) -> dict[int, str]:
    """Column index -> caps column, by keywords (first match wins per column)."""
    mapping: dict[int, str] = {}
    for index, name in enumerate(header):
        h = name.lower()
        column: str | None
        if "throttle" in h or "throttling" in h:
            column = "thermal_throttle_pct" if "therm" in h else "pwr_throttle_pct"
        elif "cap" in h or "limit" in h:
            column = "cap_w"
        elif "temp" in h or "°c" in h:
            column = "temp_max_c"
        elif "clock" in h or "mhz" in h:
            column = "mem_clock_mhz" if "mem" in h else "sm_clock_mhz"
        elif re.search(r"p-?\s?state", h):
            column = "pstate"
        elif "util" in h:
            column = "util_pct"
        elif re.search(r"(tps|tok|token)[^|]*(/|per)\s*(combined\s*|total\s*)?w", h) or re.search(
            r"/\s*w\b", h
        ):
            column = "tps_per_w"
        elif "narr" in h or "decode" in h or "gen" in h:
            column = "narr_tps"
        elif "code" in h:
            column = "code_tps"
        elif "prefill" in h or re.search(r"\bpp\b", h) or "prompt" in h:
            column = "prefill_tps"
        elif "power" in h or "draw" in h or re.fullmatch(r"\(?w(atts?)?\)?", h.strip()):
            column = "power_w"
        elif re.search(r"\btps\b|tok(en)?s?\s*/\s*s", h):
            # A plain TPS column is the load mode's metric.
            column = "prefill_tps" if prefill else "narr_tps"
        else:
            column = None
        if column is not None and column not in mapping.values():
            mapping[index] = column
    return mapping


def _number(cell: str) -> float | None:
    text = _THOUSANDS.sub("", cell.strip().replace("\\", ""))
    if not text or text in {"?", "-", "\u2014", "\u2013", "n/a", "N/A", "na"}:
        return None
    match = _NUMBER.search(text)
    if match is None:
        return None
    return float(match.group(0))


def _parse_row(cells: list[str], mapping: dict[int, str]) -> dict[str, float | None]:
    row: dict[str, float | None] = dict.fromkeys(IMPORT_COLUMNS)
    for index, column in mapping.items():
        if index < len(cells):
            row[column] = _number(cells[index])
    return row
