"""The loads' shared machinery (``sweep/loads/base.py``): window margins, a cut request judged
and counted, several rounds of a point pooled, the share of a window measured, the time-bounded
windows of :func:`run_prompts` and the keep-busy stream, on a scripted client."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from powersweep.clock import ManualClock
from powersweep.runformat import (
    WARN_IGNORED_MAX_TOKENS,
    WARN_NO_USAGE,
    WARN_PACKED_CHUNKS,
    WARN_SERVER_BUSY,
)
from powersweep.sweep.loads.base import (
    CHUNKS_SCALED,
    FIRST_SHARE,
    MARGIN_MAX_S,
    MAX_CONSECUTIVE_FAILURES,
    TOO_SLOW,
    LoadRun,
    count_cut,
    judge_cut,
    keep_busy,
    measured_share,
    request_budget_s,
    run_prompts,
    window_margin_s,
)
from powersweep.sweep.loads.pace import PROBE_TOKENS, Pace
from tests.fakes.fake_chat import FakeChat, request_result


class _Labels:
    def __init__(self) -> None:
        self.labels: list[tuple[float, str]] = []

    def label(self, cap_w: float, phase: str) -> None:
        self.labels.append((cap_w, phase))


@pytest.mark.parametrize(
    ("window_s", "prompts", "margin_s"),
    [
        (10.0, 1, 1.0),
        (30.0, 1, MARGIN_MAX_S),
        (30.0, 2, 0.75),
        (30.0, 0, MARGIN_MAX_S),
        (2.0, 3, 0.2),
    ],
)
def test_the_margin_is_a_share_of_the_window_and_bounded_per_point(
    window_s: float, prompts: int, margin_s: float
) -> None:
    assert window_margin_s(window_s, prompts) == pytest.approx(margin_s)


def test_a_request_without_a_window_gets_the_longest_window_and_half_a_minute() -> None:
    assert request_budget_s(60.0) == 90.0


def test_a_request_cut_before_any_token_is_a_failure_that_says_why() -> None:
    cut = request_result(finish="deadline", source="chunks", tokens=0, chunks=0, completion=None)
    judged = judge_cut(cut, 12.34)
    assert not judged.ok
    assert judged.error == (
        f"no token arrived within 12.3 s: the server is {TOO_SLOW} (or stuck); use a longer "
        "--target-cap-seconds or a lighter load"
    )
    busy = judge_cut(
        request_result(
            finish="deadline", tokens=0, chunks=0, completion=None, warnings=(WARN_SERVER_BUSY,)
        ),
        5.0,
    )
    assert "it answered busy (HTTP 429/503) until then" in busy.error


@pytest.mark.parametrize(
    "result",
    [
        request_result(finish="deadline", source="chunks", tokens=5, completion=None),  # tokens
        request_result(finish="length"),  # not cut
        request_result(ok=False, error="HTTP 500", tokens=0, chunks=0, finish="deadline"),
    ],
)
def test_other_results_pass_judge_cut_untouched(result: Any) -> None:
    assert judge_cut(result, 10.0) is result


def _cut(chunks: int, **kw: Any) -> Any:
    return request_result(finish="deadline", source="chunks", tokens=chunks, completion=None, **kw)


def test_a_cut_request_counts_its_chunks_times_the_servers_tokens_per_chunk() -> None:
    packed = count_cut(_cut(40, max_tokens=200), 2.5)
    assert (packed.completion_tokens, packed.token_source) == (100, CHUNKS_SCALED)
    assert packed.warnings == (WARN_PACKED_CHUNKS,)
    # a little over one token per chunk converts without calling the server a packer
    slight = count_cut(_cut(40), 1.05)
    assert (slight.completion_tokens, slight.warnings) == (42, ())
    one = count_cut(_cut(40), 1.0)
    assert (one.completion_tokens, one.token_source, one.warnings) == (40, "chunks", ())


@pytest.mark.parametrize("per_chunk", [None, math.nan, 0.0, -1.0])
def test_without_a_server_count_the_chunks_are_the_count_and_say_so(
    per_chunk: float | None,
) -> None:
    r = count_cut(_cut(30, warnings=(WARN_NO_USAGE,)), per_chunk)
    assert (r.completion_tokens, r.token_source) == (30, "chunks")
    assert r.warnings == (WARN_NO_USAGE,)  # once


def test_a_cut_request_past_its_max_tokens_ignored_it() -> None:
    r = count_cut(_cut(50, max_tokens=64), 2.0)
    assert r.completion_tokens == 100
    assert r.warnings == (WARN_PACKED_CHUNKS, WARN_IGNORED_MAX_TOKENS)


@pytest.mark.parametrize(
    "result",
    [
        request_result(finish="length", source="chunks"),  # whole: its chunks are its count
        request_result(finish="deadline", source="usage"),  # the server's count came
        request_result(finish="deadline", source="chunks", tokens=0, chunks=0, ok=False),
    ],
)
def test_count_cut_leaves_other_results_alone(result: Any) -> None:
    assert count_cut(result, 3.0) is result


def test_the_measured_share_never_passes_the_whole_window() -> None:
    overlapping = [request_result(t0=0.0, tokens=300, tps=30.0, end_s=10.0)] * 2
    assert measured_share(overlapping, [("narr", 0.0, 10.0)], "narr") == 1.0
    assert measured_share(overlapping, [("narr", 5.0, 5.0)], "narr") == 0.0


def _load_run(
    windows: list[tuple[str, float, float]], tps: dict[str, float], **extra: Any
) -> LoadRun:
    return LoadRun(windows=windows, tps=tps, extra=dict(extra))


def test_a_run_knows_its_seconds_in_all_and_per_kind() -> None:
    run = _load_run([("narr", 0.0, 10.0), ("code", 10.0, 16.0), ("narr", 20.0, 22.0)], {})
    assert run.window_s == 18.0
    assert (run.kind_s("narr"), run.kind_s("code"), run.kind_s("prefill")) == (12.0, 6.0, 0.0)


def test_one_round_is_its_own_merge() -> None:
    run = _load_run([("narr", 0.0, 10.0)], {"narr_tps": 30.0})
    assert LoadRun.merged([run]) is run


def test_rounds_pool_rates_by_the_seconds_of_their_kinds_windows() -> None:
    first = _load_run(
        [("narr", 0.0, 10.0), ("code", 10.0, 20.0)],
        {"narr_tps": 30.0, "code_tps": 40.0},
        tps_blocks="29.5 30.5",
        narr_spread_pct=2.0,
        streams=4,
    )
    first.errors.append("first")
    second = _load_run(
        [("narr", 30.0, 60.0)],
        {"narr_tps": 34.0},
        tps_blocks="33.9",
        narr_spread_pct=5.0,
        streams=8,
    )
    second.errors.append("second")
    merged = LoadRun.merged([first, second])
    assert merged.tps["narr_tps"] == pytest.approx((30.0 * 10 + 34.0 * 30) / 40)
    assert merged.tps["code_tps"] == 40.0  # only the first round measured code
    assert merged.extra["tps_blocks"] == "29.5 30.5 33.9"
    assert merged.extra["narr_spread_pct"] == 5.0  # the largest spread
    assert merged.extra["streams"] == 4  # any other column: the first round's
    assert merged.windows == first.windows + second.windows
    assert merged.errors == ["first", "second"]


def test_a_round_that_measured_a_kind_without_a_figure_makes_it_unknown() -> None:
    ok = _load_run([("narr", 0.0, 10.0)], {"narr_tps": 30.0})
    failed = _load_run([("narr", 10.0, 20.0)], {"narr_tps": math.nan})
    assert math.isnan(LoadRun.merged([ok, failed]).tps["narr_tps"])
    # a round with no window of that kind does not weigh in
    unmeasured = _load_run([("code", 10.0, 20.0)], {"narr_tps": math.nan})
    assert LoadRun.merged([ok, unmeasured]).tps["narr_tps"] == 30.0


def test_the_prefill_wall_rate_is_weighted_by_the_prefill_windows() -> None:
    a = _load_run([("prefill", 0.0, 10.0)], {"prefill_tps": 1000.0}, prefill_wall_tps=900.0)
    b = _load_run([("prefill", 10.0, 40.0)], {"prefill_tps": 1200.0}, prefill_wall_tps=1100.0)
    merged = LoadRun.merged([a, b])
    assert merged.extra["prefill_wall_tps"] == pytest.approx((900 * 10 + 1100 * 30) / 40)
    assert merged.tps["prefill_tps"] == pytest.approx((1000 * 10 + 1200 * 30) / 40)


def _prompts(
    chat: FakeChat, clock: ManualClock, pace: Pace, target_s: float
) -> tuple[LoadRun, _Labels]:
    labels = _Labels()
    prompts = [("narr", "tell a story"), ("code", "write code")]
    run = asyncio.run(run_prompts(chat, clock, labels, 250.0, prompts, target_s, pace))
    return run, labels


def test_each_prompt_gets_a_time_bounded_window_labelled_with_its_kind() -> None:
    clock = ManualClock()
    chat = FakeChat(clock, tps=30.0)
    run, labels = _prompts(chat, clock, Pace(), 10.0)
    assert labels.labels == [(250.0, "narr"), (250.0, "code")]
    assert [k for k, _, _ in run.windows] == ["narr", "code"]
    margin = window_margin_s(10.0, 2)
    for (_, t0, t1), kind in zip(run.windows, ("narr", "code"), strict=True):
        assert 10.0 - 1.0 <= t1 - t0 <= 10.0 + margin + 1e-9
        mine = [c for c in chat.calls if c.prompt_kind == kind]
        assert all(c.deadline_s == pytest.approx(t0 + 10.0 + margin) for c in mine)
        assert all(c.t_start_s < t0 + 10.0 for c in mine)  # none starts after the window
    # an unknown pace sends a probe first; the next request is sized from the rate it measured
    narr = [c for c in chat.calls if c.prompt_kind == "narr"]
    assert narr[0].max_tokens == PROBE_TOKENS
    assert narr[1].max_tokens == math.ceil(30.0 * (0.97 * (10.0 - narr[1].t_start_s) - 0.1))
    assert all(r.ok for r in run.requests)


def test_a_known_pace_sizes_the_first_request_for_part_of_the_window() -> None:
    clock = ManualClock()
    chat = FakeChat(clock, tps=30.0, ttft_s=0.0)
    pace = Pace()
    pace.decode_tps["narr"] = pace.decode_tps["code"] = 30.0
    _prompts(chat, clock, pace, 20.0)
    expected = math.ceil(30.0 * 0.97 * FIRST_SHARE * 20.0)
    assert chat.calls[0].max_tokens == expected
    assert pace.decode_tps["narr"] == pytest.approx(30.0, rel=0.01)


def test_a_prompt_stops_after_three_failures_in_a_row() -> None:
    clock = ManualClock()
    chat = FakeChat(clock, fail={1, 2, 3, 4, 5, 6}, fail_s=0.5)
    run, _ = _prompts(chat, clock, Pace(), 30.0)
    narr = [r for r in run.requests if r.prompt_kind == "narr"]
    assert len(narr) == MAX_CONSECUTIVE_FAILURES and not any(r.ok for r in narr)
    assert run.windows[0][2] - run.windows[0][1] == pytest.approx(1.5)
    assert [r.ok for r in run.requests if r.prompt_kind == "code"] == [False, False, False]


def test_a_request_the_window_cut_counts_its_chunks_with_the_servers_tokens_per_chunk() -> None:
    clock = ManualClock()
    chat = FakeChat(clock, tps=30.0, tokens_per_chunk=3, max_stream_s=30.0)
    pace = Pace()
    pace.decode_tps["narr"] = pace.decode_tps["code"] = 60.0  # expects twice the rate
    pace.tokens_per_chunk = 3.0
    run, _ = _prompts(chat, clock, pace, 10.0)
    cut = [r for r in run.requests if r.finish_reason == "deadline"]
    assert len(cut) == 2, "each prompt's request, sized from a fast pace, runs into the end"
    for r in cut:
        assert r.ok and r.token_source == CHUNKS_SCALED
        assert r.completion_tokens == 3 * r.chunk_tokens
        assert WARN_PACKED_CHUNKS in r.warnings


def test_keep_busy_streams_settle_requests_until_the_time_is_up() -> None:
    clock = ManualClock()
    chat = FakeChat(clock, tps=30.0, max_stream_s=4.0)
    seen: list[Any] = []
    asyncio.run(keep_busy(chat, clock, "p", "narr", Pace(), 10.0, on_result=seen.append))
    assert len(seen) == len(chat.calls) >= 3
    assert {c.prompt_kind for c in chat.calls} == {"settle"}
    assert all(c.deadline_s == 10.0 for c in chat.calls)
    assert chat.calls[-1].t_start_s < 10.0 <= clock.now() + 1e-9


def test_keep_busy_gives_up_after_three_failures_in_a_row() -> None:
    clock = ManualClock()
    chat = FakeChat(clock, fail=range(1, 100), fail_s=0.1)
    seen: list[Any] = []
    asyncio.run(keep_busy(chat, clock, "p", "narr", Pace(), 60.0, on_result=seen.append))
    assert len(seen) == MAX_CONSECUTIVE_FAILURES
    assert clock.now() == pytest.approx(0.3)
