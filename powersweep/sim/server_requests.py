"""How the simulated server reads a chat request's limits and refuses one over its context,
flavour by flavour (each as the real engine words it)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from powersweep.sim.server_meta import error_response

# Generation length when a request names no limit (and Ollama's when it ignores the one given).
_DEFAULT_MAX_TOKENS = 256
_OLLAMA_IGNORED_LIMIT_FACTOR = 4


def request_limit(flavour: str, body: dict[str, Any], *, ignore_max_tokens: bool) -> int | None:
    """The tokens a chat request will generate, as the flavour reads its limits (None: a limit
    that is not a positive integer, answered with 400)."""
    values = {k: body.get(k) for k in ("max_tokens", "max_completion_tokens")}
    for value in values.values():
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            return None
    mt, mct = values["max_tokens"], values["max_completion_tokens"]
    if flavour == "ollama":
        if mt is not None:
            return int(mt)
        return _OLLAMA_IGNORED_LIMIT_FACTOR * int(mct or _DEFAULT_MAX_TOKENS // 4)
    given = [int(v) for v in (mt, mct) if v is not None]
    limit = min(given) if given else _DEFAULT_MAX_TOKENS
    return limit + max(1, limit // 10) if ignore_max_tokens else limit


def over_context(flavour: str, prompt: int, limit: int, ctx: int) -> Response | None:
    """The flavour's answer to a request that does not fit its context (None: it fits)."""
    if flavour == "llamacpp" and prompt >= ctx:
        return JSONResponse(
            {
                "error": {
                    "code": 400,
                    "message": f"request ({prompt} tokens) exceeds the available context "
                    f"size ({ctx} tokens), try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": prompt,
                    "n_ctx": ctx,
                }
            },
            status_code=400,
        )
    if flavour in ("vllm", "sglang") and prompt + limit > ctx:
        return JSONResponse(
            {
                "object": "error",
                "message": f"This model's maximum context length is {ctx} tokens. However, "
                f"you requested {prompt + limit} tokens ({prompt} in the messages, {limit} "
                "in the completion). Please reduce the length of the messages or completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
            status_code=400,
        )
    if flavour == "plain" and prompt > ctx:
        return error_response(
            400, f"prompt is {prompt} tokens, context is {ctx}", "invalid_request"
        )
    return None
