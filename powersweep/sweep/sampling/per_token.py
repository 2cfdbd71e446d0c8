"""Energy per token and latency percentiles of one point, over exactly its measured seconds.

Energy per token describes the seconds TPS/W describes (the energy counter over the seconds the
metric's TPS counts), so J/token is the inverse of TPS/W and the two agree within their stated
precisions.

The reasoning: docs/figures.md, "powersweep.sweep.sampling.per_token".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from powersweep.analysis.precision import Precision, ratio_se_rel, t_quantile
from powersweep.runformat import CsvRow, as_float


class Tick(Protocol):
    """What these figures read of a combined sampler tick (``measure.Tick``)."""

    @property
    def t_s(self) -> float:
        """Run seconds of the tick."""
        ...

    @property
    def power_w(self) -> float:
        """Combined draw, W."""
        ...

    @property
    def energy_mj(self) -> tuple[float, ...]:
        """Each GPU's energy counter, mJ."""
        ...


NAN = math.nan
J_PER_KWH = 3.6e6
# The load mode's metric prompt (what tps_per_w is computed from).
METRIC_KIND = {"prefill-heavy": "prefill", "serving": "serve"}
DECODE_METRIC_KIND = "narr"


def metric_kind(load_mode: str) -> str:
    """The prompt kind whose windows the metric (and these figures) describe."""
    return METRIC_KIND.get(load_mode, DECODE_METRIC_KIND)


def metric_spans(
    windows: Sequence[tuple[str, float, float]] | None, load_mode: str
) -> list[tuple[float, float]]:
    """``(t0, t1)`` of each measured window of the metric's prompt."""
    kind = metric_kind(load_mode)
    return [(t0, t1) for k, t0, t1 in windows or () if k == kind and t1 > t0]


def chunk_tokens(result: Any) -> float:
    """Tokens per token-bearing chunk of one request (its own count over its chunks; else 1)."""
    count, chunks = getattr(result, "completion_tokens", None), getattr(result, "chunk_tokens", 0)
    if count and chunks:
        return float(count) / float(chunks)
    return 1.0


def energy_counter_j(ticks: Sequence[Tick]) -> float:
    """Combined NVML energy-counter delta from the first to the last tick, in J.

    The same span as :func:`energy_sampled_j`'s integral: the counter holds the energy of its
    last update, so each end lags its tick by up to one update period (10-100 ms), at a phase
    unrelated to the ticks; the delta covers the ticks' span within one period (unbiased, and
    under 1% of a window of 10 s or more). NaN when any GPU's counter is missing at either end
    (unsupported before Volta) or went back.
    """
    if len(ticks) < 2:
        return NAN
    first, last = ticks[0].energy_mj, ticks[-1].energy_mj
    if len(first) != len(last):
        return NAN
    deltas = [b - a for a, b in zip(first, last, strict=True)]
    # a counter that went back (a driver reload) measured nothing
    if not all(math.isfinite(d) and d >= 0 for d in deltas):
        return NAN
    return math.fsum(deltas) / 1000.0


def decode_spans(requests: Iterable[Any]) -> list[tuple[float, float]]:
    """``(t_first_token, t_last_token)`` of each completed request that decoded: the seconds a
    decode rate counts (a prompt's prefill and the gap before the next request are not in
    them)."""
    return [
        (r.t_first_token_s, r.t_last_token_s)
        for r in requests
        if r.ok and (r.completion_tokens or 0) >= 2 and r.t_last_token_s > r.t_first_token_s
    ]


def prefill_spans(requests: Iterable[Any]) -> list[tuple[float, float]]:
    """``(t_start, t_first_token)`` of each completed prefill prompt: the seconds the metric
    (prompt tokens over time to first token) counts."""
    return [
        (r.t_start_s, r.t_first_token_s)
        for r in requests
        if r.prompt_kind == "prefill"
        and r.ok
        and r.prompt_tokens
        and r.t_first_token_s > r.t_start_s
    ]


def span_power_w(ticks: Sequence[Tick], spans: Sequence[tuple[float, float]]) -> float:
    """Combined draw over ``spans``: the median of the energy counter's draw between each two
    consecutive ticks inside a span, in W.

    A prefill-heavy point alternates prefills at the cap with short answers and gaps at a lower
    draw, and a moving-average draw reading (NVML before the instant field, AMD's average
    socket power) lags each change by up to its averaging period: ticks read in a prompt's first
    second still carry the draw before it. The counter holds the energy itself; but it advances
    in steps (every 100 ms on many cards), so one half-second interval holds one step more or
    less than its length (+-20%), and the spans are too short for that to average out: the median
    of the intervals is the steady draw, as the sum is not. Without a counter, the median of the
    draw readings inside the spans; NaN when no tick falls in one.
    """
    rates: list[float] = []
    draws: list[float] = []
    for t0, t1 in spans:
        inside = [t for t in ticks if t0 <= t.t_s <= t1]
        draws.extend(t.power_w for t in inside if math.isfinite(t.power_w))
        for a, b in itertools.pairwise(inside):
            energy = energy_counter_j((a, b))
            if math.isfinite(energy) and b.t_s > a.t_s:
                rates.append(energy / (b.t_s - a.t_s))
    if rates:
        return float(np.median(rates))
    return float(np.median(draws)) if draws else NAN


