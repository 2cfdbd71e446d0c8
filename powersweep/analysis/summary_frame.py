"""What every axis's summary.md is built of: escaping, cells, the header table, the answer's
banner, the findings list and the points table's frame; an axis supplies its rows and columns."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from powersweep.analysis.findings import Finding, Severity
from powersweep.analysis.result_types import Answer, PointFigures, RunFacts, ToolInfo

# GitHub refuses comments longer than this; stay well under it.
GITHUB_COMMENT_LIMIT = 65_536

_METRIC_LABEL = {"narr_tps": "Decode TPS", "prefill_tps": "Prefill TPS"}

# The last row of a summary's header table on the simulated rig.
SIMULATED_ROW = "| Note | simulated rig, not real hardware |"

P = TypeVar("P")


def escape_md(value: object) -> str:
    """Make any text safe inside a GitHub markdown table cell or line.

    Escapes the characters that would end a cell (``|``), start emphasis, code, links or HTML, and
    folds newlines into spaces (anything that only matters at a line start cannot occur inside a
    cell or after a bullet).
    """
    text = "" if value is None else str(value)
    text = " ".join(text.split())
    out = []
    for ch in text:
        if ch in "\\`*_[]|~":
            out.append("\\" + ch)
        elif ch == "<":
            out.append("&lt;")
        elif ch == ">":
            out.append("&gt;")
        elif ch == "&":
            out.append("&amp;")
        else:
            out.append(ch)
    return "".join(out)


def md_keep_code(value: object) -> str:
    """Like :func:`escape_md`, but keep paired backtick code spans (our hints name commands)."""
    text = "" if value is None else " ".join(str(value).split())
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: nothing is code
        return escape_md(text)

    def prose(part: str) -> str:  # escape_md trims; the spaces around code spans must stay
        lead = " " if part.startswith(" ") else ""
        trail = " " if part.endswith(" ") and part.strip() else ""
        return lead + escape_md(part) + trail

    return "".join(f"`{part}`" if i % 2 else prose(part) for i, part in enumerate(parts))


def cell(value: object, digits: int = 1) -> str:
    """A table cell: a float to ``digits`` places, ``—`` for none or a non-finite one, anything
    else as escaped text."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return escape_md(value)


def number(value: float | None, digits: int = 1, sign: bool = False) -> str:
    """A number to ``digits`` places (``sign``: always signed), ``—`` where unknown."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def unknown(value: object) -> str:
    """The value escaped, or ``unknown`` where it is missing."""
    return "unknown" if value is None or value == "" else escape_md(value)


def metric_label(metric: str | None) -> str:
    """The TPS column's name: ``Decode TPS``, ``Prefill TPS`` (``TPS`` for another metric)."""
    return _METRIC_LABEL.get(metric or "", "TPS")


def tool_version(run: RunFacts, tool: ToolInfo | None) -> str | None:
    """The version that measured the run, else the one that analysed it."""
    return run.tool_version or (tool.version if tool else None)


def heading(
    run: RunFacts, tool: ToolInfo | None, metric: str | None, what: str, detail: str = ""
) -> list[str]:
    """A clock or undervolt summary's head: ``## powersweep clock sweep: H100, decode-single
    (sm-clock)``, its :func:`facts_table`, a blank line."""
    gpu = escape_md(run.gpu_name or "unknown GPU")
    mode = escape_md(run.load_mode or "unknown load")
    title = f"## powersweep {what}: {gpu}, {mode}{detail}"
    return [title, "", *facts_table(run, tool_version(run, tool), metric), ""]


def run_rows(run: RunFacts, version: str | None, metric: str | None = None) -> list[str]:
    """The header table's rows every summary carries (power, clock and undervolt runs alike):
    cooling, model and engine, load mode, the metric, date and tool version."""
    return [
        f"| Cooling | {unknown(run.cooling)} |",
        f"| Model / engine | {unknown(run.model)} / {unknown(run.engine)} |",
        f"| Load mode | {unknown(run.load_mode)} |",
        *([f"| Metric | {escape_md(metric)} |"] if metric else []),
        f"| Date | {unknown(run.date)} |",
        f"| Tool version | {unknown(version)} |",
    ]


