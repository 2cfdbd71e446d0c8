"""Finding the inference server: URL normalisation, port probing, engine and context detection."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from powersweep.clock import Clock
from powersweep.errors import PowersweepError, UsageError

# Loopback ports probed when no URL is given, with the engine that usually listens there.
DEFAULT_PORTS: tuple[tuple[int, str], ...] = (
    (8080, "llama.cpp"),
    (8000, "vLLM"),
    (30000, "SGLang"),
    (11434, "Ollama"),
    (1234, "LM Studio"),
)
ENGINES = ("llamacpp", "vllm", "sglang", "ollama", "lmstudio", "openai-compatible")
# owned_by values in /v1/models that name the engine outright.
_OWNED_BY = {"llamacpp": "llamacpp", "vllm": "vllm", "sglang": "sglang"}


@dataclass(frozen=True)
class ServerInfo:
    """The inference server a sweep talks to.

    Attributes:
        base_url: Scheme, host and port (and any path prefix), without credentials and without
            the trailing ``/v1``.
        model: Model id sent in every request.
        engine: ``llamacpp``, ``vllm``, ``sglang``, ``ollama``, ``lmstudio`` or
            ``openai-compatible``.
        context_tokens: Context length the model runs with, None when the server does not say.
        total_slots: llama.cpp parallel slots (``/props`` ``total_slots``), else None.
        accepts_thinking_switch: Whether the engine honours ``chat_template_kwargs``
            (None when unknown).
    """

    base_url: str
    model: str
    engine: str
    context_tokens: int | None
    total_slots: int | None
    accepts_thinking_switch: bool | None


def strip_credentials(url: str) -> str:
    """Return ``url`` without user/password, query and fragment (safe to log and store)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def normalize_base_url(url: str) -> str:
    """Accept ``host:port``, ``http://host:port``, ``.../v1``, ``.../v1/chat/completions``.

    Returns:
        ``scheme://host:port[/prefix]`` without credentials or a trailing slash.

    Raises:
        UsageError: Not an http(s) URL.
    """
    text = url.strip()
    if not text:
        raise UsageError("the server URL is empty")
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        port = parts.port  # raises for a port that is not a number in 0-65535
    except ValueError:
        raise UsageError(
            f"not an http(s) server URL (bad port): {strip_credentials(url)!r}"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"not an http(s) server URL: {strip_credentials(url)!r}")
    if port == 0 or any(c.isspace() for c in text) or parts.hostname.strip(".") == "":
        raise UsageError(f"not an http(s) server URL (malformed): {strip_credentials(url)!r}")
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions", "/models"):
        if path.endswith("/v1" + suffix):
            path = path[: -len(suffix)]
    if path.endswith("/v1"):
        path = path[:-3]
    return strip_credentials(urlunsplit((parts.scheme, parts.netloc, path.rstrip("/"), "", "")))


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip()) or None
    return None


async def _get_json(
    http: httpx.AsyncClient, method: str, url: str, body: Mapping[str, Any] | None = None
) -> Any:
    """JSON from an optional endpoint; None when it is absent, failing or not JSON."""
    try:
        resp = await http.request(method, url, json=body) if body else await http.get(url)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    try:
        return resp.json()
    except ValueError:
        return None


class _NotAServer(Exception):
    """A port answered but not like an OpenAI-compatible server."""


async def _models(http: httpx.AsyncClient, base: str) -> list[dict[str, Any]]:
    url = base + "/v1/models"
    resp = await http.get(url)
    if resp.status_code in (401, 403):
        raise PowersweepError(
            f"{base} refused /v1/models with HTTP {resp.status_code}: give an API key with "
            "--api-key or OPENAI_API_KEY"
        )
    if resp.status_code != 200:
        raise _NotAServer(f"{url} answered HTTP {resp.status_code}")
    try:
        payload = resp.json()
    except (ValueError, json.JSONDecodeError):
        kind = "HTML" if "<html" in resp.text[:2000].lower() else "something that is not JSON"
        raise _NotAServer(f"{url} answered {kind}") from None
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        raise _NotAServer(f"{url} answered JSON without a 'data' model list")
    return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


