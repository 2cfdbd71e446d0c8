"""Findings from requests.csv: warning codes and the tool-vs-server decode rate."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from powersweep.analysis.requests import (
    rate_findings,
    request_findings,
    server_rates,
    warning_findings,
)


def _row(cap: float, tool_tps: float, server_tps: float | None, **kw: Any) -> dict[str, Any]:
    n = 101
    return {
        "cap_w": cap,
        "prompt_kind": kw.get("kind", "narr"),
        "ok": kw.get("ok", "true"),
        "completion_tokens": float(n),
        "t_first_token_s": 1.0,
        "t_last_token_s": 1.0 + (n - 1) / tool_tps,
        "warnings": kw.get("warnings", ""),
        "server_decode_tps": server_tps,
    }


def _df(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema_overrides={"server_decode_tps": pl.Float64})


def test_rates_agree_within_five_percent() -> None:
    df = _df([_row(300, 30.0, 30.5), _row(300, 30.0, 29.8), _row(250, 25.0, 25.9)])
    rates = server_rates(df)
    assert [r.cap_w for r in rates] == [250.0, 300.0]
    assert rates[0].diff_pct == pytest.approx(100 * (25.0 / 25.9 - 1), rel=1e-6)
    (f,) = rate_findings(rates)
    assert f.code == "server_rates_agree" and f.severity == "info"
    assert "all 2 caps" in f.message and "3 requests" in f.message
    # issue 47: one cap is "its one cap", not "all 1 caps"
    (one,) = rate_findings(server_rates(_df([_row(300, 30.0, 30.5)])))
    assert "at its one cap (1 requests" not in one.message and "at its one cap (" in one.message


def test_a_cap_off_by_more_than_five_percent_is_a_warning() -> None:
    df = _df([_row(300, 30.0, 30.1), _row(250, 25.0, 27.0)])
    (f,) = rate_findings(server_rates(df))
    assert f.code == "server_rate_mismatch" and f.severity == "warning"
    assert "250 W" in f.message and "300 W" not in f.message and "1 of 2 caps" in f.message


def test_rates_skip_failed_warmup_and_rateless_requests() -> None:
    df = _df(
        [
            _row(300, 30.0, 30.0),
            _row(300, 10.0, 30.0, ok="false"),
            _row(300, 10.0, 30.0, kind="warmup"),
            _row(300, 10.0, 30.0, kind="prefill"),
            _row(250, 10.0, None),
        ]
    )
    rates = server_rates(df)
    assert [(r.cap_w, r.n_requests) for r in rates] == [(300.0, 1)]
    assert rates[0].diff_pct == pytest.approx(0.0, abs=1e-9)
    assert server_rates(_df([_row(300, 30.0, None)])) == []
    assert rate_findings([]) == []


def test_a_stalled_stream_is_not_compared() -> None:
    """The server counts a stall whole, the tool's fitted span by where it fell: a request that
    stalled says nothing of either clock (runs before ``stall_s`` compare every request)."""
    steady = {**_row(300, 30.0, 30.2), "stall_s": 0.0}
    stalled = {**_row(300, 33.0, 30.0), "stall_s": 0.4}
    rates = server_rates(_df([steady, stalled]))
    assert [r.n_requests for r in rates] == [1]
    assert rates[0].diff_pct == pytest.approx(100 * (30.0 / 30.2 - 1), rel=1e-6)
    without = [{k: v for k, v in r.items() if k != "stall_s"} for r in (steady, stalled)]
    assert [r.n_requests for r in server_rates(_df(without))] == [2]


def test_one_finding_per_warning_kind_with_count_and_caps() -> None:
    df = _df(
        [
            _row(300, 30, None, warnings="packed_chunks;ignored_max_tokens"),
            _row(250, 30, None, warnings="packed_chunks"),
            _row(250, 30, None, warnings=""),
            _row(200, 30, None, warnings="something_new"),
        ]
    )
    found = {f.code: f for f in warning_findings(df)}
    assert set(found) == {
        "request_packed_chunks",
        "request_ignored_max_tokens",
        "request_something_new",
    }
    packed = found["request_packed_chunks"]
    assert packed.message.startswith("2 of 4 requests at 250, 300 W")
    assert packed.hint
    assert found["request_ignored_max_tokens"].message.startswith("1 of 4 requests at 300 W")


def test_old_runs_without_the_columns_give_nothing() -> None:
    df = pl.DataFrame({"cap_w": [300.0], "ok": ["true"]})
    assert request_findings(df) == [] and request_findings(None) == []


def test_short_answers_are_not_compared() -> None:
    row = _row(300, 30.0, 20.0)
    row["completion_tokens"] = 8.0
    assert server_rates(_df([row])) == []
