"""The SSE parser and the stream accountant, fed bytes split at every possible position."""

from __future__ import annotations

import json
import math

import pytest

from powersweep.sweep.server.sse import (
    SseEvent,
    SseParser,
    StreamAccumulator,
    describe_body,
    error_message,
    is_token_bearing,
)


def parse_all(body: bytes, split_at: tuple[int, ...] = ()) -> tuple[list[SseEvent], SseParser]:
    parser = SseParser()
    events: list[SseEvent] = []
    start = 0
    for cut in (*split_at, len(body)):
        events += parser.feed(body[start:cut])
        start = cut
    events += parser.close()
    return events, parser


def every_split(body: bytes) -> list[tuple[int, ...]]:
    """No split, every single split point, and byte-by-byte."""
    return [(), *((i,) for i in range(1, len(body))), tuple(range(1, len(body)))]


def chunk(delta: dict[str, object] | None = None, **extra: object) -> str:
    payload: dict[str, object] = {"choices": [{"index": 0, "delta": delta or {}}]}
    payload.update(extra)
    return json.dumps(payload)


STREAM = (
    ": keep-alive comment\r\n"
    "\r\n"
    "event: message\r\n"
    "id: 7\r\n"
    "retry: 1000\r\n"
    'data:{"a": 1}\r\n'
    "\r\n"
    "data: line one\n"
    "data: line two\n"
    "\n"
    "data: café ☕\r"
    "\r"
    "data: [DONE]\n"
    "\n"
).encode()


@pytest.mark.parametrize("splits", every_split(STREAM))
def test_parser_handles_every_split(splits: tuple[int, ...]) -> None:
    events, parser = parse_all(STREAM, splits)
    assert [e.data for e in events] == [
        '{"a": 1}',
        "line one\nline two",
        "café ☕",
        "[DONE]",
    ]
    assert events[0].event == "message"
    assert events[0].id == "7"
    assert events[1].event == "message"
    assert not parser.not_sse


def test_data_without_space_and_with_two_spaces() -> None:
    events, _ = parse_all(b"data:x\n\ndata:  y\n\n")
    # Only one leading space is stripped, as the SSE spec says.
    assert [e.data for e in events] == ["x", " y"]


def test_event_type_resets_after_dispatch() -> None:
    events, _ = parse_all(b"event: chunk\ndata: 1\n\ndata: 2\n\n")
    assert [(e.event, e.data) for e in events] == [("chunk", "1"), ("message", "2")]


def test_unterminated_last_event_is_dispatched_on_close() -> None:
    parser = SseParser()
    assert parser.feed(b"data: tail") == []
    assert [e.data for e in parser.close()] == ["tail"]


def test_crlf_split_between_reads_is_one_line_end() -> None:
    parser = SseParser()
    got = parser.feed(b"data: a\r")
    got += parser.feed(b"\n\r")
    got += parser.feed(b"\ndata: b\r\n\r\n")
    assert [e.data for e in got] == ["a", "b"]


def test_llamacpp_error_line_becomes_error_event() -> None:
    events, _ = parse_all(b'error: {"code": 500, "message": "boom"}\n\n')
    assert events == [SseEvent(event="error", data='{"code": 500, "message": "boom"}')]


@pytest.mark.parametrize(
    "body",
    [
        b"<!DOCTYPE html>\n<html><title>Bad Gateway</title></html>",
        b'{"error": {"message": "nope"}}',
        b'{\n  "object": "list"\n}',
        b"Internal Server Error",
    ],
)
def test_non_sse_bodies_are_flagged(body: bytes) -> None:
    events, parser = parse_all(body)
    assert parser.not_sse
    assert events == []


def test_describe_body() -> None:
    assert describe_body(b"<html><title>502 Bad Gateway</title></html>", "text/html") == (
        "an HTML page (502 Bad Gateway)"
    )
    assert describe_body(b'{"error": {"message": "no such model", "type": "x"}}') == (
        "no such model (x)"
    )
    assert describe_body(b"") == "an empty body"
    assert describe_body(b"oops").startswith("text 'oops'")