async def discover_server(
    url: str | None,
    *,
    model: str | None,
    api_key: str | None,
    clock: Clock,
    timeout_s: float = 3.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> ServerInfo:
    """Find the server, its model, engine and context length.

    Args:
        url: Server URL (wins); None probes loopback ports 8080, 8000, 30000, 11434, 1234.
        model: Model id to use; None takes the server's only model.
        api_key: Bearer token for servers that need one (never logged).
        clock: Run clock (unused for timing today; kept so discovery shares the sweep's clock).
        timeout_s: Wall seconds per probe.
        transport: Optional httpx transport (tests inject ``httpx.MockTransport``).

    Returns:
        What was found.

    Raises:
        PowersweepError: No server found, or it does not answer like an OpenAI-compatible server.
        UsageError: Bad URL, or several models and none chosen.
    """
    del clock  # discovery takes no measurements
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = httpx.Timeout(timeout_s)
    async with httpx.AsyncClient(headers=headers, timeout=timeout, transport=transport) as http:
        if url is not None:
            base = normalize_base_url(url)
            try:
                models = await _models(http, base)
            except httpx.ConnectError:
                raise PowersweepError(
                    f"no server at {base}: connection refused (is it running?)"
                ) from None
            except httpx.TimeoutException:
                raise PowersweepError(
                    f"no answer from {base}/v1/models within {timeout_s:g} s"
                ) from None
            except httpx.HTTPError as exc:
                raise PowersweepError(f"cannot reach {base}: {type(exc).__name__}") from None
            except _NotAServer as exc:
                raise PowersweepError(
                    f"{exc}: not an OpenAI-compatible server (give its base URL, e.g. "
                    "http://127.0.0.1:8080)"
                ) from None
            return await _describe(http, base, models, model)
        tried: list[str] = []
        for port, name in DEFAULT_PORTS:
            base = f"http://127.0.0.1:{port}"
            try:
                models = await _models(http, base)
            except httpx.HTTPError:
                tried.append(f"{port} ({name}): nothing")
                continue
            except _NotAServer as exc:
                tried.append(f"{port} ({name}): {exc}")
                continue
            return await _describe(http, base, models, model)
        raise PowersweepError(
            "no OpenAI-compatible server found on 127.0.0.1; tried "
            + "; ".join(tried)
            + " (start one or pass --url)"
        )


async def _describe(
    http: httpx.AsyncClient, base: str, models: list[dict[str, Any]], model: str | None
) -> ServerInfo:
    if model is None:
        if not models:
            raise PowersweepError(f"{base}/v1/models lists no model; pass --model")
        if len(models) > 1:
            ids = ", ".join(m["id"] for m in models[:6]) + (", ..." if len(models) > 6 else "")
            raise UsageError(f"{base} serves {len(models)} models ({ids}); choose one with --model")
        entry: dict[str, Any] = models[0]
        model = str(entry["id"])
    else:
        entry = next((m for m in models if m["id"] == model), models[0] if models else {})

    owned_by = str(entry.get("owned_by", "")).lower()
    engine = _OWNED_BY.get(owned_by)
    props: Any = None
    model_info: Any = None
    if engine in (None, "llamacpp"):
        props = await _get_json(http, "GET", base + "/props")
        if isinstance(props, dict) and ("default_generation_settings" in props or engine):
            engine = "llamacpp"
        else:
            props = None
    if engine in (None, "sglang"):
        model_info = await _get_json(http, "GET", base + "/get_model_info")
        if isinstance(model_info, dict) and ("model_path" in model_info or engine):
            engine = "sglang"
        else:
            model_info = None
    if engine is None and isinstance(await _get_json(http, "GET", base + "/api/tags"), dict):
        engine = "ollama"
    if engine is None and isinstance(await _get_json(http, "GET", base + "/api/v0/models"), dict):
        engine = "lmstudio"
    if engine is None:
        engine = "vllm" if "max_model_len" in entry else "openai-compatible"

    context: int | None = None
    slots: int | None = None
    if engine == "llamacpp" and isinstance(props, dict):
        dgs = props.get("default_generation_settings")
        if isinstance(dgs, dict):
            context = _int(dgs.get("n_ctx"))
        # /v1/models meta.n_ctx_train is the training length, not what the server runs with.
        context = context or _int(props.get("n_ctx"))
        slots = _int(props.get("total_slots"))
    elif engine in ("vllm", "sglang"):
        context = _int(entry.get("max_model_len"))
        if context is None and isinstance(model_info, dict):
            context = _int(model_info.get("context_length")) or _int(
                model_info.get("max_context_length")
            )
        if context is None and engine == "sglang":
            server_info = await _get_json(http, "GET", base + "/get_server_info")
            if isinstance(server_info, dict):
                context = _int(server_info.get("context_length"))
    elif engine == "ollama":
        show = await _get_json(http, "POST", base + "/api/show", {"model": model, "name": model})
        context = _ollama_context(show)
    elif engine == "lmstudio":
        info = await _get_json(http, "GET", base + "/api/v0/models/" + model)
        if isinstance(info, dict):
            context = _int(info.get("loaded_context_length")) or _int(
                info.get("max_context_length")
            )
    switch = {"llamacpp": True, "vllm": True, "sglang": True, "ollama": False}.get(engine)
    return ServerInfo(
        base_url=base,
        model=model,
        engine=engine,
        context_tokens=context,
        total_slots=slots,
        accepts_thinking_switch=switch,
    )


def _ollama_context(show: Any) -> int | None:
    """num_ctx from the model's parameters (what it runs with), else the model's length."""
    if not isinstance(show, dict):
        return None
    params = show.get("parameters")
    if isinstance(params, str):
        match = re.search(r"^\s*num_ctx\s+(\d+)", params, re.MULTILINE)
        if match:
            return int(match.group(1))
    info = show.get("model_info")
    if isinstance(info, dict):
        for key, value in info.items():
            if key.endswith(".context_length") and _int(value):
                return _int(value)
    return None
