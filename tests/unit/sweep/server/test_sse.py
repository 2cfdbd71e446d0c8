"""The SSE reader and the stream accountant, fed bytes split at every possible position."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest

from powersweep.sweep.server.sse import (
    SseLineTooLong,
    SseReader,
    StreamAccumulator,
    describe_body,
    error_message,
    is_token_bearing,
)

Event = tuple[str, bytes, float]


def chunk(delta: Any = None, finish: Any = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }
    out.update(extra)
    return out


def sse(*events: Any, sep: bytes = b"\n") -> bytes:
    out = b""
    for e in events:
        data = e if isinstance(e, bytes) else json.dumps(e, separators=(",", ":")).encode()
        out += b"data: " + data + sep + sep
    return out


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
VLLM = sse(
    chunk({"role": "assistant", "content": ""}),
    *(chunk({"content": w}) for w in (" the", " café", " ☕", " end")),
    chunk({}, "length"),
    {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}},
    b"[DONE]",
)
LLAMACPP = (
    sse(chunk({"reasoning_content": "hm"}))
    + b": ping\n\n"
    + sse(chunk({"content": "a"}), chunk({}, "stop", timings={"predicted_n": 2}))
    + b"data: [DONE]\n\n"
)
PLAIN = (
    b"event: chunk\n"
    + sse(chunk({"reasoning": "r", "reasoning_content": "r"}))
    + b"event: chunk\n"
    + sse(chunk({"content": "x"}, "length"))
)
CRLF = sse(chunk({"content": "a"}), chunk({"content": "b"}), sep=b"\r\n") + b"data: [DONE]\r\n\r\n"
MIXED = (
    b": keep-alive comment\r\n\r\n"
    b"event: message\r\nid: 7\r\nretry: 1000\r\n"
    b'data:{"choices":[{"delta":{"content":"x"}}]}\r\n\r\n'
    b'data: {"choices":\ndata: [{"delta":{"content":"two lines"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"cr"}}]}\r\r'
    b"data: [DONE]\n\n"
)
ODD_JSON = (
    b'data: {"choices":[{"delta":{"content":5}}]}\n\n'  # not a string: not a token
    b'data: {"choices":{"delta":{"content":"x"}}}\n\n'  # choices not a list
    b'data: {"choices":[{"delta":"text"}]}\n\n'
    b'data: {"choices":[null,{"delta":{"content":"y"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"a","content":"bb"}}]}\n\n'  # last key wins
    b'data: {"choices":[{"delta":{"\\u0063ontent":"escaped key"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"nan"}}],"x":NaN}\n\n'
    b'data: {"choices":[{"delta":{"content":"\\u00e9\xff"}}]}\n\n'  # invalid UTF-8
    b"data: \xc2\xa0[DONE]\n\n"  # str.strip() removes the no-break space, bytes.strip() not
    b"data: not json\n\n"
    b"data: [1, 2]\n\n"
    b'data: {"choices":[{"delta":{"content":""},"finish_reason":""}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"z"},"finish_reason":7}]}\n\n'
)
TOOLS = sse(
    chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}),
    chunk({"content": "x", "tool_calls": []}),
    chunk({"content": "y", "tool_calls": None}),
    chunk({"tool_calls": []}),
)
ERRORS = [
    sse(chunk({"content": "a"}), {"error": {"message": "CUDA OOM", "type": "server_error"}}),
    b'error: {"code": 500, "message": "boom"}\n\n',
    b"event: error\ndata: not json at all\n\n",
    sse({"object": "error", "message": "vllm says no"}),
    sse({"detail": "fastapi says no"}),
    sse(chunk({"content": "b"}, error=None), chunk({"content": "c"}, usage={})),
    sse(chunk({"content": "d"}, usage=None, timings=None)),
]
SPACES = (
    b'data:{"choices":[{"delta":{"content":"no space"}}]}\n\n'
    b'data:  {"choices":[{"delta":{"content":"two spaces"}}]}\n\n'
    b"data:x\n\ndata\n\n" + sse(chunk({"content": "z"}))
)
BOM = b"\xef\xbb\xbf" + sse(chunk({"content": "after a bom"}))
UNTERMINATED = sse(chunk({"content": "a"})) + b'data: {"choices":[{"delta":{"content":"tail"}}]}'
NOT_SSE = [
    b"<!DOCTYPE html>\n<html><title>Bad Gateway</title></html>",
    b'{"error": {"message": "nope"}}',
    b'{\n  "object": "list"\n}',
    b"Internal Server Error",
    b"hello\ndata: " + json.dumps(chunk({"content": "x"})).encode() + b"\n\n",
    # a BOM alone on the first line leaves an empty field name: not an event stream
    b"\xef\xbb\xbf\n" + sse(chunk({"content": "x"})),
]
BODIES = [
    *(STREAM, VLLM, LLAMACPP, PLAIN, CRLF, MIXED, ODD_JSON, TOOLS, *ERRORS),
    *(SPACES, BOM, UNTERMINATED),
]


def pieces(body: bytes, splits: tuple[int, ...]) -> list[bytes]:
    cuts = [0, *splits, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(cuts)]


def splits_of(body: bytes) -> list[tuple[int, ...]]:
    """No split, every single split point, every pair of neighbours, and byte by byte."""
    n = len(body)
    return [
        (),
        *((i,) for i in range(1, n)),
        *((i, i + 1) for i in range(1, n - 1)),
        tuple(range(1, n)),
    ]


def recording(max_line: int = 1 << 20) -> tuple[SseReader, list[Event]]:
    """A reader that keeps the events it dispatches, in the list beside it."""
    events: list[Event] = []
    return SseReader(lambda *event: events.append(event), max_line), events


def read(
    body: bytes, splits: tuple[int, ...] = (), max_line: int = 1 << 20
) -> tuple[list[Event], SseReader]:
    """The events of ``body`` read in pieces (read k arrives at run time k, the close after)."""
    reader, events = recording(max_line)
    reads = pieces(body, splits)
    for k, piece in enumerate(reads):
        reader.feed(piece, float(k))
        if reader.not_sse:  # the client fails the request here, reading nothing more
            return events, reader
    reader.close(float(len(reads)))
    return events, reader


@pytest.mark.parametrize("splits", splits_of(STREAM))
def test_reader_frames_every_split_alike(splits: tuple[int, ...]) -> None:
    events, reader = read(STREAM, splits)
    assert [(e, d.decode()) for e, d, _ in events] == [
        ("message", '{"a": 1}'),
        ("message", "line one\nline two"),
        ("message", "café ☕"),
        ("message", "[DONE]"),
    ]
    assert not reader.not_sse


@pytest.mark.parametrize("body", BODIES, ids=lambda b: repr(b[:24]))
def test_each_event_is_dispatched_by_the_read_that_ends_its_blank_line(body: bytes) -> None:
    # Byte by byte, read k is byte k: each event before the close ends at a line end that
    # follows another (its blank line).
    by_byte, _ = read(body, tuple(range(1, len(body))))
    ends = [int(t) for _, _, t in by_byte if t < len(body)]
    assert all(body[t] in b"\r\n" and body[t - 1] in b"\r\n" for t in ends), ends
    whole, _ = read(body)
    assert [e[:2] for e in by_byte] == [e[:2] for e in whole]
    for splits in splits_of(body):
        events, _ = read(body, splits)
        cuts = [*splits, len(body)]
        # the read that holds the byte the event ended at; the close where none did
        expected = [
            (e, d, float(sum(c <= t for c in cuts))) if t < len(body) else (e, d, len(cuts))
            for e, d, t in by_byte
        ]
        assert events == expected, splits


def test_data_without_space_and_with_two_spaces() -> None:
    events, _ = read(b"data:x\n\ndata:  y\n\n")
    # Only one leading space is stripped, as the SSE spec says.
    assert [d for _, d, _ in events] == [b"x", b" y"]


def test_event_type_resets_after_dispatch() -> None:
    events, _ = read(b"event: chunk\ndata: 1\n\ndata: 2\n\n")
    assert [(e, d) for e, d, _ in events] == [("chunk", b"1"), ("message", b"2")]


def test_unterminated_last_event_is_dispatched_on_close() -> None:
    reader, events = recording()
    reader.feed(b"data: tail", 1.0)
    assert events == []
    reader.close(2.0)
    assert events == [("message", b"tail", 2.0)]


def test_crlf_split_between_reads_is_one_line_end() -> None:
    reader, events = recording()
    reader.feed(b"data: a\r", 1.0)
    reader.feed(b"\n\r", 2.0)
    # the \r ending read 2 ends the blank line: the event is whole then, whatever follows
    assert events == [("message", b"a", 2.0)]
    reader.feed(b"\ndata: b\r\n\r\n", 3.0)
    assert events == [("message", b"a", 2.0), ("message", b"b", 3.0)]


def test_a_bom_before_the_first_field_is_dropped() -> None:
    events, reader = read(BOM)
    assert [json.loads(d) for _, d, _ in events] == [chunk({"content": "after a bom"})]
    assert not reader.not_sse


def test_llamacpp_error_line_becomes_error_event() -> None:
    events, _ = read(b'error: {"code": 500, "message": "boom"}\n\n')
    assert events == [("error", b'{"code": 500, "message": "boom"}', 0.0)]


@pytest.mark.parametrize("body", NOT_SSE, ids=lambda b: repr(b[:16]))
def test_not_sse_bodies_are_flagged_on_every_split(body: bytes) -> None:
    for splits in splits_of(body):
        events, reader = read(body, splits)
        assert reader.not_sse and events == [], splits
    reader, events = recording()
    reader.feed(body, 0.0)
    reader.close(0.0)
    assert reader.not_sse and reader.raw_head == body and events == []


@pytest.mark.parametrize("limit", [40, 41, 65, 66, 80])
def test_line_limit_trips_on_the_read_that_leaves_a_longer_line_unfinished(limit: int) -> None:
    body = b"data: a\n\ndata: " + b"x" * 60 + b"\n\n"  # its longest line: 66 bytes
    tripped = 0
    for splits in splits_of(body):
        reader, events = recording(limit)
        ends = [*splits, len(body)]
        for k, (piece, end) in enumerate(zip(pieces(body, splits), ends, strict=True)):
            unfinished = end - (body.rfind(b"\n", 0, end) + 1)
            if unfinished > limit:
                before = list(events)
                with pytest.raises(SseLineTooLong, match=f"more than {limit} bytes"):
                    reader.feed(piece, float(k))
                assert events == before  # nothing of that read is dispatched
                tripped += 1
                break
            reader.feed(piece, float(k))
        else:
            reader.close(float(len(splits) + 1))
            assert len(events) == 2
    assert (tripped > 0) == (limit < 66)


def test_an_endless_line_is_refused_at_the_limit() -> None:
    reader = SseReader(StreamAccumulator().add_event, max_line_bytes=1 << 20)
    reader.feed(b"data: " + b"x" * (1 << 19), 0.0)
    with pytest.raises(SseLineTooLong, match="more than 1048576 bytes"):
        reader.feed(b"x" * (1 << 19), 0.0)


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


def state(acc: StreamAccumulator) -> dict[str, Any]:
    out = {k: v for k, v in vars(acc).items() if k not in ("token_times", "t_first_token_s")}
    out["times"] = acc.token_times_s
    out["t_first"] = None if math.isnan(acc.t_first_token_s) else acc.t_first_token_s
    out["t_last"] = None if math.isnan(acc.t_last_token_s) else acc.t_last_token_s
    out["totals"] = acc.totals()
    return out


def general(acc: StreamAccumulator) -> Any:
    """The general path alone (json and dicts) as the reader's callback."""

    def add(event_type: str, data: bytes, t_s: float) -> None:
        acc.events += 1
        acc.add_event_text(event_type, data.decode("utf-8", errors="replace"), t_s)

    return add


