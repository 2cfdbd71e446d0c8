"""A run's CSV (or a hand-made one) read as text, every problem named rather than guessed away.

The reasoning: docs/analyze.md, "powersweep.analysis.csvtext".
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Collection, Sequence
from pathlib import Path

import polars as pl

from powersweep.analysis.run_record import RunRecord
from powersweep.analysis.textfile import read_text
from powersweep.errors import UsageError
from powersweep.runformat import FORMULA_STARTS

# Cells that mean "not measured" besides an empty one (tolerated in hand-made files).
MISSING_TOKENS = frozenset({"", "nan", "none", "null", "na", "n/a", "?", "-", "—"})
# run.json key: data rows of each CSV written whole when run.json was last written.

_DELIMITERS = (",", "\t", ";")
# A cell that starts like a spreadsheet formula (runformat.FORMULA_STARTS, as a regex).
_FORMULA_START = "^[" + "".join("\\" + c if c in "-^]\\" else c for c in FORMULA_STARTS) + "]"
# A run that ended this way wrote every row whole (older runs, without ``rows_written``).
_ENDED_CLEANLY = frozenset({"complete", "partial"})


def read_text_csv(
    path: Path,
    notes: list[str] | None = None,
    *,
    run: RunRecord | None = None,
    known: Collection[str] | None = None,
) -> pl.DataFrame:
    """Read a CSV with every column as text, mapping every failure to one UsageError line.

    Args:
        path: The CSV.
        notes: Where problems that do not stop the read are said (a cut row, a duplicated or
            unknown column); None: not said.
        run: The run's ``run.json``, if any: it alone can say a last line without its line end
            was cut by a crash (:func:`cut_by_crash`).
        known: Column names the file may have; others are noted as ignored (None: not checked).

    Returns:
        The rows, columns named by the trimmed header (a duplicate's later copies renamed so
        that nothing reads them).

    Raises:
        UsageError: The file cannot be read or decoded, is empty, or is not a CSV.
    """
    text = read_text(path)
    if not text.strip():
        raise UsageError(f"{path}: empty file")
    header_line = text.split("\n", 1)[0]
    delimiter = _delimiter(header_line, known)
    if not text.endswith("\n") and "\n" in text.strip() and cut_by_crash(path.name, text, run):
        cut = text.rfind("\n") + 1
        partial = text[cut:]
        text = text[:cut]
        if notes is not None:
            notes.append(
                f"{path.name}: the last row was cut short (no line end, and run.json does not "
                f"count it: the run was interrupted mid-write) and is ignored: {partial[:60]!r}"
            )
    names = next(csv.reader([header_line], delimiter=delimiter), [])
    try:
        df = pl.read_csv(io.BytesIO(text.encode("utf-8")), infer_schema=False, separator=delimiter)
    except pl.exceptions.PolarsError as exc:
        raise UsageError(f"{path}: malformed CSV ({_malformed(text, delimiter, exc)})") from exc
    if len(names) != df.width:
        raise UsageError(f"{path}: malformed CSV (the header does not parse: {header_line[:60]!r})")
    renamed, problems = _header(names, known)
    df.columns = renamed
    if notes is not None:
        notes += [f"{path.name}: {p}" for p in problems + _unnamed(df)]
    return df


def cut_by_crash(name: str, text: str, run: RunRecord | None) -> bool:
    """Whether a last line without its line end was cut by a crash, as the run records it.

    The sweep writes whole rows, each with its line end, and counts them in ``run.json``
    (``rows_written``) after each cap: in a run that did not end (``complete`` or ``partial``),
    a last line beyond that count was being written when it died, and so was a caps.csv row
    whose cap ``caps_done`` lacks (run.json is written after each cap's row; older runs have no
    count). A run that ended wrote every row whole, and a file with no run.json is someone's
    own: there the last line counts.
    """
    if run is None:
        return False
    lines = text.count("\n")  # the header and the complete data rows before the last line
    written = (run.rows_written or {}).get(name)
    if run.status in _ENDED_CLEANLY:
        return False  # it wrote every row whole and ended: a later line is someone's edit
    if written is not None and lines > written:
        return True
    if name == "caps.csv":
        # run.json is written after each cap's row: a row whose cap it does not list was cut.
        return _last_cap(text) not in _numbers(run.caps_done)
    return written is None


def _last_cap(text: str) -> float | None:
    head = text.split("\n", 1)[0]
    last = text[text.rfind("\n") + 1 :]
    delimiter = _delimiter(head, None)
    names = [n.strip() for n in next(csv.reader([head], delimiter=delimiter), [])]
    cells = next(csv.reader([last], delimiter=delimiter), [])
    if "cap_w" not in names or names.index("cap_w") >= len(cells):
        return None
    try:
        return float(cells[names.index("cap_w")])
    except ValueError:
        return None


def _numbers(values: Sequence[object] | None) -> set[float]:
    out: set[float] = set()
    for v in values or []:
        if isinstance(v, int | float) and not isinstance(v, bool):
            out.add(float(v))
    return out


def _delimiter(header: str, known: Collection[str] | None) -> str:
    """The header's delimiter: a comma, else the tab or semicolon that splits it into known
    names (Excel's "Unicode text" is tab-separated; some locales export with semicolons)."""
    wanted = set(known or ()) | {"cap_w", "power_w", "narr_tps", "prefill_tps"}
    for delimiter in _DELIMITERS:
        cells = next(csv.reader([header], delimiter=delimiter), [])
        if {c.strip().lower() for c in cells} & wanted:
            return delimiter
    return ","


def _header(names: Sequence[str], known: Collection[str] | None) -> tuple[list[str], list[str]]:
    """Trimmed header names (a known name in any case becomes the contract's), each unique,
    and what is wrong with them: duplicates (the first copy is used) and unknown columns."""
    wanted = set(known or ())
    trimmed = []
    for i, raw in enumerate(names):
        name = raw.strip()
        if name.lower() in wanted:
            name = name.lower()
        trimmed.append(name or f"(column {i + 1})")
    counts = Counter(trimmed)
    out: list[str] = []
    problems: list[str] = []
    seen: set[str] = set()
    for i, name in enumerate(trimmed):
        if name in seen:
            out.append(f"{name} (copy in column {i + 1})")
            continue
        seen.add(name)
        out.append(name)
        if counts[name] > 1:
            where = [str(j + 1) for j, n in enumerate(trimmed) if n == name]
            problems.append(
                f"column {name!r} appears {counts[name]} times in the header (columns "
                f"{', '.join(where)}): column {where[0]} is used, the others are ignored"
            )
    if known is not None:
        unknown = [n for n in dict.fromkeys(trimmed) if n not in wanted and not n.startswith("(")]
        if unknown:
            problems.append(
                f"{len(unknown)} column(s) not in the run format are ignored: "
                + ", ".join(repr(n) for n in unknown[:12])
            )
    return out, problems


def _unnamed(df: pl.DataFrame) -> list[str]:
    """Columns with no header name that hold data (a trailing delimiter makes empty ones)."""
    out = []
    for name in df.columns:
        if not name.startswith("(column "):
            continue
        if (
            df.get_column(name)
            .cast(pl.String)
            .str.strip_chars()
            .fill_null("")
            .str.len_chars()
            .sum()
        ):
            out.append(f"{name[1:-1]} has values but no header name and is ignored")
    return out


def _malformed(text: str, delimiter: str, exc: Exception) -> str:
    """Where a CSV polars cannot read goes wrong, in words (the line with too many fields)."""
    rows = csv.reader(io.StringIO(text), delimiter=delimiter)
    width = None
    for line, row in enumerate(rows, start=1):
        if width is None:
            width = len(row)
        elif len(row) > width:
            return f"line {line} has {len(row)} fields, the header {width}"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return first


def to_floats(path: Path, df: pl.DataFrame, columns: Sequence[str]) -> dict[str, pl.Series]:
    """Convert text columns to Float64 in one pass.

    A cell that is neither a number nor missing (empty, ``nan``, ``n/a``, ``?``, ...) is an
    error, reported for the first such column in ``columns`` order; ``true``/``false`` are 1/0.

    Raises:
        UsageError: A cell is not a number; the message names the line, column and cell.
    """
    present = [c for c in columns if c in df.columns]
    if not present:
        return {}
    exprs: list[pl.Expr] = []
    for column in present:
        text = pl.col(column).cast(pl.String).str.strip_chars()
        lowered = text.str.to_lowercase()
        missing = text.is_null() | lowered.is_in(list(MISSING_TOKENS))
        boolean = lowered.is_in(["true", "false"])
        number = text.cast(pl.Float64, strict=False)
        exprs.append((~missing & ~boolean & number.is_null()).alias(f"bad:{column}"))
        exprs.append(
            pl.when(missing)
            .then(None)
            .when(boolean)
            .then(pl.when(lowered == "true").then(1.0).otherwise(0.0))
            .otherwise(number)
            .fill_nan(None)
            .alias(column)
        )
    out = df.select(exprs)
    for column in present:
        bad = out.get_column(f"bad:{column}")
        if bad.any():
            row = int(bad.arg_true()[0])
            cell = str(df.get_column(column).cast(pl.String)[row]).strip()
            hint = (
                " (write numbers without thousands separators, with a decimal point)"
                if "," in cell
                else ""
            )
            # Line numbers count the header as line 1.
            raise UsageError(f"{path} line {row + 2}: {column} {cell[:40]!r} is not a number{hint}")
    return {column: out.get_column(column) for column in present}


def spreadsheet_safe_frame(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with every text cell a spreadsheet would run as a formula escaped as
    :func:`~powersweep.runformat.spreadsheet_safe` escapes it (a leading ``'``), numbers and
    numeric text left as they are: a table that is written out (a CSV, summary.md's block) may
    hold cells a server or a pasted table put there (issue 46)."""
    text = [c for c, t in df.schema.items() if t == pl.String]
    if not text:
        return df
    return df.with_columns(
        pl.when(
            pl.col(c).str.contains(_FORMULA_START)
            & pl.col(c).str.strip_chars().cast(pl.Float64, strict=False).is_null()
        )
        .then(pl.lit("'") + pl.col(c))
        .otherwise(pl.col(c))
        .alias(c)
        for c in text
    )
