"""The account of a run with no usable point: why it ended, each point's status, the faults it
met and the requests they cut.

The reasoning: docs/analyze.md, "powersweep.analysis.failed_run".
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from powersweep.analysis.csvtext import read_text_csv
from powersweep.errors import UsageError
from powersweep.runformat import CsvRow, JsonMap

# Point columns shown per row, where the run has them.
_POINT_COLUMNS = ("cap_w", "sm_lock_mhz", "mem_lock_mhz", "status", "reason")
# Causes of failed requests listed (the rest are counted).
_CAUSES_SHOWN = 8


def failed_run_summary(run_dir: Path, why: str) -> str:
    """A markdown summary of a run that has no usable point.

    Args:
        run_dir: The run directory.
        why: Why there is no analysis (the analysis's own one-line refusal).
    """
    meta = _run_json(run_dir / "run.json")
    notes: list[str] = []
    caps = _table(run_dir / "caps.csv", notes)
    requests = _table(run_dir / "requests.csv", notes)
    lines = [
        f"# powersweep: {meta.get('status') or 'unknown status'}, no usable point",
        "",
        f"**No recommendation**: {_md(why)}",
        "",
    ]
    if meta.get("error") and str(meta["error"]) != why:
        lines += [f"The sweep ended with: {_md(str(meta['error']))}", ""]
    lines += _restored(meta.get("restored"))
    lines += _points(caps)
    lines += _faults(meta.get("faults"))
    lines += _failed_requests(requests)
    lines += [f"- note: {_md(n)}" for n in notes]
    return "\n".join(lines).rstrip() + "\n"


def _run_json(path: Path) -> JsonMap:
    """The run.json of a run that failed, read as whatever JSON object it holds (a run that died
    early may have written any part of it: this account must not fail on its shape)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _table(path: Path, notes: list[str]) -> Sequence[CsvRow]:
    if not path.is_file():
        return []
    try:
        return read_text_csv(path, notes).to_dicts()
    except UsageError as exc:
        notes.append(str(exc))
        return []


def _restored(restored: object) -> list[str]:
    if not isinstance(restored, list) or not restored:
        return []
    out = ["### Cards", ""]
    for r in restored:
        if not isinstance(r, dict):
            continue
        state = "restored to" if r.get("ok") else "**NOT restored** to"
        limit = r.get("limit_w")
        what = f"power limit {state} {limit:g} W" if isinstance(limit, int | float) else state
        out.append(f"- GPU {r.get('gpu_index')}: {what}")
    return [*out, ""]


def _points(caps: Sequence[CsvRow]) -> list[str]:
    if not caps:
        return ["No point was written to caps.csv.", ""]
    columns = [c for c in _POINT_COLUMNS if any(row.get(c) not in (None, "") for row in caps)]
    out = ["### Points", "", "| " + " | ".join(columns) + " |"]
    out.append("|" + "---|" * len(columns))
    for row in caps:
        out.append("| " + " | ".join(_md(str(row.get(c) or "")) for c in columns) + " |")
    return [*out, ""]


def _faults(faults: object) -> list[str]:
    if not isinstance(faults, list) or not faults:
        return []
    out = ["### Faults", ""]
    for f in faults:
        if not isinstance(f, dict):
            continue
        examples = "; ".join(str(e) for e in f.get("examples") or [])
        tail = f": e.g. {_md(examples)}" if examples else ""
        out.append(f"- **{_md(str(f.get('kind')))}** x{f.get('count')}{tail}")
    return [*out, ""]


def _failed_requests(requests: Sequence[CsvRow]) -> list[str]:
    failed = [r for r in requests if str(r.get("ok", "")).lower() in ("false", "0")]
    cut = [r for r in requests if "cut_by_reset" in str(r.get("warnings") or "")]
    if not failed and not cut:
        return []
    out = ["### Requests", ""]
    if cut:
        out.append(
            f"- {len(cut)} of {len(requests)} requests were reset by the server mid-stream "
            "(their tokens counted up to the reset)"
        )
    if failed:
        out.append(f"- {len(failed)} of {len(requests)} requests failed:")
        causes = Counter(
            (str(r.get("prompt_kind") or "?"), str(r.get("error") or "no reason given"))
            for r in failed
        )
        for (kind, error), n in causes.most_common(_CAUSES_SHOWN):
            out.append(f"  - {n} x {_md(kind)}: {_md(error)}")
        rest = len(causes) - _CAUSES_SHOWN
        if rest > 0:
            out.append(f"  - and {rest} other causes")
    return [*out, ""]


def _md(text: str) -> str:
    """Text safe in a markdown table cell or line."""
    return " ".join(text.split()).replace("|", "\\|")