@pytest.mark.parametrize("body", [*BODIES, *NOT_SSE], ids=lambda b: repr(b[:24]))
def test_the_typed_decoder_accounts_as_the_general_path(body: bytes) -> None:
    # after every read, on every split: it falls back only where it cannot decide
    for splits in splits_of(body):
        fast, slow = (StreamAccumulator(record_token_times=True) for _ in range(2))
        readers = SseReader(fast.add_event), SseReader(general(slow))
        reads = pieces(body, splits)
        for k, piece in enumerate(reads):
            for reader in readers:
                reader.feed(piece, float(k))
            assert state(fast) == state(slow), (splits, k)
        for reader in readers:
            reader.close(float(len(reads)))
        assert state(fast) == state(slow), splits


def test_the_common_stream_is_accounted_as_expected() -> None:
    acc = StreamAccumulator(record_token_times=True)
    reader = SseReader(acc.add_event)
    reader.feed(VLLM[:200], 1.0)
    reader.feed(VLLM[200:], 2.0)
    reader.close(3.0)
    totals = acc.totals()
    assert (acc.chunk_tokens, totals.completion_tokens, totals.token_source) == (4, 4, "usage")
    assert acc.text_bytes == len(" the café ☕ end".encode())
    assert totals.finish_reason == "length" and acc.done
    assert acc.token_times is not None and acc.token_times.typecode == "d"
    # tokens that arrived in one read share its time
    assert set(acc.token_times) <= {1.0, 2.0} and acc.token_times[-1] == 2.0


