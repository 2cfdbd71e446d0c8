"""``powersweep import``: turn a power-cap table pasted by users of the bash script into caps rows.

The reasoning: docs/analyze.md, "powersweep.analysis.importer".
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from powersweep.analysis.textfile import read_text
from powersweep.errors import UsageError
from powersweep.runformat import JsonObject

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
# "combined (2 cards)" in the power header; "(GPUs 0,1)" in the title of older versions.
_CARDS_IN_HEADER = re.compile(r"\((\d+)\s*cards?\)", re.IGNORECASE)
_GPUS_IN_TITLE = re.compile(r"power-cap sweep\b[^\n]*\(GPUs?\s+([\d,\s]+)\)", re.IGNORECASE)
LOAD_MODES = ("decode-single", "decode-concurrent", "prefill-heavy")
# "**Load mode:** `decode-single`" (the script) and "| Load mode | decode-single |" (a summary)
_LOAD_MODE = re.compile(r"load[\s_-]*mode\W{0,6}(" + "|".join(LOAD_MODES) + r")\b", re.IGNORECASE)
# "# Power-cap sweep — NVIDIA GeForce RTX 3090 (GPUs 0,1)": the script's title names the card
_GPU_IN_TITLE = re.compile(
    r"^#+\s*power-cap sweep\s*[\u2014\u2013:-]+\s*(.+?)\s*(?:\(GPUs?\s[^)]*\))?\s*$",
    re.IGNORECASE | re.MULTILINE,
)
# a summary's "| GPU | 2 x NVIDIA H100 |" (or "2x ...")
_COUNT_PREFIX = re.compile(r"^(\d+)\s*x\s+(.+)$", re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SEPARATOR = re.compile(r"^\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")


def import_summary(md_path: Path) -> pl.DataFrame:
    """Parse the first power-cap table of a markdown file.

    Args:
        md_path: The pasted summary (markdown or plain text).

    Returns:
        Caps rows with columns ``cap_w, narr_tps, code_tps, prefill_tps, power_w, tps_per_w``,
        any of ``EXTRA_COLUMNS`` the table has, and ``n_gpus`` when the text says how many cards
        the draw sums (Float64, null where missing), sorted by cap.

    Raises:
        UsageError: The file cannot be read or decoded (UTF-8 or UTF-16 with its mark), or
            holds no table with a cap column, a power column and a TPS column, or no row with
            a cap.
    """
    text = read_text(Path(md_path))
    prefill = _PREFILL_MODE.search(text) is not None
    for table in _tables(text):
        mapping = _map_header(table[0], prefill=prefill)
        if not {"cap_w", "power_w"} <= set(mapping.values()):
            continue
        if not {"narr_tps", "prefill_tps", "code_tps"} & set(mapping.values()):
            continue
        _check_cells(md_path, table)
        rows = [_parse_row(cells, mapping) for cells in table[1:]]
        rows = [r for r in rows if r["cap_w"] is not None]
        if not rows:
            raise UsageError(f"{md_path}: the power-cap table has no row with a cap")
        columns = [*IMPORT_COLUMNS, *(c for c in EXTRA_COLUMNS if c in mapping.values())]
        data: dict[str, list[float | None]] = {c: [r.get(c) for r in rows] for c in columns}
        cards = _cards(table[0], text)
        if cards is not None:
            columns.append("n_gpus")
            data["n_gpus"] = [float(cards)] * len(rows)
        df = pl.DataFrame(data, schema=dict.fromkeys(columns, pl.Float64))
        return df.sort("cap_w", maintain_order=True)
    raise UsageError(
        f"{md_path}: no power-cap table found (need a markdown table with Cap, Power and TPS "
        "columns)"
    )


def import_run(md_path: Path) -> tuple[pl.DataFrame, JsonObject]:
    """The first power-cap table (:func:`import_summary`) and the run.json its text supports:
    the GPU (a summary's ``| GPU |`` row, or the script's ``# Power-cap sweep — NAME`` title),
    one entry per card the draw sums, the load mode, and a summary's cooling, model / engine and
    date; only what the text states, and ``imported_from``.

    Raises:
        UsageError: As :func:`import_summary`.
    """
    df = import_summary(md_path)
    text = read_text(Path(md_path))
    names, facts = _header_facts(text)
    meta: JsonObject = {"schema_version": 1, "imported_from": str(md_path)}
    if names:
        # the draw column's card count (caps.csv's n_gpus) wins over a summary's "2 x" label
        known = df["n_gpus"].drop_nulls() if "n_gpus" in df.columns else None
        n = int(known.max()) if known is not None and known.len() else len(names)  # type: ignore[arg-type]
        cards = names if len(names) == n else [names[0]] * n
        meta["gpus"] = [{"index": i, "name": name} for i, name in enumerate(cards)]
    server: JsonObject = {k: facts.pop(k) for k in ("model", "engine") if k in facts}
    if server:
        meta["server"] = server
    meta.update(facts)
    return df, meta


def _header_facts(text: str) -> tuple[list[str] | None, dict[str, str]]:
    """The cards a pasted summary's header names (None: none), and what else it says of the run,
    in run.json's keys. A summary's two-column header table (read as the caps table is:
    :func:`_tables`) first, then the script's title and its load-mode line."""
    names: list[str] | None = None
    facts: dict[str, str] = {}
    for table in _tables(text):
        for cells in table:
            if len(cells) != 2:
                continue
            key, value = cells[0].strip().lower(), _unescaped(cells[1])
            if not value or value == "unknown":
                continue
            if key == "gpu" and names is None:
                names = _gpu_names(value)
            elif key == "cooling":
                facts.setdefault("cooling", value)
            elif key == "date":
                facts.setdefault("started_at", value)
            elif key == "model / engine":
                model, _, engine = value.partition(" / ")
                for name, part in (("model", model), ("engine", engine)):
                    if part.strip() and part.strip() != "unknown":
                        facts.setdefault(name, part.strip())
    if names is None:
        title = _GPU_IN_TITLE.search(text)
        if title:
            names = _gpu_names(title.group(1))
    mode = _LOAD_MODE.search(text)
    if mode:
        facts["load_mode"] = mode.group(1).lower()
    return names, facts


def _gpu_names(label: str) -> list[str]:
    """The cards a GPU label names: ``2 x NAME`` two of them, ``A + B`` one of each."""
    count = _COUNT_PREFIX.match(label)
    if count:
        return [count.group(2).strip()] * max(1, int(count.group(1)))
    return [part.strip() for part in label.split(" + ") if part.strip()]


def _unescaped(cell: str) -> str:
    """A cell as written before markdown escaping (``\\|`` is ``|``), code spans unwrapped."""
    return re.sub(r"\\(.)", r"\1", cell).strip().strip("`").strip()


def _check_cells(md_path: Path, table: list[list[str]]) -> None:
    """Every row as many cells as the header: a row with one more (an unescaped ``|`` in a
    cell) or one fewer would read its figures from the wrong columns (issue 46).

    Raises:
        UsageError: The first row that does not fit, named by its number and its first cell.
    """
    width = len(table[0])
    for n, cells in enumerate(table[1:], start=1):
        if len(cells) != width:
            raise UsageError(
                f"{md_path}: row {n} of the power-cap table ({cells[0] or 'no first cell'!r}) "
                f"has {len(cells)} cells where its header has {width}: its figures would be "
                "read from the wrong columns; escape a | inside a cell as \\| or fix the row"
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
        column = _column(name.lower(), prefill)
        if column is not None and column not in mapping.values():
            mapping[index] = column
    return mapping


def _column(h: str, prefill: bool) -> str | None:
    """The caps column a lower-case header cell names (None: none caps.csv has)."""
    if "throttle" in h or "throttling" in h:
        return "thermal_throttle_pct" if "therm" in h else "pwr_throttle_pct"
    if "cap" in h or "limit" in h:
        return "cap_w"
    if "temp" in h or "°c" in h:
        return "temp_max_c"
    if "clock" in h or "mhz" in h or re.search(r"\bclk\b", h):
        return "mem_clock_mhz" if "mem" in h else "sm_clock_mhz"
    if re.search(r"p-?\s?state", h):
        return "pstate"
    if "util" in h:
        return "util_pct"
    if re.search(r"(tps|tok|token)[^|]*(/|per)\s*(combined\s*|total\s*)?w", h) or re.search(
        r"/\s*w\b", h
    ):
        return "tps_per_w"
    if "power" in h or "draw" in h or re.fullmatch(r"\(?w(atts?)?\)?", h.strip()):
        return "power_w"
    return _tps_column(h, prefill)


def _tps_column(h: str, prefill: bool) -> str | None:
    """Which TPS a header cell holds. "decode" holds "code": the code prompt's column is the
    word ``code`` alone. In a prefill table the narrative column is prefill TPS and the code
    column is none caps.csv has (the script repeats the narrative figure there, or gives the
    code prompt's prefill)."""
    stated_prefill = "prefill" in h or re.search(r"\bpp\b", h) or "prompt" in h
    if re.search(r"\bcode\b", h):
        return None if prefill or stated_prefill else "code_tps"
    if stated_prefill:
        return "prefill_tps"
    if "narr" in h:
        return "prefill_tps" if prefill and "decode" not in h else "narr_tps"
    if "decode" in h or "gen" in h:
        return "narr_tps"
    if re.search(r"\btps\b|tok(en)?s?\s*/\s*s", h):
        # A plain TPS column is the load mode's metric.
        return "prefill_tps" if prefill else "narr_tps"
    return None


def _cards(header: list[str], text: str) -> int | None:
    """How many cards the table's draw sums, where the text says (None: it does not)."""
    for cell in header:
        match = _CARDS_IN_HEADER.search(cell)
        if match and _column(cell.lower(), False) == "power_w":
            return max(1, int(match.group(1)))
    title = _GPUS_IN_TITLE.search(text)
    if title:
        indices = [p for p in re.split(r"[,\s]+", title.group(1)) if p]
        return len(indices) or None
    return None


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
