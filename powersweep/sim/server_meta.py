"""The simulated server's endpoints other than chat, per flavour: model lists, llama.cpp's
``/props``, ``/metrics`` and ``/tokenize``, SGLang's model info, Ollama's tags and show."""

from __future__ import annotations

import re
from typing import Any, Protocol

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

# The simulator's tokenizer: a run of up to 4 word characters, or one other non-space character.
TOKEN_RE = re.compile(r"\w{1,4}|[^\w\s]")
N_CTX_TRAIN = 131072


class _Engine(Protocol):
    @property
    def context_tokens(self) -> int: ...


class ServedModel(Protocol):
    """What the endpoints read of the server (``SimServer``)."""

    model: str
    flavour: str
    created: int
    total_slots: int | None
    hide_num_ctx: bool
    requests_processing: int
    requests_deferred: int
    tokens_generated: int

    @property
    def engine(self) -> _Engine: ...


async def json_or_none(request: Request) -> Any:
    """The request's JSON body, or None when it is not JSON (or the client hung up)."""
    try:
        return await request.json()
    except (ValueError, UnicodeDecodeError, ClientDisconnect):
        # a client that hung up mid-upload (a deadline) needs no answer
        return None


def error_response(status: int, message: str, kind: str) -> Response:
    """An OpenAI-style error body."""
    return JSONResponse(
        {"error": {"code": status, "message": message, "type": kind}}, status_code=status
    )


class MetaRoutes:
    """The non-chat endpoints of one server, as its flavour has them.

    Args:
        server: The server whose model, context and counters they report.
    """

    def __init__(self, server: ServedModel) -> None:
        self.s = server

    def routes(self) -> list[Route]:
        """The flavour's routes (``/v1/models`` and ``/health`` on every flavour)."""
        routes = [
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
        ]
        flavour = self.s.flavour
        if flavour == "llamacpp":
            routes += [
                Route("/props", self.props, methods=["GET"]),
                Route("/metrics", self.metrics, methods=["GET"]),
                Route("/tokenize", self.tokenize, methods=["POST"]),
            ]
        elif flavour == "vllm":
            routes.append(Route("/metrics", self.metrics, methods=["GET"]))
        elif flavour == "sglang":
            routes.append(Route("/get_model_info", self.sglang_info, methods=["GET"]))
        elif flavour == "ollama":
            routes += [
                Route("/api/tags", self.ollama_tags, methods=["GET"]),
                Route("/api/show", self.ollama_show, methods=["POST"]),
            ]
        return routes

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(self, request: Request) -> Response:
        entry: dict[str, Any] = {
            "id": self.s.model,
            "object": "model",
            "created": self.s.created,
            "owned_by": {
                "llamacpp": "llamacpp",
                "vllm": "vllm",
                "sglang": "sglang",
                "ollama": "library",
                "plain": "system",
            }[self.s.flavour],
        }
        if self.s.flavour == "llamacpp":
            entry["meta"] = {
                "n_ctx_train": N_CTX_TRAIN,
                "n_ctx": self.s.engine.context_tokens,
                "n_vocab": 32000,
                "n_params": 7 * 10**9,
            }
        elif self.s.flavour == "vllm":
            entry.update(root=self.s.model, parent=None, max_model_len=self.s.engine.context_tokens)
        return JSONResponse({"object": "list", "data": [entry]})

    async def props(self, request: Request) -> Response:
        return JSONResponse(
            {
                "default_generation_settings": {
                    "n_ctx": self.s.engine.context_tokens,
                    "params": {"n_predict": -1, "temperature": 0.8},
                },
                "total_slots": self.s.total_slots,
                "model_path": f"/models/{self.s.model}.gguf",
                "build_info": "b0000-sim",
            }
        )

    async def metrics(self, request: Request) -> Response:
        if self.s.flavour == "llamacpp":
            lines = [
                "# HELP llamacpp:requests_processing Number of requests processing.",
                "# TYPE llamacpp:requests_processing gauge",
                f"llamacpp:requests_processing {self.s.requests_processing}",
                "# HELP llamacpp:requests_deferred Number of requests deferred.",
                "# TYPE llamacpp:requests_deferred gauge",
                f"llamacpp:requests_deferred {self.s.requests_deferred}",
                "# TYPE llamacpp:tokens_predicted_total counter",
                f"llamacpp:tokens_predicted_total {self.s.tokens_generated}",
            ]
        else:
            label = f'{{model_name="{self.s.model}"}}'
            lines = [
                "# HELP vllm:num_requests_running Number of requests in model execution batches.",
                "# TYPE vllm:num_requests_running gauge",
                f"vllm:num_requests_running{label} {float(self.s.requests_processing)}",
                "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
                "# TYPE vllm:num_requests_waiting gauge",
                f"vllm:num_requests_waiting{label} {float(self.s.requests_deferred)}",
            ]
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    async def tokenize(self, request: Request) -> Response:
        body = await json_or_none(request)
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, str):
            return error_response(400, "'content' must be a string", "invalid_request_error")
        tokens = [sum(piece.encode()) % 32000 for piece in TOKEN_RE.findall(content)]
        return JSONResponse({"tokens": tokens})

    async def sglang_info(self, request: Request) -> Response:
        return JSONResponse(
            {
                "model_path": self.s.model,
                "tokenizer_path": self.s.model,
                "is_generation": True,
                "preferred_sampling_params": None,
                "context_length": self.s.engine.context_tokens,
            }
        )

    async def ollama_tags(self, request: Request) -> Response:
        return JSONResponse(
            {"models": [{"name": self.s.model, "model": self.s.model, "size": 4 * 10**9}]}
        )

    async def ollama_show(self, request: Request) -> Response:
        body = await json_or_none(request)
        name = (body or {}).get("model") or (body or {}).get("name")
        if name != self.s.model:
            return JSONResponse({"error": f"model '{name}' not found"}, status_code=404)
        # Real Ollama lists num_ctx only when a Modelfile sets it; otherwise clients see only the
        # training context while the runtime context is far smaller (and prompts get truncated).
        num_ctx = "" if self.s.hide_num_ctx else f"num_ctx {self.s.engine.context_tokens}\n"
        return JSONResponse(
            {
                "parameters": f"{num_ctx}temperature 0.7",
                "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
                "details": {"family": "llama", "parameter_size": "7B"},
            }
        )