def test_error_message_shapes() -> None:
    assert error_message({"error": {"message": "m", "type": "t"}}) == "m (t)"
    assert error_message({"error": "plain"}) == "plain"
    assert error_message({"object": "error", "message": "vllm says"}) == "vllm says"
    detail = {"detail": [{"loc": ["body", "chat_template_kwargs"], "msg": "Extra inputs"}]}
    assert error_message(detail) == "chat_template_kwargs: Extra inputs"
    assert error_message({"choices": []}) is None


@pytest.mark.parametrize(
    ("delta", "bearing"),
    [
        ({"content": "hi"}, True),
        ({"content": ""}, False),
        ({"content": None, "role": "assistant"}, False),
        ({"reasoning_content": "hm"}, True),
        ({"reasoning": "hm"}, True),
        ({"tool_calls": [{"index": 0}]}, True),
        ({"tool_calls": []}, False),
        ({}, False),
        (None, False),
    ],
)
def test_token_bearing(delta: object, bearing: bool) -> None:
    assert is_token_bearing(delta) is bearing


def feed_stream(lines: list[str], times: list[float] | None = None) -> StreamAccumulator:
    body = "".join(f"data: {line}\n\n" for line in lines).encode()
    acc = StreamAccumulator(record_token_times=True)
    events, _ = parse_all(body)
    for i, event in enumerate(events):
        acc.add_event(event, times[i] if times else float(i))
    return acc


def test_usage_wins_and_times_use_all_token_bearing_deltas() -> None:
    acc = feed_stream(
        [
            chunk({"role": "assistant", "content": None}),
            chunk({"reasoning_content": "think"}),
            chunk({"reasoning": "a", "reasoning_content": "a"}),  # two aliases: one token
            chunk({"content": "x"}),
            chunk({}, **{"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
            json.dumps(
                {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 9,
                        "completion_tokens": 3,
                        "prompt_tokens_details": {"cached_tokens": 4},
                    },
                }
            ),
            "[DONE]",
        ],
        times=[0.0, 1.0, 2.0, 3.5, 4.0, 4.0, 4.0],
    )
    totals = acc.totals()
    assert totals.token_source == "usage"
    assert totals.completion_tokens == 3
    assert totals.prompt_tokens == 9
    assert totals.cached_tokens == 4
    assert totals.chunk_tokens == 3
    assert totals.finish_reason == "length"
    assert acc.t_first_token_s == 1.0
    assert acc.t_last_token_s == 3.5
    assert acc.token_times_s == [1.0, 2.0, 3.5]
    assert acc.done


def test_timings_then_chunks_as_fallbacks() -> None:
    timings = {
        "prompt_n": 5,
        "cache_n": 2,
        "predicted_n": 4,
        "predicted_per_second": 41.5,
        "prompt_per_second": 900.0,
    }
    acc = feed_stream([chunk({"content": "a"}), chunk({}, timings=timings)])
    totals = acc.totals()
    assert (totals.token_source, totals.completion_tokens) == ("timings", 4)
    assert totals.prompt_tokens == 7
    assert totals.cached_tokens == 2
    assert totals.server_decode_tps == 41.5
    assert totals.server_prompt_tps == 900.0

    acc = feed_stream([chunk({"content": "a"}), chunk({"content": "b"}), "[DONE]"])
    totals = acc.totals()
    assert (totals.token_source, totals.completion_tokens, totals.prompt_tokens) == (
        "chunks",
        2,
        None,
    )


def test_error_inside_stream_keeps_message() -> None:
    acc = feed_stream(
        [chunk({"content": "a"}), json.dumps({"error": {"message": "CUDA OOM", "code": 500}})]
    )
    assert acc.totals().error == "CUDA OOM"
    assert acc.chunk_tokens == 1


def test_empty_or_missing_choices_and_garbage_events() -> None:
    acc = feed_stream([json.dumps({"choices": []}), json.dumps({"id": "x"}), "not json", "[1]"])
    assert acc.chunk_tokens == 0
    assert acc.bad_events == 2
    assert math.isnan(acc.t_first_token_s)
    assert acc.totals().error == ""
