"""powersweep.sim.server_requests: how the simulated server reads a chat request's token limit,
flavour by flavour, and refuses a request over its context in each engine's own words."""

from __future__ import annotations

import json
from typing import Any

import pytest

from powersweep.sim.server_requests import over_context, request_limit


@pytest.mark.parametrize(
    ("body", "limit"),
    [
        ({}, 256),
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 80}, 80),
        ({"max_tokens": 100, "max_completion_tokens": 80}, 80),  # the smaller one wins
        ({"max_tokens": 1}, 1),
    ],
)
def test_openai_flavours_generate_the_smaller_limit_or_256(
    body: dict[str, Any], limit: int
) -> None:
    for flavour in ("llamacpp", "vllm", "sglang", "plain"):
        assert request_limit(flavour, body, ignore_max_tokens=False) == limit


@pytest.mark.parametrize("value", [0, -5, 2.5, "100", True, False, [100]], ids=lambda v: repr(v))
def test_a_limit_that_is_not_a_positive_integer_is_refused(value: object) -> None:
    for key in ("max_tokens", "max_completion_tokens"):
        for flavour in ("llamacpp", "ollama"):
            assert request_limit(flavour, {key: value}, ignore_max_tokens=False) is None


def test_a_server_ignoring_max_tokens_generates_a_tenth_more_at_least_one() -> None:
    assert request_limit("vllm", {"max_tokens": 100}, ignore_max_tokens=True) == 110
    assert request_limit("vllm", {"max_tokens": 5}, ignore_max_tokens=True) == 6
    assert request_limit("vllm", {}, ignore_max_tokens=True) == 256 + 25


def test_ollama_honours_max_tokens_but_ignores_max_completion_tokens() -> None:
    assert request_limit("ollama", {"max_tokens": 100}, ignore_max_tokens=False) == 100
    # Ollama's OpenAI layer ignores max_completion_tokens: it generates 4x as much
    assert request_limit("ollama", {"max_completion_tokens": 50}, ignore_max_tokens=False) == 200
    assert request_limit("ollama", {}, ignore_max_tokens=False) == 256
    # and the flag does not stretch what Ollama already decided
    assert request_limit("ollama", {"max_tokens": 100}, ignore_max_tokens=True) == 100


def _json_body(response: Any) -> dict[str, Any]:
    return json.loads(bytes(response.body))


def test_llamacpp_refuses_a_prompt_that_fills_the_context_whatever_the_limit() -> None:
    assert over_context("llamacpp", 4095, 10_000, 4096) is None
    refused = over_context("llamacpp", 4096, 1, 4096)
    assert refused is not None and refused.status_code == 400
    error = _json_body(refused)["error"]
    assert error["type"] == "exceed_context_size_error"
    assert (error["n_prompt_tokens"], error["n_ctx"]) == (4096, 4096)
    assert error["message"].startswith("request (4096 tokens) exceeds the available context size")


@pytest.mark.parametrize("flavour", ["vllm", "sglang"])
def test_vllm_and_sglang_count_the_prompt_and_the_completion(flavour: str) -> None:
    assert over_context(flavour, 4000, 96, 4096) is None
    refused = over_context(flavour, 4000, 97, 4096)
    assert refused is not None and refused.status_code == 400
    body = _json_body(refused)
    assert body["type"] == "BadRequestError" and body["code"] == 400
    assert (
        "maximum context length is 4096 tokens. However, you requested 4097 tokens"
        in (body["message"])
    )
    assert "(4000 in the messages, 97 in the completion)" in body["message"]


def test_plain_refuses_only_a_prompt_longer_than_the_context() -> None:
    assert over_context("plain", 4096, 10_000, 4096) is None
    refused = over_context("plain", 4097, 1, 4096)
    assert refused is not None and refused.status_code == 400
    assert _json_body(refused) == {
        "error": {
            "code": 400,
            "message": "prompt is 4097 tokens, context is 4096",
            "type": "invalid_request",
        }
    }


def test_ollama_never_refuses_it_truncates() -> None:
    assert over_context("ollama", 1_000_000, 1_000_000, 2048) is None
