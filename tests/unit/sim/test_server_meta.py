"""powersweep.sim.server_meta: the simulated server's non-chat endpoints, as each flavour has
them (model lists, llama.cpp's /props, /metrics and /tokenize, SGLang's model info, Ollama's tags
and show), served in process (httpx over ASGI) from a stand-in server."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from powersweep.sim.server_meta import TOKEN_RE, MetaRoutes

FLAVOURS = ("llamacpp", "vllm", "sglang", "ollama", "plain")


@dataclass
class _Engine:
    context_tokens: int = 8192


@dataclass
class _Served:
    flavour: str
    model: str = "qwen-sim"
    created: int = 1_700_000_000
    total_slots: int | None = 4
    hide_num_ctx: bool = False
    requests_processing: int = 2
    requests_deferred: int = 3
    tokens_generated: int = 1234
    engine: _Engine = field(default_factory=_Engine)


class _Client:
    """Requests to one stand-in server's routes, each answered in process."""

    def __init__(self, flavour: str, **changes: Any) -> None:
        self.app = Starlette(routes=MetaRoutes(_Served(flavour, **changes)).routes())

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
                return await client.request(method, path, **kwargs)

        return asyncio.run(go())

    def get(self, path: str) -> httpx.Response:
        return self.request("GET", path)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)


def _client(flavour: str, **changes: Any) -> _Client:
    return _Client(flavour, **changes)


def _paths(flavour: str) -> set[str]:
    return {r.path for r in MetaRoutes(_Served(flavour)).routes()}  # type: ignore[attr-defined]


def test_each_flavour_has_its_own_endpoints() -> None:
    common = {"/v1/models", "/health"}
    assert _paths("llamacpp") == common | {"/props", "/metrics", "/tokenize"}
    assert _paths("vllm") == common | {"/metrics"}
    assert _paths("sglang") == common | {"/get_model_info"}
    assert _paths("ollama") == common | {"/api/tags", "/api/show"}
    assert _paths("plain") == common


@pytest.mark.parametrize(
    ("flavour", "owner"),
    [
        ("llamacpp", "llamacpp"),
        ("vllm", "vllm"),
        ("sglang", "sglang"),
        ("ollama", "library"),
        ("plain", "system"),
    ],
)
def test_models_lists_the_model_with_its_owner(flavour: str, owner: str) -> None:
    with _client(flavour) as client:
        assert client.get("/health").json() == {"status": "ok"}
        body = client.get("/v1/models").json()
    (entry,) = body["data"]
    assert body["object"] == "list"
    assert (entry["id"], entry["owned_by"], entry["created"]) == ("qwen-sim", owner, 1_700_000_000)
    assert ("meta" in entry) == (flavour == "llamacpp")
    assert ("max_model_len" in entry) == (flavour == "vllm")


def test_llamacpp_and_vllm_report_the_loaded_context() -> None:
    with _client("llamacpp") as client:
        meta = client.get("/v1/models").json()["data"][0]["meta"]
        props = client.get("/props").json()
    assert (meta["n_ctx"], meta["n_ctx_train"]) == (8192, 131072)
    assert props["default_generation_settings"]["n_ctx"] == 8192
    assert props["total_slots"] == 4
    assert props["model_path"] == "/models/qwen-sim.gguf"
    with _client("vllm") as client:
        entry = client.get("/v1/models").json()["data"][0]
    assert (entry["max_model_len"], entry["root"], entry["parent"]) == (8192, "qwen-sim", None)


def test_metrics_in_each_engines_names() -> None:
    with _client("llamacpp") as client:
        text = client.get("/metrics").text
    assert "llamacpp:requests_processing 2\n" in text
    assert "llamacpp:requests_deferred 3\n" in text
    assert "llamacpp:tokens_predicted_total 1234\n" in text
    with _client("vllm") as client:
        response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'vllm:num_requests_running{model_name="qwen-sim"} 2.0\n' in response.text
    assert 'vllm:num_requests_waiting{model_name="qwen-sim"} 3.0\n' in response.text


def test_tokenize_splits_as_the_simulators_tokenizer_counts() -> None:
    text = "Hello, wonderful world!"
    with _client("llamacpp") as client:
        tokens = client.post("/tokenize", json={"content": text}).json()["tokens"]
        refused = client.post("/tokenize", json={"content": 5})
        not_json = client.post("/tokenize", content=b"\xff not json")
    # runs of up to four word characters, and each other non-space character
    assert TOKEN_RE.findall(text) == ["Hell", "o", ",", "wond", "erfu", "l", "worl", "d", "!"]
    assert len(tokens) == 9 and all(0 <= t < 32000 for t in tokens)
    assert tokens[0] == sum(b"Hell") % 32000
    for bad in (refused, not_json):
        assert bad.status_code == 400
        assert bad.json()["error"]["message"] == "'content' must be a string"


def test_sglang_model_info_reports_the_context() -> None:
    with _client("sglang") as client:
        info = client.get("/get_model_info").json()
    assert (info["model_path"], info["context_length"], info["is_generation"]) == (
        "qwen-sim",
        8192,
        True,
    )


def test_ollama_show_lists_num_ctx_unless_hidden_and_refuses_other_models() -> None:
    with _client("ollama") as client:
        assert client.get("/api/tags").json()["models"][0]["name"] == "qwen-sim"
        shown = client.post("/api/show", json={"model": "qwen-sim"}).json()
        by_name = client.post("/api/show", json={"name": "qwen-sim"}).json()
        missing = client.post("/api/show", json={"model": "llama3"})
        empty = client.post("/api/show", content=b"")
    assert shown["parameters"] == "num_ctx 8192\ntemperature 0.7"
    assert by_name == shown
    assert missing.status_code == 404 and missing.json() == {"error": "model 'llama3' not found"}
    assert empty.status_code == 404
    with _client("ollama", hide_num_ctx=True) as client:
        hidden = client.post("/api/show", json={"model": "qwen-sim"}).json()
    assert hidden["parameters"] == "temperature 0.7"
    assert hidden["model_info"]["llama.context_length"] == 131072
