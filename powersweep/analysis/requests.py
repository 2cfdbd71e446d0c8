"""Findings from requests.csv: what the client warned about, and the server's own decode rate.

llama.cpp reports its own decode rate per request (``timings.predicted_per_second``); the tool
measures the same thing from token arrival times. Their agreement is the best cross-check a run
has, so it is reported every time the server gives it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import polars as pl

from powersweep import runformat as rf
from powersweep.analysis.findings import Finding, finding
from powersweep.analysis.result_types import ServerRate
from powersweep.runformat import as_float

# Tool vs server decode rate: a cap whose rates differ by more than this is a finding.
RATE_MISMATCH_PCT = 5.0
# Requests whose decode rate is not compared: unmeasured ones (warm-up, settle, the scheduling
# check) and prefill requests (a few tokens each: one token's jitter is a large share).
_NOT_COMPARED_KINDS = frozenset({"warmup", "settle", "check", "prefill"})
# Shorter answers give a rate from too few token intervals to compare at 5%.
MIN_COMPARED_TOKENS = 16

# code -> (what happened, what to do)
_WARNING_TEXT: dict[str, tuple[str, str]] = {
    rf.WARN_PACKED_CHUNKS: (
        "the server packed several tokens into one stream event",
        "nothing, as long as the server reports usage or timings: TPS counts the server's "
        "tokens, not events (without usage it would read low)",
    ),
    rf.WARN_EXTRA_CHUNKS: (
        "the server sent more token events than the tokens it reported",
        "check the server's usage counting (reasoning tokens left out?); TPS uses its count",
    ),
    rf.WARN_IGNORED_MAX_TOKENS: (
        "the server generated more tokens than max_tokens asked for",
        "the requests ran longer than planned; check the server honours `max_tokens` "
        "(Ollama: `num_predict`)",
    ),
    rf.WARN_NO_USAGE: (
        "the server reported no token count, so tokens are the client's count of stream events",
        "that reads low if the server packs tokens; enable usage in streams "
        "(`stream_options.include_usage`) or use a server that reports it",
    ),
    rf.WARN_NO_FINISH: (
        "the stream ended without finish_reason or [DONE]",
        "check the server's log and any proxy timeouts: streams were cut",
    ),
    rf.WARN_BAD_EVENTS: (
        "stream events were not JSON",
        "a proxy may be rewriting the stream; connect to the server directly",
    ),
    rf.WARN_NOT_STREAMED: (
        "the server ignored stream=true and answered one JSON body",
        "without a stream there are no token times; enable streaming on the server",
    ),
}


def _caps_text(caps: set[float]) -> str:
    ordered = sorted(caps)
    shown = ", ".join(f"{c:g}" for c in ordered[:12])
    more = f" and {len(ordered) - 12} more" if len(ordered) > 12 else ""
    return f"{shown}{more} W"


def warning_findings(requests: pl.DataFrame | None) -> list[Finding]:
    """One finding per kind of request warning: how many requests, at which caps, what to do."""
    if requests is None or "warnings" not in requests.columns or "cap_w" not in requests.columns:
        return []
    count: dict[str, int] = defaultdict(int)
    caps: dict[str, set[float]] = defaultdict(set)
    for cap, text in zip(requests["cap_w"].to_list(), requests["warnings"].to_list(), strict=True):
        for code in str(text or "").split(";"):
            code = code.strip()
            if not code:
                continue
            count[code] += 1
            if cap is not None and math.isfinite(cap):
                caps[code].add(float(cap))
    out = []
    for code in sorted(count, key=lambda c: (-count[c], c)):
        what, todo = _WARNING_TEXT.get(code, (f"the client warned {code!r}", ""))
        where = f" at {_caps_text(caps[code])}" if caps[code] else ""
        out.append(
            finding(
                "warning",
                f"request_{code}",
                f"{count[code]} of {requests.height} requests{where}: {what}",
                todo or None,
            )
        )
    return out


def server_rates(requests: pl.DataFrame | None) -> list[ServerRate]:
    """Per cap: the tool's and the server's decode rate over the same completed requests.

    Both are token-weighted: the tool's is ``sum(n - 1) / sum((n - 1) / decode_tps)`` (each
    request's decode time, as caps.csv's rates count it; ``t_last - t_first`` in a
    requests.csv without ``decode_tps``), the server's ``sum(n) / sum(n / server_decode_tps)``
    (its own decode time per request). Requests whose stream stalled (``stall_s`` above 0) are
    left out.

    Returns:
        One rate per cap, ascending cap; empty when the server reported no rate.
    """
    need = {"cap_w", "ok", "completion_tokens", "server_decode_tps"}
    if requests is None or not need <= set(requests.columns):
        return []
    if "decode_tps" in requests.columns:
        tool_s = (pl.col("completion_tokens") - 1) / pl.col("decode_tps")
    elif {"t_first_token_s", "t_last_token_s"} <= set(requests.columns):
        tool_s = pl.col("t_last_token_s") - pl.col("t_first_token_s")
    else:
        return []
    df = requests.filter(
        (pl.col("ok").cast(pl.String).str.to_lowercase() == "true")
        & pl.col("server_decode_tps").is_not_null()
        & (pl.col("server_decode_tps") > 0)
        & (pl.col("completion_tokens") >= MIN_COMPARED_TOKENS)
        & (tool_s.is_finite() & (tool_s > 0)).fill_null(False)
    )
    if "prompt_kind" in df.columns:
        df = df.filter(~pl.col("prompt_kind").is_in(list(_NOT_COMPARED_KINDS)))
    if "stall_s" in df.columns:
        # a stalled stream's rate depends on how each side weighs the stall (the server counts
        # it whole, the tool's fitted span by where it fell): only steady streams compare clocks
        df = df.filter(~(pl.col("stall_s").cast(pl.Float64, strict=False) > 0).fill_null(False))
    if df.height == 0:
        return []
    per_cap = (
        df.with_columns(
            (pl.col("completion_tokens") - 1).alias("_tool_tok"),
            tool_s.alias("_tool_s"),
            (pl.col("completion_tokens") / pl.col("server_decode_tps")).alias("_server_s"),
        )
        .group_by("cap_w")
        .agg(
            pl.col("_tool_tok").sum(),
            pl.col("_tool_s").sum(),
            pl.col("completion_tokens").sum().alias("_server_tok"),
            pl.col("_server_s").sum(),
            pl.len().alias("n"),
        )
        .sort("cap_w")
    )
    out = []
    for row in per_cap.iter_rows(named=True):
        tool = row["_tool_tok"] / row["_tool_s"]
        server = row["_server_tok"] / row["_server_s"]
        out.append(
            ServerRate(
                cap_w=float(row["cap_w"]),
                tool_tps=as_float(tool, None),
                server_tps=as_float(server, None),
                diff_pct=as_float(100.0 * (tool / server - 1.0), None),
                n_requests=int(row["n"]),
            )
        )
    return out


def rate_findings(rates: Sequence[ServerRate]) -> list[Finding]:
    """A warning naming the caps where tool and server decode rates differ by more than 5%,
    else one line saying they agree."""
    if not rates:
        return []
    off = [r for r in rates if abs(as_float(r.diff_pct)) > RATE_MISMATCH_PCT]
    worst = max(rates, key=lambda r: abs(as_float(r.diff_pct)))
    if off:
        parts = "; ".join(
            f"{r.cap_w:g} W: tool {as_float(r.tool_tps):.2f} vs server "
            f"{as_float(r.server_tps):.2f} ({as_float(r.diff_pct):+.1f}%)"
            for r in off[:8]
        )
        return [
            finding(
                "warning",
                "server_rate_mismatch",
                f"the tool's decode TPS differs from the server's own "
                f"(timings.predicted_per_second) by more than {RATE_MISMATCH_PCT:g}% at "
                f"{len(off)} of {len(rates)} caps: {parts}",
                "a proxy buffering the stream, or a server batching events, skews the tool's "
                "token times; connect to the server directly",
            )
        ]
    n = sum(r.n_requests or 0 for r in rates)
    return [
        finding(
            "info",
            "server_rates_agree",
            f"the tool's decode TPS agrees with the server's own rate "
            f"(timings.predicted_per_second) within {RATE_MISMATCH_PCT:g}% "
            f"{'at its one cap' if len(rates) == 1 else f'at all {len(rates)} caps'} "
            f"({n} request{'' if n == 1 else 's'}; largest difference "
            f"{as_float(worst.diff_pct):+.2f}% at {worst.cap_w:g} W)",
            None,
        )
    ]


def request_findings(requests: pl.DataFrame | None) -> list[Finding]:
    """Every requests.csv finding: warnings by kind, then the tool-vs-server rate check."""
    return warning_findings(requests) + rate_findings(server_rates(requests))