def feed_stream(events: list[Any], times: list[float] | None = None) -> StreamAccumulator:
    """Each event (a JSON object, or bytes as they are) a read of its own, at ``times[i]``
    (else ``i``)."""
    acc = StreamAccumulator(record_token_times=True)
    reader = SseReader(acc.add_event)
    for i, event in enumerate(events):
        reader.feed(sse(event), times[i] if times else float(i))
    reader.close(float(len(events)))
    return acc


def test_usage_wins_and_times_use_all_token_bearing_deltas() -> None:
    acc = feed_stream(
        [
            chunk({"role": "assistant", "content": None}),
            chunk({"reasoning_content": "think"}),
            chunk({"reasoning": "a", "reasoning_content": "a"}),  # two aliases: one token
            chunk({"content": "x"}),
            chunk({}, "length"),
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 9,
                    "completion_tokens": 3,
                    "prompt_tokens_details": {"cached_tokens": 4},
                },
            },
            b"[DONE]",
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

    acc = feed_stream([chunk({"content": "a"}), chunk({"content": "b"}), b"[DONE]"])
    totals = acc.totals()
    assert (totals.token_source, totals.completion_tokens, totals.prompt_tokens) == (
        "chunks",
        2,
        None,
    )


def test_error_inside_stream_keeps_message() -> None:
    acc = feed_stream([chunk({"content": "a"}), {"error": {"message": "CUDA OOM", "code": 500}}])
    assert acc.totals().error == "CUDA OOM"
    assert acc.chunk_tokens == 1


def test_empty_or_missing_choices_and_garbage_events() -> None:
    acc = feed_stream([{"choices": []}, {"id": "x"}, b"not json", b"[1]"])
    assert acc.chunk_tokens == 0
    assert acc.bad_events == 2
    assert math.isnan(acc.t_first_token_s)
    assert acc.totals().error == ""
