"""Input that cannot be trusted, named: duplicate caps, ignored rows, implausible draws, caps
the sweep marked suspect, and the faults a run met.

Every row the analysis leaves out is said here, with its caps.csv line, so a figure is either
used or visibly set aside. Pure functions over a loaded :class:`~powersweep.analysis.load.Curve`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

from powersweep.analysis import claims
from powersweep.analysis.failures import cause_examples, counted_elsewhere
from powersweep.analysis.findings import Finding, finding
from powersweep.analysis.load import SOURCE_LINE, Curve
from powersweep.analysis.plausibility import IMPLAUSIBLE, OUTLIER
from powersweep.analysis.run_record import RunAdaptive, RunFault, RunRecord, RunStalls
from powersweep.runformat import CONFIRM_REASON, REFERENCE_REASON, REPEAT_REASONS, CsvRow, as_float

SUSPECT = "suspect"
# Statuses reported here rather than as "not measured".
OWN_STATUSES = frozenset({SUSPECT, IMPLAUSIBLE, OUTLIER})
_FAULT_TEXT = {
    "remeasured": "point(s) looked disturbed (a stall or a paused server, a stuck stream, a "
    "prefill far slower than its peers, or narrative and code rates that disagree) and were "
    "measured again",
    "suspect": "point(s) stayed disturbed after a second measurement (status suspect)",
    "cap_retried": "failed point(s) were measured again at the end of the sweep",
    "planner_repeat": "point(s) the adaptive planner asked for again after they failed or stayed "
    "disturbed were not measured again (one attempt each; failed ones get one retry at the end)",
    "usage_untrusted": "request(s) reported usage the streamed text could not hold "
    "(token chunks counted instead)",
    "server_busy": "request(s) met a busy server (HTTP 429/503) and were retried",
    "no_countable_tokens": "request(s) got a stream without tokens the client could count",
    "line_too_long": "request(s) met an event-stream line that never ended",
    "too_slow": "request(s) got no token before their deadline",
    "slow_requests": "warm-up request(s) ran past their deadline",
    "cut_at_deadline": "request(s) streamed past their max_tokens (the server ignores it) and "
    "were cut at their window's end (what arrived counts)",
    "request_failed": "request(s) failed",
    "unstable_offset": "undervolt step(s) failed their stability check",
    "gpu_reset": "GPU reset(s) by an unstable offset (the card came back at offset 0)",
    "xid_unreadable": "card set(s) could not report Xid errors (steps checked without them)",
    "probe_cached": "stability probe(s) the server served from its cache even when asked not "
    "to and sent again (their prefill was not checked at that step)",
    "cache_untold": "server(s) that report no cached prompt tokens: whether a stability probe "
    "was served from cache could not be told",
    "stale_bytes": "kept connection(s) that got bytes no request asked for (a second response "
    "from the server): closed unread, later requests went on new connections",
    "stretch_unchecked": "undervolt search(es) whose TPS does not follow the card (a simulated "
    "card beside a real server): steps not judged by their TPS",
}
_LIST_MAX = 12
# Fault kinds a search is meant to meet (its own findings report them).
SEARCH_OUTCOMES = frozenset({"unstable_offset"})


def usable_mask(metric: str) -> pl.Expr:
    """Rows the analysis uses (as :func:`powersweep.analysis.core` filters them)."""
    return (
        (pl.col("status") == "ok")
        & pl.col(metric).is_not_null()
        & pl.col(metric).is_finite()
        & (pl.col(metric) > 0)
        & pl.col("power_w").is_not_null()
        & pl.col("power_w").is_finite()
        & (pl.col("power_w") > 0)
    )


def input_findings(curve: Curve) -> list[Finding]:
    """Findings on rows the analysis ignores or chose between, and on the run's faults."""
    caps = curve.caps
    metric = curve.metric
    if SOURCE_LINE not in caps.columns:
        caps = caps.with_columns(pl.Series(SOURCE_LINE, range(2, caps.height + 2)))
    caps = caps.with_columns(usable_mask(metric).alias("_usable"))
    out = _ignored_rows(caps, metric)
    out += _own_statuses(caps)
    out += _duplicates(caps)
    out += run_findings(curve.run, curve.requests, str(curve.source))
    return out


