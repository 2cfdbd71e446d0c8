"""The server's pace (``sweep/loads/pace.py``): rates and times to first token learned from
completed requests, the rate expected at the next point, the tokens a request asks for within
the server's context, and the snapshot a resumed run restores."""

from __future__ import annotations

import math

import pytest

from powersweep.sweep.loads.pace import (
    MAX_REQUEST_TOKENS,
    MIN_REQUEST_TOKENS,
    PROBE_TOKENS,
    PROMPT_ROOM_TOKENS,
    Pace,
    server_tokens_per_chunk,
)
from tests.fakes.fake_chat import request_result


def test_tokens_per_chunk_is_the_median_of_completed_requests_with_a_server_count() -> None:
    results = [
        request_result(tokens=90, chunks=30),  # 3 per chunk
        request_result(tokens=60, chunks=30),  # 2
        request_result(tokens=120, chunks=30, source="timings"),  # 4
        # not counted: the client's own count, a cut request, a failure
        request_result(tokens=300, chunks=30, source="chunks"),
        request_result(tokens=300, chunks=30, finish="deadline"),
        request_result(tokens=300, chunks=30, ok=False),
    ]
    assert server_tokens_per_chunk(results) == 3.0
    assert math.isnan(server_tokens_per_chunk(results[3:]))
    assert math.isnan(server_tokens_per_chunk([]))


def test_learn_pools_each_kinds_tokens_over_its_seconds() -> None:
    pace = Pace()
    pace.learn(
        [
            request_result("narr", tokens=31, tps=30.0, ttft_s=0.2),  # 30 tokens in 1 s
            request_result("narr", tokens=91, tps=20.0, ttft_s=0.4),  # 90 tokens in 4.5 s
            request_result("code", tokens=41, tps=40.0, ttft_s=0.1),
            request_result("code", tokens=500, ok=False),  # a failure teaches nothing
        ]
    )
    assert pace.decode_tps["narr"] == pytest.approx(120.0 / 5.5)
    assert pace.ttft_s["narr"] == pytest.approx(0.3)  # the median
    assert pace.decode_tps["code"] == pytest.approx(40.0)
    assert pace.knows("narr") and not pace.knows("prefill")
    assert pace.tokens_per_chunk == 1.0


def test_learn_under_one_kind_and_a_single_token_teaches_only_its_ttft() -> None:
    pace = Pace()
    pace.learn([request_result("warmup", tokens=1, ttft_s=0.7)], kind="narr")
    assert not pace.knows("narr") and pace.ttft_s == {"narr": pytest.approx(0.7)}
    pace.learn([request_result("warmup", tokens=31, tps=30.0)], kind="narr")
    assert pace.decode_tps == {"narr": pytest.approx(30.0)}


def test_with_one_point_known_the_slow_side_of_the_bound_is_expected() -> None:
    pace = Pace()
    pace.decode_tps["narr"] = 30.0
    pace.remember(300.0)
    pace.aim(200.0)
    assert pace.decode_tps["narr"] == pytest.approx(20.0)  # in proportion to the cap, at most
    pace.aim(400.0)
    assert pace.decode_tps["narr"] == pytest.approx(30.0)  # never faster than measured


def test_with_two_points_a_line_predicts_held_inside_the_bounds() -> None:
    pace = Pace()
    for position, rate in ((300.0, 30.0), (250.0, 27.0)):
        pace.decode_tps["narr"] = rate
        pace.remember(position)
    pace.aim(275.0)
    assert pace.decode_tps["narr"] == pytest.approx(28.5)
    pace.aim(100.0)  # extrapolated down the line: 18, inside [10.8, 27]
    assert pace.decode_tps["narr"] == pytest.approx(18.0)
    steep = Pace()
    for position, rate in ((300.0, 30.0), (290.0, 20.0)):
        steep.decode_tps["narr"] = rate
        steep.remember(position)
    steep.aim(200.0)  # the line would go negative: held at the proportional bound
    assert steep.decode_tps["narr"] == pytest.approx(20.0 * 200.0 / 290.0)


@pytest.mark.parametrize("position", [math.nan, 0.0, -10.0])
def test_positions_that_are_not_positive_numbers_are_ignored(position: float) -> None:
    pace = Pace()
    pace.decode_tps["narr"] = 30.0
    pace.remember(position)
    pace.remember(300.0)
    pace.decode_tps["narr"] = 25.0
    pace.aim(position)
    assert pace.decode_tps["narr"] == 25.0
    pace.aim(300.0)
    assert pace.decode_tps["narr"] == 30.0  # only the finite position was remembered


def test_max_tokens_fills_the_time_after_the_first_token() -> None:
    pace = Pace()
    assert pace.max_tokens("narr", 10.0) == PROBE_TOKENS
    assert pace.max_tokens("narr", 10.0, unknown=1000) == 1000
    pace.decode_tps["narr"], pace.ttft_s["narr"] = 30.0, 0.3
    assert pace.max_tokens("narr", 10.0) == math.ceil(30.0 * (0.97 * 10.0 - 0.3))
    assert pace.max_tokens("narr", 10.0, slack=1.5) == math.ceil(30.0 * (0.97 * 10.0 - 0.3) * 1.5)
    assert pace.max_tokens("narr", 0.1) == MIN_REQUEST_TOKENS
    assert pace.max_tokens("narr", 1e6) == MAX_REQUEST_TOKENS


def test_max_tokens_fits_each_streams_share_of_the_context() -> None:
    pace = Pace(context_tokens=4096)
    pace.decode_tps["narr"] = 1000.0
    assert pace.max_tokens("narr", 60.0) == 4096 - PROMPT_ROOM_TOKENS
    assert pace.max_tokens("narr", 60.0, streams=4) == 4096 // 4 - PROMPT_ROOM_TOKENS
    # a context too small for the prompt room still asks for the minimum
    assert Pace(context_tokens=300).max_tokens("narr", 60.0) == MIN_REQUEST_TOKENS
    assert Pace(context_tokens=300).max_tokens("narr", 60.0, unknown=10) == MIN_REQUEST_TOKENS


def test_another_request_is_worth_it_only_with_time_for_more_than_its_prefill() -> None:
    pace = Pace()
    assert pace.worth_another("narr", 0.6, 10.0)
    assert not pace.worth_another("narr", 0.5, 10.0)  # 5% of the window
    pace.ttft_s["narr"] = 1.0
    assert not pace.worth_another("narr", 3.0, 10.0)
    assert pace.worth_another("narr", 3.01, 10.0)


def test_a_snapshot_restores_and_bad_values_are_ignored() -> None:
    pace = Pace()
    pace.decode_tps["narr"], pace.ttft_s["narr"], pace.tokens_per_chunk = 30.0, 0.2, 2.0
    again = Pace()
    again.restore(pace.snapshot())
    assert again.snapshot() == pace.snapshot()
    other = Pace()
    other.restore(
        {
            "decode_tps": {"narr": 31.0, "code": -1.0, "x": math.nan, "y": "fast"},
            "ttft_s": [0.1],
            "tokens_per_chunk": True,
        }
    )
    assert other.decode_tps == {"narr": 31.0} and other.ttft_s == {}
    assert other.tokens_per_chunk is None
    other.restore({"tokens_per_chunk": 0})
    assert other.tokens_per_chunk is None
    other.restore("not a snapshot")
    assert other.decode_tps == {"narr": 31.0}
