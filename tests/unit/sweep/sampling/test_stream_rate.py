"""A stream's decode span on its own rhythm: a late stamp at either end does not move it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from powersweep.analysis.requests import server_rates
from powersweep.sweep.sampling.measure import decode_blocks
from powersweep.sweep.sampling.stream_rate import (
    decode_stall_share,
    decode_tps,
    fitted_span_s,
    stall_gaps,
    without_stalls,
)
from powersweep.sweep.server.request import RequestResult

RATE = 100.0  # tokens per run second


def _stream_request(times: list[float], tokens: int | None = None) -> RequestResult:
    return RequestResult(
        prompt_kind="narr",
        stream=0,
        t_start_s=-0.5,
        t_first_token_s=times[0],
        t_last_token_s=times[-1],
        t_end_s=times[-1],
        prompt_tokens=40,
        completion_tokens=tokens if tokens is not None else len(times),
        token_source="usage",
        chunk_tokens=len(times),
        token_times_s=tuple(times),
        finish_reason="length",
        ok=True,
        error="",
    )


def _even_token_times(n: int = 301) -> list[float]:
    return [i / RATE for i in range(n)]


def test_even_chunks_give_the_span_of_their_ends() -> None:
    times = _even_token_times()
    assert fitted_span_s(times, times[0], times[-1]) == pytest.approx(3.0)
    assert _stream_request(times).decode_tps == pytest.approx(RATE)


def test_a_late_last_stamp_barely_moves_the_rate() -> None:
    # The client read nothing from 2.96 s to 3.06 s (a busy host): the last 5 chunks, which
    # the server sent on time, are stamped together when it reads again.
    late = [t if t < 2.955 else 3.06 for t in _even_token_times()]
    r = _stream_request(late)
    ends = (len(late) - 1) / (late[-1] - late[0])
    assert ends == pytest.approx(RATE * 3.0 / 3.06)  # 2% low, on one stamp
    assert r.decode_tps == pytest.approx(RATE, rel=0.005)
    assert decode_tps([r], "narr") == pytest.approx(r.decode_tps)


def test_a_late_first_stamp_barely_moves_the_rate() -> None:
    late = [max(t, 0.1) for t in _even_token_times()]
    r = _stream_request(late)
    assert (len(late) - 1) / (late[-1] - late[0]) == pytest.approx(RATE * 3.0 / 2.9)
    assert r.decode_tps == pytest.approx(RATE, rel=0.005)


def test_a_stream_that_slowed_keeps_its_average_rate() -> None:
    # first half at 100/s, second half at 50/s: no lapse, a real change of rate
    times = [i / 100.0 for i in range(151)] + [1.5 + i / 50.0 for i in range(1, 151)]
    span = fitted_span_s(times, times[0], times[-1])
    assert span == pytest.approx(times[-1] - times[0], rel=0.03)


def test_too_few_or_unrecorded_stamps_fall_back_to_the_ends() -> None:
    assert fitted_span_s([0.0, 0.4], 0.0, 0.4) == pytest.approx(0.4)
    assert fitted_span_s(None, 1.0, 3.5) == pytest.approx(2.5)
    assert fitted_span_s([], 1.0, 3.5) == pytest.approx(2.5)
    assert fitted_span_s([1.0, 1.0, 1.0], 1.0, 1.0) == 0.0  # one read: no span either way
    assert math.isnan(fitted_span_s(None, math.nan, 1.0))
    # a request without stamps: the ends, as before
    no_stamps = SimpleNamespace(
        ok=True, prompt_kind="narr", completion_tokens=101, t_first_token_s=1.0, t_last_token_s=2.0
    )
    assert decode_tps([no_stamps], "narr") == pytest.approx(100.0)


def test_packed_chunks_scale_the_chunk_rhythm_to_tokens() -> None:
    # 4 tokens a chunk after the first: 101 chunks, 401 tokens, 25 chunks a second
    times = [i / 25.0 for i in range(101)]
    assert _stream_request(times, tokens=401).decode_tps == pytest.approx(100.0)


def test_blocks_sum_to_the_fitted_rate() -> None:
    late = [t if t < 2.955 else 3.06 for t in _even_token_times()]
    r = _stream_request(late)
    blocks = decode_blocks([r], "narr")
    assert sum(b[0] for b in blocks) / sum(b[1] for b in blocks) == pytest.approx(r.decode_tps)


def test_the_server_rate_comparison_uses_the_requests_decode_rate() -> None:
    rng = np.random.default_rng(1)
    rows = []
    for tps in (30.0, 31.0):
        rows.append(
            {
                "cap_w": 300.0,
                "prompt_kind": "narr",
                "ok": "true",
                "completion_tokens": 101.0,
                "t_first_token_s": 1.0,
                # a late last stamp: the ends read low, the request's decode_tps does not
                "t_last_token_s": 1.0 + 100 / tps + float(rng.uniform(0.3, 0.5)),
                "decode_tps": tps,
                "server_decode_tps": tps,
            }
        )
    (rate,) = server_rates(pl.DataFrame(rows))
    assert rate.tool_tps == pytest.approx(200 / (100 / 30 + 100 / 31))
    assert rate.diff_pct == pytest.approx(0.0, abs=1e-9)
    # an older requests.csv without decode_tps: the ends
    old = pl.DataFrame(rows).drop("decode_tps")
    (rate,) = server_rates(old)
    assert rate.tool_tps < 0.9 * 30.0


def _jittered(n: int, seed: int, stall_at: int | None = None, stall_s: float = 0.4) -> list[float]:
    rng = np.random.default_rng(seed)
    gaps = (1.0 + 0.05 * rng.standard_normal(n - 1)) / RATE
    if stall_at is not None:
        gaps[stall_at] += stall_s
    return [0.0, *np.cumsum(gaps).tolist()]


@pytest.mark.parametrize("where", [1, 150, 298])
def test_a_stall_anywhere_in_a_stream_is_named_with_the_seconds_it_lost(where: int) -> None:
    lost = stall_gaps(_jittered(301, where, stall_at=where))
    assert list(lost) == [where]
    assert lost[where] == pytest.approx(0.4, abs=0.01)


def test_jitter_and_a_late_reader_are_no_stall() -> None:
    """A client that read late gets the chunks due meanwhile in a burst: the server lost
    nothing, however long the gap; jitter alone never makes a gap four times the median."""
    for seed in range(20):
        assert stall_gaps(_jittered(301, seed)) == {}
    late = _even_token_times()
    late[100:130] = [late[130]] * 30  # 0.3 s unread, then 30 chunks at once
    assert stall_gaps(late) == {}
    assert without_stalls(late) == late


def test_the_stall_share_is_what_the_rate_loses_to_stalls() -> None:
    """decode_tps counts the stall (on its fitted span, where a stall mid-stream weighs more
    than one at an end); the share takes the rate back to the stream's rhythm."""
    times = _jittered(301, 7, stall_at=120, stall_s=0.6)
    requests = [_stream_request(times)]
    share = decode_stall_share(requests, "narr")
    assert share > 0.6 / (times[-1] - times[0])
    rhythm = decode_tps(requests, "narr") / (1.0 - share)
    assert rhythm == pytest.approx(RATE, rel=0.01)
    assert decode_stall_share([_stream_request(_even_token_times())], "narr") == 0.0
    assert math.isnan(decode_stall_share([], "narr"))
