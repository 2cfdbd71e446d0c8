"""The fast stream path (SseReader + account_data) against the general one (SseParser +
StreamAccumulator.add_event): the same accounting after every read, on every split."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest

from powersweep.sweep.server.sse import SseLineTooLong, SseParser, StreamAccumulator
from powersweep.sweep.server.sse_fast import SseReader, account_data


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
BOM_ALONE = b"\xef\xbb\xbf\n" + sse(chunk({"content": "x"}))
UNTERMINATED = sse(chunk({"content": "a"})) + b'data: {"choices":[{"delta":{"content":"tail"}}]}'
NOT_SSE = [
    b"<!DOCTYPE html>\n<html><title>Bad Gateway</title></html>",
    b'{"error": {"message": "nope"}}',
    b"Internal Server Error",
    b"hello\ndata: " + json.dumps(chunk({"content": "x"})).encode() + b"\n\n",
]
BODIES = [
    *(VLLM, LLAMACPP, PLAIN, CRLF, MIXED, ODD_JSON, TOOLS, *ERRORS),
    *(SPACES, BOM, BOM_ALONE, UNTERMINATED),
]


def state(acc: StreamAccumulator) -> dict[str, Any]:
    out = {k: v for k, v in vars(acc).items() if k not in ("token_times", "t_first_token_s")}
    out["times"] = acc.token_times_s
    out["t_first"] = None if math.isnan(acc.t_first_token_s) else acc.t_first_token_s
    out["t_last"] = None if math.isnan(acc.t_last_token_s) else acc.t_last_token_s
    out["totals"] = acc.totals()
    return out


def pieces(body: bytes, splits: tuple[int, ...]) -> list[bytes]:
    cuts = [0, *splits, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(cuts)]


def run_both(body: bytes, splits: tuple[int, ...], max_line: int = 1 << 20) -> None:
    """Feed both paths read by read (read k arrives at run time k) and compare after each."""
    parser = SseParser(max_line)
    general = StreamAccumulator(record_token_times=True)
    fast = StreamAccumulator(record_token_times=True)
    reader = SseReader(fast, max_line)
    reads = pieces(body, splits)
    for k, piece in enumerate(reads):
        try:
            events = parser.feed(piece)
        except SseLineTooLong:
            with pytest.raises(SseLineTooLong):
                reader.feed(piece, float(k))
            assert state(fast) == state(general)
            return
        reader.feed(piece, float(k))
        assert reader.not_sse == parser.not_sse
        if parser.not_sse:  # the client fails the request here, counting nothing more
            assert state(fast) == state(general)
            return
        for event in events:
            general.add_event(event, float(k))
        assert state(fast) == state(general), f"after read {k} of {reads}"
    for event in parser.close():
        general.add_event(event, float(len(reads)))
    reader.close(float(len(reads)))
    assert reader.not_sse == parser.not_sse
    assert state(fast) == state(general)


def splits_of(body: bytes) -> list[tuple[int, ...]]:
    """No split, every single split point, every pair of neighbours, and byte by byte."""
    n = len(body)
    return [
        (),
        *((i,) for i in range(1, n)),
        *((i, i + 1) for i in range(1, n - 1)),
        tuple(range(1, n)),
    ]


@pytest.mark.parametrize("body", BODIES, ids=lambda b: repr(b[:24]))
def test_fast_path_accounts_as_the_general_one_on_every_split(body: bytes) -> None:
    for splits in splits_of(body):
        run_both(body, splits)


@pytest.mark.parametrize("body", NOT_SSE, ids=lambda b: repr(b[:16]))
def test_not_sse_bodies_are_flagged_as_the_general_parser_does(body: bytes) -> None:
    for splits in splits_of(body):
        run_both(body, splits)
    reader = SseReader(StreamAccumulator())
    reader.feed(body, 0.0)
    reader.close(0.0)
    assert reader.not_sse and reader.raw_head == body


def test_the_common_stream_is_accounted_as_expected() -> None:
    acc = StreamAccumulator(record_token_times=True)
    reader = SseReader(acc)
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


@pytest.mark.parametrize("limit", [40, 41, 80])
def test_line_limit_trips_on_the_same_read_as_the_general_parser(limit: int) -> None:
    body = sse(chunk({"content": "a"})) + b"data: " + b"x" * 60 + b"\n\n"
    for splits in splits_of(body):
        run_both(body, splits, max_line=limit)


def test_an_endless_line_is_refused_at_the_limit() -> None:
    reader = SseReader(StreamAccumulator(), max_line_bytes=1 << 20)
    reader.feed(b"data: " + b"x" * (1 << 19), 0.0)
    with pytest.raises(SseLineTooLong, match="more than 1048576 bytes"):
        reader.feed(b"x" * (1 << 19), 0.0)


def _account_both(body: bytes) -> None:
    fast = StreamAccumulator(record_token_times=True)
    general = StreamAccumulator(record_token_times=True)
    for i, event in enumerate(SseParser().feed(body)):
        if event.event == "error":
            continue  # the reader hands error events to the general path itself
        fast.events += 1
        account_data(fast, event.data.encode(), float(i))
        general.events += 1
        general.add_event_text("message", event.data, float(i))
        assert state(fast) == state(general), event.data


@pytest.mark.parametrize("body", [ODD_JSON, TOOLS, VLLM, LLAMACPP, *ERRORS])
def test_account_data_falls_back_only_where_the_typed_decoder_cannot_decide(body: bytes) -> None:
    _account_both(body)
