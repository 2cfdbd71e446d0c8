"""What the chat client asks a server beside chat requests: its queue and its tokenizer.

:class:`ServerQueries` is a base of :class:`~powersweep.sweep.server.client.ChatClient`:
``queued_requests`` reads the requests waiting for a slot from ``/metrics`` (llama.cpp, vLLM),
``count_tokens`` asks the server's ``/tokenize``.

The reasoning: docs/architecture.md, "powersweep.sweep.server.server_queries".
"""

from __future__ import annotations

from typing import Any

import httpx

from powersweep.sweep.server.discovery import ServerInfo


class ServerQueries:
    """The server's queue and tokenizer, as :class:`~powersweep.sweep.server.client.ChatClient`
    asks them (its base; the attributes below are set by its constructor)."""

    _info: ServerInfo
    _http: httpx.AsyncClient

    async def queued_requests(self) -> int | None:
        """Requests the server holds waiting for a slot now (None when it does not say).

        Reads llama.cpp's ``llamacpp:requests_deferred`` or vLLM's ``vllm:num_requests_waiting``
        from ``/metrics`` (llama-server needs ``--metrics``).
        """
        base = self._info.base_url.rstrip("/")
        try:
            response = await self._http.get(f"{base}/metrics", timeout=5.0)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        total: float | None = None
        for line in response.text.splitlines():
            if line.startswith("#"):
                continue
            # ``name{labels} value [timestamp]``: a label value may hold spaces, a value never
            end = line.rfind("}") + 1 if "{" in line else line.find(" ")
            name, value = line[:end], line[end:]
            metric = name.split("{", 1)[0]
            if metric in ("llamacpp:requests_deferred", "vllm:num_requests_waiting"):
                try:
                    total = (total or 0.0) + float(value.split()[0])
                except (ValueError, IndexError):
                    continue
        return None if total is None else int(total)

    async def count_tokens(self, text: str) -> int | None:
        """Tokens the server's tokenizer makes of ``text`` (None when it has no tokenize API).

        llama.cpp answers ``POST /tokenize {"content"}`` with ``{"tokens": [...]}``; vLLM answers
        ``POST /tokenize {"model", "prompt"}`` with ``{"count"}``.
        """
        base = self._info.base_url.rstrip("/")
        if self._info.engine == "llamacpp":
            body: dict[str, Any] = {"content": text, "add_special": False}
        elif self._info.engine == "vllm":
            body = {"model": self._info.model, "prompt": text, "add_special_tokens": False}
        else:
            return None
        try:
            response = await self._http.post(f"{base}/tokenize", json=body, timeout=60.0)
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        if isinstance(data.get("count"), int):
            return int(data["count"])
        tokens = data.get("tokens")
        return len(tokens) if isinstance(tokens, list) else None
