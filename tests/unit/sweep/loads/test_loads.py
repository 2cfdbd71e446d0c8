"""Pure pieces of the load modes: window counting, calibration fit, prompt making."""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from powersweep.clock import ManualClock
from powersweep.sim.server import count_prompt_tokens
from powersweep.sweep.loads.base import MAX_CONSECUTIVE_FAILURES
from powersweep.sweep.loads.concurrent import DecodeConcurrent
from powersweep.sweep.loads.concurrent_window import (
    spread_pct,
    tokens_in_window,
    tokens_per_chunk,
)
from powersweep.sweep.loads.prefill import PrefillHeavy
from powersweep.sweep.loads.prefill_sizing import fit_ttft, make_prompt, tokens_for_ttft
from powersweep.sweep.loads.single import DecodeSingle
from powersweep.sweep.verdict import FaultLog


@dataclass(frozen=True)
class R:
    token_times_s: tuple[float, ...]
    completion_tokens: int | None
    chunk_tokens: int
    token_source: str = "usage"
    finish_reason: str | None = "length"
    ok: bool = True


def test_only_tokens_arriving_inside_the_window_count() -> None:
    early = R(tuple(float(t) for t in range(0, 10)), 10, 10)  # 0..9 s, window is 5..15
    cut = R(tuple(12.0 + 0.5 * k for k in range(10)), None, 10, "chunks", "deadline")  # 12..16.5
    assert tokens_in_window([early, cut], 5.0, 15.0, default_per_chunk=1.0) == 5 + 7


def test_multi_token_chunks_convert_through_the_servers_count() -> None:
    # a server that packs 3 tokens per event: counting events would read 3x low
    done = R(tuple(1.0 + k for k in range(10)), 30, 10)
    cut = R(tuple(2.0 + k for k in range(5)), None, 5, "chunks", "deadline")
    assert tokens_per_chunk(done, 1.0) == 3.0
    assert tokens_per_chunk(cut, 2.5) == 2.5
    assert tokens_in_window([done, cut], 0.0, 100.0, default_per_chunk=3.0) == 30 + 15


def test_spread() -> None:
    assert spread_pct([100.0, 110.0, 90.0]) == pytest.approx(20.0)
    assert math.isnan(spread_pct([100.0]))


def test_ttft_fit_recovers_a_quadratic_and_inverts() -> None:
    a, b = 1e-3, 2e-8
    pts = [(n, a * n + b * n * n) for n in (1000, 4000, 9000)]
    fa, fb = fit_ttft(pts)
    assert fa == pytest.approx(a, rel=1e-6) and fb == pytest.approx(b, rel=1e-6)
    n = tokens_for_ttft(fa, fb, 10.0)
    assert a * n + b * n * n == pytest.approx(10.0)
    assert tokens_for_ttft(1e-3, 0.0, 5.0) == pytest.approx(5000)
    assert fit_ttft([(1000, 2.0)]) == (0.002, 0.0)


def test_prompts_start_with_a_nonce_and_vary() -> None:
    rng = random.Random(1)
    p1, p2 = make_prompt(500, "a", rng), make_prompt(500, "b", rng)
    assert p1.startswith("[request a]") and p2.startswith("[request b]")
    assert p1[40:200] != p2[40:200]  # varied body: no shared prefix beyond the instruction
    assert 500 <= count_prompt_tokens(p1) <= 1100


class _ScriptedProbe:
    """A DecodeConcurrent whose windows and draws come from scripts (no server, no clock)."""

    @staticmethod
    def make(tps_by_n: dict[int, float], draws: list[float]) -> tuple[Any, list[tuple[int, float]]]:
        from powersweep.clock import ScaledClock
        from powersweep.sweep.loads.concurrent import DecodeConcurrent
        from powersweep.sweep.loads.concurrent_window import Window

        asked: list[tuple[int, float]] = []
        left = list(draws)

        class Power:
            def median_power_w(self, t0_s: float, t1_s: float) -> float:
                return left.pop(0)

        class Load(DecodeConcurrent):
            async def window(self, cap_w, kind, prompt, n, length_s, phase):  # type: ignore[no-untyped-def,override]
                asked.append((n, length_s))
                return Window(n, 0.0, length_s, tps_by_n[n] * length_s, tps_by_n[n], 0, 0), []

        load = Load(None, ScaledClock(1000.0), None, 6.0, max_probe=8)  # type: ignore[arg-type]
        load.power = Power()
        return load, asked


