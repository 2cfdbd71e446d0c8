"""Loading a run (or a bare ``caps.csv``) into a :class:`Curve`.

Every column is read as text first and converted here, so a bad cell becomes a one-line
:class:`~powersweep.errors.UsageError` naming the file, the line and the column instead of a
polars traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from powersweep.analysis.csvtext import read_text_csv, spreadsheet_safe_frame, to_floats
from powersweep.analysis.plausibility import (
    METRICS,
    mark_implausible,
    mark_outliers,
    pick_metric,
)
from powersweep.analysis.run_record import RunRecord
from powersweep.errors import PowersweepError, UsageError
from powersweep.runformat import (
    CAPS_FLOAT_COLUMNS,
    CLOCK_LOCK_COLUMNS,
    REQUESTS_FLOAT_COLUMNS,
    SAMPLES_FLOAT_COLUMNS,
    SCHEMA_VERSION,
    SERVING_COLUMNS,
    caps_columns,
)
from powersweep.safe_files import write_atomic

# The caps.csv line each row came from (the header is line 1).
SOURCE_LINE = "source_line"


@dataclass(frozen=True)
class Curve:
    """A loaded power-cap curve and whatever raw data came with it.

    Attributes:
        caps: One row per cap, every caps.csv column of the contract present (missing ones null),
            numeric columns as Float64, ``status`` filled with ``ok`` where absent, sorted by cap.
        metric: ``narr_tps`` or ``prefill_tps``: the TPS that TPS/W uses.
        run: ``run.json`` content if present.
        samples: samples.csv if present and readable.
        requests: requests.csv if present and readable.
        source: The directory or CSV path given.
        out_dir: Where outputs go by default (the run directory, or the CSV's folder).
        notes: Problems met while loading optional files (they become findings).
    """

    caps: pl.DataFrame
    metric: str
    run: RunRecord | None
    samples: pl.DataFrame | None
    requests: pl.DataFrame | None
    source: Path
    out_dir: Path
    notes: tuple[str, ...] = field(default=())


def load_curve(path: Path) -> Curve:
    """Load a run directory or a bare caps.csv.

    Args:
        path: A run directory (holding caps.csv, and optionally run.json, samples.csv,
            requests.csv) or a CSV file with at least ``cap_w``, ``power_w`` and ``narr_tps`` or
            ``prefill_tps``.

    Returns:
        The loaded curve.

    Raises:
        UsageError: The path is missing, or the file is empty, malformed, lacks a required column,
            holds non-numeric values or no usable row, or run.json is from a newer powersweep.
    """
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    if path.is_dir():
        caps_path = path / "caps.csv"
        if not caps_path.is_file():
            raise UsageError(f"{path}: no caps.csv here; give a run directory or a caps.csv file")
        run_dir: Path | None = path
        out_dir = path
    else:
        caps_path = path
        out_dir = path.parent
        # A caps.csv inside a run directory still brings its run.json and raw data along.
        run_dir = path.parent if path.name == "caps.csv" else None

    notes: list[str] = []
    run = (
        read_run_json(run_dir / "run.json")
        if run_dir and (run_dir / "run.json").is_file()
        else None
    )
    caps, metric = read_caps(caps_path, notes, run)
    samples = requests = None
    if run_dir is not None:
        samples = _read_optional(run_dir / "samples.csv", SAMPLES_FLOAT_COLUMNS, notes, run)
        requests = _read_optional(run_dir / "requests.csv", REQUESTS_FLOAT_COLUMNS, notes, run)
    return Curve(
        caps=caps,
        metric=metric,
        run=run,
        samples=samples,
        requests=requests,
        source=path,
        out_dir=out_dir,
        notes=tuple(notes),
    )


def write_caps_csv(df: pl.DataFrame, path: Path) -> None:
    """Write a caps table as caps.csv (nulls as empty cells, floats at full precision).

    Args:
        df: Caps rows; must hold ``cap_w``.
        path: Destination file; parent folders are created.

    Raises:
        PowersweepError: The file cannot be written.
    """
    if "cap_w" not in df.columns:
        raise PowersweepError("cannot write caps.csv: the table has no cap_w column")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, spreadsheet_safe_frame(df).write_csv())
    except OSError as exc:
        raise PowersweepError(f"cannot write {path}: {exc.strerror or exc}") from exc


def read_run_json(path: Path) -> RunRecord:
    """A run's run.json, typed.

    Raises:
        UsageError: It cannot be read, is no JSON object, is from a newer powersweep, or a key
            holds a value of the wrong type (the message names it).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object")
    version = data.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        raise UsageError(f"{path}: schema_version must be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise UsageError(
            f"{path}: written by a newer powersweep (schema_version {version} > "
            f"{SCHEMA_VERSION}); upgrade powersweep to read it"
        )
    try:
        return RunRecord.from_json(data)
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None


def read_caps(
    path: Path, notes: list[str] | None = None, run: RunRecord | None = None
) -> tuple[pl.DataFrame, str]:
    # every column the format defines: the serving load's appear in its runs only
    df = read_text_csv(path, notes, run=run, known=caps_columns("serving"))
    # A clock-lock curve is keyed by its locks; its cap_w (the limit in force) may be absent.
    clocks = any(c in df.columns for c in CLOCK_LOCK_COLUMNS)
    missing = [
        c for c in ("cap_w", "power_w") if c not in df.columns and not (clocks and c == "cap_w")
    ]
    if not any(m in df.columns for m in METRICS):
        missing.append("narr_tps or prefill_tps")
    if missing:
        raise UsageError(f"{path}: missing required column(s): {', '.join(missing)}")
    if df.height == 0:
        raise UsageError(f"{path}: no data rows")

    # the serving load's columns only where its run wrote them (no other run grows them)
    floats = CAPS_FLOAT_COLUMNS + tuple(c for c in SERVING_COLUMNS if c in df.columns)
    converted = to_floats(path, df, floats)
    columns: list[pl.Series] = []
    for name in floats:
        if name in converted:
            columns.append(converted[name])
        else:
            columns.append(pl.Series(name, [None] * df.height, dtype=pl.Float64))
    status = (
        [
            ("ok" if s is None or not str(s).strip() else str(s).strip().lower())
            for s in df["status"]
        ]
        if "status" in df.columns
        else ["ok"] * df.height
    )
    error = (
        [None if e is None or not str(e).strip() else str(e).strip() for e in df["error"]]
        if "error" in df.columns
        else [None] * df.height
    )
    columns.append(pl.Series("status", status, dtype=pl.String))
    columns.append(pl.Series("error", error, dtype=pl.String))
    for name in ("reason", "tps_blocks"):
        text = (
            [None if v is None or not str(v).strip() else str(v).strip() for v in df[name]]
            if name in df.columns
            else [None] * df.height
        )
        columns.append(pl.Series(name, text, dtype=pl.String))
    # Line numbers count the header as line 1 (findings name the rows they ignore).
    columns.append(pl.Series(SOURCE_LINE, range(2, df.height + 2), dtype=pl.Int64))
    # blank lines are no rows: they need no note
    blank = df.select(
        pl.all_horizontal(pl.all().is_null() | (pl.all().str.strip_chars() == "")).alias("b")
    )["b"]
    caps = pl.DataFrame(columns)
    clocks = (
        clocks
        and caps.select(
            pl.any_horizontal([pl.col(c).is_not_null() for c in CLOCK_LOCK_COLUMNS]).any()
        ).item()
    )
    if not clocks:
        no_cap = caps.filter(
            (pl.col("cap_w").is_null() | ~pl.col("cap_w").is_finite()) & ~pl.lit(blank)
        )
        caps = caps.filter(pl.col("cap_w").is_not_null() & pl.col("cap_w").is_finite())
        if caps.height == 0:
            raise UsageError(f"{path}: no row has a numeric cap_w")
        if no_cap.height and notes is not None:
            lines = ", ".join(str(n) for n in no_cap[SOURCE_LINE].to_list()[:10])
            notes.append(
                f"{path.name}: {no_cap.height} row(s) without a finite cap_w ignored (line {lines})"
            )
    if caps.filter(pl.col("cap_w") <= 0).height:
        raise UsageError(f"{path}: cap_w must be positive watts")
    caps = caps.with_columns(pl.col("n_gpus").fill_null(1.0))
    if not clocks:
        caps = caps.sort("cap_w", maintain_order=True)
    caps = mark_outliers(mark_implausible(caps))

    metric = pick_metric(caps)
    if metric is None:
        raise UsageError(
            f"{path}: nothing to analyse: no row has a numeric cap_w, a positive finite "
            f"power_w and a positive finite narr_tps or prefill_tps ({_first_row(caps)})"
        )
    return caps, metric


def _first_row(caps: pl.DataFrame) -> str:
    """The first row's figures, in words, for an error about a curve with none usable."""
    row = caps.row(0, named=True)
    cells = ", ".join(
        f"{c} {'empty' if row.get(c) is None else format(row[c], 'g')}"
        for c in ("power_w", *METRICS)
        if c in caps.columns and (c == "power_w" or caps.get_column(c).null_count() < caps.height)
    )
    return f"{caps.height} row(s); line {row[SOURCE_LINE]}: {cells}"


def _read_optional(
    path: Path, float_columns: tuple[str, ...], notes: list[str], run: RunRecord | None
) -> pl.DataFrame | None:
    """Read samples.csv / requests.csv; a broken optional file is a note, not a failure."""
    if not path.is_file():
        return None
    try:
        df = read_text_csv(path, notes, run=run)
        return df.with_columns(list(to_floats(path, df, float_columns).values()))
    except UsageError as exc:
        notes.append(f"{path.name} ignored: {exc}")
        return None
