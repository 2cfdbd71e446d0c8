"""The measured loads: what runs against the server at each cap.

Each load is time-bounded and labels the sampler with its phase, so the draw can be matched to
the work. A load is prepared once at the highest cap (probe, calibration), then measured at every
cap; it reports its own TPS figures, since each mode defines them differently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from powersweep.clock import Clock
from powersweep.sweep.loads.prompts import DECODE_PROMPTS

MAX_CONSECUTIVE_FAILURES = 3
# Run seconds a request may run past its window: a request started just before the window ends
# still finishes normally, and one that does not is cut (what arrived is counted).
REQUEST_MARGIN_S = 30.0
TOO_SLOW = "too slow for the window"


def request_budget_s(window_s: float) -> float:
    """Run seconds one request of a ``window_s`` window may take before it is cut."""
    return window_s + REQUEST_MARGIN_S


def judge_cut(result: Any, budget_s: float) -> Any:
    """A request cut at its deadline before any token arrived is a failure that says why."""
    if getattr(result, "finish_reason", None) != "deadline" or result.chunk_tokens > 0:
        return result
    return dataclasses.replace(
        result,
        ok=False,
        error=(
            f"no token arrived within {budget_s:g} s: the server is {TOO_SLOW} (or stuck); "
            "use a longer --target-cap-seconds, a shorter max_tokens or a lighter load"
        ),
    )


class ChatApi(Protocol):
    """The part of the client the loads use (``powersweep.sweep.server.client.ChatClient``)."""

    async def chat(
        self,
        prompt: str,
        *,
        max_tokens: int,
        prompt_kind: str,
        stream_index: int = 0,
        stream: bool = True,
        record_token_times: bool = False,
        extra_body: dict[str, Any] | None = None,
        deadline_s: float | None = None,
    ) -> Any:
        """Send one chat request and return its result (never raises for server errors)."""
        ...


class PhaseLabel(Protocol):
    """Where the load says what it is doing (the sampler)."""

    def label(self, cap_w: float, phase: str) -> None:
        """Label the following samples."""
        ...


@dataclass
class LoadRun:
    """What a load did at one cap.

    Attributes:
        requests: Every request result, in order.
        windows: ``(phase, t_start_s, t_end_s)`` of each measured phase.
        tps: The cap's figures by ``caps.csv`` column (``narr_tps``, ``code_tps``,
            ``prefill_tps``); NaN where not measured.
        extra: More ``caps.csv`` columns the mode adds (spreads, counts).
        errors: Why measured figures were rejected (truncated prompts, cache hits...).
        power_windows: ``(t_start_s, t_end_s)`` spans the draw median must use exactly, when
            the TPS was counted inside them (decode-concurrent); empty: every load tick.
    """

    requests: list[Any] = field(default_factory=list)
    windows: list[tuple[str, float, float]] = field(default_factory=list)
    tps: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    power_windows: list[tuple[float, float]] = field(default_factory=list)

    @property
    def window_s(self) -> float:
        """Total measured seconds."""
        return sum(t1 - t0 for _, t0, t1 in self.windows)


class Load(Protocol):
    """A load mode."""

    mode: str

    async def prepare(self, cap_w: float) -> dict[str, Any]:
        """Probe or calibrate at the highest cap, before the sweep; returns facts for run.json."""
        ...

    async def measure(self, cap_w: float) -> LoadRun:
        """Run the measured load at one cap."""
        ...

    def apply(self, prepared: dict[str, Any]) -> dict[str, Any]:
        """Take a set-up from an earlier :meth:`prepare` (a resumed run) instead of probing."""
        ...


async def run_prompts(
    client: ChatApi,
    clock: Clock,
    sampler: PhaseLabel,
    cap_w: float,
    prompts: Sequence[tuple[str, str, int]],
    target_s: float,
) -> LoadRun:
    """Send each prompt repeatedly until it has covered ``target_s`` run seconds.

    A prompt stops early after three consecutive failed requests, so a dead server costs a few
    requests per cap, not a hang; every request is cut :data:`REQUEST_MARGIN_S` past the window,
    so a server that never ends a stream costs the window and the margin. Token arrival times
    are kept (stalls are found from them).
    """
    run = LoadRun()
    budget = request_budget_s(target_s)
    for kind, prompt, max_tokens in prompts:
        sampler.label(cap_w, kind)
        t0 = clock.now()
        failures = 0
        while True:
            # Chunk arrival times feed tps_blocks (the noise of the cap's TPS).
            result = await client.chat(
                prompt,
                max_tokens=max_tokens,
                prompt_kind=kind,
                record_token_times=True,
                deadline_s=max(clock.now(), t0 + target_s) + REQUEST_MARGIN_S,
            )
            result = judge_cut(result, budget)
            run.requests.append(result)
            failures = 0 if result.ok else failures + 1
            if failures >= MAX_CONSECUTIVE_FAILURES or clock.now() - t0 >= target_s:
                break
        run.windows.append((kind, t0, clock.now()))
    return run


async def warmup(
    client: ChatApi,
    sampler: PhaseLabel,
    cap_w: float,
    requests_per_prompt: int = 3,
    *,
    clock: Clock | None = None,
    budget_s: float | None = None,
) -> list[Any]:
    """Warm the server and the card: a few requests of each prompt (not measured).

    With a clock and a budget every request is cut after ``budget_s`` run seconds; the warm-up
    ends at the first request that was cut (the card is warm by then, or the server cannot serve
    the window: minutes of further warm-up would say nothing new).
    """
    sampler.label(cap_w, "warmup")
    results = []
    for _, prompt, max_tokens in DECODE_PROMPTS:
        for _ in range(requests_per_prompt):
            deadline = None
            if clock is not None and budget_s is not None:
                deadline = clock.now() + budget_s
            result = await client.chat(
                prompt, max_tokens=max_tokens, prompt_kind="warmup", deadline_s=deadline
            )
            if budget_s is not None:
                result = judge_cut(result, budget_s)
            results.append(result)
            if result.finish_reason == "deadline":
                return results
    return results
