"""Many runs at once, for ``fleet report``: every caps.csv read in a few polars scans, grouped
by header, each run's rows marked and its metric picked as :func:`~.load.load_curve` does; a
run a scan cannot take is read on its own.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from powersweep.analysis.csvtext import to_floats
from powersweep.analysis.load import METRICS, Curve, read_caps, read_run_json
from powersweep.analysis.plausibility import mark_implausible, mark_outliers
from powersweep.errors import UsageError
from powersweep.runformat import CAPS_FLOAT_COLUMNS


def load_curves(run_dirs: Sequence[Path]) -> tuple[list[Curve], list[tuple[Path, str]]]:
    """Load many run directories' caps.csv and run.json at once (no samples or requests).

    Files with the same header are read by one polars scan and every column is converted in one
    pass, which is what keeps a fleet of a thousand runs fast. A run whose caps.csv does not
    parse is loaded alone, so its error names the file, line and column.

    Args:
        run_dirs: Run directories, each holding caps.csv (and usually run.json).

    Returns:
        The curves that loaded (in the order given) and ``(run_dir, error)`` for those that
        did not.
    """
    dirs = [Path(d) for d in run_dirs]
    caps_all, slow = _scan_caps(dirs)
    parts: dict[int, pl.DataFrame] = {}
    metrics: dict[int, str] = {}
    if caps_all is not None:
        # rows no card can show are set aside here too, as one run's own load does
        caps_all = mark_outliers(mark_implausible(caps_all), "_run")
        parts = {
            int(k[0]): v.drop("_run")
            for k, v in caps_all.partition_by("_run", as_dict=True).items()
        }
        metrics = _metrics_by_run(caps_all)
    curves: list[Curve | None] = [None] * len(dirs)
    failed: dict[int, str] = {}
    for i, d in enumerate(dirs):
        caps = parts.get(i)
        metric = metrics.get(i)
        if i in slow or caps is None or metric is None:
            slow.add(i)  # the slow path says what is wrong with it
            continue
        try:
            run = read_run_json(d / "run.json") if (d / "run.json").is_file() else None
        except UsageError as exc:
            failed[i] = str(exc)
            continue
        curves[i] = Curve(caps, metric, run, None, None, d, d)
    for i in sorted(slow | {i for i in range(len(dirs)) if curves[i] is None} - set(failed)):
        loaded, bad = _load_one_by_one([dirs[i]])
        if loaded:
            curves[i] = loaded[0]
        else:
            failed[i] = bad[0][1]
    return [c for c in curves if c is not None], [(dirs[i], failed[i]) for i in sorted(failed)]


def _metrics_by_run(caps_all: pl.DataFrame) -> dict[int, str]:
    """Each run's metric as :func:`~.load.pick_metric` picks it, for all runs in one pass; runs
    without one, or with a cap that is not positive, are left out."""
    power_ok = pl.col("power_w").is_finite() & (pl.col("power_w") > 0)
    usable = [(pl.col(m).is_finite() & (pl.col(m) > 0) & power_ok).any().alias(m) for m in METRICS]
    table = caps_all.group_by("_run").agg(*usable, (pl.col("cap_w") <= 0).any().alias("_bad"))
    out: dict[int, str] = {}
    for row in table.iter_rows(named=True):
        metric = next((m for m in METRICS if row[m]), None)
        if metric is not None and not row["_bad"]:
            out[int(row["_run"])] = metric
    return out


def _scan_caps(dirs: Sequence[Path]) -> tuple[pl.DataFrame | None, set[int]]:
    """Every caps.csv as one typed frame with a ``_run`` index column, plus the indices of runs
    that need the slow path (unreadable, malformed, or a cell that is not a number)."""
    slow: set[int] = set()
    by_header: dict[str, list[int]] = {}
    for i, d in enumerate(dirs):
        header = _plain_header(d / "caps.csv")
        if header is None:
            slow.add(i)
        else:
            by_header.setdefault(header, []).append(i)
    frames: list[pl.DataFrame] = []
    for header, idx in by_header.items():
        names = next(csv.reader([header]), [])
        frame = _scan_group([dirs[i] for i in idx], idx, names, slow)
        if frame is not None:
            frames.append(frame)
    if not frames:
        return None, slow | set(range(len(dirs)))
    typed = pl.concat(frames, how="diagonal_relaxed")
    exprs: list[pl.Expr] = [pl.col("_run")]
    for name in CAPS_FLOAT_COLUMNS:
        col = pl.col(name) if name in typed.columns else pl.lit(None, dtype=pl.Float64)
        exprs.append(col.cast(pl.Float64).fill_nan(None).alias(name))
    status = pl.col("status") if "status" in typed.columns else pl.lit(None, dtype=pl.String)
    error = pl.col("error") if "error" in typed.columns else pl.lit(None, dtype=pl.String)
    status = status.cast(pl.String).str.strip_chars().str.to_lowercase()
    error = error.cast(pl.String).str.strip_chars()
    exprs.append(
        pl.when(status.is_null() | (status == ""))
        .then(pl.lit("ok"))
        .otherwise(status)
        .alias("status")
    )
    exprs.append(pl.when(error == "").then(None).otherwise(error).alias("error"))
    # why a row was measured: a confirm re-measurement is pooled, any other repeat replaces the
    # reading before it (pooling.pool_repeats), as load_curve reads the same file
    reason = pl.col("reason") if "reason" in typed.columns else pl.lit(None, dtype=pl.String)
    exprs.append(reason.cast(pl.String).str.strip_chars().alias("reason"))
    caps_all = (
        typed.select(exprs)
        .filter(pl.col("cap_w").is_not_null())
        .with_columns(pl.col("n_gpus").fill_null(1.0))
        .sort(["_run", "cap_w"], maintain_order=True)
    )
    return caps_all, slow


def _plain_header(path: Path) -> str | None:
    """The header of a caps.csv the fast scan reads as the sweep wrote it (ASCII, comma-
    separated, unique names, every line ended); None sends it to the slow path, which names
    what is unusual about it."""
    try:
        with open(path, "rb") as f:
            head = f.readline()
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return None
            f.seek(-1, os.SEEK_END)
            last = f.read(1)
    except OSError:
        return None
    if last != b"\n" or not head.isascii() or b"\x00" in head:
        return None
    header = head.decode("ascii")
    names = [n.strip() for n in next(csv.reader([header]), [])]
    if len(set(names)) != len(names) or "cap_w" not in names:
        return None
    return header


def _scan_group(
    dirs: Sequence[Path], idx: Sequence[int], names: Sequence[str], slow: set[int]
) -> pl.DataFrame | None:
    """caps.csv files sharing one header, read by one scan: numbers parsed as they are read
    (the sweep's own files); when a cell is not a plain number, as text judged run by run."""
    index = {str(d / "caps.csv"): i for d, i in zip(dirs, idx, strict=True)}
    numeric = {n: pl.Float64 for n in names if n.strip() in CAPS_FLOAT_COLUMNS}
    run = pl.col("_path").replace_strict(index, return_dtype=pl.Int32).alias("_run")
    try:
        df = pl.scan_csv(
            list(index), infer_schema=False, schema_overrides=numeric, include_file_paths="_path"
        ).collect()
        return df.rename({c: c.strip() for c in df.columns}).with_columns(run).drop("_path")
    except (pl.exceptions.PolarsError, OSError):
        pass
    try:
        text = pl.scan_csv(list(index), infer_schema=False, include_file_paths="_path").collect()
    except (pl.exceptions.PolarsError, OSError):
        slow.update(idx)
        return None
    text = text.rename({c: c.strip() for c in text.columns}).with_columns(run).drop("_path")
    good: list[pl.DataFrame] = []
    for key, part in text.partition_by("_run", as_dict=True).items():
        try:
            converted = to_floats(Path("caps.csv"), part, CAPS_FLOAT_COLUMNS)
        except UsageError:
            slow.add(int(key[0]))
            continue
        good.append(part.with_columns(list(converted.values())))
    return pl.concat(good, how="diagonal_relaxed") if good else None


def _load_one_by_one(run_dirs: Sequence[Path]) -> tuple[list[Curve], list[tuple[Path, str]]]:
    """The slow path: each run's caps.csv and run.json alone (raw samples are not needed)."""
    curves: list[Curve] = []
    failed: list[tuple[Path, str]] = []
    for d in run_dirs:
        d = Path(d)
        try:
            if not (d / "caps.csv").is_file():
                raise UsageError(f"{d}: no caps.csv here")
            run = read_run_json(d / "run.json") if (d / "run.json").is_file() else None
            caps, metric = read_caps(d / "caps.csv", run=run)
        except UsageError as exc:
            failed.append((d, str(exc)))
            continue
        curves.append(Curve(caps, metric, run, None, None, d, d))
    return curves, failed
