"""Energy per token and latency percentiles of a point, from known ticks and requests."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from powersweep.sweep.sampling.per_token import (
    energy_per_token,
    latency_percentiles,
    metric_spans,
)


@dataclass(frozen=True)
class T:
    t_s: float
    power_w: float
    energy_mj: tuple[float, ...]


@dataclass(frozen=True)
class R:
    prompt_kind: str
    t_start_s: float
    t_first_token_s: float
    token_times_s: tuple[float, ...]
    completion_tokens: int | None
    chunk_tokens: int
    ok: bool = True
    prompt_tokens: int | None = None


def _ticks(t0: float, t1: float, watts: float, step: float = 0.5, n_gpus: int = 1) -> list[T]:
    """Steady draw ``watts`` per GPU, each counter integrating it exactly."""
    out = []
    t = t0
    while t <= t1 + 1e-9:
        e = watts * t * 1000.0
        out.append(T(t, watts * n_gpus, tuple(e for _ in range(n_gpus))))
        t += step
    return out


def _stream(kind: str, start: float, first: float, gap: float, n: int, per_chunk: int = 1) -> R:
    times = tuple(first + i * gap for i in range(n))
    return R(kind, start, first, times, n * per_chunk, n)


def test_counter_and_tokens_of_the_same_span_give_joules_per_token() -> None:
    ticks = _ticks(10.0, 20.0, 300.0)
    # 20 tokens/s from 10.0 to 20.0: a token every 50 ms
    req = _stream("narr", 9.9, 10.0, 0.05, 201)
    spans = metric_spans([("narr", 10.0, 20.0), ("code", 20.0, 30.0)], "decode-single")
    assert spans == [(10.0, 20.0)]
    out = energy_per_token(ticks, [req], spans, "decode-single")
    assert out["energy_tokens"] == pytest.approx(201)
    assert out["j_per_token"] == pytest.approx(3000.0 / 201)
    assert out["j_per_token_sampled"] == pytest.approx(3000.0 / 201)
    assert out["kwh_per_mtok"] == pytest.approx(3000.0 / 201 * 1e6 / 3.6e6)


def test_packed_chunks_count_their_tokens_and_only_the_metric_prompt_counts() -> None:
    ticks = _ticks(0.0, 4.0, 200.0, n_gpus=2)
    packed = _stream("narr", 0.0, 0.1, 0.1, 40, per_chunk=3)  # 120 tokens in 40 chunks
    code = _stream("code", 0.0, 0.1, 0.01, 400)
    out = energy_per_token(ticks, [packed, code], [(0.0, 4.0)], "decode-concurrent")
    assert out["energy_tokens"] == pytest.approx(120)
    assert out["j_per_token"] == pytest.approx(2 * 200.0 * 4.0 / 120)


def test_a_drifting_counter_shows_against_the_sampled_integral() -> None:
    ticks = [T(t.t_s, t.power_w, (t.energy_mj[0] * 1.05,)) for t in _ticks(0.0, 10.0, 250.0)]
    req = _stream("narr", 0.0, 0.0, 0.1, 101)
    out = energy_per_token(ticks, [req], [(0.0, 10.0)], "decode-single")
    assert out["j_per_token"] / out["j_per_token_sampled"] == pytest.approx(1.05)


def test_prefill_counts_each_prompts_share_inside_the_window() -> None:
    ticks = _ticks(0.0, 10.0, 400.0)
    # 8000 tokens over 2 s of prefill each; the last one straddles the window's end
    reqs = [R("prefill", s, s + 2.0, (s + 2.0,), 1, 1, prompt_tokens=8000) for s in (0.0, 3.0, 9.0)]
    out = energy_per_token(ticks, reqs, [(0.0, 10.0)], "prefill-heavy")
    assert out["energy_tokens"] == pytest.approx(8000 + 8000 + 4000)
    assert out["j_per_token"] == pytest.approx(4000.0 / 20000)


def test_no_window_or_a_missing_counter_is_unknown_not_zero() -> None:
    ticks = _ticks(0.0, 4.0, 200.0)
    req = _stream("narr", 0.0, 0.1, 0.1, 30)
    assert math.isnan(energy_per_token(ticks, [req], [], "decode-single")["j_per_token"])
    broken = [T(t.t_s, t.power_w, (math.nan,)) for t in ticks]
    out = energy_per_token(broken, [req], [(0.0, 4.0)], "decode-single")
    assert math.isnan(out["j_per_token"])
    assert out["j_per_token_sampled"] > 0


def test_latency_percentiles_over_every_stream_of_the_window() -> None:
    # two streams that began before the window (their TTFT still counts), gaps of 50 and 100 ms
    a = _stream("narr", 0.0, 0.5, 0.05, 200)
    b = _stream("narr", 0.0, 0.8, 0.1, 100)
    out = latency_percentiles([a, b], [(2.0, 8.0)], "decode-concurrent")
    assert out["ttft_p50_ms"] == pytest.approx(650.0)
    assert out["ttft_p95_ms"] == pytest.approx(500.0 + 0.95 * 300.0)
    assert out["itl_p50_ms"] == pytest.approx(50.0)
    assert out["itl_p95_ms"] == pytest.approx(100.0)


def test_a_packed_chunk_spreads_its_gap_over_its_tokens() -> None:
    r = _stream("narr", 0.0, 0.2, 0.3, 20, per_chunk=3)
    out = latency_percentiles([r], [(0.0, 10.0)], "decode-single")
    assert out["itl_p50_ms"] == pytest.approx(100.0)
    assert out["ttft_p95_ms"] == pytest.approx(200.0)


def test_failed_requests_and_other_prompts_have_no_latency() -> None:
    bad = R("narr", 0.0, 0.5, (0.5, 0.6), 2, 2, ok=False)
    code = _stream("code", 0.0, 0.1, 0.01, 50)
    out = latency_percentiles([bad, code], [(0.0, 5.0)], "decode-single")
    assert all(math.isnan(v) for v in out.values())


def test_the_p95_upper_bound_holds_the_true_p95_about_97_percent_of_the_time() -> None:
    import numpy as np

    from powersweep.sweep.sampling.per_token import p95_upper_ms

    rng = np.random.default_rng(7)
    true_p95 = -math.log(0.05) * 40.0  # exponential gaps of mean 40 ms
    trials = [list(rng.exponential(40.0, size=300)) for _ in range(400)]
    highs = [p95_upper_ms(t) for t in trials]
    # a two-sided 95% interval: its upper end lies above the truth in about 97.5% of runs
    above = sum(h >= true_p95 for h in highs) / len(highs)
    assert 0.95 <= above <= 0.995, above
    assert all(h >= float(np.percentile(t, 95)) for h, t in zip(highs, trials, strict=True))
    # too few samples to bound a p95: no bound rather than a made-up one
    assert math.isnan(p95_upper_ms(list(rng.exponential(40.0, size=60))))
    assert math.isnan(p95_upper_ms([]))