def test_probe_measures_a_window_again_when_its_draw_was_missed() -> None:
    import asyncio

    tps = {1: 50.0, 2: 95.0, 4: 180.0, 8: 182.0}
    # 4 streams: the sampler missed the first window, so it is run again, longer
    load, asked = _ScriptedProbe.make(tps, [300.0, 350.0, math.nan, 420.0, 425.0])
    pick, rows, reason = asyncio.run(load.probe(400.0))
    assert [n for n, _ in asked] == [1, 2, 4, 4, 8]
    assert asked[3][1] == 2 * asked[2][1]
    assert pick == 4 and rows[2].power_w == 420.0
    assert "8 streams" in reason


def test_probe_an_unreadable_draw_leaves_tps_to_decide() -> None:
    import asyncio

    tps = {1: 50.0, 2: 95.0, 4: 180.0, 8: 300.0}
    nan = math.nan
    load, _ = _ScriptedProbe.make(tps, [300.0, nan, nan, nan, nan, 330.0])
    pick, rows, _ = asyncio.run(load.probe(400.0))
    # every NaN draw is kept as measured (nothing invented), and TPS alone carried the pick
    assert pick == 8
    assert [math.isnan(r.power_w) for r in rows] == [False, True, True, False]


class _FailingClient:
    """Answers every chat request at once with a failed result (a server down between points)."""

    def __init__(self) -> None:
        self.sent = 0

    async def chat(self, prompt: str, **kwargs: Any) -> Any:
        self.sent += 1
        return SimpleNamespace(ok=False, error="HTTP 500: boom", prompt_kind=kwargs["prompt_kind"])


class _Labels:
    def label(self, cap_w: float, phase: str) -> None:
        pass


def _loads(client: _FailingClient) -> dict[str, Any]:
    clock, labels = ManualClock(), _Labels()
    return {
        "decode-single": DecodeSingle(client, clock, labels, 10.0),
        # (keep-busy needs only chat of the client APIs)
        "decode-concurrent": DecodeConcurrent(
            client,  # type: ignore[arg-type]
            clock,
            labels,
            10.0,
            concurrency=2,
        ),
        "prefill-heavy": PrefillHeavy(client, clock, labels, 10.0),  # type: ignore[arg-type]
    }


@pytest.mark.parametrize("mode", ["decode-single", "decode-concurrent", "prefill-heavy"])
def test_the_keep_busy_load_hands_every_result_on_and_its_failures_are_faults(mode: str) -> None:
    client = _FailingClient()
    seen: list[Any] = []
    asyncio.run(_loads(client)[mode].keep_busy(300.0, 30.0, on_result=seen.append))
    # each stream gives up after a few failures in a row, and every one was handed on
    assert len(seen) == client.sent >= MAX_CONSECUTIVE_FAILURES
    assert all(r.prompt_kind == "settle" for r in seen)
    faults = FaultLog()
    faults.requests(seen)
    (failed,) = faults.to_list()
    assert failed["kind"] == "request_failed" and failed["count"] == client.sent


def test_rounds_of_one_point_pool_into_one_run() -> None:
    from powersweep.sweep.loads.base import LoadRun

    first = LoadRun(
        requests=["a", "b"],
        windows=[("narr", 0.0, 3.0), ("code", 3.0, 6.0)],
        tps={"narr_tps": 30.0, "code_tps": 29.0, "prefill_tps": math.nan},
        extra={"narr_tps_spread_pct": 1.0, "code_tps_spread_pct": 2.0, "tps_blocks": "1:0.5"},
    )
    second = LoadRun(
        requests=["c"],
        windows=[("narr", 7.0, 13.0)],
        tps={"narr_tps": 33.0, "code_tps": math.nan, "prefill_tps": math.nan},
        extra={"narr_tps_spread_pct": 3.0, "tps_blocks": "2:0.6"},
    )
    run = LoadRun.merged([first, second])
    assert run.requests == ["a", "b", "c"] and run.kind_s("narr") == 9.0
    # weighted by the seconds of each round's windows of that kind: 3 s at 30, 6 s at 33
    assert run.tps["narr_tps"] == pytest.approx(32.0)
    assert run.tps["code_tps"] == 29.0  # the later round did not measure it
    assert math.isnan(run.tps["prefill_tps"])
    assert run.extra == {
        "narr_tps_spread_pct": 3.0,
        "code_tps_spread_pct": 2.0,
        "tps_blocks": "1:0.5 2:0.6",
    }
    # a round whose requests failed leaves the pooled figure unknown
    failed = LoadRun(windows=[("narr", 14.0, 16.0)], tps={"narr_tps": math.nan})
    assert math.isnan(LoadRun.merged([first, failed]).tps["narr_tps"])
    assert LoadRun.merged([first]) is first
