"""Finding the inference server (``sweep/server/discovery.py``) through ``httpx.MockTransport``
(no socket): URL normalisation, the model, the engine from each engine's own endpoints, the
context length it runs with, and one-line errors for what is not a usable server."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from powersweep.clock import ManualClock
from powersweep.errors import PowersweepError, UsageError
from powersweep.sweep.server.discovery import (
    DEFAULT_PORTS,
    ServerInfo,
    discover_server,
    normalize_base_url,
    strip_credentials,
)

Routes = dict[str, Any]


def _transport(routes: Routes, seen: list[httpx.Request] | None = None) -> httpx.MockTransport:
    """Answers ``routes[(host:port) + path]`` (JSON, or a Response); anything else is a 404."""

    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        key = f"{request.url.host}:{request.url.port}{request.url.path}"
        answer = routes.get(key)
        if answer is None:
            return httpx.Response(404, json={"error": "not found"})
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, httpx.Response):
            return answer
        return httpx.Response(200, json=answer)

    return httpx.MockTransport(handle)


def _discover_routes(routes: Routes, url: str | None = "http://gpu:8080", **kw: Any) -> ServerInfo:
    kw.setdefault("model", None)
    kw.setdefault("api_key", None)
    return asyncio.run(
        discover_server(url, clock=ManualClock(), transport=_transport(routes), **kw)
    )


def _models(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"object": "list", "data": list(entries)}


@pytest.mark.parametrize(
    ("given", "base"),
    [
        ("gpu:8080", "http://gpu:8080"),
        ("https://user:secret@gpu:8443/api/v1/chat/completions", "https://gpu:8443/api"),
        ("http://gpu:8000/v1/models/", "http://gpu:8000"),
        ("http://gpu:8000/v1/completions?x=1#f", "http://gpu:8000"),
        ("  http://[::1]:8000/  ", "http://[::1]:8000"),
    ],
)
def test_urls_normalise_to_the_base_without_credentials(given: str, base: str) -> None:
    assert normalize_base_url(given) == base


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("", "the server URL is empty"),
        ("ftp://gpu:21", "not an http(s) server URL: 'ftp://gpu:21'"),
        ("http://user:pw@gpu:99999", "bad port"),
        ("http://gpu:0", "malformed"),
        ("http://gpu name:8000", "malformed"),
        ("http://...:8000", "malformed"),
    ],
)
def test_urls_that_are_no_server_are_refused_without_their_credentials(
    given: str, message: str
) -> None:
    with pytest.raises(UsageError) as info:
        normalize_base_url(given)
    assert message in str(info.value) and "pw" not in str(info.value)


def test_credentials_query_and_fragment_are_stripped() -> None:
    assert strip_credentials("https://u:p@h:1/x?key=1#y") == "https://h:1/x"


def test_llama_cpp_runs_with_its_props_context_and_slots() -> None:
    info = _discover_routes(
        {
            "gpu:8080/v1/models": _models(
                {"id": "qwen.gguf", "owned_by": "llamacpp", "meta": {"n_ctx_train": 131072}}
            ),
            "gpu:8080/props": {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 4},
        }
    )
    assert info == ServerInfo("http://gpu:8080", "qwen.gguf", "llamacpp", 8192, 4, True)


def test_an_older_llama_cpp_is_found_by_its_props_alone() -> None:
    info = _discover_routes(
        {
            "gpu:8080/v1/models": _models({"id": "m", "owned_by": "someone"}),
            "gpu:8080/props": {"default_generation_settings": {}, "n_ctx": "4096"},
        }
    )
    assert (info.engine, info.context_tokens, info.total_slots) == ("llamacpp", 4096, None)


def test_vllm_says_its_context_in_the_model_list() -> None:
    info = _discover_routes(
        {"gpu:8080/v1/models": _models({"id": "m", "owned_by": "vllm", "max_model_len": 32768})}
    )
    assert (info.engine, info.context_tokens, info.accepts_thinking_switch) == (
        "vllm",
        32768,
        True,
    )
    unnamed = _discover_routes({"gpu:8080/v1/models": _models({"id": "m", "max_model_len": 2048})})
    assert (unnamed.engine, unnamed.context_tokens) == ("vllm", 2048)


def test_sglang_is_found_by_its_model_info_and_its_context_read_there() -> None:
    info = _discover_routes(
        {
            "gpu:8080/v1/models": _models({"id": "m", "owned_by": "sglang"}),
            "gpu:8080/get_model_info": {"model_path": "/m", "context_length": 65536},
        }
    )
    assert (info.engine, info.context_tokens) == ("sglang", 65536)
    server_info = _discover_routes(
        {
            "gpu:8080/v1/models": _models({"id": "m", "owned_by": "sglang"}),
            "gpu:8080/get_server_info": {"context_length": 16384},
        }
    )
    assert (server_info.engine, server_info.context_tokens) == ("sglang", 16384)


def test_ollama_runs_with_its_num_ctx_parameter_or_the_models_length() -> None:
    routes: Routes = {
        "gpu:8080/v1/models": _models({"id": "llama3", "owned_by": "library"}),
        "gpu:8080/api/tags": {"models": []},
        "gpu:8080/api/show": {
            "parameters": "stop <eot>\nnum_ctx 8192\n",
            "model_info": {"llama.context_length": 131072},
        },
    }
    info = _discover_routes(routes)
    assert (info.engine, info.context_tokens, info.accepts_thinking_switch) == (
        "ollama",
        8192,
        False,
    )
    routes["gpu:8080/api/show"] = {"model_info": {"llama.context_length": 131072}}
    assert _discover_routes(routes).context_tokens == 131072


def test_lm_studio_runs_with_its_loaded_context() -> None:
    info = _discover_routes(
        {
            "gpu:8080/v1/models": _models({"id": "m"}),
            "gpu:8080/api/v0/models": {"data": []},
            "gpu:8080/api/v0/models/m": {"loaded_context_length": 4096, "max_context_length": 1},
        }
    )
    assert (info.engine, info.context_tokens, info.accepts_thinking_switch) == (
        "lmstudio",
        4096,
        None,
    )


def test_an_unknown_engine_is_openai_compatible_with_no_context() -> None:
    info = _discover_routes({"gpu:8080/v1/models": _models({"id": "m", "owned_by": "openai"})})
    assert (info.engine, info.context_tokens, info.total_slots) == (
        "openai-compatible",
        None,
        None,
    )


def test_several_models_need_a_choice_and_the_choice_is_taken() -> None:
    routes: Routes = {
        "gpu:8080/v1/models": _models(
            *(
                {"id": f"m{i}", "owned_by": "vllm", "max_model_len": 1000 * (i + 1)}
                for i in range(8)
            )
        )
    }
    with pytest.raises(UsageError) as info:
        _discover_routes(routes)
    assert str(info.value) == (
        "http://gpu:8080 serves 8 models (m0, m1, m2, m3, m4, m5, ...); choose one with --model"
    )
    chosen = _discover_routes(routes, model="m2")
    assert (chosen.model, chosen.context_tokens) == ("m2", 3000)


def test_an_empty_model_list_asks_for_a_model() -> None:
    with pytest.raises(PowersweepError, match=r"^http://gpu:8080/v1/models lists no model; pass"):
        _discover_routes({"gpu:8080/v1/models": _models()})


def test_the_api_key_is_sent_as_a_bearer_token() -> None:
    seen: list[httpx.Request] = []
    routes: Routes = {"gpu:8080/v1/models": _models({"id": "m", "owned_by": "vllm"})}
    asyncio.run(
        discover_server(
            "gpu:8080",
            model=None,
            api_key="sk-1",
            clock=ManualClock(),
            transport=_transport(routes, seen),
        )
    )
    assert seen[0].headers["authorization"] == "Bearer sk-1"


def _refusal_of(answer: Any) -> str:
    with pytest.raises(PowersweepError) as info:
        _discover_routes({"gpu:8080/v1/models": answer})
    return str(info.value)


def test_answers_that_are_not_a_model_list_are_one_line_errors() -> None:
    assert _refusal_of(httpx.Response(401)) == (
        "http://gpu:8080 refused /v1/models with HTTP 401: give an API key with --api-key or "
        "OPENAI_API_KEY"
    )
    assert _refusal_of(httpx.Response(500)).startswith(
        "http://gpu:8080/v1/models answered HTTP 500: not an OpenAI-compatible server"
    )
    html = httpx.Response(200, text="<html><body>router login</body></html>")
    assert "answered HTML" in _refusal_of(html)
    assert "answered something that is not JSON" in _refusal_of(httpx.Response(200, text="hi"))
    assert "without a 'data' model list" in _refusal_of({"models": []})


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (httpx.ConnectError("refused"), "no server at http://gpu:8080: connection refused"),
        (httpx.ReadTimeout("slow"), "no answer from http://gpu:8080/v1/models within 3 s"),
        (httpx.RemoteProtocolError("bad"), "cannot reach http://gpu:8080: RemoteProtocolError"),
    ],
)
def test_a_server_that_cannot_be_reached_says_how(error: Exception, message: str) -> None:
    with pytest.raises(PowersweepError, match=f"^{message}"):
        _discover_routes({"gpu:8080/v1/models": error})


def test_without_a_url_the_loopback_ports_are_probed_in_order() -> None:
    refused = httpx.ConnectError("refused")
    routes: Routes = {
        "127.0.0.1:8080/v1/models": refused,
        "127.0.0.1:8000/v1/models": httpx.Response(404),
        "127.0.0.1:30000/v1/models": _models({"id": "m", "owned_by": "sglang"}),
    }
    info = _discover_routes(routes, url=None)
    assert (info.base_url, info.engine) == ("http://127.0.0.1:30000", "sglang")


def test_nothing_on_any_loopback_port_names_what_each_answered() -> None:
    routes: Routes = {
        f"127.0.0.1:{port}/v1/models": httpx.ConnectError("refused") for port, _ in DEFAULT_PORTS
    }
    routes["127.0.0.1:8000/v1/models"] = httpx.Response(200, text="<html>")
    with pytest.raises(PowersweepError) as info:
        _discover_routes(routes, url=None)
    assert str(info.value) == (
        "no OpenAI-compatible server found on 127.0.0.1; tried 8080 (llama.cpp): nothing; "
        "8000 (vLLM): http://127.0.0.1:8000/v1/models answered HTML; 30000 (SGLang): nothing; "
        "11434 (Ollama): nothing; 1234 (LM Studio): nothing (start one or pass --url)"
    )
