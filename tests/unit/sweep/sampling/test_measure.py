"""From samples and requests to a cap's figures."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pytest

from powersweep.sweep.gpu import CLOCK_EVENT_SW_POWER_CAP, CLOCK_EVENT_SW_THERMAL, GpuSample
from powersweep.sweep.sampling.measure import (
    cap_row,
    decode_tps,
    energy_counter_j,
    energy_sampled_j,
    group_ticks,
    load_ticks,
    prefill_tps,
    relabel_outside,
)
from powersweep.sweep.sampling.sampler import SampleRow


@dataclass(frozen=True)
class Req:
    prompt_kind: str
    ok: bool
    completion_tokens: int | None
    prompt_tokens: int | None
    t_start_s: float
    t_first_token_s: float
    t_last_token_s: float
    error: str = ""


def sample(
    gpu: int,
    power: float,
    *,
    util: float = 100,
    energy: float = math.nan,
    temp: float = 60,
    bits: int = CLOCK_EVENT_SW_POWER_CAP,
    sm: float = 1500,
) -> GpuSample:
    return GpuSample(gpu, power, energy, temp, sm, 9751, util, 2, bits)


def test_decode_tps_is_token_weighted_and_excludes_first_token() -> None:
    reqs = [
        Req("narr", True, 501, 50, 0.0, 1.0, 11.0),  # 500 tokens in 10 s
        Req("narr", True, 101, 50, 20.0, 20.5, 30.5),  # 100 tokens in 10 s
        Req("narr", False, 300, 50, 40.0, 41.0, 42.0),  # failed: ignored
        Req("code", True, 401, 50, 50.0, 51.0, 61.0),
    ]
    assert decode_tps(reqs, "narr") == pytest.approx(600 / 20)
    assert decode_tps(reqs, "code") == pytest.approx(40.0)
    assert math.isnan(decode_tps(reqs, "prefill"))
    assert math.isnan(decode_tps([Req("narr", True, 1, 5, 0, 1, 1)], "narr"))


def test_prefill_tps_is_prompt_over_ttft() -> None:
    reqs = [
        Req("prefill", True, 10, 8000, 0.0, 4.0, 4.2),
        Req("prefill", True, 10, 8000, 10, 14, 14.1),
    ]
    assert prefill_tps(reqs) == pytest.approx(2000)


def rows_for(
    powers: list[tuple[float, float]], phase: str = "narr", **kw: float
) -> list[SampleRow]:
    """One tick per entry; each entry is the draw of GPU 0 and GPU 1."""
    out = []
    for k, (p0, p1) in enumerate(powers):
        out.append(
            SampleRow(k * 0.5, k, 300, phase, sample(0, p0, energy=1000.0 * k * p0 / 2, **kw))
        )
        out.append(
            SampleRow(k * 0.5, k, 300, phase, sample(1, p1, energy=1000.0 * k * p1 / 2, **kw))
        )
    return out


def test_multi_gpu_draw_is_summed_per_tick() -> None:
    ticks = group_ticks(rows_for([(300, 290), (301, 289), (299, 291)]))
    assert [t.power_w for t in ticks] == [590, 590, 590]


def test_load_ticks_need_load_phase_and_util() -> None:
    rows = [
        *rows_for([(300, 300)] * 3, phase="settle"),
        SampleRow(9, 9, 300, "narr", sample(0, 100, util=20)),
        SampleRow(10, 10, 300, "narr", sample(0, 310)),
    ]
    assert [t.power_w for t in load_ticks(rows)] == [310]


def test_energy_counter_and_trapezoid_agree_for_constant_draw() -> None:
    ticks = group_ticks(rows_for([(200, 100)] * 11))
    assert energy_sampled_j(ticks) == pytest.approx(300 * 5.0)
    assert energy_counter_j(ticks) == pytest.approx(300 * 5.0)


def test_energy_counter_missing_is_nan() -> None:
    rows = [SampleRow(k, k, 300, "narr", sample(0, 200)) for k in range(3)]
    assert math.isnan(energy_counter_j(group_ticks(rows)))


def test_cap_row_medians_flags_and_status() -> None:
    rows = rows_for([(300, 0), (302, 0), (298, 0), (400, 0)], temp=70)
    rows.append(SampleRow(3, 4, 300, "code", sample(0, 300, bits=CLOCK_EVENT_SW_THERMAL, temp=85)))
    reqs = [Req("narr", True, 101, 50, 0, 1, 11), Req("code", True, 51, 50, 12, 13, 18)]
    row = cap_row(
        cap_w=300,
        load_mode="decode-single",
        rows=rows,
        requests=reqs,
        n_gpus=2,
        settle_s=3,
        window_s=20,
    )
    assert row["status"] == "ok"
    assert row["narr_tps"] == pytest.approx(10) and row["code_tps"] == pytest.approx(10)
    # the mean of 300, 302, 298, 400, 300 (too few ticks inside the decodes: every loaded
    # one), energy over time: a median would read a bursty load's bursts (issue 44)
    assert row["power_w"] == pytest.approx(320)
    assert row["tps_per_w"] == pytest.approx(10 / 320)
    assert row["temp_max_c"] == 85
    assert row["thermal_throttle_pct"] == pytest.approx(20)
    assert row["pwr_throttle_pct"] == pytest.approx(80)
    assert row["n_requests"] == 2 and row["n_samples"] == 5


def test_cap_row_without_completed_requests_is_failed_with_error() -> None:
    reqs = [Req("narr", False, None, None, 0, math.nan, math.nan, "HTTP 500: boom")]
    row = cap_row(
        cap_w=300,
        load_mode="decode-single",
        rows=[],
        requests=reqs,
        n_gpus=1,
        settle_s=3,
        window_s=1,
    )
    assert row["status"] == "failed" and row["error"] == "HTTP 500: boom"
    assert math.isnan(row["power_w"]) and math.isnan(row["tps_per_w"])


def test_an_idle_card_beside_a_loaded_one_keeps_every_load_tick() -> None:
    rows = [
        SampleRow(float(t), t, 300, "narr", sample(gpu, 250.0 if gpu == 0 else 30.0, util=u))
        for t in range(10)
        for gpu, u in ((0, 98.0), (1, 0.0))
    ]
    ticks = load_ticks(rows)
    assert len(ticks) == 10  # a mean over the two cards (49%) would have dropped them all
    assert all(t.util_pct == 98.0 and t.power_w == 280.0 for t in ticks)


def test_the_draw_median_uses_exactly_the_tps_window() -> None:
    # the streams ramp up (low draw) before the window opens at t = 6.2
    rows = [
        SampleRow(t / 2, t, 300, "concurrent", sample(0, 150.0 if t / 2 < 6.2 else 280.0))
        for t in range(20)
    ]
    reqs = [Req("narr", True, 101, 50, 0.0, 1.0, 9.0)]
    everything = cap_row(
        cap_w=300, load_mode="decode-concurrent", rows=rows, requests=reqs, n_gpus=1,
        settle_s=0, window_s=5, tps={"narr_tps": 40.0},
    )  # fmt: skip
    windowed = cap_row(
        cap_w=300, load_mode="decode-concurrent", rows=rows, requests=reqs, n_gpus=1,
        settle_s=0, window_s=5, tps={"narr_tps": 40.0}, windows=[(6.2, 9.5)],
    )  # fmt: skip
    assert everything["n_samples"] == 20 and everything["power_w"] < 280.0
    assert windowed["n_samples"] == 7 and windowed["power_w"] == 280.0
    relabelled = relabel_outside(rows, [(6.2, 9.5)])
    assert [r.phase for r in relabelled].count("ramp") == 13
    assert all(r.phase == "concurrent" for r in relabelled if r.t_s >= 6.2)
    assert relabel_outside(rows, []) == rows


def test_a_busy_card_that_does_not_serve_does_not_make_ticks_loaded() -> None:
    # GPU 1 runs someone else's job at 100%; the serving GPU 0 is idle for the first 4 ticks
    rows = [
        SampleRow(float(t), t, 300, "narr", sample(gpu, 200.0, util=u))
        for t in range(10)
        for gpu, u in ((0, 5.0 if t < 4 else 95.0), (1, 100.0))
    ]
    assert len(load_ticks(rows)) == 10
    assert len(load_ticks(rows, busy_gpus={0})) == 6
    reqs = [Req("narr", True, 101, 50, 0.0, 1.0, 9.0)]
    row = cap_row(
        cap_w=300, load_mode="decode-single", rows=rows, requests=reqs, n_gpus=2,
        settle_s=0, window_s=10, busy_gpus={0},
    )  # fmt: skip
    assert row["n_samples"] == 6 and row["util_pct"] == 95.0


def _prefill_timeline(
    n_gpus: int, *, counter: bool
) -> tuple[list[SampleRow], list[Req], list[float]]:
    """Five 2 s prefills at 300 W per card (card 1: 200 W), each followed by 0.3 s of answer and
    gap at 120 W; a 1 s moving-average draw reading; an energy counter that advances every
    0.1 s (holds the energy of its last step); ticks every 0.5 s at a phase unrelated to both."""
    dt = 0.001
    busy = [300.0, 200.0]
    reqs, spans = [], []
    t = 1.0
    for _ in range(5):
        spans.append((t, t + 2.0))
        reqs.append(Req("prefill", True, 10, 4000, t, t + 2.0, t + 2.2))
        t += 2.3
    end = t + 1.0

    def draw(gpu: int, x: float) -> float:
        return busy[gpu] if any(a <= x < b for a, b in spans) else 120.0

    steps = int(end / dt)
    energy = [[0.0] * (steps + 1) for _ in range(n_gpus)]
    for g in range(n_gpus):
        for k in range(steps):
            energy[g][k + 1] = energy[g][k] + draw(g, k * dt) * dt
    rows = []
    tick, x = 0, 0.137
    while x < end - 0.01:
        for g in range(n_gpus):
            avg = sum(draw(g, x - j * 0.01) for j in range(100)) / 100  # the last second
            held = int(x / 0.1) * int(0.1 / dt)  # the counter's last step
            e_mj = 1000.0 * energy[g][held] if counter else math.nan
            rows.append(SampleRow(x, tick, 300, "prefill", sample(g, avg, energy=e_mj)))
        tick += 1
        x += 0.5 + 0.0007 * (tick % 3)  # jitter: an interval holds 4, 5 or 6 counter steps
    return rows, reqs, busy[:n_gpus]


@pytest.mark.parametrize("counter", [True, False])
@pytest.mark.parametrize("n_gpus", [1, 2])
def test_prefill_draw_is_of_the_prompts_seconds(n_gpus: int, counter: bool) -> None:
    rows, reqs, busy = _prefill_timeline(n_gpus, counter=counter)
    row = cap_row(
        cap_w=300,
        load_mode="prefill-heavy",
        rows=rows,
        requests=reqs,
        n_gpus=n_gpus,
        settle_s=0,
        window_s=12,
    )
    lagging = statistics.fmean(
        sum(r.sample.power_w for r in rows if r.tick == k) for k in {r.tick for r in rows}
    )
    truth = sum(busy)
    # every tick's mean: the answers' draw and the reading's lag pull it well under the prompts'
    assert lagging < 0.95 * truth
    # the counter's steps read each prompt's draw; without a counter, the readings inside the
    # prompts (the lag's part of them is a minority at a 2 s prefill)
    assert row["power_w"] == pytest.approx(truth, rel=0.005 if counter else 0.02)
    assert row["tps_per_w"] == pytest.approx(row["prefill_tps"] / row["power_w"])
    by_gpu = dict(part.split(":") for part in row["power_w_by_gpu"].split(";"))
    assert [float(by_gpu[str(g)]) for g in range(n_gpus)] == pytest.approx(
        busy, rel=0.005 if counter else 0.02
    )
    # decode modes without decode spans keep the mean of every load tick
    decode = cap_row(
        cap_w=300,
        load_mode="decode-single",
        rows=rows,
        requests=[],
        n_gpus=n_gpus,
        settle_s=0,
        window_s=12,
    )
    assert decode["power_w"] == pytest.approx(lagging)


def test_a_server_slower_than_its_windows_is_named_as_such() -> None:
    # issue 46: a server dripping 0.3 tokens/s under 2 s windows failed every point unsaid
    from types import SimpleNamespace

    from powersweep.sweep.sampling.measure import _no_figure

    cut = [
        SimpleNamespace(
            finish_reason="deadline", completion_tokens=1, ok=True, t_start_s=t, t_end_s=t + 2.2
        )
        for t in (0.0, 2.2)
    ]
    why = _no_figure(cut, n_ok=2)
    assert why.startswith("2 request(s) were cut at their window's end of up to 2.2 s with 1")
    assert "--target-cap-seconds" in why
    done = [SimpleNamespace(finish_reason="stop", completion_tokens=1, t_start_s=0, t_end_s=1)]
    assert "none gave a rate" in _no_figure(done, n_ok=1)


def test_a_decode_points_draw_is_the_mean_over_its_decodes() -> None:
    # issue 44: a bursty load's instant readings swing between its bursts (350 W) and the gaps
    # between them (150 W, a quarter of the time): the card draws 300 W on average, what the
    # truth is (energy over time); the median read 350. A tick in the gap between two requests
    # (the replayed rig's 22 W, the card idling) is no decode's draw and is left out
    bursty = [150.0 if k % 4 == 3 else 350.0 for k in range(20)]
    draws = [*bursty[:10], 22.0, *bursty[10:]]
    rows = [SampleRow(k * 0.5, k, 400, "narr", sample(0, p)) for k, p in enumerate(draws)]
    reqs = [
        Req("narr", True, 51, 50, 0.0, 0.0, 4.9),  # ticks 0-9
        Req("narr", True, 51, 50, 5.0, 5.5, 10.0),  # ticks 11-20; tick 10 its prefill
    ]
    row = cap_row(
        cap_w=400,
        load_mode="decode-single",
        rows=rows,
        requests=reqs,
        n_gpus=1,
        settle_s=0,
        window_s=10,
    )
    assert row["power_w"] == pytest.approx(statistics.fmean(bursty))
    assert row["power_w_by_gpu"] == f"0:{statistics.fmean(bursty):g}"