def ignored_rows(curve: Curve) -> list[Finding]:
    """The ``rows_ignored`` finding alone, and the loader's notes (a clock curve, whose rows
    share one cap, has no duplicate caps to name)."""
    caps = curve.caps
    if SOURCE_LINE not in caps.columns:
        caps = caps.with_columns(pl.Series(SOURCE_LINE, range(2, caps.height + 2)))
    notes = [
        finding("warning", "input_note", note, "check the run directory's files")
        for note in curve.notes
    ]
    return notes + _ignored_rows(
        caps.with_columns(usable_mask(curve.metric).alias("_usable")), curve.metric
    )


def _line(row: CsvRow) -> str:
    return f"line {row[SOURCE_LINE]} ({_w(row['cap_w'])})"


def _w(value: object) -> str:
    """A cap in watts (``? W`` where the cell or the record has no number)."""
    return (
        f"{value:g} W" if isinstance(value, int | float) and not isinstance(value, bool) else "? W"
    )


def _why_ignored(row: CsvRow, metric: str) -> str:
    parts = []
    for col in ("power_w", metric):
        v = row.get(col)
        number = as_float(v)
        if v is None:
            parts.append(f"{col} missing")
        elif not math.isfinite(number):
            parts.append(f"{col} is {v}")
        elif number <= 0:
            parts.append(f"{col} is {number:g} (not positive)")
    return ", ".join(parts) or "not usable"


def _ignored_rows(caps: pl.DataFrame, metric: str) -> list[Finding]:
    """Rows with status ok whose figures cannot be used (NaN, inf, zero or negative)."""
    bad = caps.filter((pl.col("status") == "ok") & ~pl.col("_usable"))
    if bad.height == 0:
        return []
    rows = list(bad.iter_rows(named=True))
    listed = "; ".join(f"{_line(r)}: {_why_ignored(r, metric)}" for r in rows[:_LIST_MAX])
    more = f"; and {len(rows) - _LIST_MAX} more" if len(rows) > _LIST_MAX else ""
    return [
        finding(
            "warning",
            "rows_ignored",
            f"{len(rows)} row(s) of caps.csv ignored, their figures are not usable: {listed}{more}",
            "a NaN, infinite, zero or negative draw or TPS is a failed reading; rerun those caps",
        )
    ]


def _own_statuses(caps: pl.DataFrame) -> list[Finding]:
    out = []
    for status, code, hint in (
        (
            SUSPECT,
            "suspect_caps",
            "a stall or a paused sweep disturbed them twice; rerun those caps",
        ),
        (
            IMPLAUSIBLE,
            "implausible_rows",
            "check the file's units (W per card) and the readings",
        ),
        (
            OUTLIER,
            "outlier_caps",
            "measure those points again (--caps): a window disturbed by something else (another "
            "load, a request that ended early, a stall) reads apart from the curve",
        ),
    ):
        rows = list(caps.filter(pl.col("status") == status).iter_rows(named=True))
        if not rows:
            continue
        listed = "; ".join(f"{_line(r)}: {r.get('error') or status}" for r in rows[:_LIST_MAX])
        out.append(
            finding(
                "warning",
                code,
                f"{len(rows)} cap(s) {status}, kept in the table and left out of every pick: "
                f"{listed}",
                hint,
            )
        )
    return out


