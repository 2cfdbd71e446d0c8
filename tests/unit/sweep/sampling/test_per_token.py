"""Energy per token and latency percentiles of a point, from known ticks and requests."""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

import pytest

from powersweep.analysis.precision import Precision
from powersweep.sweep.sampling.per_token import (
    energy_per_token,
    latency_percentiles,
    metric_seconds,
    sensors_gap_rel,
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

    @property
    def t_last_token_s(self) -> float:
        return self.token_times_s[-1] if self.token_times_s else math.nan


def _ticks(t0: float, t1: float, watts: float, step: float = 0.5, n_gpus: int = 1) -> list[T]:
    """Steady draw ``watts`` per GPU, each counter integrating it exactly."""
    out = []
    t = t0
    while t <= t1 + 1e-9:
        e = watts * t * 1000.0
        out.append(T(t, watts * n_gpus, tuple(e for _ in range(n_gpus))))
        t += step
    return out


def _token_stream(
    kind: str, start: float, first: float, gap: float, n: int, per_chunk: int = 1
) -> R:
    times = tuple(first + i * gap for i in range(n))
    return R(kind, start, first, times, n * per_chunk, n)


def _precision(tps_u95: float = 0.004, bias: float = 0.0) -> Precision:
    return Precision(tps_u95, 0.002, math.hypot(tps_u95, 0.002), bias, 0.0, 10.0)


def test_decode_seconds_are_each_requests_first_to_last_token() -> None:
    # a request's time to first token and the gap before the next one are not decode seconds
    a = _token_stream("narr", 0.0, 0.2, 0.05, 41)  # decode 0.2-2.2 s
    b = _token_stream("narr", 2.3, 2.5, 0.05, 21)  # decode 2.5-3.5 s
    code = _token_stream("code", 3.6, 3.7, 0.05, 30)
    one = R("narr", 3.6, 3.7, (3.7,), 1, 1)  # one token: no decode span
    windows = [("narr", 0.0, 3.6), ("code", 3.6, 5.0)]
    spans = metric_seconds([a, b, code, one], windows, "decode-single")
    assert spans == [(0.2, pytest.approx(2.2)), (2.5, pytest.approx(3.5))]
    # decode-concurrent counts its tokens over the metric's windows
    assert metric_seconds([a, b], windows, "decode-concurrent") == [(0.0, 3.6)]
    # prefill-heavy: each prompt's send to its first token
    pre = R("prefill", 1.0, 1.8, (1.8,), 1, 1, prompt_tokens=4000)
    assert metric_seconds([pre], [("prefill", 0.0, 5.0)], "prefill-heavy") == [(1.0, 1.8)]


def _varying(spans: list[tuple[float, float]], inside_w: float, outside_w: float) -> list[T]:
    """Ticks every 0.5 s from 0 to 10 s of a draw that is ``inside_w`` in ``spans`` and
    ``outside_w`` elsewhere, with a counter that integrates it exactly."""
    out, energy, t, step = [], 0.0, 0.0, 0.001
    marks = {round(0.5 * i, 3) for i in range(21)}
    while t <= 10.0 + 1e-9:
        if round(t, 3) in marks:
            inside = any(a <= t <= b for a, b in spans)
            out.append(T(round(t, 3), inside_w if inside else outside_w, (energy,)))
        inside = any(a <= t + step / 2 <= b for a, b in spans)
        energy += (inside_w if inside else outside_w) * step * 1000.0
        t += step
    return out


def test_the_energy_is_the_counters_over_the_decode_seconds_only() -> None:
    # decode draws 300 W, prefill and gaps 150 W: a window's energy would understate the decode
    spans = [(0.2, 3.1), (3.4, 6.6), (7.0, 9.9)]
    ticks = _varying(spans, 300.0, 150.0)
    out = energy_per_token(ticks, spans, 30.0, _precision())
    # whole tick intervals inside a span only: 0.5-3.0, 3.5-6.5, 7.0-9.5 s
    assert out["energy_tokens"] == pytest.approx(30.0 * (2.5 + 3.0 + 2.5))
    assert out["j_per_token"] == pytest.approx(300.0 / 30.0, rel=1e-3)
    assert out["j_per_token_sampled"] == pytest.approx(300.0 / 30.0, rel=1e-3)
    assert out["kwh_per_mtok"] == pytest.approx(out["j_per_token"] * 1e6 / 3.6e6)
    # the whole window's energy over the tokens served in it (the old figure) reads higher: it
    # pays for the seconds between the decodes too
    window = (ticks[-1].energy_mj[0] - ticks[0].energy_mj[0]) / 1000.0
    assert window / (30.0 * 8.8) > 1.05 * out["j_per_token"]


def test_the_stated_precision_adds_the_rate_the_counter_and_the_drift() -> None:
    spans = [(0.0, 10.0)]
    steady = energy_per_token(_ticks(0.0, 10.0, 250.0), spans, 25.0, _precision(0.004, 0.003))
    # a steady counter: the TPS and the drift's bias alone, in quadrature
    assert steady["j_per_token_u95_pct"] == pytest.approx(100.0 * math.hypot(0.004, 0.003))
    # a counter whose intervals scatter +-2%: its own half-width joins them
    rng = random.Random(3)
    noisy, energy = [], 0.0
    for i in range(21):
        noisy.append(T(0.5 * i, 250.0, (energy,)))
        energy += 250.0 * 0.5 * 1000.0 * (1.0 + rng.gauss(0.0, 0.02))
    out = energy_per_token(noisy, spans, 25.0, _precision(0.004, 0.0))
    assert out["j_per_token_u95_pct"] > 100.0 * 0.004 * 1.5
    # the energy's part, a ratio over 8 batches of intervals, holds the truth at its 95%
    gap = abs(out["j_per_token"] / 10.0 - 1.0)
    assert gap < out["j_per_token_u95_pct"] / 100.0


def test_multi_gpu_counters_add_up_and_packed_chunks_are_the_rates_business() -> None:
    ticks = _ticks(0.0, 4.0, 200.0, n_gpus=2)
    out = energy_per_token(ticks, [(0.0, 4.0)], 30.0, _precision())
    assert out["j_per_token"] == pytest.approx(2 * 200.0 / 30.0)
    assert out["energy_tokens"] == pytest.approx(120.0)


def test_a_drifting_counter_shows_against_the_sampled_draw() -> None:
    ticks = [T(t.t_s, t.power_w, (t.energy_mj[0] * 1.05,)) for t in _ticks(0.0, 10.0, 250.0)]
    spans = [(0.0, 10.0)]
    # the sensors' difference over the same seconds, which the point's precision carries ...
    gap = sensors_gap_rel(ticks, spans)
    assert gap == pytest.approx(0.05)
    assert sensors_gap_rel(ticks, []) == 0.0
    precision = dataclasses.replace(_precision(), power_sensors_rel=gap)
    out = energy_per_token(ticks, spans, 10.0, precision)
    assert out["j_per_token"] / out["j_per_token_sampled"] == pytest.approx(1.05)
    # ... and J/token's stated precision with it: the counter cannot be surer than its
    # difference from the readings (issue 44: J/token and TPS/W agree within it)
    assert out["j_per_token_u95_pct"] == pytest.approx(100.0 * math.hypot(0.004, 0.05))


def test_no_seconds_no_rate_or_a_missing_counter_is_unknown_not_zero() -> None:
    ticks = _ticks(0.0, 4.0, 200.0)
    assert math.isnan(energy_per_token(ticks, [], 20.0, _precision())["j_per_token"])
    # a span shorter than one tick interval holds no whole interval
    assert math.isnan(energy_per_token(ticks, [(1.1, 1.4)], 20.0, _precision())["j_per_token"])
    assert math.isnan(energy_per_token(ticks, [(0.0, 4.0)], math.nan, _precision())["j_per_token"])
    broken = [T(t.t_s, t.power_w, (math.nan,)) for t in ticks]
    out = energy_per_token(broken, [(0.0, 4.0)], 20.0, _precision())
    assert math.isnan(out["j_per_token"]) and math.isnan(out["j_per_token_u95_pct"])
    assert out["j_per_token_sampled"] == pytest.approx(10.0)
    # a rate without its own precision (one prefill prompt) states none
    blind = Precision(math.nan, math.nan, math.nan, 0.0, math.nan, math.nan)
    assert math.isnan(energy_per_token(ticks, [(0.0, 4.0)], 20.0, blind)["j_per_token_u95_pct"])


def test_latency_percentiles_over_every_stream_of_the_window() -> None:
    # two streams that began before the window (their TTFT still counts), gaps of 50 and 100 ms
    a = _token_stream("narr", 0.0, 0.5, 0.05, 200)
    b = _token_stream("narr", 0.0, 0.8, 0.1, 100)
    out = latency_percentiles([a, b], [(2.0, 8.0)], "decode-concurrent")
    assert out["ttft_p50_ms"] == pytest.approx(650.0)
    assert out["ttft_p95_ms"] == pytest.approx(500.0 + 0.95 * 300.0)
    assert out["itl_p50_ms"] == pytest.approx(50.0)
    assert out["itl_p95_ms"] == pytest.approx(100.0)


def test_a_packed_chunk_spreads_its_gap_over_its_tokens() -> None:
    r = _token_stream("narr", 0.0, 0.2, 0.3, 20, per_chunk=3)
    out = latency_percentiles([r], [(0.0, 10.0)], "decode-single")
    assert out["itl_p50_ms"] == pytest.approx(100.0)
    assert out["ttft_p95_ms"] == pytest.approx(200.0)


def test_failed_requests_and_other_prompts_have_no_latency() -> None:
    bad = R("narr", 0.0, 0.5, (0.5, 0.6), 2, 2, ok=False)
    code = _token_stream("code", 0.0, 0.1, 0.01, 50)
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