def energy_sampled_j(ticks: Sequence[Tick]) -> float:
    """Trapezoid integral of combined draw (each card's instant reading where it has one) over
    the same ticks, in J (NaN if < 2 ticks)."""
    pts = [(t.t_s, t.power_w) for t in ticks if math.isfinite(t.power_w)]
    if len(pts) < 2:
        return NAN
    return math.fsum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(pts))


def metric_seconds(
    requests: Sequence[Any],
    windows: Sequence[tuple[str, float, float]] | None,
    load_mode: str,
) -> list[tuple[float, float]]:
    """The seconds the metric's TPS counts, as ``(t0, t1)`` spans.

    decode-single (and every clock axis's single stream): each completed request of the
    metric's prompt from its first token to its last (the decode TPS's own span: the time to
    first token and the gap before the next request are not in it); decode-concurrent: the
    metric's windows (its TPS is the tokens that arrived in them over their length);
    prefill-heavy: each prompt from its send to its first token (:func:`prefill_spans`).
    """
    kind = metric_kind(load_mode)
    if kind == "prefill":
        return prefill_spans(requests)
    if load_mode in WINDOW_COUNTED:
        return metric_spans(windows, load_mode)
    return [
        (r.t_first_token_s, r.t_last_token_s)
        for r in requests
        if r.prompt_kind == kind
        and r.ok
        and (r.completion_tokens or 0) >= 2
        and r.t_last_token_s > r.t_first_token_s
    ]


# Load modes whose TPS counts the tokens that arrived in a window over the window's length.
WINDOW_COUNTED = frozenset({"decode-concurrent", "serving"})
# The most consecutive batches the counter's intervals are cut into for the draw's precision.
ENERGY_BATCHES = 8


def steady_intervals(
    ticks: Sequence[Tick], spans: Sequence[tuple[float, float]]
) -> list[tuple[Tick, Tick]]:
    """Each two consecutive ticks that both lie inside one of ``spans``, in time order.

    The energy counter is read at the ticks only: an interval with a tick outside the spans
    would carry the draw of seconds the metric does not count (a prefill, the gap between two
    requests), so only whole intervals inside a span are taken.
    """
    ordered = sorted(ticks, key=lambda t: t.t_s)
    seen: set[int] = set()
    out: list[tuple[Tick, Tick]] = []
    for t0, t1 in spans:
        inside = [i for i, t in enumerate(ordered) if t0 <= t.t_s <= t1]
        for i, j in itertools.pairwise(inside):
            if j == i + 1 and i not in seen and ordered[j].t_s > ordered[i].t_s:
                seen.add(i)
                out.append((ordered[i], ordered[j]))
    return sorted(out, key=lambda pair: pair[0].t_s)


