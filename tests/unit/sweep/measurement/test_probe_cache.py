"""The stability check's probes against a server with a prompt cache (issue 45): they ask for
none without changing their prompts, a probe served from cache anyway is sent again and then
noted, a server that reports no count is named once, and token logprobs are compared beyond
the reference's own variation.

The fake server is an OpenAI chat endpoint behind ``httpx.MockTransport`` that records every
request body and keeps a prefix cache as the engines do: llama.cpp's (``cache_prompt``), vLLM's
(``cache_salt``), one that ignores both, or one that reports no count at all.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from powersweep.clock import ScaledClock
from powersweep.sweep.gpu import ClockOffset, LockedClocks
from powersweep.sweep.measurement.stability import (
    LOGPROB_FLOOR_NATS,
    StabilityCheck,
    check_step,
)
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.server.client import ChatClient
from powersweep.sweep.server.discovery import ServerInfo
from powersweep.sweep.verdict import FaultLog

REFERENCE = SweepPoint(280.0, 1680.0, None, 0.0)
STEP = SweepPoint(280.0, 1680.0, None, 60.0)
ROW = {"status": "ok", "narr_tps": 40.0, "tps_u95_pct": 1.0}


class CachingServer:
    """A greedy chat server with a prefix cache.

    Args:
        honours: ``llama`` (``cache_prompt: false`` computes all), ``vllm`` (a new
            ``cache_salt`` finds nothing cached), or ``none`` (serves its cache whatever the
            request asks).
        reports: Report the cached tokens (``usage.prompt_tokens_details`` and ``timings``).
    """

    def __init__(self, honours: str = "llama", reports: bool = True) -> None:
        self.honours = honours
        self.reports = reports
        self.bodies: list[dict[str, Any]] = []
        self.cache: set[tuple[str, str]] = set()
        self.logprob_shift = 0.0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404)  # no tokenizer: the probe is sized by its usage
        body = json.loads(request.content)
        self.bodies.append(body)
        prompt = body["messages"][-1]["content"]
        tokens = max(1, len(prompt) // 4)
        # vLLM keys its blocks by the salt too; the others by the prompt alone
        key = (str(body.get("cache_salt", "")) if self.honours == "vllm" else "", prompt)
        cached = 0
        if key in self.cache and not self._computes(body):
            cached = tokens - 1  # as llama.cpp, the last prompt token is always computed
        self.cache.add(key)
        n = min(body["max_tokens"], 4)
        words = [f"w{(len(prompt) + i) % 7}" for i in range(n)]
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": " ".join(words)},
            "finish_reason": "length",
        }
        if body.get("logprobs"):
            content = [
                {"token": w, "logprob": -0.1 * (i + 1) + self.logprob_shift}
                for i, w in enumerate(words)
            ]
            choice["logprobs"] = {"content": content}
        usage: dict[str, Any] = {"prompt_tokens": tokens, "completion_tokens": n}
        payload: dict[str, Any] = {"object": "chat.completion", "choices": [choice]}
        if self.reports:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
            payload["timings"] = {"cache_n": cached, "prompt_n": tokens - cached}
        payload["usage"] = usage
        return httpx.Response(200, json=payload)

    def _computes(self, body: dict[str, Any]) -> bool:
        if self.honours == "llama":
            return body.get("cache_prompt") is False
        return False  # vLLM: a new salt is a new cache key; "none": the cache is served

    def probe_bodies(self) -> list[dict[str, Any]]:
        """The probes' bodies (not the one-token request that sizes the prefill probe)."""
        return [b for b in self.bodies if b["max_tokens"] > 1]


class _Card:
    index = 0

    def __init__(self) -> None:
        self.offset = 0.0

    def xid_events(self) -> tuple[int, ...]:
        return ()

    def sm_clock_offset(self) -> Any:
        return ClockOffset(True, self.offset, -200.0, 1000.0)

    def locked_clocks(self) -> Any:
        return LockedClocks(True, 1680.0, None)


