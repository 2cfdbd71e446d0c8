"""powersweep.sweep.server.server_queries: what the client asks a server beside chat requests,
answered in process by httpx's mock transport. The queue read from ``/metrics`` (llama.cpp's
deferred and vLLM's waiting requests, summed over labelled series), the tokenizer asked in each
engine's own body, and None, never an exception, whenever the server does not say."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from powersweep.sweep.server.discovery import ServerInfo
from powersweep.sweep.server.server_queries import ServerQueries

Handler = Callable[[httpx.Request], httpx.Response]


class _Queries(ServerQueries):
    def __init__(self, engine: str, handler: Handler, base_url: str = "http://srv:8000/") -> None:
        self._info = ServerInfo(base_url, "m", engine, 4096, None, None)
        self._http = httpx.AsyncClient(transport=httpx.MockTransport(handler))


def _query(queries: _Queries, call: Callable[[_Queries], Any]) -> Any:
    async def go() -> Any:
        try:
            return await call(queries)
        finally:
            await queries._http.aclose()

    return asyncio.run(go())


def _metrics(text: str, status: int = 200) -> tuple[Handler, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, text=text)

    return handler, seen


def _queued(engine: str, handler: Handler) -> int | None:
    return _query(_Queries(engine, handler), lambda q: q.queued_requests())


def test_llama_cpp_deferred_requests_are_the_queue() -> None:
    handler, seen = _metrics(
        "# HELP llamacpp:requests_deferred Requests waiting\n"
        "# TYPE llamacpp:requests_deferred gauge\n"
        "llamacpp:requests_processing 4\n"
        "llamacpp:requests_deferred 3\n"
    )
    assert _queued("llamacpp", handler) == 3
    (request,) = seen
    assert str(request.url) == "http://srv:8000/metrics"  # the base URL's slash is not doubled


def test_vllm_waiting_requests_are_summed_over_its_series() -> None:
    handler, _ = _metrics(
        'vllm:num_requests_running{model_name="m"} 8.0\n'
        'vllm:num_requests_waiting{model_name="m",engine="0"} 2.0\n'
        'vllm:num_requests_waiting{model_name="m",engine="1"} 1.0 1712345678000\n'
    )
    assert _queued("vllm", handler) == 3


def test_a_label_value_with_a_space_still_counts() -> None:
    handler, _ = _metrics('vllm:num_requests_waiting{model_name="Qwen 3"} 4.0\n')
    assert _queued("vllm", handler) == 4


@pytest.mark.parametrize(
    "text",
    [
        "llamacpp:requests_processing 4\n",  # no queue metric: the server does not say
        "llamacpp:requests_deferred NaN-ish\n",
        "llamacpp:requests_deferred\n",
        "",
    ],
)
def test_metrics_without_a_readable_queue_are_unknown(text: str) -> None:
    handler, _ = _metrics(text)
    assert _queued("llamacpp", handler) is None


def test_a_malformed_line_is_skipped_and_the_rest_still_count() -> None:
    handler, _ = _metrics("llamacpp:requests_deferred x\nllamacpp:requests_deferred 2\n")
    assert _queued("llamacpp", handler) == 2


def test_a_failing_or_absent_metrics_endpoint_is_unknown() -> None:
    handler, _ = _metrics("llamacpp:requests_deferred 3\n", status=404)
    assert _queued("llamacpp", handler) is None

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    assert _queued("llamacpp", refused) is None


def _tokenizer(
    answer: Any, status: int = 200, raw: bytes | None = None
) -> tuple[Handler, list[dict[str, Any]]]:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.method == "POST" and request.url.path == "/tokenize"
        bodies.append(json.loads(request.content))
        if raw is not None:
            return httpx.Response(status, content=raw)
        return httpx.Response(status, json=answer)

    return handler, bodies


def _count(engine: str, handler: Handler, text: str = "hello world") -> int | None:
    return _query(_Queries(engine, handler), lambda q: q.count_tokens(text))


def test_llama_cpp_is_asked_for_the_content_without_special_tokens() -> None:
    handler, bodies = _tokenizer({"tokens": [1, 2, 3, 4, 5]})
    assert _count("llamacpp", handler, "five tokens here") == 5
    assert bodies == [{"content": "five tokens here", "add_special": False}]


def test_vllm_is_asked_with_the_model_and_answers_a_count() -> None:
    handler, bodies = _tokenizer({"count": 7, "tokens": [1, 2]})
    assert _count("vllm", handler, "seven") == 7  # the count wins over the list
    assert bodies == [{"model": "m", "prompt": "seven", "add_special_tokens": False}]


@pytest.mark.parametrize("engine", ["sglang", "ollama", "lmstudio", "openai-compatible"])
def test_engines_without_a_tokenize_api_are_not_asked(engine: str) -> None:
    def never(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"{engine} was asked {request.url}")

    assert _count(engine, never) is None


@pytest.mark.parametrize(
    ("answer", "status", "raw"),
    [
        ({"tokens": [1]}, 500, None),  # an error status
        (None, 200, b"not json"),
        ([1, 2, 3], 200, None),  # not an object
        ({"count": "7"}, 200, None),  # a count that is not a number
        ({"tokens": "1 2 3"}, 200, None),
        ({}, 200, None),
    ],
)
def test_a_tokenizer_answer_that_cannot_be_read_is_unknown(
    answer: Any, status: int, raw: bytes | None
) -> None:
    handler, _ = _tokenizer(answer, status, raw)
    assert _count("llamacpp", handler) is None


def test_a_tokenizer_that_cannot_be_reached_is_unknown() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    assert _count("vllm", timeout) is None
