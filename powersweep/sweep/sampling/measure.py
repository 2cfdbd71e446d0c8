"""From raw samples and requests to one cap's row of ``caps.csv``.

Pure functions, so every figure the tool reports can be unit-tested from known inputs.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from powersweep.analysis.noise import parse_blocks
from powersweep.analysis.precision import (
    Precision,
    RunToRun,
    ThermalModel,
    drift_sensitivity_per_c,
    point_precision,
    sensor_step,
)
from powersweep.runformat import SERVE_KIND
from powersweep.sweep.gpu import GpuSample
from powersweep.sweep.sampling.per_token import (
    decode_spans,
    energy_counter_j,
    energy_per_request,
    energy_per_token,
    energy_sampled_j,
    latency_percentiles,
    metric_seconds,
    metric_spans,
    prefill_spans,
    sensors_gap_rel,
    span_power_w,
)
from powersweep.sweep.sampling.sampler import SampleRow
from powersweep.sweep.sampling.serving_figures import (
    served_rps,
    serving_blocks,
    serving_columns,
    serving_tps,
)
from powersweep.sweep.sampling.stream_rate import decode_span_s, decode_stall_share, decode_tps
from powersweep.sweep.sampling.thermal import slope_c_per_min, still_to_come_c_per_min

NAN = math.nan
LOAD_UTIL_PCT = 50.0
LOAD_PHASES = frozenset({"narr", "code", "prefill", "concurrent", SERVE_KIND})


class RequestTiming(Protocol):
    """What the aggregation needs of one request (the client's ``RequestResult`` has it)."""

    @property
    def prompt_kind(self) -> str:
        """``narr``, ``code``, ``prefill``..."""
        ...

    @property
    def ok(self) -> bool:
        """Whether the request completed."""
        ...

    @property
    def completion_tokens(self) -> int | None:
        """Generated tokens (None if unknown)."""
        ...

    @property
    def prompt_tokens(self) -> int | None:
        """Prompt tokens (None if unknown)."""
        ...

    @property
    def t_start_s(self) -> float:
        """Sent, run seconds."""
        ...

    @property
    def t_first_token_s(self) -> float:
        """First token-bearing chunk, run seconds."""
        ...

    @property
    def t_last_token_s(self) -> float:
        """Last token-bearing chunk, run seconds."""
        ...


def prefill_tps(requests: Iterable[RequestTiming]) -> float:
    """Prompt tokens per second to first token, weighted over completed prefill requests."""
    tokens = 0.0
    seconds = 0.0
    for r in requests:
        if not r.ok or r.prompt_kind != "prefill" or not r.prompt_tokens:
            continue
        ttft = r.t_first_token_s - r.t_start_s
        if not ttft > 0:
            continue
        tokens += r.prompt_tokens
        seconds += ttft
    return tokens / seconds if seconds > 0 else NAN


@dataclass(frozen=True)
class Tick:
    """All GPUs' readings of one sampler tick, combined."""

    t_s: float
    phase: str
    power_w: float
    energy_mj: tuple[float, ...]
    temp_max_c: float
    util_pct: float
    first: SampleRow
    throttle_power: bool
    throttle_thermal: bool
    samples: tuple[GpuSample, ...] = ()


def group_ticks(rows: Sequence[SampleRow], busy_gpus: Collection[int] | None = None) -> list[Tick]:
    """Combine rows of the same tick: draw summed (each card's :attr:`~GpuSample.draw_w`, the
    instant reading where the driver has one), temperature and utilization max, flags OR'd.

    ``busy_gpus`` are the GPUs serving the model: the tick's utilization is theirs (the busiest
    of them), so a card in the set that does other work does not make an idle tick look loaded.

    A tick whose draw failed on any GPU has NaN combined draw (a partial sum would undercount).
    """
    by_tick: dict[int, list[SampleRow]] = defaultdict(list)
    for r in rows:
        by_tick[r.tick].append(r)
    ticks: list[Tick] = []
    for tick in sorted(by_tick):
        group = sorted(by_tick[tick], key=lambda r: r.sample.gpu_index)
        samples = [r.sample for r in group]
        temps = [s.temp_c for s in samples if math.isfinite(s.temp_c)]
        serving = [s for s in samples if busy_gpus is None or s.gpu_index in busy_gpus]
        utils = [s.util_pct for s in serving or samples if math.isfinite(s.util_pct)]
        ticks.append(
            Tick(
                t_s=group[0].t_s,
                phase=group[0].phase,
                power_w=math.fsum(s.draw_w for s in samples),
                energy_mj=tuple(s.energy_mj for s in samples),
                temp_max_c=max(temps) if temps else NAN,
                # the busiest card: an idle card beside a loaded one must not hide the load
                util_pct=max(utils) if utils else NAN,
                first=group[0],
                throttle_power=any(s.throttle_power for s in samples),
                throttle_thermal=any(s.throttle_thermal for s in samples),
                samples=tuple(samples),
            )
        )
    return ticks


def load_ticks(
    rows: Sequence[SampleRow],
    windows: Sequence[tuple[float, float]] | None = None,
    busy_gpus: Collection[int] | None = None,
) -> list[Tick]:
    """Ticks taken while the measured load ran: a load phase and utilization above 50%.

    With ``windows``, only ticks inside one of them (inclusive): the spans a load counted its
    TPS in, so draw and TPS describe the same seconds.
    """
    return loaded(group_ticks(rows, busy_gpus), windows)


def loaded(
    ticks: Sequence[Tick],
    windows: Sequence[tuple[float, float]] | None,
    *,
    busy_only: bool = True,
) -> list[Tick]:
    """The grouped ``ticks`` taken while the measured load ran (as :func:`load_ticks`).

    ``busy_only`` False (the serving load) keeps the window's ticks whatever the utilization:
    a card idle between two arrivals is part of what a request costs.
    """
    return [
        t
        for t in ticks
        if t.phase in LOAD_PHASES
        and (not busy_only or (math.isfinite(t.util_pct) and t.util_pct > LOAD_UTIL_PCT))
        and (windows is None or any(t0 <= t.t_s <= t1 for t0, t1 in windows))
    ]


def relabel_outside(
    rows: Sequence[SampleRow], windows: Sequence[tuple[float, float]], phase: str = "ramp"
) -> list[SampleRow]:
    """Load-phase rows outside every window get ``phase`` (``ramp``: streams still starting),
    so samples.csv says which ticks the cap's figures used."""
    if not windows:
        return list(rows)
    return [
        dataclasses.replace(r, phase=phase)
        if r.phase in LOAD_PHASES and not any(t0 <= r.t_s <= t1 for t0, t1 in windows)
        else r
        for r in rows
    ]


# The fewest ticks a draw is taken over inside the decode spans; with fewer, every loaded tick.
MIN_DRAW_TICKS = 4


def _decoding(ticks: Sequence[Tick], requests: Sequence[RequestTiming]) -> list[Tick]:
    """The loaded ticks inside a request's decode (its first token to its last): a tick in a
    prompt's prefill or between two requests reads a card that waits, which the decode rates
    do not count; every loaded tick where fewer than :data:`MIN_DRAW_TICKS` fall inside."""
    spans = decode_spans(requests)
    inside = [t for t in ticks if any(t0 <= t.t_s <= t1 for t0, t1 in spans)]
    return inside if len(inside) >= MIN_DRAW_TICKS else list(ticks)


def _median(values: Iterable[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else NAN


def _mean(values: Iterable[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.fmean(finite) if finite else NAN


# A cap binds when the card draws at least this share of it (its leakage then comes out of the
# clock, not on top of the draw).
BINDING_SHARE = 0.98
# Two points' draws this close cannot tell the curve's slope.
MIN_SLOPE_DRAW_W = 2.0
# The trailing run seconds a point's temperature drift is fitted over: forty whole-degree readings
# resolve about 1 C/min, where a 3 s window's six cannot tell 10 C/min from noise; a sweep's
# drift changes over the card's time constant (tens of seconds), so a neighbour's end still
# shows it.
DRIFT_TRAIL_S = 20.0


def cap_row(
    *,
    cap_w: float,
    load_mode: str,
    rows: Sequence[SampleRow],
    requests: Sequence[RequestTiming],
    n_gpus: int,
    settle_s: float,
    window_s: float,
    status: str = "ok",
    error: str = "",
    tps: Mapping[str, float] | None = None,
    windows: Sequence[tuple[float, float]] | None = None,
    busy_gpus: Collection[int] | None = None,
    extra: Mapping[str, Any] | None = None,
    phase_windows: Sequence[tuple[str, float, float]] | None = None,
    thermal: ThermalModel | None = None,
    earlier: Sequence[tuple[float, float]] = (),
    neighbour: tuple[float, float] | None = None,
    power_step_w: float = NAN,
    run_to_run: RunToRun | None = None,
) -> dict[str, Any]:
    """The ``caps.csv`` row of one cap (columns as in docs/run-format.md).

    ``tps`` carries the figures a load computed itself (decode-concurrent counts arrivals in a
    window); without it they come from the requests. ``windows`` restricts the draw (and every
    other sample figure) to the spans that TPS was counted in; ``busy_gpus`` are the GPUs whose
    utilization marks a tick as loaded (the serving ones). ``extra`` adds mode-specific columns
    (and may replace ``tps_blocks``, the resampling units of the metric's TPS).
    ``phase_windows`` are the load's ``(prompt kind, t0, t1)`` windows: energy per token and the
    latency percentiles are of the metric prompt's windows (NaN without them).
    ``thermal`` is the card's thermal model fitted so far (None: not yet), which prices the
    temperature's drift into the point's stated precision; ``earlier`` are the ``(run s, °C)``
    readings before ``rows`` (the last points'), which the drift's trailing fit may reach;
    ``neighbour`` is the ``(TPS, combined W)`` of the nearest other point measured, whose slope
    prices a degree of drift; ``power_step_w`` the power sensor's step seen so far in the run
    (each card's, NaN: none), which a point whose own readings never change still states;
    ``run_to_run`` the run-to-run term carried (None: the floor alone).
    """
    every = group_ticks(rows, busy_gpus)
    serving = load_mode == "serving"
    ticks = loaded(every, windows, busy_only=not serving)
    draw_ticks = _decoding(ticks, requests) if windows is None else ticks
    # the mean, as energy over time: under a bursty load the median of instant readings sits
    # at the bursts' draw, some 10% above what the card draws on average (issue 44)
    power = _mean(t.power_w for t in draw_ticks)
    ttft_spans = prefill_spans(requests) if load_mode == "prefill-heavy" else []
    # prefill-heavy: the draw of the seconds prefill_tps counts (each prompt's time to first
    # token), not of the short answers and gaps between them
    spanned = span_power_w(ticks, ttft_spans) if ttft_spans else NAN
    if math.isfinite(spanned):
        power, power_by_gpu = spanned, _per_gpu_span_power(ticks, ttft_spans)
    else:
        power_by_gpu = _per_gpu(draw_ticks, "draw_w", _mean)
    if tps is not None:
        narr = tps.get("narr_tps", NAN)
        code = tps.get("code_tps", NAN)
        pre = tps.get("prefill_tps", NAN)
    elif load_mode == "prefill-heavy":
        narr = code = NAN
        pre = prefill_tps(requests)
    elif serving:
        # the serving load's metric: the output tokens per second its arrivals streamed
        narr, code, pre = serving_tps(requests, phase_windows), NAN, NAN
    else:
        narr = decode_tps(requests, "narr")
        code = decode_tps(requests, "code")
        pre = NAN
    metric = pre if load_mode == "prefill-heavy" else narr
    n_ok = sum(1 for r in requests if r.ok)
    if status == "ok" and not math.isfinite(metric):
        status = "failed"
        error = error or _first_error(requests) or _no_figure(requests, n_ok)
    if serving:
        blocks = serving_blocks(requests, phase_windows, TPS_BLOCKS)
    elif load_mode == "prefill-heavy":
        blocks = prefill_blocks(requests)
    else:
        blocks = decode_blocks(requests, "narr")
    spans = metric_spans(phase_windows, load_mode)
    # a load that counts its own units (decode-concurrent's window slices) gives them in extra
    units = parse_blocks(str(extra["tps_blocks"])) if extra and "tps_blocks" in extra else blocks

    tau = thermal.tau_s if thermal is not None else NAN
    # how fast the temperature still moved as the figures were taken: the slope over the
    # trailing DRIFT_TRAIL_S of every reading up to the end of the windows (the settle before
    # them and the last point's end included); a short window's few whole-degree readings alone
    # cannot tell 3 C/min from noise
    end_s = max((t.t_s for t in ticks), default=NAN)
    # when the figures were taken: the run's drift (its re-read points) is priced from there
    mid_s = statistics.fmean(t.t_s for t in ticks) if ticks else NAN
    mine = [(t.t_s, t.temp_max_c) for t in every]
    first_s = min((t for t, _ in mine), default=NAN)
    readings = [*((t, c) for t, c in earlier if t < first_s), *mine]
    trail = [(t, c) for t, c in readings if end_s - DRIFT_TRAIL_S <= t <= end_s]
    trail = trail or [(t.t_s, t.temp_max_c) for t in ticks]
    # the card settles at the level its mean draw (gaps included) holds it at
    mean_draw = _mean(t.power_w for t in every)
    seconds = metric_seconds(requests, phase_windows, load_mode)
    drift = still_to_come_c_per_min(slope_c_per_min(trail), thermal, trail, mean_draw, end_s)
    binding = power >= BINDING_SHARE * cap_w * n_gpus
    sensitivity = drift_sensitivity_per_c(
        curve_slope(metric, power, neighbour), power, binding, n_gpus
    )
    precision = point_precision(
        units,
        [t.power_w for t in draw_ticks],
        drift,
        tau,
        sensitivity,
        # under a binding cap a degree's leakage comes out of the clock: TPS moves as TPS/W
        # does; under a cap that does not bind the clock holds
        tps_sensitivity_per_c=sensitivity if binding else 0.0,
        # the card draws its leakage until the cap holds it: a card at its cap that cools
        # keeps drawing the cap (its clock rises), one that heats draws more up to the cap
        power_sensitivity_per_c=0.0
        if binding and not drift > 0
        else drift_sensitivity_per_c(NAN, power, False, n_gpus),
        power_headroom_rel=max(0.0, cap_w * n_gpus - power) / power if power > 0 else NAN,
        power_step_w=_finest(power_step_w, card_step_w(every)),
        n_cards=n_gpus,
        run_to_run=run_to_run,
        t_s=mid_s,
        power_sensors_rel=sensors_gap_rel(every, seconds),
    )
    firsts = [t.first.sample for t in ticks]
    pstates = Counter(s.pstate for s in firsts if s.pstate is not None)
    n = len(ticks)
    return {
        "cap_w": cap_w,
        "narr_tps": narr,
        "code_tps": code,
        "prefill_tps": pre,
        "power_w": power,
        "energy_j": energy_counter_j(ticks),
        "energy_sampled_j": energy_sampled_j(ticks),
        "tps_per_w": metric / power if math.isfinite(metric) and power > 0 else NAN,
        "temp_max_c": max((t.temp_max_c for t in ticks), default=NAN),
        # how fast the hottest card's temperature still moved while the figures were taken
        "temp_drift_c_per_min": drift,
        "sm_clock_mhz": _median(s.sm_clock_mhz for s in firsts),
        "mem_clock_mhz": _median(s.mem_clock_mhz for s in firsts),
        "util_pct": _median(t.util_pct for t in ticks),
        # every card's own medians (the columns above are the first card's)
        "sm_clock_mhz_by_gpu": _per_gpu(ticks, "sm_clock_mhz"),
        "mem_clock_mhz_by_gpu": _per_gpu(ticks, "mem_clock_mhz"),
        "power_w_by_gpu": power_by_gpu,
        "pwr_throttle_pct": 100.0 * sum(t.throttle_power for t in ticks) / n if n else NAN,
        "thermal_throttle_pct": 100.0 * sum(t.throttle_thermal for t in ticks) / n if n else NAN,
        "pstate": pstates.most_common(1)[0][0] if pstates else None,
        "n_samples": n,
        "n_requests": n_ok,
        "n_gpus": n_gpus,
        "settle_s": settle_s,
        "window_s": window_s,
        "t_mid_s": mid_s,
        "status": status,
        "error": error,
        "tps_blocks": format_blocks(blocks),
        **precision_columns(precision, thermal),
        # the counter's energy over the seconds the metric counts, per token served in them
        **energy_per_token(every, seconds, metric, precision),
        **latency_percentiles(requests, spans, load_mode),
        **stall_columns(requests, load_mode),
        **(_serving(every, seconds, requests, phase_windows, precision, extra) if serving else {}),
        **(extra or {}),
    }


def _serving(
    ticks: Sequence[Tick],
    seconds: Sequence[tuple[float, float]],
    requests: Sequence[RequestTiming],
    phase_windows: Sequence[tuple[str, float, float]] | None,
    precision: Precision,
    extra: Mapping[str, Any] | None,
) -> dict[str, float]:
    """A serving point's columns (its targets and bound come in ``extra``, from the load)."""
    given = dict(extra or {})

    def target(key: str) -> float | None:
        value = given.pop(key, None)
        return float(value) if value is not None and math.isfinite(float(value)) else None

    columns = serving_columns(
        requests,
        phase_windows,
        request_rate_rps=float(given.get("request_rate_rps", NAN)),
        max_in_flight=int(given.get("max_in_flight", 0)),
        max_ttft_ms=target("max_ttft_ms"),
        max_itl_ms=target("max_itl_ms"),
    )
    return {**columns, **energy_per_request(ticks, seconds, served_rps(columns), precision)}


def stall_columns(requests: Sequence[RequestTiming], load_mode: str) -> dict[str, float]:
    """decode-single's stall shares of each prompt kind, % (its rates are taken on the requests'
    decode spans, which a stall between two windows never enters; the run states them at its
    own share, ``stall_run_pct``, at its end). NaN in the modes whose figures count a window's
    whole time (decode-concurrent) or each prompt's time to first token (prefill-heavy)."""
    decode = load_mode == "decode-single"
    return {
        f"{kind}_stall_pct": 100.0 * decode_stall_share(requests, kind) if decode else NAN
        for kind in ("narr", "code")
    }


def curve_slope(tps: float, power_w: float, neighbour: tuple[float, float] | None) -> float:
    """d ln(TPS) / dP between a point and its nearest measured neighbour (NaN: unknown, or
    draws too close to tell)."""
    if neighbour is None:
        return NAN
    n_tps, n_power = neighbour
    values = (tps, power_w, n_tps, n_power)
    if not all(math.isfinite(v) for v in values) or min(tps, n_tps) <= 0:
        return NAN
    if abs(power_w - n_power) < MIN_SLOPE_DRAW_W:
        return NAN
    return (math.log(tps) - math.log(n_tps)) / (power_w - n_power)


def precision_columns(precision: Precision, thermal: ThermalModel | None) -> dict[str, float]:
    """The caps.csv columns of a point's precision (95% half-widths in percent) and the card's
    thermal time constant."""
    return {
        **stated_columns(precision),
        "thermal_tau_s": thermal.tau_s if thermal is not None else NAN,
    }


def stated_columns(precision: Precision) -> dict[str, float]:
    """The caps.csv columns of a point's precision: 95% half-widths and biases in percent, their
    degrees of freedom, the sensor's step and the run-to-run term carried."""
    rtr = precision.run_to_run or RunToRun()
    return {
        "tps_u95_pct": 100.0 * precision.tps_u95_rel,
        "power_u95_pct": 100.0 * precision.power_u95_rel,
        "tps_per_w_u95_pct": 100.0 * precision.u95_rel,
        "tps_per_w_stat_u95_pct": 100.0 * precision.stat_u95_rel,
        "drift_bias_pct": 100.0 * precision.drift_bias_rel,
        "tps_per_w_dof": precision.dof,
        "tps_per_w_within_u95_pct": 100.0 * precision.within_u95_rel,
        "tps_per_w_within_dof": precision.within_dof,
        "tps_within_u95_pct": 100.0 * precision.tps_within_u95_rel,
        "tps_within_dof": precision.tps_within_dof,
        "tps_fast_u95_pct": 100.0 * precision.tps_fast_u95_rel,
        "tps_fast_dof": precision.tps_fast_dof,
        "tps_drift_bias_pct": 100.0 * precision.tps_bias_rel,
        "power_drift_bias_pct": 100.0 * precision.power_bias_rel,
        "power_sensors_pct": 100.0 * precision.power_sensors_rel,
        "run_drift_bias_pct": 100.0 * precision.run_drift_rel,
        "tps_run_drift_bias_pct": 100.0 * precision.tps_run_drift_rel,
        "power_step_w": precision.power_step_w,
        "run_to_run_tps_sd_pct": 100.0 * rtr.tps_sd_rel,
        "run_to_run_sd_pct": 100.0 * rtr.tps_per_w_sd_rel,
        "run_to_run_dof": rtr.dof,
        "run_to_run_pairs": rtr.pairs,
        "run_to_run_floor_pct": 100.0 * rtr.floor_rel,
    }


def card_step_w(ticks: Sequence[Tick]) -> float:
    """The finest step any card's power sensor showed over ``ticks`` (NaN: none seen)."""
    by_gpu: dict[int, list[float]] = defaultdict(list)
    for t in ticks:
        for sample in t.samples:
            by_gpu[sample.gpu_index].append(sample.draw_w)
    return _finest(*(sensor_step(v) for v in by_gpu.values()))


def _finest(*steps: float) -> float:
    finite = [s for s in steps if math.isfinite(s) and s > 0]
    return min(finite) if finite else NAN


def _per_gpu(
    ticks: Sequence[Tick], field: str, average: Callable[[Iterable[float]], float] = _median
) -> str:
    """``index:value;index:value`` of one reading's ``average`` over the ticks, per GPU (the
    median unless told; empty: none)."""
    values: dict[int, list[float]] = defaultdict(list)
    for t in ticks:
        for sample in t.samples:
            values[sample.gpu_index].append(getattr(sample, field))
    return _format_per_gpu({index: average(v) for index, v in values.items()})


@dataclass(frozen=True)
class _GpuTick:
    """One GPU's reading of a tick, in the shape the span figures read."""

    t_s: float
    power_w: float
    energy_mj: tuple[float, ...]


def _per_gpu_span_power(ticks: Sequence[Tick], spans: Sequence[tuple[float, float]]) -> str:
    """``index:W;index:W`` of each GPU's own :func:`span_power_w` (as :func:`_per_gpu`)."""
    by_gpu: dict[int, list[_GpuTick]] = defaultdict(list)
    for t in ticks:
        for sample in t.samples:
            by_gpu[sample.gpu_index].append(_GpuTick(t.t_s, sample.draw_w, (sample.energy_mj,)))
    return _format_per_gpu({index: span_power_w(v, spans) for index, v in by_gpu.items()})


def _format_per_gpu(values: Mapping[int, float]) -> str:
    """``index:value`` pairs by GPU index, ``;``-separated (a NaN value leaves it empty)."""
    return ";".join(
        f"{index}:{round(v, 3):g}" if math.isfinite(v) else f"{index}:"
        for index, v in sorted(values.items())
    )


def _no_figure(requests: Sequence[Any], n_ok: int) -> str:
    """Why a cap has no figure although no request reported an error: a server slower than the
    windows are long (its requests cut at their end before two tokens, issue 46) says so."""
    if not requests:
        return "no request was sent"
    cut = [r for r in requests if getattr(r, "finish_reason", None) == "deadline"]
    if cut:
        tokens = max(int(getattr(r, "completion_tokens", 0) or 0) for r in cut)
        spans = [r.t_end_s - r.t_start_s for r in cut if r.t_end_s > r.t_start_s]
        longest = f" of up to {max(spans):.1f} s" if spans else ""
        return (
            f"{len(cut)} request(s) were cut at their window's end{longest} with {tokens} "
            "token(s) at most: the server streams slower than a window can rate (a rate needs "
            "2 or more tokens); give longer windows (--min-cap-seconds, --target-cap-seconds)"
        )
    if n_ok:
        return (
            f"{n_ok} request(s) completed but none gave a rate (a rate needs 2 or more tokens "
            "with arrival times)"
        )
    return "no request completed"


def _first_error(requests: Sequence[Any]) -> str:
    for r in requests:
        err = getattr(r, "error", "")
        if err:
            return str(err)
    return ""


# How many blocks each request (decode) or window (concurrent) is cut into for tps_blocks: enough
# for a bootstrap to see the spread inside one request, few enough to keep caps.csv compact.
TPS_BLOCKS = 10


def decode_blocks(
    requests: Iterable[Any], kind: str, n_blocks: int = TPS_BLOCKS
) -> list[tuple[float, float]]:
    """``(tokens, seconds)`` blocks of consecutive inter-token intervals of each request.

    Each completed request of ``kind`` with chunk arrival times is cut into up to ``n_blocks``
    runs of consecutive intervals; a block's tokens are its intervals scaled so that the request's
    blocks sum to ``completion_tokens - 1``, and its seconds scaled so that they sum to the
    request's decode span (:func:`~.stream_rate.decode_tps`'s, on the stream's rhythm). Summed
    over all blocks, the blocks give exactly :func:`~.stream_rate.decode_tps`; resampled, they
    show how much the rate moved within the measured requests.
    """
    out: list[tuple[float, float]] = []
    for r in requests:
        times = getattr(r, "token_times_s", None)
        if not r.ok or r.prompt_kind != kind or r.completion_tokens is None or not times:
            continue
        span = r.t_last_token_s - r.t_first_token_s
        if r.completion_tokens < 2 or not span > 0 or len(times) < 3:
            continue
        per_interval = (r.completion_tokens - 1) / (len(times) - 1)
        stretch = decode_span_s(r) / (times[-1] - times[0]) if times[-1] > times[0] else 1.0
        edges = _split_edges(len(times) - 1, n_blocks)
        for a, b in itertools.pairwise(edges):
            seconds = (times[b] - times[a]) * stretch
            if seconds > 0:
                out.append(((b - a) * per_interval, seconds))
    return out


def prefill_blocks(requests: Iterable[RequestTiming]) -> list[tuple[float, float]]:
    """``(prompt tokens, seconds to first token)`` of each completed prefill request."""
    out: list[tuple[float, float]] = []
    for r in requests:
        if not r.ok or r.prompt_kind != "prefill" or not r.prompt_tokens:
            continue
        ttft = r.t_first_token_s - r.t_start_s
        if ttft > 0:
            out.append((float(r.prompt_tokens), ttft))
    return out


def format_blocks(blocks: Sequence[tuple[float, float]]) -> str:
    """``tokens:seconds`` pairs separated by spaces (the ``tps_blocks`` column); empty if none."""
    return " ".join(f"{t:.6g}:{s:.6g}" for t, s in blocks)


def _split_edges(n_items: int, n_blocks: int) -> list[int]:
    """Edges that cut ``n_items`` consecutive items into ``min(n_blocks, n_items)`` near-equal
    runs."""
    k = max(1, min(n_blocks, n_items))
    return [round(i * n_items / k) for i in range(k + 1)]
