"""The warm-up: time-bounded requests at the first point until rate and draw are steady.

It warms the server (first requests can be slow) and the card, and measures the pace the first
point's requests are sized from: a short first request of each prompt kind measures its rate,
the next ones last half a window each.

The reasoning: docs/reference.md, "powersweep.sweep.loads.warmup".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from powersweep.clock import Clock
from powersweep.sweep.loads.base import ChatApi, judge_cut, window_margin_s
from powersweep.sweep.loads.pace import Pace
from powersweep.sweep.loads.prompts import DECODE_PROMPTS

# The warm-up lasts at most this many windows ...
WARMUP_WINDOWS = 3.0
# ... its requests (after a first short one per kind) each this share of a window ...
WARMUP_REQUEST_SHARE = 0.5
# ... and it is steady once the last two rates of each kind, and the last two draws, agree
# within this ...
STEADY_PCT = 2.0
# ... and the card's temperature rises no faster than this: under a cap a cooler card runs
# faster (about 1% per 5 C: less leakage leaves more of the cap to the clock), so a card still
# heating reads fast at the first points.
STEADY_TEMP_C_PER_S = 0.05


class WarmupSampler(Protocol):
    """The sampler calls the warm-up uses."""

    def label(self, cap_w: float, phase: str) -> None:
        """Label the following samples."""
        ...

    def median_power_w(self, t0_s: float, t1_s: float) -> float:
        """Median combined draw between two run times (NaN without readings)."""
        ...

    def temp_slope_c_per_s(self, t0_s: float, t1_s: float) -> float:
        """The hottest card's temperature slope between two run times, °C/s (NaN: unknown)."""
        ...


@dataclass(frozen=True)
class Warmup:
    """What the warm-up did.

    Attributes:
        results: Every request, in order (``prompt_kind`` ``warmup``).
        steady: Rate and draw were steady when it ended.
        reason: Why it ended, in words.
        duration_s: Run seconds it took.
    """

    results: list[Any] = field(default_factory=list)
    steady: bool = False
    reason: str = ""
    duration_s: float = 0.0

    def record(self) -> dict[str, Any]:
        """``run.json`` ``warmup``."""
        return {
            "requests": len(self.results),
            "steady": self.steady,
            "reason": self.reason,
            "duration_s": self.duration_s,
        }


def _agree(values: Sequence[float]) -> bool:
    if len(values) < 2:
        return False
    a, b = values[-2], values[-1]
    return math.isfinite(a) and math.isfinite(b) and abs(b - a) <= STEADY_PCT / 100.0 * abs(a)


def _rate(r: Any) -> float:
    span = r.t_last_token_s - r.t_first_token_s
    n = r.completion_tokens
    return (n - 1) / span if r.ok and n and n >= 2 and span > 0 else math.nan


async def warmup(
    client: ChatApi,
    clock: Clock,
    sampler: WarmupSampler,
    cap_w: float,
    pace: Pace,
    *,
    window_s: float,
    max_requests: int,
) -> Warmup:
    """Warm up at ``cap_w`` until rate and draw are steady (at most a few windows).

    Args:
        client: The server client.
        clock: Run clock.
        sampler: Phase labels and the draw of a span.
        cap_w: The point's cap (labels the samples).
        pace: Learns the rates the first point's requests are sized from.
        window_s: The sweep's window (``--target-cap-seconds``).
        max_requests: At most this many requests per prompt kind (0: no warm-up).
    """
    sampler.label(cap_w, "warmup")
    t0 = clock.now()
    end = t0 + WARMUP_WINDOWS * window_s
    results: list[Any] = []
    rates: dict[str, list[float]] = {kind: [] for kind, _ in DECODE_PROMPTS}
    draws: list[float] = []
    sent = dict.fromkeys(rates, 0)
    seconds = WARMUP_REQUEST_SHARE * window_s
    margin = window_margin_s(window_s)
    reason = f"{max_requests} requests per prompt"
    steady = False
    while not steady:
        if clock.now() >= end:
            reason = f"its bound of {WARMUP_WINDOWS:g} windows ({end - t0:.3g} s)"
            break
        todo = [(k, p) for k, p in DECODE_PROMPTS if sent[k] < max_requests]
        if not todo:
            break
        for kind, prompt in todo:
            if clock.now() >= end:
                break
            known = pace.knows(kind)
            deadline = min(end, clock.now() + 2 * seconds + margin) if known else end
            r = await client.chat(
                prompt,
                max_tokens=pace.max_tokens(kind, seconds),
                prompt_kind="warmup",
                deadline_s=deadline,
            )
            r = judge_cut(r, deadline - r.t_start_s)
            results.append(r)
            sent[kind] += 1
            if not r.ok:
                continue
            pace.learn([r], kind=kind)
            rates[kind].append(_rate(r))
            draws.append(sampler.median_power_w(r.t_first_token_s, r.t_end_s))
        if not any(r.ok for r in results):
            reason = "no request completed"
            break
        steady = (
            all(_agree(v) for v in rates.values())
            and (_agree(draws) or _no_draw(draws))
            and _not_heating(sampler, clock.now(), window_s)
        )
        if steady:
            reason = (
                f"rate and draw steady within {STEADY_PCT:g}%, temperature within "
                f"{STEADY_TEMP_C_PER_S:g} C/s"
            )
    return Warmup(results, steady, reason, clock.now() - t0)


def _not_heating(sampler: WarmupSampler, now_s: float, window_s: float) -> bool:
    """The temperature over the last window moves no faster than :data:`STEADY_TEMP_C_PER_S`
    (unreadable: the rates and draws decide)."""
    slope = sampler.temp_slope_c_per_s(now_s - window_s, now_s)
    return not abs(slope) > STEADY_TEMP_C_PER_S


def _no_draw(draws: Sequence[float]) -> bool:
    """The sampler read no draw at all (a read failing every time): the rates decide."""
    return len(draws) >= 2 and not any(math.isfinite(d) for d in draws)
