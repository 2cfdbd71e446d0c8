"""powersweep.sim.server_chunks: what the simulated server streams. The tokenizer's count, each
request's generated text (seeded, reasoning first; a greedy request's from its prompt and seed,
diverged on an unstable card), the chunk, usage and timings bodies as each flavour writes them,
the non-streamed answer, an error event, and the response that stops its stream the moment the
client hangs up (and holds a whole answer's headers, so a failed one gets its own status)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from powersweep.sim import faults
from powersweep.sim.server_chunks import (
    ChunkFormat,
    FailedAnswer,
    Plan,
    Progress,
    WatchedResponse,
    count_prompt_tokens,
    error_event,
    greedy_key,
    is_greedy,
    message_text,
)


def _chunk_plan(**changes: Any) -> Plan:
    base: dict[str, Any] = {
        "request_no": 7,
        "prompt_tokens": 12,
        "completion_tokens": 6,
        "reasoning_tokens": 2,
        "stream": True,
        "include_usage": True,
    }
    return Plan(**{**base, **changes})


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("   \n\t", 0),
        ("cat", 1),
        ("cats", 1),
        ("catsup", 2),
        ("a, b!", 4),
        ("x_1 2", 2),
        ("naïve", 2),
    ],
)
def test_count_prompt_tokens(text: str, tokens: int) -> None:
    assert count_prompt_tokens(text) == tokens


def test_progress_decode_time_is_never_negative_or_nan() -> None:
    p = Progress()
    assert p.decode_s == 0.0  # NaN start and end
    p.decode_start_s, p.last_token_s = 2.0, 1.5
    assert p.decode_s == 0.0
    p.last_token_s = 3.25
    assert p.decode_s == 1.25


def test_texts_are_seeded_per_request_and_start_each_part_without_a_space() -> None:
    fmt = ChunkFormat("llamacpp", "m", 1, seed=3)
    texts = fmt.texts(_chunk_plan())
    assert texts == fmt.texts(_chunk_plan())  # same seed and request: same text
    assert texts != ChunkFormat("llamacpp", "m", 1, seed=4).texts(_chunk_plan())
    assert len(texts) == 6
    # reasoning tokens first, then the answer: each part starts without a space
    assert not texts[0].startswith(" ") and not texts[2].startswith(" ")
    assert all(t.startswith(" ") for i, t in enumerate(texts) if i not in (0, 2))
    assert len(fmt.texts(_chunk_plan(completion_tokens=100_000))) == 8192  # longer streams repeat


def test_sampled_texts_are_what_they_were_before_greedy_answers() -> None:
    # pinned from the simulator before greedy requests existed: a sweep's load is unchanged
    texts = ChunkFormat("llamacpp", "m", 0, seed=3).texts(_chunk_plan(request_no=2))
    assert texts == ["let", " I", "card", " sets", " and", " it"]


def _messages(text: str = "What is 2+2?", role: str = "user") -> list[dict[str, Any]]:
    return [{"role": "user", "content": "Be brief."}, {"role": role, "content": text}]


def test_the_greedy_key_is_the_prompt_and_the_seed() -> None:
    key = greedy_key(_messages(), 5)
    assert key == greedy_key(_messages(), 5) and 0 <= key < 2**64
    assert greedy_key(_messages(), None) == greedy_key(_messages(), 0)  # no seed: seed 0
    others = [
        greedy_key(_messages(), 6),
        greedy_key(_messages(), "5"),
        greedy_key(_messages("What is 2+3?"), 5),
        greedy_key(_messages(role="assistant"), 5),
        greedy_key(_messages()[1:], 5),
        greedy_key([{"role": "user", "content": [{"type": "text", "text": "\ud800"}]}], 5),
    ]
    assert len({key, *others}) == len(others) + 1


@pytest.mark.parametrize(
    ("temperature", "greedy"),
    [
        (0, True),
        (0.0, True),
        (-0.0, True),
        (0.7, False),
        (None, False),
        (False, False),
        ("0", False),
    ],
)
def test_greedy_means_temperature_zero(temperature: Any, greedy: bool) -> None:
    assert is_greedy({"temperature": temperature}) is greedy
    assert is_greedy({}) is False


def test_a_greedy_text_follows_its_key_alone_and_a_shorter_one_is_its_start() -> None:
    key = greedy_key(_messages(), 5)
    text = ChunkFormat("vllm", "m", 1, seed=3).texts(
        _chunk_plan(greedy_key=key, completion_tokens=40)
    )
    # not the request's number, nor the server's seed, nor its flavour
    again = ChunkFormat("llamacpp", "m", 9, seed=4).texts(
        _chunk_plan(greedy_key=key, completion_tokens=40, request_no=99)
    )
    assert again == text
    for n in (1, 2, 7, 39):
        assert (
            ChunkFormat("vllm", "m", 1, 3).texts(_chunk_plan(greedy_key=key, completion_tokens=n))
            == (text[:n])
        )
    other = ChunkFormat("vllm", "m", 1, 3).texts(
        _chunk_plan(greedy_key=greedy_key(_messages(), 6), completion_tokens=40)
    )
    assert other != text
    # a sampled request with the same number is another text
    assert ChunkFormat("vllm", "m", 1, 3).texts(_chunk_plan(completion_tokens=40)) != text


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 33, 256])
def test_a_diverged_answer_keeps_a_start_from_the_prompt_and_always_differs(n: int) -> None:
    fmt = ChunkFormat("llamacpp", "m", 1, 0)
    starts = set()
    for seed in range(60):
        plan = _chunk_plan(greedy_key=greedy_key(_messages(), seed), completion_tokens=n)
        stable = fmt.texts(plan)
        wrong = fmt.diverged(plan, stable)
        assert wrong == fmt.diverged(plan, stable)  # deterministic
        assert len(wrong) == n and wrong != stable
        at = next(i for i, (a, b) in enumerate(zip(stable, wrong, strict=True)) if a != b)
        assert 1 <= at <= max(1, n // 2)  # never the first token, within the first half
        starts.add(at)
        # every token keeps its spacing: parts still start without a space
        assert [t.startswith(" ") for t in wrong] == [t.startswith(" ") for t in stable]
    if n >= 8:
        assert len(starts) > 2  # drawn from the prompt, not one fixed place


def test_only_a_greedy_answer_of_two_tokens_or_more_diverges() -> None:
    fmt = ChunkFormat("llamacpp", "m", 1, 0)
    one = _chunk_plan(greedy_key=greedy_key(_messages(), 1), completion_tokens=1)
    assert fmt.diverged(one, fmt.texts(one)) == fmt.texts(one)
    sampled = _chunk_plan(completion_tokens=20)
    assert fmt.diverged(sampled, fmt.texts(sampled)) == fmt.texts(sampled)


def test_a_greedy_answer_asked_for_logprobs_has_them_the_same_each_time() -> None:
    # a deterministic server's logprobs: the same answer decoded again has the same ones, a
    # diverged one differs where its tokens do (the stability check compares both)
    fmt = ChunkFormat("llamacpp", "m", 1, 0)
    plan = _chunk_plan(greedy_key=greedy_key(_messages(), 3), completion_tokens=12, logprobs=True)
    stable = fmt.texts(plan)

    def logprobs(texts: list[str]) -> list[float]:
        body = fmt.whole(plan, texts, len(texts), Progress())
        return [t["logprob"] for t in body["choices"][0]["logprobs"]["content"]]

    first = logprobs(stable)
    assert first == logprobs(stable) and len(first) == 12
    assert all(-2.0 <= lp <= 0.0 for lp in first)
    wrong = fmt.diverged(plan, stable)
    at = next(i for i, (a, b) in enumerate(zip(stable, wrong, strict=True)) if a != b)
    assert logprobs(wrong)[:at] == first[:at]
    unasked = fmt.whole(_chunk_plan(greedy_key=plan.greedy_key), stable, 12, Progress())
    assert "logprobs" not in unasked["choices"][0]


def test_an_error_event_is_one_server_error_event() -> None:
    raw = error_event("boom")
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n") and raw.count(b"\n") == 2
    assert json.loads(raw[len(b"data: ") :]) == {
        "error": {"code": 500, "message": "boom", "type": "server_error"}
    }


@pytest.mark.parametrize(
    ("flavour", "reasoning_delta"),
    [
        ("llamacpp", {"reasoning_content": "x"}),
        ("vllm", {"reasoning_content": "x"}),
        ("ollama", {"reasoning": "x"}),
        ("plain", {"reasoning": "x", "reasoning_content": "x"}),
    ],
)
def test_delta_names_reasoning_as_the_flavour_does(
    flavour: str, reasoning_delta: dict[str, str]
) -> None:
    fmt = ChunkFormat(flavour, "m", 1, 0)
    plan = _chunk_plan()
    assert fmt.delta(plan, 1, "x") == reasoning_delta
    assert fmt.delta(plan, 2, "x") == {"content": "x"}
    # the no-tokens fault streams text under a key no client reads
    assert fmt.delta(_chunk_plan(fault="no-tokens"), 3, "x") == {"text": "x"}


def test_chunk_is_one_sse_event_carrying_the_model_and_extras() -> None:
    fmt = ChunkFormat("vllm", "qwen", 1_700_000_000, 0)
    raw = fmt.chunk(_chunk_plan(), [{"index": 0, "delta": {"content": "hi"}}], usage=None)
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n") and raw.count(b"\n") == 2
    body = json.loads(raw[len(b"data: ") :])
    assert body == {
        "id": "chatcmpl-sim-7",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "qwen",
        "choices": [{"index": 0, "delta": {"content": "hi"}}],
        "usage": None,
    }


def test_usage_counts_the_tokens_and_the_fault_inflates_them() -> None:
    fmt = ChunkFormat("vllm", "m", 1, 0)
    assert fmt.usage(_chunk_plan(), 5) == {
        "prompt_tokens": 12,
        "completion_tokens": 5,
        "total_tokens": 17,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    inflated = fmt.usage(_chunk_plan(fault="inflated-usage"), 5)
    assert inflated["completion_tokens"] == 5 * faults.INFLATE_FACTOR
    assert inflated["total_tokens"] == 12 + 5 * faults.INFLATE_FACTOR


def test_timings_in_milliseconds_and_rates_zero_without_time() -> None:
    fmt = ChunkFormat("llamacpp", "m", 1, 0)
    t = fmt.timings(_chunk_plan(), 6, prefill_s=0.5, decode_s=2.0)
    assert (t["prompt_ms"], t["prompt_per_second"]) == (500.0, 24.0)
    assert (t["predicted_n"], t["predicted_ms"], t["predicted_per_second"]) == (6, 2000.0, 3.0)
    zero = fmt.timings(_chunk_plan(), 6, prefill_s=0.0, decode_s=0.0)
    assert zero["prompt_per_second"] == zero["predicted_per_second"] == 0.0


def test_whole_answer_splits_reasoning_from_content_and_only_llamacpp_adds_timings() -> None:
    plan = _chunk_plan()
    texts = ["think", " more", "The", " answer", " is", " 42"]
    progress = Progress()
    progress.prefill_s, progress.decode_start_s, progress.last_token_s = 0.1, 1.0, 2.0
    llama = ChunkFormat("llamacpp", "m", 1, 0).whole(plan, texts, 6, progress)
    message = llama["choices"][0]["message"]
    assert message == {
        "role": "assistant",
        "content": "The answer is 42",
        "reasoning_content": "think more",
    }
    assert llama["choices"][0]["finish_reason"] == "length"
    assert llama["object"] == "chat.completion" and llama["usage"]["completion_tokens"] == 6
    assert llama["timings"]["predicted_ms"] == 1000.0
    vllm = ChunkFormat("vllm", "m", 1, 0).whole(_chunk_plan(reasoning_tokens=0), texts, 6, progress)
    assert "timings" not in vllm
    assert vllm["choices"][0]["message"] == {
        "role": "assistant",
        "content": "think moreThe answer is 42",
    }


@pytest.mark.parametrize(
    ("message", "text"),
    [
        ({"role": "user", "content": "hello"}, "hello"),
        (
            {"content": [{"type": "text", "text": "a"}, {"type": "image"}, "junk", {"text": "b"}]},
            "a  b",
        ),
        ({"content": None}, ""),
        ({"content": 5}, ""),
        ("hello", ""),
        (None, ""),
    ],
)
def test_message_text(message: Any, text: str) -> None:
    assert message_text(message) == text


def _run_watched(
    body: AsyncIterator[bytes], disconnect_after: int | None, hold_headers: bool = False
) -> list[dict[str, Any]]:
    """Runs a WatchedResponse; the client hangs up after ``disconnect_after`` body messages."""
    sent: list[dict[str, Any]] = []
    hung_up = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        bodies = [m for m in sent if m["type"] == "http.response.body"]
        if disconnect_after is not None and len(bodies) >= disconnect_after:
            hung_up.set()

    async def receive() -> dict[str, Any]:
        await hung_up.wait()
        return {"type": "http.disconnect"}

    async def go() -> None:
        response = WatchedResponse(body, "text/event-stream", hold_headers=hold_headers)
        await response({"type": "http"}, receive, send)

    asyncio.run(asyncio.wait_for(go(), 5.0))
    return sent


def test_watched_response_streams_every_piece_then_ends_the_body() -> None:
    async def pieces() -> AsyncIterator[bytes]:
        for piece in (b"a", b"b"):
            yield piece

    sent = _run_watched(pieces(), None)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert (b"content-type", b"text/event-stream") in sent[0]["headers"]
    assert [(m["body"], m["more_body"]) for m in sent[1:]] == [
        (b"a", True),
        (b"b", True),
        (b"", False),
    ]


def test_watched_response_stops_an_endless_stream_when_the_client_hangs_up() -> None:
    closed: list[bool] = []

    async def endless() -> AsyncIterator[bytes]:
        try:
            while True:
                yield b"x"
                await asyncio.sleep(0)
        finally:
            closed.append(True)

    sent = _run_watched(endless(), disconnect_after=3)
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert 3 <= len(bodies) < 10  # stopped at once, not after many more writes
    assert closed == [True]  # the generator was closed, not left to the garbage collector


def test_watched_response_raises_a_bug_in_its_generator() -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"a"
        raise ZeroDivisionError("bug")

    with pytest.raises(ZeroDivisionError):
        _run_watched(broken(), None)


def test_a_whole_answer_that_fails_before_its_headers_gets_its_own_status() -> None:
    async def failed() -> AsyncIterator[bytes]:
        raise FailedAnswer(500, b'{"error": 1}')
        yield b"never"  # an async generator

    async def whole() -> AsyncIterator[bytes]:
        await asyncio.sleep(0)
        yield b"{}"

    sent = _run_watched(failed(), None, hold_headers=True)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 500
    assert [(m["body"], m["more_body"]) for m in sent[1:]] == [
        (b'{"error": 1}', True),
        (b"", False),
    ]
    sent = _run_watched(whole(), None, hold_headers=True)
    assert sent[0]["status"] == 200
    assert [m["body"] for m in sent[1:]] == [b"{}", b""]
    # without held headers the failure is a bug in the generator: 200 has gone out already
    with pytest.raises(FailedAnswer):
        _run_watched(failed(), None)