def _duplicates(caps: pl.DataFrame) -> list[Finding]:
    """A cap with several rows: which row counts and why."""
    out: list[Finding] = []
    counts = caps.group_by("cap_w", maintain_order=True).len()
    for cap in counts.filter(pl.col("len") > 1)["cap_w"].to_list():
        rows = list(caps.filter(pl.col("cap_w") == cap).iter_rows(named=True))
        lines = ", ".join(str(r[SOURCE_LINE]) for r in rows)
        usable = [r for r in rows if r["_usable"]]
        if not usable:
            out.append(
                finding(
                    "warning",
                    "duplicate_cap",
                    f"{_w(cap)} appears in {len(rows)} rows (lines {lines}); none is usable",
                    "rerun that cap",
                )
            )
            continue
        last = [r for r in rows if (r.get("reason") or "") not in REPEAT_REASONS][-1:]
        if last and str(last[0].get("status") or "ok") != "ok":
            # a recheck found it suspect, a retry failed: the reading it replaced does not
            # stand either (pooling.current_rows), and the suspect/failed finding says why
            out.append(
                finding(
                    "warning",
                    "duplicate_cap",
                    f"{_w(cap)} appears in {len(rows)} rows (lines {lines}): its last "
                    f"measurement, line {last[0][SOURCE_LINE]}, ended {last[0].get('status')}, "
                    "so the earlier reading it replaced is left out too",
                    "rerun that cap",
                )
            )
            continue
        confirm = [r for r in usable if (r.get("reason") or "") in REPEAT_REASONS]
        if confirm:
            out.append(_pooled(cap, rows, usable, confirm))
            continue
        kept = usable[-1]
        earlier_bad = all(not r["_usable"] for r in rows if r is not kept)
        why = (
            "the only usable one (the others failed or were set aside: a re-measurement)"
            if earlier_bad
            else "the last usable row, the latest measurement; the others are ignored"
        )
        out.append(
            finding(
                "info" if earlier_bad else "warning",
                "duplicate_cap",
                f"{_w(cap)} appears in {len(rows)} rows (lines {lines}): kept line "
                f"{kept[SOURCE_LINE]}, {why}",
                None if earlier_bad else "remove the rows you do not want",
            )
        )
    return out


def _pooled(
    cap: float,
    rows: Sequence[CsvRow],
    usable: Sequence[CsvRow],
    confirm: Sequence[CsvRow],
) -> Finding:
    """A cap the confirm phase measured again: its readings are pooled, as the analysis does
    (:func:`powersweep.analysis.pooling.pool_repeats`), so no reading of it is ignored."""
    base = [r for r in usable if (r.get("reason") or "") not in REPEAT_REASONS][-1:]
    pooled = [*base, *confirm]
    lines = ", ".join(str(r[SOURCE_LINE]) for r in pooled)
    left = [r for r in rows if all(r is not p for p in pooled)]
    who = " and ".join(
        name
        for reason, name in (
            (CONFIRM_REASON, "the confirm phase"),
            (REFERENCE_REASON, "the run's reference re-read"),
        )
        if any((r.get("reason") or "") == reason for r in confirm)
    )
    message = (
        f"{_w(cap)} appears in {len(rows)} rows: {who} measured it again, and "
        f"lines {lines} are pooled into its figures"
    )
    if left:
        message += (
            f"; line(s) {', '.join(str(r[SOURCE_LINE]) for r in left)} were set aside "
            "(failed, or an earlier attempt measured again)"
        )
    return finding("info", "confirm_pooled", message)


def _failed_requests(requests: pl.DataFrame | None) -> RunFault | None:
    """requests.csv's failed requests as a ``request_failed`` fault, for a run whose run.json
    does not count them (older versions): the ones no other fault kind counts."""
    if requests is None or not {"ok", "error"} <= set(requests.columns):
        return None
    ok = requests["ok"].cast(pl.String).str.strip_chars().str.to_lowercase()
    errors = [
        str(e or "")
        for e, good in zip(requests["error"].to_list(), ok.to_list(), strict=True)
        if good == "false" and not counted_elsewhere(e)
    ]
    if not errors:
        return None
    return RunFault(kind="request_failed", count=len(errors), examples=cause_examples(errors))


