"""One chat request's record (``sweep/server/request.py``): what :class:`RequestRun` makes of a
stream's events (the server's count, whether to trust it, a cut, a reset, the warnings), its
decode rate, and an HTTP library's error in words."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx
import pytest

from powersweep import runformat as rf
from powersweep.clock import ManualClock
from powersweep.sweep.server.request import (
    ERR_NO_COUNTABLE_TOKENS,
    RequestResult,
    RequestRun,
    http_error_text,
)
from tests.fakes.fake_chat import request_result

T0, DT = 1.0, 0.1


def _request_run(
    tokens: int = 20,
    *,
    usage: int | None = None,
    finish: str | None = "length",
    done: bool = True,
    text: str = "word ",
    extra_events: int = 0,
) -> RequestRun:
    """A stream of ``tokens`` token chunks, then a chunk with the finish reason and usage."""
    run = RequestRun(ManualClock(), record_token_times=True)
    run.t_start_s = 0.5
    acc = run.acc
    for _ in range(extra_events):  # role-only deltas: events without a token
        acc.events += 1
        acc.add_event_text("", json.dumps({"choices": [{"delta": {"role": "assistant"}}]}), T0)
    for k in range(tokens):
        acc.events += 1
        chunk = {"choices": [{"delta": {"content": text}, "finish_reason": None}]}
        acc.add_event_text("", json.dumps(chunk), T0 + k * DT)
    last: dict[str, Any] = {"choices": [{"delta": {}, "finish_reason": finish}]}
    if usage is not None:
        last["usage"] = {"prompt_tokens": 40, "completion_tokens": usage}
    if finish is not None or usage is not None:
        acc.events += 1
        acc.add_event_text("", json.dumps(last), T0 + tokens * DT)
    if done:
        acc.events += 1
        acc.add_event_text("", "[DONE]", T0 + tokens * DT)
    run.t_end_s = T0 + tokens * DT + 0.01
    return run


def _result_of(
    run: RequestRun, *, streamed: bool = True, limit: int | None = None
) -> RequestResult:
    return run.result("narr", 2, streamed, limit, lambda s: s.replace("sk-secret", "***"))


def test_a_whole_stream_with_the_servers_count() -> None:
    r = _result_of(_request_run(20, usage=20), limit=64)
    assert (r.ok, r.error, r.finish_reason, r.token_source) == (True, "", "length", "usage")
    assert (r.completion_tokens, r.chunk_tokens, r.prompt_tokens) == (20, 20, 40)
    assert (r.prompt_kind, r.stream, r.max_tokens, r.warnings) == ("narr", 2, 64, ())
    assert (r.t_start_s, r.t_first_token_s) == (0.5, T0)
    assert r.t_last_token_s == pytest.approx(T0 + 19 * DT)
    assert r.decode_tps == pytest.approx(19 / (19 * DT))
    assert list(r.token_times_s or ()) == pytest.approx([T0 + k * DT for k in range(20)])


@pytest.mark.parametrize(
    ("usage", "limit", "warnings"),
    [
        (60, None, (rf.WARN_PACKED_CHUNKS,)),  # three tokens per event
        (10, None, (rf.WARN_EXTRA_CHUNKS,)),  # half the chunks: still a possible count
        (20, 10, (rf.WARN_IGNORED_MAX_TOKENS,)),
        (None, None, (rf.WARN_NO_USAGE,)),  # the client's chunks are a guess
    ],
)
def test_counts_and_chunks_that_disagree_are_warned(
    usage: int | None, limit: int | None, warnings: tuple[str, ...]
) -> None:
    r = _result_of(_request_run(20, usage=usage), limit=limit)
    assert r.ok and r.warnings == warnings
    assert r.completion_tokens == (usage or 20)


@pytest.mark.parametrize("usage", [5000, 9])
def test_a_count_the_stream_cannot_hold_is_replaced_by_the_chunks(usage: int) -> None:
    # more tokens than 1.5 per streamed byte, or fewer than half the token-bearing chunks
    r = _result_of(_request_run(20, usage=usage))
    assert r.ok and (r.completion_tokens, r.token_source) == (20, "chunks")
    assert r.warnings == (rf.WARN_USAGE_UNTRUSTED,)


def test_a_stream_ended_without_a_finish_reason() -> None:
    cut = _result_of(_request_run(20, finish=None, done=True))
    assert not cut.ok
    assert cut.error == (
        "the server ended the stream after 20 tokens without a finish reason (the generation "
        "was cut, e.g. by another request)"
    )
    open_ended = _result_of(_request_run(20, finish=None, done=False))
    assert open_ended.ok and rf.WARN_NO_FINISH in open_ended.warnings


@pytest.mark.parametrize(
    ("run", "error"),
    [
        (
            _request_run(0, finish=None, done=False),
            "server closed the stream without sending any event",
        ),
        (_request_run(0, usage=0, finish="stop"), "the server answered, but generated no tokens"),
        (
            _request_run(0, usage=50, finish="stop", extra_events=2),  # counted, but none readable
            f"{ERR_NO_COUNTABLE_TOKENS} (no content, reasoning or tool_calls in 4 events)",
        ),
    ],
)
def test_a_stream_without_a_token_fails_with_what_it_did_send(run: RequestRun, error: str) -> None:
    r = _result_of(run)
    assert not r.ok and r.error == error


def test_a_request_cut_at_its_deadline_is_cut_whatever_finish_came() -> None:
    run = _request_run(20, finish=None, done=False)
    run.deadline_hit = True
    r = _result_of(run, limit=10)
    assert r.ok and (r.finish_reason, r.token_source, r.completion_tokens) == (
        "deadline",
        "chunks",
        20,
    )
    assert r.warnings == (rf.WARN_IGNORED_MAX_TOKENS,)  # no no_usage: the cut is by design
    whole = _request_run(20, usage=20)
    whole.deadline_hit = True  # hit as it ended: the server's count came
    assert _result_of(whole).finish_reason == "length"


def test_a_deadline_over_events_without_tokens_is_a_stream_the_client_cannot_read() -> None:
    run = _request_run(0, finish=None, done=False, extra_events=3)
    run.deadline_hit = True
    r = _result_of(run)
    assert not r.ok and r.finish_reason == "deadline"
    assert r.error.startswith(ERR_NO_COUNTABLE_TOKENS) and "before the window's end" in r.error


def test_a_reset_after_tokens_measured_the_rate_up_to_it() -> None:
    run = _request_run(20, finish=None, done=False)
    run.reset = True
    run.fail("connection reset by the server while reading the answer, after 20 tokens")
    r = _result_of(run)
    assert r.ok and r.error == ""
    assert (r.finish_reason, r.completion_tokens, r.token_source) == (rf.CUT_BY_RESET, 20, "chunks")
    assert r.warnings == (rf.WARN_CUT_BY_RESET,)


@pytest.mark.parametrize(("tokens", "streamed"), [(1, True), (20, False)])
def test_a_reset_before_two_tokens_or_of_an_unstreamed_answer_fails(
    tokens: int, streamed: bool
) -> None:
    run = _request_run(tokens, finish=None, done=False)
    run.reset = True
    run.fail("connection reset")
    r = _result_of(run, streamed=streamed)
    assert not r.ok and r.error == "connection reset"
    if not streamed:
        assert math.isnan(r.t_first_token_s) and math.isnan(r.t_last_token_s)


def test_busy_retries_and_bad_events_are_warned() -> None:
    run = _request_run(20, usage=20)
    run.busy_retries = 2
    run.acc.add_event_text("", "{not json", T0)
    assert _result_of(run).warnings == (rf.WARN_SERVER_BUSY, rf.WARN_BAD_EVENTS)


def test_an_unstreamed_answer_without_a_count_has_none() -> None:
    run = RequestRun(ManualClock(), record_token_times=False)
    run.non_stream = True
    run.acc.add_completion(
        {"choices": [{"message": {"content": "hello there"}, "finish_reason": "stop"}]}
    )
    r = _result_of(run, streamed=False)
    assert r.ok and r.completion_tokens is None and r.warnings == (rf.WARN_NO_USAGE,)


def test_the_first_error_stands_and_is_cleaned_onto_one_line() -> None:
    run = _request_run(20, usage=20)
    run.fail("HTTP 401: bad key sk-secret\n  for this server")
    run.fail("a later error")
    r = _result_of(run)
    assert not r.ok and r.error == "HTTP 401: bad key *** for this server"


def test_wall_seconds_left_and_the_sending_time() -> None:
    class Clock:
        scale = 2.0

        def now(self) -> float:
            return 5.0

    run = RequestRun(Clock(), record_token_times=False)  # type: ignore[arg-type]
    assert run.wall_left_s() is None
    run.deadline_s = 9.0
    assert run.wall_left_s() == 2.0
    asyncio.run(run.trace("connection.connect_tcp.started", {}))
    assert math.isnan(run.t_start_s)
    asyncio.run(run.trace("http11.send_request_headers.started", {}))
    assert run.t_start_s == 5.0


def test_the_decode_rate_leaves_the_first_token_out_and_needs_two() -> None:
    assert request_result(tokens=31, tps=30.0).decode_tps == pytest.approx(30.0)
    assert math.isnan(request_result(tokens=1).decode_tps)
    assert math.isnan(request_result(tokens=10, completion=None).decode_tps)


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (
            httpx.ReadError(""),
            "connection reset by the server while reading the answer, after 7 tokens (ReadError)",
        ),
        (httpx.ReadError("peer\n reset"), "after 7 tokens (ReadError: peer reset)"),
        (
            httpx.WriteError("pipe"),
            "connection broken while sending the request (WriteError: pipe)",
        ),
        (httpx.DecodingError("gzip"), "the answer could not be decoded (DecodingError: gzip)"),
        (httpx.ConnectError("refused"), "network error (ConnectError: refused)"),
        (httpx.ReadTimeout("slow"), "ReadTimeout: slow"),
        (httpx.ReadTimeout(""), "ReadTimeout (no detail from the HTTP library)"),
    ],
)
def test_http_errors_in_words(exc: httpx.HTTPError, text: str) -> None:
    assert http_error_text(exc, 7).endswith(text)
