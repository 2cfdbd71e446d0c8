"""powersweep.sweep.server.greedy_answer: a non-streamed chat completion read into a greedy
answer (reasoning then content, the server's count and finish reason), and every body that is
not one (not JSON, an error object, no choices, no message, no text) a failed answer that says
why."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from powersweep.sweep.server.greedy_answer import GreedyAnswer, parse_greedy


def _completion(message: Any, **extra: Any) -> bytes:
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = {"object": "chat.completion", "choices": [choice], **extra}
    return json.dumps(body).encode()


def test_content_usage_and_finish_reason() -> None:
    raw = _completion(
        {"role": "assistant", "content": "Paris."},
        usage={"prompt_tokens": 9, "completion_tokens": 3},
    )
    answer = parse_greedy(raw, "application/json")
    assert answer == GreedyAnswer(
        text="Paris.", completion_tokens=3, finish_reason="stop", prompt_tokens=9
    )
    assert answer.ok and answer.error == ""


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_reasoning_comes_before_the_content(key: str) -> None:
    answer = parse_greedy(_completion({"content": " It is 4.", key: "2+2..."}))
    assert answer.ok and answer.text == "2+2... It is 4."


def test_one_reasoning_under_two_aliases_is_kept_once() -> None:
    # A strict server (the simulator's "plain") sends the same reasoning under both names.
    message = {"reasoning": "think", "reasoning_content": "think", "content": "!"}
    assert parse_greedy(_completion(message)).text == "think!"


def test_reasoning_alone_is_an_answer_cut_while_thinking() -> None:
    answer = parse_greedy(_completion({"content": None, "reasoning_content": "hmm"}))
    assert answer.ok and answer.text == "hmm"


def test_an_empty_content_is_an_answer() -> None:
    answer = parse_greedy(_completion({"content": ""}))
    assert answer.ok and answer.text == ""


def test_llamacpp_timings_count_when_usage_is_missing() -> None:
    answer = parse_greedy(_completion({"content": "a b"}, timings={"predicted_n": 2}))
    assert answer.completion_tokens == 2


def test_no_count_is_none_not_zero() -> None:
    answer = parse_greedy(_completion({"content": "a b"}))
    assert answer.ok and answer.completion_tokens is None


@pytest.mark.parametrize(
    ("raw", "ctype", "error"),
    [
        (b"<html><title>Bad Gateway</title></html>", "text/html", "an HTML page (Bad Gateway)"),
        (b"", "", "server answered an empty body instead of JSON"),
        (b"\xff\xfe not utf-8", "", "instead of JSON"),
        (b"[1, 2]", "", "server answered JSON that is not a chat completion"),
        (b'{"error": {"message": "model not loaded"}}', "", "model not loaded"),
        (b'{"object": "list", "data": []}', "", "chat completion without choices"),
        (b'{"choices": []}', "", "chat completion without choices"),
        (b'{"choices": [{"index": 0, "text": "hi"}]}', "", "chat completion without a message"),
        (b'{"choices": ["hi"]}', "", "chat completion without a message"),
        (
            b'{"choices": [{"message": {"role": "assistant", "content": null}}]}',
            "",
            "message has no content or reasoning text",
        ),
    ],
)
def test_a_body_that_is_not_a_chat_completion_fails_clearly(
    raw: bytes, ctype: str, error: str
) -> None:
    answer = parse_greedy(raw, ctype)
    assert not answer.ok
    assert error in answer.error
    assert answer.text == "" and "\n" not in answer.error


def test_failed_is_one_line_and_never_ok() -> None:
    answer = GreedyAnswer.failed("HTTP 500:\n  boom " + "x" * 500)
    assert not answer.ok and answer.error.startswith("HTTP 500: boom")
    assert len(answer.error) <= 300 and "\n" not in answer.error
    assert not GreedyAnswer.failed("").ok  # an empty reason must not read as ok


def test_the_answer_is_frozen() -> None:
    answer = GreedyAnswer(text="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        answer.text = "b"  # type: ignore[misc]


def test_cached_tokens_from_usage_else_llama_timings_and_token_logprobs() -> None:
    logprobs = {"content": [{"token": "P", "logprob": -0.5}, {"token": ".", "logprob": 0}]}
    raw = json.dumps(
        {
            "choices": [{"message": {"content": "P."}, "logprobs": logprobs}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2},
            "timings": {"cache_n": 8, "prompt_n": 1},
        }
    ).encode()
    answer = parse_greedy(raw)
    assert answer.cached_tokens == 8 and answer.logprobs == (-0.5, 0.0)
    # a server that counts none says so with 0; one that reports no count leaves None
    assert parse_greedy(_completion({"content": "a"}, timings={"cache_n": 0})).cached_tokens == 0
    plain = parse_greedy(_completion({"content": "a"}, usage={"completion_tokens": 1}))
    assert plain.cached_tokens is None and plain.logprobs is None


@pytest.mark.parametrize("logprobs", [None, {"content": None}, {"content": "x"}, [1, 2]])
def test_logprobs_in_another_shape_are_none(logprobs: Any) -> None:
    raw = json.dumps({"choices": [{"message": {"content": "a"}, "logprobs": logprobs}]})
    assert parse_greedy(raw.encode()).logprobs is None