def _fault_part(f: RunFault) -> str:
    kind = f.kind or "?"
    text = _FAULT_TEXT.get(kind, kind)
    examples = [e for e in f.examples if e]
    count = "?" if f.count is None else f.count
    if kind == "request_failed" and examples:
        return f"{count} {text}: {'; '.join(examples)}"
    example = f" (e.g. {examples[0]})" if examples else ""
    return f"{count} {text}{example}"


def run_findings(
    run: RunRecord | None, requests: pl.DataFrame | None = None, source: str = "RUN"
) -> list[Finding]:
    """The run's own record of faults it met and of a status that withholds an answer
    (:func:`~.claims.status_reason`; ``source`` the run directory its command names).

    Failed requests are among them, by cause in words: from run.json, or (a run that did not
    count them) from requests.csv.
    """
    if run is None:
        return []
    out = []
    faults = list(run.faults or [])
    if not any(f.kind == "request_failed" for f in faults):
        failed = _failed_requests(requests)
        faults += [failed] if failed else []
    # what a search looks for is no fault of the run: an undervolt search ends on the step that
    # failed its check, and says so in a finding of its own (issue 47)
    faults = [f for f in faults if f.kind not in SEARCH_OUTCOMES]
    if faults:
        out.append(
            finding(
                "warning",
                "run_faults",
                "the run met faults: " + "; ".join(_fault_part(f) for f in faults),
                "the figures above account for them; check the server if they repeat",
            )
        )
    out += _stalls_finding(run.stalls, run.load_mode or "")
    adaptive = run.adaptive or RunAdaptive()
    if adaptive.left_out:
        caps = ", ".join(f"{_w(c.cap_w)} ({c.reason or '?'})" for c in adaptive.left_out)
        out.append(
            finding(
                "warning",
                "adaptive_budget",
                f"the adaptive sweep stopped at its budget of "
                f"{'?' if adaptive.max_caps is None else adaptive.max_caps} "
                f"caps; still asked for, not measured: {caps}",
                "plateau and ceiling edges near those caps may be a step off or missing: "
                "measure them with --caps, or sweep dense",
            )
        )
    axis = run.options.axis if run.options else None
    what = "caps" if axis in (None, "power") else "steps" if axis == "undervolt" else "points"
    claim = claims.status_claim(run, source, what)
    if claim is not None:
        why, remedy = claim
        out.append(
            finding(
                "warning",
                f"run_{run.status}",
                f"{_no_answer(why, str(run.status))}; {remedy}",
                f"{remedy}; nothing the run measured is applied until it answers",
            )
        )
    return out


def _no_answer(why: str, status: str) -> str:
    """``interrupted after 9 of 21 caps: no answer yet`` (unless the reason says it already)."""
    if "answer" in why:
        return why
    return f"{why}: no answer" + (" yet" if status in ("interrupted", "running") else "")


def _stalls_finding(stalls: RunStalls | None, load_mode: str) -> list[Finding]:
    """``streams_stalled``: the share of the decode time the server's streams stalled (run.json
    ``stalls``), and how the run's rates carry it."""
    share = as_float(stalls.share_pct) if stalls is not None else math.nan
    if not share > 0:
        return []
    how = (
        "each point's rates are stated at that share, whether or not its own short windows met "
        "a stall, and its interval carries the share's uncertainty"
        if load_mode == "decode-single"
        else "each window's rate counts the stalls that fell in it"
    )
    sd = as_float(stalls.sd_pct) if stalls is not None else math.nan
    return [
        finding(
            "info",
            "streams_stalled",
            f"the server's token streams stalled for {share:.2g}% (±{1.96 * sd:.2g}%) of their "
            f"decode time, in {stalls.requests if stalls else None} requests (another tenant's "
            "slices, or "
            f"the host's): the long-run rate counts them; {how}",
            "if the GPU or the host is shared, sweep when nothing else runs: the stalls are the "
            "other work's, not the card's",
        )
    ]
