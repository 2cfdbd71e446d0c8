"""Pure pieces of the load modes: window counting, calibration fit, prompt making."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest

from powersweep.sim.server import count_prompt_tokens
from powersweep.sweep.loads.concurrent import spread_pct, tokens_in_window, tokens_per_chunk
from powersweep.sweep.loads.prefill import fit_ttft, make_prompt, tokens_for_ttft


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
