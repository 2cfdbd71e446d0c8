"""A run in one screen on the terminal: its points, the answer, the files written.

The reasoning: docs/architecture.md, "powersweep.report_view".
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from powersweep.analysis.clock_analysis import point_label
from powersweep.analysis.clock_result_types import ClockAnalysis, LockPoint, LockRow, Locks
from powersweep.analysis.result_types import PowerAnalysis, RunFacts, known
from powersweep.analysis.summary import SHOWN_STATUSES, starred_cap
from powersweep.analysis.undervolt_result_types import OffsetStep, UndervoltAnalysis
from powersweep.runformat import as_float

WIDTH = 80
# what the marks in the table's first column mean, by axis
ANSWER_MARK, TIED_MARK = "*", "~"


@dataclass(frozen=True)
class Row:
    """One line of the table: a point as the analysis states it.

    Attributes:
        mark: ``*`` the answer, ``~`` tied with it within the stated precision, else blank.
        point: The cap, locks or offset, in the header's unit.
        tps: TPS of the run's metric (None: not measured).
        power_w: Draw (combined over the cards).
        tps_per_w: TPS per watt.
        u95_pct: The stated 95% half-width of TPS/W, % (None: the run states none).
        status: ``ok``, ``outlier``, ``unstable``, ``failed``... (repeats pooled: ``ok x2``).
    """

    mark: str
    point: str
    tps: float | None
    power_w: float | None
    tps_per_w: float | None
    u95_pct: float | None
    status: str


Result = PowerAnalysis | ClockAnalysis | UndervoltAnalysis


def render_view(
    result: Result, headline: str | None, run: Path | None, paths: Sequence[Path]
) -> str:
    """The whole view: :func:`render_body`, then :func:`render_paths`."""
    files = render_paths(run, paths)
    return render_body(result, headline) + (f"\n{files}\n" if files else "")


def render_body(result: Result, headline: str | None) -> str:
    """A title line, the table, what its marks mean, and the answer (what a command prints as
    soon as the analysis is done, before anything is written)."""
    return f"{render_points(result)}\n\n{render_answer(result, headline)}\n"


def render_points(result: Result) -> str:
    """The title line, the table of the points and the legend of its marks."""
    header, rows, legend = _rows(result)
    lines = [_title(result.run, len(rows), _noun(result))]
    lines += _table(header, rows)
    marks = {r.mark for r in rows}
    said = [text for mark, text in legend if mark and mark in marks]
    if said:
        lines.append(_fit("  ".join(said)))
    lines += [_fit(text) for mark, text in legend if not mark]  # notes on the columns
    return "\n".join(lines)


def render_answer(result: Result, headline: str | None) -> str:
    """The answer line(s) as the axis words them (no answer: what withholds it), wrapped at
    80 columns (a path is never broken)."""
    return _wrap(headline or _no_answer(result))


def _no_answer(result: Result) -> str:
    answer = known(getattr(result, "answer", None))
    if answer is not None and answer.why:
        return f"no answer: {answer.why}"
    status = result.run.status
    if status and status != "complete":
        return f"no answer: the run is {status} and no point finished ok"
    return "no answer: no point finished ok"


def render_failed(why: str, run: Path, paths: Sequence[Path]) -> str:
    """A run with nothing to analyse: no table, why, and what it wrote."""
    files = render_paths(run, paths)
    return _wrap(f"no answer: {why}") + "\n" + (f"\n{files}\n" if files else "")


def render_paths(run: Path | None, paths: Sequence[Path]) -> str:
    """``run:`` and ``summary:`` in full, then the other files (``analysis.json``, the charts),
    named from the run directory where they are in it."""
    lines = [f"run:      {run}"] if run is not None else []
    # the rest named from the run directory (a caps.csv's own), else in full
    base = run if run is not None and run.is_dir() else None
    if run is not None and run.name == "caps.csv":
        base = run.parent
    others = []
    for path in paths:
        if path.name == "summary.md":
            lines.append(f"summary:  {path}")
        elif base is not None and path.is_relative_to(base):
            others.append(str(path.relative_to(base)))
        else:
            others.append(str(path))
    if others:
        lines.append(
            textwrap.fill(
                ", ".join(others),
                WIDTH,
                initial_indent="files:    ",
                subsequent_indent=" " * 10,
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    return "\n".join(lines)


def _rows(result: Result) -> tuple[str, list[Row], list[tuple[str, str]]]:
    if isinstance(result, PowerAnalysis):
        return _power_rows(result)
    if isinstance(result, ClockAnalysis):
        return _clock_rows(result)
    return _undervolt_rows(result)


def _noun(result: Result) -> str:
    if isinstance(result, PowerAnalysis):
        return "cap"
    return "point" if isinstance(result, ClockAnalysis) else "step"


def _power_rows(result: PowerAnalysis) -> tuple[str, list[Row], list[tuple[str, str]]]:
    sweet = result.sweet_spot
    u95 = (known(sweet.tps_per_w_u95_pct) if sweet is not None else None) or {}
    # a bare curve states one reading's half-width, from its own scatter or the typical floor
    estimate = known(sweet.estimate) if sweet is not None and not u95 else None
    per_reading = estimate.reading_u95_pct if estimate is not None else None
    star = starred_cap(result)
    tied = set(known(sweet.tied_caps) or []) if sweet is not None and star is not None else set()
    rows = []
    for cap in result.caps:
        shown = (
            cap.figures.status in SHOWN_STATUSES
            and cap.figures.tps is not None
            and cap.figures.power_w is not None
        )
        ok = cap.figures.status in (None, "ok")
        mark = (
            ANSWER_MARK
            if ok and cap.cap_w == star
            else TIED_MARK
            if ok and cap.cap_w in tied
            else ""
        )
        rows.append(
            Row(
                mark,
                f"{cap.cap_w:g}",
                cap.figures.tps if shown else None,
                cap.figures.power_w if shown else None,
                cap.figures.tps_per_w if shown else None,
                u95.get(str(cap.cap_w), per_reading) if shown else None,
                _status(cap.figures.status, cap.figures.n_measurements if shown else None),
            )
        )
    answer = known(result.answer)
    what = "best cap (a boundary)" if answer is not None and answer.kind == "boundary" else None
    # a rig of several cards: the cap is each card's, the draw theirs together
    header = "cap W/card" if (result.run.n_gpus or 1) > 1 else "cap W"
    legend = _legend(what or "sweet spot")
    if per_reading is not None and sweet is not None:
        legend.append(("", f"+-95%: one reading's, {known(sweet.noise_source) or 'estimated'}"))
    return header, rows, legend


def _clock_rows(result: ClockAnalysis) -> tuple[str, list[Row], list[tuple[str, str]]]:
    answer = known(result.answer)
    best = result.peak if answer is None or answer.given else None
    peak = _locks(best) if best is not None else None
    tied = {_locks(p) for p in known(best.tied_points) or []} if best is not None else set()
    entries: dict[tuple[float | None, float | None], Row] = {}
    for p in result.points:
        key = _locks(p)
        mark = ANSWER_MARK if key == peak else TIED_MARK if key in tied else ""
        entries[key] = Row(
            mark,
            _lock_text(result.axis, key),
            p.figures.tps,
            p.figures.power_w,
            p.figures.tps_per_w,
            known(p.figures.tps_per_w_u95_pct),
            "ok",
        )
    # the rows that did not end ok and were not measured ok later: failed, rejected, outliers
    for r in result.rows:
        key = _locks(r)
        if r.figures.status in (None, "ok") or (key in entries and entries[key].status == "ok"):
            continue
        shown = r.figures.status in SHOWN_STATUSES
        entries[key] = Row(
            "",
            _lock_text(result.axis, key),
            r.figures.tps if shown else None,
            r.figures.power_w if shown else None,
            r.figures.tps_per_w if shown else None,
            None,
            _status(r.figures.status, None),
        )
    order = sorted(entries, key=lambda k: (-as_float(k[1], -1.0), as_float(k[0], -1.0)))
    header = {"sm-clock": "SM MHz", "mem-clock": "mem MHz"}.get(result.axis, "SM/mem MHz")
    what = "best point (a boundary)" if answer is not None and answer.kind == "boundary" else None
    return header, [entries[k] for k in order], _legend(what or "efficiency peak")


def _undervolt_rows(result: UndervoltAnalysis) -> tuple[str, list[Row], list[tuple[str, str]]]:
    chosen = [c for c in (result.chosen, result.memory.chosen if result.memory else None) if c]
    steps: list[OffsetStep] = [*([result.baseline] if result.baseline else []), *result.steps]
    steps += result.soaks
    if result.memory is not None:
        steps += [*result.memory.steps, *result.memory.soaks]
    rows = [
        Row(
            ANSWER_MARK if s in chosen else "",
            _offset_text(s),
            s.figures.tps,
            s.figures.power_w,
            s.figures.tps_per_w,
            known(s.figures.tps_per_w_u95_pct),
            _status(s.figures.status, None),
        )
        for s in steps
    ]
    soaked = " (soaked)" if result.chosen is not None and result.chosen.reason == "soak" else ""
    return "offset MHz", rows, [(ANSWER_MARK, f"{ANSWER_MARK} the answer{soaked}")]


def _legend(what: str) -> list[tuple[str, str]]:
    return [
        (ANSWER_MARK, f"{ANSWER_MARK} {what}"),
        (TIED_MARK, f"{TIED_MARK} tied with it (within noise)"),
    ]


def _locks(p: LockPoint | LockRow | Locks) -> tuple[float | None, float | None]:
    return p.sm_lock_mhz, p.mem_lock_mhz


def _lock_text(axis: str, key: tuple[float | None, float | None]) -> str:
    sm, mem = key
    if sm is None and mem is None:
        return "unlocked"
    if axis == "sm-clock" and mem is None:
        return f"{sm:g}"
    if axis == "mem-clock" and sm is None:
        return f"{mem:g}"
    if axis == "grid" and sm is not None and mem is not None:
        return f"{sm:g}/{mem:g}"
    return point_label({"sm_lock_mhz": sm, "mem_lock_mhz": mem})


def _offset_text(step: OffsetStep) -> str:
    """``+210``, ``+210 soak``, ``mem +500``; the baseline ``350 W cap``."""
    if step.sm_lock_mhz is None and step.cap_w is not None:
        return f"{step.cap_w:g} W cap"
    if step.mem_offset_mhz is not None:
        text = f"mem {step.mem_offset_mhz:+g}"
    else:
        text = f"{step.sm_offset_mhz:+g}" if step.sm_offset_mhz is not None else "?"
    if step.reason in ("soak", "reread", "refine"):
        text += f" {step.reason}"
    return text


def _status(status: str | None, repeats: int | None) -> str:
    text = status or "ok"
    return f"{text} x{repeats}" if repeats is not None and repeats > 1 else text


def _title(run: RunFacts, n: int, noun: str) -> str:
    """``GPU, load mode, cooling: 21 caps`` (and the run's status where it did not finish); a
    long GPU name is what is cut to fit."""
    what = ", ".join(w for w in (run.gpu_name or "unknown GPU", run.load_mode, run.cooling) if w)
    count = f": {n} {noun}{'s' if n != 1 else ''}"
    if run.status and run.status != "complete":
        count += f", run {run.status}"
    if (run.n_gpus or 1) > 1:
        count += f", {run.n_gpus} GPUs"
    room = WIDTH - len(count)
    return (what if len(what) <= room else what[: room - 3] + "...") + count


def _table(header: str, rows: Iterable[Row]) -> list[str]:
    heads = (" ", header, "TPS", "draw W", "TPS/W", "+-95%", "status")
    cells = [
        (
            r.mark,
            r.point,
            _fmt(r.tps, 1),
            _fmt(r.power_w, 0),
            _fmt(r.tps_per_w, 4),
            _fmt(r.u95_pct, 2, "%"),
            r.status,
        )
        for r in rows
    ]
    widths = [max(len(c[i]) for c in [heads, *cells]) for i in range(len(heads))]
    # numbers right-aligned under their header; the status, last, left-aligned and cut to fit
    out = []
    for c in [heads, *cells]:
        left = "  ".join(
            c[i].ljust(widths[i]) if i == 0 else c[i].rjust(widths[i]) for i in range(6)
        )
        out.append(_fit(f"{left}  {c[6]}").rstrip())
    return out


def _fmt(value: float | None, digits: int, unit: str = "") -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}f}{unit}"


def _wrap(text: str) -> str:
    """``text`` wrapped at 80 columns, a command in backticks kept on one line (to copy it)."""
    keep = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", _GLUE), text)
    return "\n".join(
        textwrap.fill(line, WIDTH, break_long_words=False, break_on_hyphens=False)
        for line in keep.splitlines()
    ).replace(_GLUE, " ")


# stands for a space that must not break a line while wrapping (never in a printed text)
_GLUE = "\0"


def _fit(line: str) -> str:
    """A line cut to the terminal's 80 columns (a long name), marked as cut."""
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."
