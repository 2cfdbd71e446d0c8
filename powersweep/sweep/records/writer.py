"""Writes a run directory as the run contract (docs/run-format.md) says.

CSVs are appended after every cap and flushed, and ``run.json`` is replaced atomically, so a
crash or a kill leaves every finished cap readable.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from powersweep.analysis.csvtext import cut_by_crash
from powersweep.analysis.run_record import RunRecord
from powersweep.errors import PowersweepError
from powersweep.runformat import (
    REQUESTS_COLUMNS,
    SAMPLES_COLUMNS,
    caps_columns,
    spreadsheet_safe,
)
from powersweep.safe_files import append, open_no_follow, read_bytes, write_atomic
from powersweep.sweep.sampling.sampler import SampleRow
from powersweep.sweep.sampling.stream_rate import stall_gaps


def cell(value: Any) -> str:
    """Format one CSV cell: empty for missing/NaN, ``true``/``false`` for booleans, text no
    spreadsheet runs as a formula (:func:`~powersweep.runformat.spreadsheet_safe`: a server's
    error message is the server's words)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            return ""
        return repr(round(value, 6))
    if isinstance(value, int):
        return str(value)
    return spreadsheet_safe(str(value))


def gpu_slug(names: Sequence[str]) -> str:
    """A file-name-safe name for a GPU set that names every card model: ``rtx-3090``,
    ``2x-rtx-4090``, ``rtx-3090+rtx-4090`` (a mixed rig), ``2x-rtx-3090+rtx-4090``."""
    counts: dict[str, int] = {}
    for name in names:
        slug = _model_slug(name)
        counts[slug] = counts.get(slug, 0) + 1
    if not counts:
        return "gpu"
    parts = [f"{n}x-{slug}" if n > 1 else slug for slug, n in counts.items()]
    # each model whole (a directory name may hold 255 bytes): shortened only past 120
    return "+".join(parts)[:120].rstrip("-+")


def run_dir_name(
    stamp: str, gpu_names: Sequence[str], load_mode: str, axis: str, cooling: str
) -> str:
    """A run directory's name that says what ran: ``<stamp>-<gpus>-<axis>[-<cooling>]-<load>``,
    e.g. ``20260501-100000-rtx-3090-sm-clock-water-decode-single``; the cooling is left out
    where it was not given (``unspecified`` names nothing)."""
    parts = [stamp, gpu_slug(gpu_names), axis]
    if cooling and cooling != "unspecified":
        parts.append(cooling)
    parts.append(load_mode)
    return "-".join(parts)


def _model_slug(name: str) -> str:
    name = re.sub(r"\(.*?\)", "", name)
    name = re.sub(r"\b(nvidia|geforce)\b", "", name, flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40].strip("-") or "gpu"


def utc_now_iso() -> str:
    """Now, as ISO-8601 UTC with seconds."""
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Replace a JSON file atomically (write a temp file beside it, then rename).

    Raises:
        PowersweepError: The file cannot be written.
    """
    text = json.dumps(_json_safe(data), indent=2, allow_nan=False) + "\n"
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise PowersweepError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


class RunWriter:
    """Creates a run directory and appends to its files.

    Args:
        out_root: The ``--out`` directory (created if missing).
        gpu_names: Names of the GPUs of the set (for the directory name).
        load_mode: Load mode (for the directory name).
        now: Start time (UTC) naming the directory.
        axis: What the sweep varies (for the directory name).
        cooling: How the card is cooled (for the directory name; ``unspecified`` names nothing).
    """

    dropped_partial: list[str]

    def __init__(
        self,
        out_root: Path,
        gpu_names: Sequence[str],
        load_mode: str,
        now: datetime | None = None,
        initial_meta: Mapping[str, Any] | None = None,
        *,
        axis: str = "power",
        cooling: str = "unspecified",
    ) -> None:
        self._caps_columns: tuple[str, ...] = caps_columns(load_mode)
        self._widths: dict[str, int] = {}
        self._lines: dict[str, int] = {}
        self.dropped_partial = []
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
        base = run_dir_name(stamp, gpu_names, load_mode, axis, cooling)
        try:
            out_root.mkdir(parents=True, exist_ok=True)
            # Built under a hidden temporary name and renamed into place, so a run directory
            # never exists without its run.json and CSV headers (a signal can come any time).
            staging = Path(tempfile.mkdtemp(dir=out_root, prefix=".run-"))
        except OSError as exc:
            raise PowersweepError(
                f"cannot create the run directory under {out_root}: {exc.strerror or exc} "
                "(choose another --out)"
            ) from exc
        try:
            os.chmod(staging, 0o777 & ~_umask())
            self.path = staging
            self._init_csv("samples.csv", SAMPLES_COLUMNS)
            self._init_csv("requests.csv", REQUESTS_COLUMNS)
            self._init_csv("caps.csv", self._caps_columns)
            if initial_meta is not None:
                self.write_run_json(initial_meta)
            path = out_root / base
            n = 1
            while True:
                try:
                    # rename onto an existing non-empty directory fails: never merges two runs
                    if os.path.lexists(path):  # a link planted at the name too
                        raise FileExistsError(path)
                    os.rename(staging, path)
                    break
                except FileExistsError:
                    n += 1
                    path = out_root / f"{base}-{n}"
            self.path = path
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise PowersweepError(
                f"cannot create the run directory under {out_root}: {exc.strerror or exc} "
                "(choose another --out)"
            ) from exc
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    @classmethod
    def reopen(cls, path: Path) -> RunWriter:
        """Append to an existing run directory (``--resume``); missing CSVs get their header.

        Raises:
            PowersweepError: The directory is not writable.
        """
        writer = cls.__new__(cls)
        writer.path = path
        writer._widths = {}
        writer._lines = {}
        writer.dropped_partial = []
        meta = _run_meta(path / "run.json")
        mode = str((meta or {}).get("load_mode") or "")
        for name, columns in (
            ("samples.csv", SAMPLES_COLUMNS),
            ("requests.csv", REQUESTS_COLUMNS),
            ("caps.csv", caps_columns(mode)),
        ):
            target = path / name
            if not target.exists() or target.stat().st_size == 0:
                writer._init_csv(name, columns)
            elif writer._drop_partial_row(name, meta):
                writer.dropped_partial.append(name)
        # a run written by an older version keeps its own caps.csv columns
        with open(path / "caps.csv", newline="") as f:
            header = next(csv.reader(f), None)
        writer._caps_columns = tuple(header) if header else caps_columns(mode)
        # samples/requests of an older version lack the columns added since (always at the end)
        for name in ("samples.csv", "requests.csv"):
            with open(path / name, newline="") as f:
                old = next(csv.reader(f), None)
            if old:
                writer._widths[name] = len(old)
        return writer

    def _drop_partial_row(self, name: str, meta: Mapping[str, Any] | None = None) -> bool:
        """Cut a half-written last row (a kill mid-write) off a CSV; True when one was cut.

        Its cap is not in ``caps_done`` nor its row in ``rows_written`` (run.json is written
        after the row), so a resumed run measures it again instead of keeping half a figure. A
        last row the run's record (``meta``, its run.json) says was written whole only lost its
        line end (an editor): it gets it back, as the reader keeps it
        (:func:`~powersweep.analysis.csvtext.cut_by_crash` judges both).
        """
        target = self.path / name
        try:
            data = read_bytes(target)
            lines = data.count(b"\n")
            if data.endswith(b"\n"):
                self._lines[name] = lines
                return False
            record = RunRecord.from_json(meta) if meta is not None else None
            whole = not cut_by_crash(name, data.decode("utf-8", errors="replace"), record)
            with os.fdopen(open_no_follow(target, os.O_RDWR), "r+b") as f:
                if whole:
                    f.seek(0, os.SEEK_END)
                    f.write(b"\r\n")
                else:
                    f.truncate(data.rfind(b"\n") + 1)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise PowersweepError(f"cannot repair {target}: {exc.strerror or exc}") from exc
        self._lines[name] = lines + 1 if whole else lines
        return not whole

    def _init_csv(self, name: str, columns: Sequence[str]) -> None:
        self._append(name, [list(columns)])

    def _append(self, name: str, rows: Iterable[Sequence[str]]) -> None:
        width = self._widths.get(name)
        if width is not None:
            rows = [row[:width] for row in rows]
        # Rows go out in one write, then to disk: a crash leaves whole rows or a cut last row
        # (which readers drop), never rows interleaved with half of another.
        buf = io.StringIO()
        csv.writer(buf).writerows(rows)
        text = buf.getvalue()
        if not text:
            return
        try:
            append(self.path / name, text.encode())
        except OSError as exc:
            raise PowersweepError(
                f"cannot write {self.path / name}: {exc.strerror or exc}"
            ) from exc
        # the writer folds every cell onto one line: one line end per row
        self._lines[name] = self._lines.get(name, 0) + text.count("\n")

    def rows_written(self) -> dict[str, int]:
        """Data rows written whole to each CSV so far (its header not counted)."""
        return {name: max(0, lines - 1) for name, lines in sorted(self._lines.items())}

    def write_run_json(self, data: Mapping[str, Any]) -> None:
        """Replace ``run.json``, with ``rows_written`` (:meth:`rows_written`): what a reader
        needs to tell a row cut by a crash from a last line that only lacks its line end."""
        write_json_atomic(self.path / "run.json", {**data, "rows_written": self.rows_written()})

    def append_samples(self, rows: Sequence[SampleRow], *, confirm: bool = False) -> None:
        """Append sampler rows to ``samples.csv`` (``confirm``: readings of a re-measurement)."""
        out = []
        for r in rows:
            s = r.sample
            out.append(
                [
                    cell(round(r.t_s, 3)),
                    cell(r.tick),
                    cell(r.cap_w),
                    r.phase,
                    cell(s.gpu_index),
                    cell(s.power_w),
                    cell(s.energy_mj),
                    cell(s.temp_c),
                    cell(s.sm_clock_mhz),
                    cell(s.mem_clock_mhz),
                    cell(s.util_pct),
                    cell(s.pstate),
                    cell(s.throttle_power),
                    cell(s.throttle_thermal),
                    cell(s.clock_event_bits),
                    cell(r.sm_lock_mhz),
                    cell(r.mem_lock_mhz),
                    cell(confirm),
                    cell(s.power_instant_w),
                    cell(r.sm_offset_mhz),
                ]
            )
        self._append("samples.csv", out)

    def append_requests(
        self,
        cap_w: float,
        results: Sequence[Any],
        locks: tuple[float | None, float | None] = (None, None),
        *,
        confirm: bool = False,
        offset_mhz: float | None = None,
    ) -> None:
        """Append the client's request results to ``requests.csv`` (``locks``: the clock point's
        SM and memory locks, on a clock sweep; ``confirm``: see :meth:`append_samples`;
        ``offset_mhz``: the undervolt step's SM clock offset)."""
        out = []
        for r in results:
            out.append(
                [
                    cell(cap_w),
                    r.prompt_kind,
                    cell(r.stream),
                    cell(r.t_start_s),
                    cell(r.t_first_token_s),
                    cell(r.t_last_token_s),
                    cell(r.t_end_s),
                    cell(r.prompt_tokens),
                    cell(r.completion_tokens),
                    r.token_source,
                    cell(r.chunk_tokens),
                    cell(r.decode_tps),
                    cell(r.finish_reason),
                    cell(r.ok),
                    _one_line(r.error),
                    cell(locks[0]),
                    cell(locks[1]),
                    ";".join(getattr(r, "warnings", ())),
                    cell(getattr(r, "server_decode_tps", None)),
                    cell(getattr(r, "server_prompt_tps", None)),
                    cell(confirm),
                    cell(getattr(r, "max_tokens", None)),
                    cell(offset_mhz),
                    cell(_stall_s(r)),
                ]
            )
        self._append("requests.csv", out)

    def restate_caps(self, update: Callable[[dict[str, str]], Mapping[str, Any]]) -> None:
        """Rewrite caps.csv with ``update``'s cells in place of each row's (the same rows and
        columns; a column the file lacks is left out): a figure known only at the end of the run
        (the run-to-run term) carried into every row. Written whole beside it and renamed over
        it: a crash leaves the old file or the new one, never half of each."""
        target = self.path / "caps.csv"
        try:
            with open(target, newline="") as f:
                reader = csv.reader(f)
                header = next(reader, None)
                rows = list(reader)
            if not header:
                return
            out = io.StringIO()
            writer = csv.writer(out)
            writer.writerow(header)
            for values in rows:
                row = dict(zip(header, values, strict=False))
                changed = {k: cell(v) for k, v in update(row).items() if k in row}
                writer.writerow([changed.get(c, v) for c, v in zip(header, values, strict=False)])
            st = target.lstat()
            # root keeps the owner a sudo run handed it to; a user keeps their own
            owner = (st.st_uid, st.st_gid) if os.geteuid() == 0 else None
            write_atomic(target, out.getvalue(), mode=st.st_mode & 0o777, owner=owner)
        except OSError as exc:
            raise PowersweepError(f"cannot rewrite {target}: {exc.strerror or exc}") from exc

    def append_cap(self, row: Mapping[str, Any]) -> None:
        """Append one row to ``caps.csv``."""
        values = [
            _one_line(row.get(c) or "") if c == "error" else cell(row.get(c))
            for c in self._caps_columns
        ]
        self._append("caps.csv", [values])


def _run_meta(path: Path) -> dict[str, Any] | None:
    """A run.json's content, or None where it cannot be read (the resume checked it before)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _one_line(text: str) -> str:
    return spreadsheet_safe(" ".join(str(text).split())[:500])


def _stall_s(result: Any) -> float | None:
    """The seconds a request's token stream stalled (requests.csv ``stall_s``; None without its
    chunks' arrival times)."""
    times = getattr(result, "token_times_s", None)
    return math.fsum(stall_gaps(times).values()) if times else None