def _probe_steps(
    server: CachingServer, steps: int = 1, engine: str = "llamacpp"
) -> tuple[list[dict[str, Any]], FaultLog, list[str]]:
    """The reference, then ``steps`` steps, through the real client; each step's row, the
    run's faults and its warnings."""
    faults, said = FaultLog(), []
    rows: list[dict[str, Any]] = []

    async def go() -> None:
        clock = ScaledClock(1.0)
        info = ServerInfo("http://fake", "m", engine, 8192, None, True)
        client = ChatClient(info, clock, transport=httpx.MockTransport(server))
        card = _Card()
        check = StabilityCheck(client, [card], clock, check_stretch=False)  # type: ignore[list-item]
        try:
            for point in [REFERENCE] + [STEP] * steps:
                card.offset = point.sm_offset_mhz or 0.0
                row = dict(ROW)
                assert await check_step(check, point, row, 0, faults, said.append) is None
                rows.append(row)
        finally:
            await client.aclose()

    asyncio.run(go())
    return rows, faults, said


def _fault_kinds(faults: FaultLog) -> dict[str, int]:
    return {f["kind"]: f["count"] for f in faults.to_list()}


def test_the_probes_ask_for_no_cache_each_with_a_salt_of_its_own() -> None:
    server = CachingServer("llama")
    rows, faults, said = _probe_steps(server, steps=2)
    bodies = server.probe_bodies()
    assert len(bodies) == 3 * 2 + 3 * 2  # the reference's two rounds, then two steps
    assert all(b["cache_prompt"] is False and b["logprobs"] is True for b in bodies)
    salts = [b["cache_salt"] for b in bodies]
    assert len(set(salts)) == len(salts)
    # the prompts stay the same at every step: only the cache controls beside them change
    prompts = [b["messages"][-1]["content"] for b in bodies]
    assert prompts[:3] == prompts[3:6] == prompts[6:9] == prompts[9:]
    assert all(r["status"] == "ok" for r in rows)
    assert _fault_kinds(faults) == {} and said == []


def test_a_salted_vllm_cache_serves_nothing() -> None:
    server = CachingServer("vllm")
    rows, faults, _ = _probe_steps(server, steps=1, engine="vllm")
    assert all(r["status"] == "ok" for r in rows) and _fault_kinds(faults) == {}


def test_a_server_that_serves_its_cache_anyway_is_noticed() -> None:
    server = CachingServer("none")
    rows, faults, said = _probe_steps(server, steps=1)
    # the reference's first narr probe finds the prompt the one-token sizing request left; its
    # second round, then the step, find every probe cached: each sent once more, cached again
    assert len(server.probe_bodies()) == 4 + 3 * 2 + 3 * 2
    assert all(r["status"] == "ok" for r in rows)  # not unstable: unchecked, and said so
    assert _fault_kinds(faults) == {"probe_cached": 7}
    prefill = [s for s in said if "prefill probe" in s]
    assert len(prefill) == 2
    assert "the server served the prefill probe from its cache" in prefill[-1]
    assert "its prefill was not checked" in prefill[-1]
    assert prefill[-1].startswith(STEP.label())


def test_a_server_that_reports_no_count_is_named_once_a_run() -> None:
    server = CachingServer("none", reports=False)
    rows, faults, said = _probe_steps(server, steps=3, engine="vllm")
    assert all(r["status"] == "ok" for r in rows)
    assert _fault_kinds(faults) == {"cache_untold": 1}
    untold = [s for s in said if "cannot be told" in s]
    assert len(untold) == 1 and "--enable-prompt-tokens-details" in untold[0]
    # nothing to retry on: one request per probe
    assert len(server.probe_bodies()) == 3 * 2 + 3 * 3


def test_logprobs_that_move_beyond_the_reference_make_the_step_unstable() -> None:
    server = CachingServer("llama")
    faults, said = FaultLog(), []
    rows: list[dict[str, Any]] = []

    async def go() -> None:
        clock = ScaledClock(1.0)
        info = ServerInfo("http://fake", "m", "llamacpp", 8192, None, True)
        client = ChatClient(info, clock, transport=httpx.MockTransport(server))
        card = _Card()
        card.offset = STEP.sm_offset_mhz or 0.0  # the card holds the step's offset throughout
        check = StabilityCheck(client, [card], clock, check_stretch=False)  # type: ignore[list-item]
        for shift in (0.0, LOGPROB_FLOOR_NATS / 2, LOGPROB_FLOOR_NATS * 3):
            server.logprob_shift = shift
            row = dict(ROW)
            await check_step(check, REFERENCE if not rows else STEP, row, 0, faults, said.append)
            rows.append(row)
        await client.aclose()

    asyncio.run(go())
    assert [r["status"] for r in rows] == ["ok", "ok", "unstable"]
    # the answers' text is the same: only their logprobs moved
    assert rows[2]["answers_differ"] == 0
    assert "token logprobs moved" in rows[2]["error"]