def facts_table(
    run: RunFacts,
    version: str | None,
    metric: str | None = None,
    *,
    gpu: str | None = None,
    setup: Sequence[str] = (),
    answer: Sequence[str] = (),
) -> list[str]:
    """The summary's header table: the GPU (``gpu``: the axis's own text, else the run's label
    or name), the axis's ``setup`` rows, :func:`run_rows`, its ``answer`` rows, the simulated
    rig's note."""
    if gpu is None:
        gpu = escape_md(run.gpu_label) if run.gpu_label else unknown(run.gpu_name)
    return [
        "| | |",
        "|---|---|",
        f"| GPU | {gpu} |",
        *setup,
        *run_rows(run, version, metric),
        *answer,
        *([SIMULATED_ROW] if run.simulated else []),
    ]


def answer_banner(answer: Answer | None, keep_code: bool = False) -> list[str]:
    """What withholds or bounds the answer, said before anything else (none for an answer)."""
    if answer is None or answer.kind == "answer":
        return []
    what = "No answer" if answer.kind == "none" else "Boundary"
    why = md_keep_code(answer.why) if keep_code else escape_md(answer.why)
    return [f"**{what}: {why}.**", ""]


def apply_line(source: object, what: str) -> list[str]:
    """``Apply it: `sudo powersweep apply RUN` (what it sets)`` and a blank line: the run's path
    as code (a backtick in it would end the span, so it becomes a quote)."""
    path = " ".join(str(source).split()).replace("`", "'")
    return [f"Apply it: `sudo powersweep apply {path}` ({escape_md(what)}).", ""]


def findings_lines(
    findings: Sequence[Finding],
    *,
    style: Literal["coded", "plain"] = "plain",
    empty: str | None = None,
) -> list[str]:
    """``### Findings`` and one bullet each (``empty``: the bullet where there is none).

    ``coded``: warnings first, each with its code, its message's code spans kept and its hint on
    a line of its own; ``plain``: in the analysis's order, the severity and the hint after a dash.
    """
    lines = ["### Findings", ""]
    if style == "coded":
        # warnings first, each kind in the analysis' own order (a stable sort)
        ordered = sorted(findings, key=lambda f: f.severity != Severity.WARNING)
        lines += [_coded(f) for f in ordered]
    else:
        for f in findings:
            hint = f" — {escape_md(f.hint)}" if f.hint else ""
            lines.append(f"- **{escape_md(f.severity)}**: {escape_md(f.message)}{hint}")
    if not findings and empty:
        lines.append(f"- {empty}")
    return lines


def _coded(f: Finding) -> str:
    mark = "**warning**" if f.severity == Severity.WARNING else "info"
    line = f"- {mark} **{escape_md(f.code)}**: {md_keep_code(f.message)}"
    if f.hint:
        line += f"  \n  _Try:_ {md_keep_code(f.hint)}"
    return line


def row(cells: Iterable[str]) -> str:
    """A markdown table row of cells already escaped."""
    return "| " + " | ".join(cells) + " |"


def table_head(titles: Sequence[str], align: str) -> list[str]:
    """A table's title row (an empty title is one space: ``| |``) and its alignment row
    (``align``: ``l`` or ``r`` per column)."""
    names = "|" + "|".join(f" {t} " if t else " " for t in titles) + "|"
    return [names, "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]


@dataclass(frozen=True)
class Column(Generic[P]):
    """One column of a points table: its title, its cell for a point, its alignment."""

    title: str
    cell: Callable[[P], str]
    align: Literal["l", "r"] = "r"


def table(columns: Sequence[Column[P]], points: Iterable[P]) -> list[str]:
    """A points table: the titles, the alignment and one row a point."""
    head = table_head([c.title for c in columns], "".join(c.align for c in columns))
    return head + [row(c.cell(p) for c in columns) for p in points]


def status_cell(figures: PointFigures, missing: str = "ok") -> str:
    """A point's status (``missing`` where none is recorded), with its error where it is not
    ``ok``."""
    status = figures.status or missing
    if figures.error and status != "ok":
        status = f"{status}: {figures.error}"
    return escape_md(status)


def source_line(source: object) -> list[str]:
    """The summary's last line: where its curve was read from."""
    return ["", f"<sub>source: {escape_md(str(source))}</sub>", ""]


def truncate_lines(text: str, limit: int, what: str) -> str:
    """Cut text at a line boundary so it fits ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    kept: list[str] = []
    size = 0
    for line in lines:
        if size + len(line) + 1 > max(limit - 80, 0):
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept) + f"\n… ({what}: {len(lines) - len(kept)} more lines)\n"