def counter_draw(intervals: Sequence[tuple[Tick, Tick]]) -> tuple[float, float, float]:
    """The energy counter's mean draw over ``intervals`` (W), its 95% half-width (relative) and
    the seconds it covers; NaN where no interval has both counter readings.

    The half-width is the ratio estimator's (energy over seconds) over the intervals cut into
    at most :data:`ENERGY_BATCHES` consecutive batches, Student's t. Two neighbouring intervals
    share a counter reading, whose lag behind its tick (up to one update period of the counter)
    cancels from their sum: taken apart they overstate the variance, never understate it.
    """
    units = [(energy_counter_j(pair), pair[1].t_s - pair[0].t_s) for pair in intervals]
    units = [(e, s) for e, s in units if math.isfinite(e)]
    seconds = math.fsum(s for _, s in units)
    if not seconds > 0:
        return NAN, NAN, 0.0
    draw = math.fsum(e for e, _ in units) / seconds
    k = min(ENERGY_BATCHES, len(units))
    batches = [
        (float(sum(e for e, _ in part)), float(sum(s for _, s in part)))
        for part in (units[i * len(units) // k : (i + 1) * len(units) // k] for i in range(k))
    ]
    se, dof = ratio_se_rel(batches)
    u95 = t_quantile(dof) * se if math.isfinite(se) else NAN
    return draw, u95, seconds


def sensors_gap_rel(ticks: Sequence[Tick], spans: Sequence[tuple[float, float]]) -> float:
    """The energy counter's mean draw over the whole tick intervals inside ``spans``
    (:func:`steady_intervals`) over the readings' (their trapezoid) over the same intervals,
    less one; 0 where either is missing.

    The two measure one draw over the same seconds: the counter integrates every burst, the
    readings sample a few instants of it (and lag it where the driver averages), so where they
    differ neither figure is surer than that.
    """
    intervals = steady_intervals(ticks, spans)
    draw, _, _ = counter_draw(intervals)
    sampled = math.fsum(energy_sampled_j(pair) for pair in intervals)
    sampled_s = math.fsum(b.t_s - a.t_s for a, b in intervals)
    if not (math.isfinite(draw) and math.isfinite(sampled) and sampled > 0 and sampled_s > 0):
        return 0.0
    return draw / (sampled / sampled_s) - 1.0


def energy_per_token(
    ticks: Sequence[Tick],
    spans: Sequence[tuple[float, float]],
    tps: float,
    precision: Precision,
) -> dict[str, float]:
    """``j_per_token`` and its ``j_per_token_u95_pct``, ``j_per_token_sampled``,
    ``kwh_per_mtok`` and ``energy_tokens``: the energy of the seconds the metric counts over
    the tokens served in them.

    The energy is the counter's over the whole tick intervals inside those seconds
    (:func:`steady_intervals`), the tokens the metric's rate times the same seconds, so
    J/token is the counter's mean draw over them divided by the TPS that TPS/W divides: the
    two describe the same seconds, and J/token times TPS/W is the counter's draw over the
    sampled one. Its 95% half-width adds the TPS's, the counter draw's
    (:func:`counter_draw`), the temperature drift's bias (the same as TPS/W's) and the
    counter's difference from the readings' draw over the same seconds
    (:func:`sensors_gap_rel`, the precision's ``power_sensors_rel``) in quadrature.

    Args:
        ticks: The point's ticks (all GPUs combined), in any order.
        spans: The metric's seconds (:func:`metric_seconds`).
        tps: The metric's rate (decode or prefill TPS, all GPUs together).
        precision: The point's precision (its TPS half-width, drift bias and the sensors'
            difference).

    Returns:
        The columns; NaN where no whole interval lies inside the seconds, the rate is unknown,
        or a counter reading is missing (then ``j_per_token_sampled`` only).
    """
    intervals = steady_intervals(ticks, spans)
    draw, draw_u95, seconds = counter_draw(intervals)
    sampled = math.fsum(energy_sampled_j(pair) for pair in intervals)
    sampled_s = math.fsum(b.t_s - a.t_s for a, b in intervals)
    if not (math.isfinite(tps) and tps > 0 and sampled_s > 0):
        return dict.fromkeys(ENERGY_COLUMNS, NAN)
    per_token = draw / tps if seconds > 0 else NAN
    u95 = _j_per_token_u95(precision, draw_u95)
    return {
        "j_per_token": per_token,
        "j_per_token_u95_pct": 100.0 * u95 if math.isfinite(per_token) else NAN,
        "j_per_token_sampled": sampled / sampled_s / tps if math.isfinite(sampled) else NAN,
        "kwh_per_mtok": per_token * 1e6 / J_PER_KWH,
        "energy_tokens": tps * (seconds if seconds > 0 else sampled_s),
    }


def _j_per_token_u95(precision: Precision, counter_u95: float) -> float:
    """J/token's 95% half-width (relative): the TPS's, the counter draw's, the drift's bias and
    the sensors' difference in quadrature."""
    return math.sqrt(
        precision.tps_u95_rel**2
        + counter_u95**2
        + precision.drift_bias_rel**2
        + precision.power_sensors_rel**2
    )


def j_per_token_restated(row: CsvRow, precision: Precision) -> dict[str, float]:
    """``j_per_token_u95_pct`` of a caps.csv row whose precision is restated as ``precision``
    (the run-to-run term carried at the run's end): the counter draw's own part, what the row's
    half-width holds beyond its TPS's, drift's and sensors' terms, is kept. Empty where the row
    states none."""
    stated = as_float(row.get("j_per_token_u95_pct")) / 100.0
    if not math.isfinite(stated):
        return {}
    parts = [
        as_float(row.get(key), 0.0) / 100.0
        for key in ("tps_u95_pct", "drift_bias_pct", "power_sensors_pct")
    ]
    counter_sq = stated**2 - sum(p**2 for p in parts if math.isfinite(p))
    return {
        "j_per_token_u95_pct": 100.0 * _j_per_token_u95(precision, math.sqrt(max(0.0, counter_sq)))
    }


def energy_per_request(
    ticks: Sequence[Tick],
    spans: Sequence[tuple[float, float]],
    requests_per_s: float,
    precision: Precision,
) -> dict[str, float]:
    """``j_per_request`` and its ``j_per_request_u95_pct``: the counter's mean draw over the
    whole tick intervals inside ``spans`` (the serving windows) over the requests completed per
    second of them.

    The half-width adds the counter draw's (:func:`counter_draw`), the temperature drift's bias
    and the counter's difference from the readings' draw in quadrature. The request count has no
    term: it is exact for the arrival sequence, which every point of the run replays, so it
    moves no comparison between points; how far this sequence's mix of lengths stands for the
    rate's long-run mix is not stated (docs/serving.md).
    """
    draw, draw_u95, seconds = counter_draw(steady_intervals(ticks, spans))
    if not (seconds > 0 and math.isfinite(requests_per_s) and requests_per_s > 0):
        return {"j_per_request": NAN, "j_per_request_u95_pct": NAN}
    u95 = math.sqrt(draw_u95**2 + precision.drift_bias_rel**2 + precision.power_sensors_rel**2)
    return {"j_per_request": draw / requests_per_s, "j_per_request_u95_pct": 100.0 * u95}


ENERGY_COLUMNS = (
    "j_per_token",
    "j_per_token_u95_pct",
    "j_per_token_sampled",
    "kwh_per_mtok",
    "energy_tokens",
)


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else NAN


def p95_upper_ms(values: Sequence[float]) -> float:
    """The upper end of the p95's 95% confidence interval (:func:`quantile_interval`; NaN when
    the samples cannot bound it: fewer than 72, or none)."""
    return quantile_interval(values, P95)[1]


P95 = 0.95
P95_CONFIDENCE = 0.95


def quantile_interval(values: Sequence[float], q: float) -> tuple[float, float]:
    """The 95% confidence interval of the ``q`` quantile of ``values`` by order statistics
    (distribution-free, SciPy's ``quantile_test(values, p=q).confidence_interval(0.95)``: the
    count of values under the quantile is Binomial(n, q)); an end the samples cannot bound is
    NaN (a p99 needs some 300 values for its upper end)."""
    n = len(values)
    if n < 2:
        return NAN, NAN
    from scipy.special import bdtr  # lazy, as in analysis.precision

    tail = (1.0 - P95_CONFIDENCE) / 2
    cdf = bdtr(np.arange(n + 1), n, q)
    # 0-based: the lower end is the r-th value, r - 1 the largest count with P(X <= r - 1) <=
    # tail; the upper end the value at the count whose upper tail P(X > k) is at most tail
    lo_index = int(np.searchsorted(cdf, tail, side="right")) - 1
    hi_index = int(np.searchsorted(cdf, 1.0 - tail, side="left"))
    ordered = np.sort(np.asarray(values, dtype=float))
    lo = float(ordered[lo_index]) if 0 <= lo_index < n else NAN
    hi = float(ordered[hi_index]) if hi_index < n else NAN
    return lo, hi


def latency_percentiles(
    requests: Sequence[Any], spans: Sequence[tuple[float, float]], load_mode: str
) -> dict[str, float]:
    """``ttft_p50_ms``, ``ttft_p95_ms``, ``itl_p50_ms``, ``itl_p95_ms`` of the metric's requests,
    and the upper ends of the p95s' 95% confidence intervals (:func:`p95_upper_ms`).

    Percentiles interpolate linearly between order statistics (numpy's default); NaN when a
    figure has no sample (a prefill-heavy answer of one token has no inter-token gap).
    """
    kind = metric_kind(load_mode)

    def inside(t: float) -> bool:
        return any(t0 <= t <= t1 for t0, t1 in spans)

    ttft: list[float] = []
    itl: list[float] = []
    for r in requests:
        if r.prompt_kind != kind or not r.ok:
            continue
        first = r.t_first_token_s
        times = getattr(r, "token_times_s", None) or (first,)
        # the request served the window: its first token is what its client waited for
        if math.isfinite(first) and first >= r.t_start_s and any(inside(t) for t in times):
            ttft.append((first - r.t_start_s) * 1000.0)
        per_chunk = chunk_tokens(r)
        itl.extend((b - a) * 1000.0 / per_chunk for a, b in itertools.pairwise(times) if inside(b))
    return {
        "ttft_p50_ms": _percentile(ttft, 50),
        "ttft_p95_ms": _percentile(ttft, 95),
        "itl_p50_ms": _percentile(itl, 50),
        "itl_p95_ms": _percentile(itl, 95),
        "ttft_p95_hi_ms": p95_upper_ms(ttft),
        "itl_p95_hi_ms": p95_upper_ms(itl),
    }
