"""Noise of the sweet spot: which caps are statistically tied with the best one.

The sweet spot itself is always the measured cap with the highest TPS/W; this module only says how
sure that pick is.

The reasoning: docs/precision.md, "powersweep.analysis.noise".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from powersweep.analysis.cap_points import CapPoint
from powersweep.analysis.curve_noise import FLOOR_SIGMA_REL, CurveNoise, Line, estimate
from powersweep.analysis.load import Curve
from powersweep.analysis.near_peak import near_peak_index
from powersweep.analysis.precision import Reading
from powersweep.analysis.result_types import Bootstrap, NoiseEstimate, Pick, known
from powersweep.analysis.run_record import RunRecord
from powersweep.runformat import as_float

# A cap is statistically tied with the best when it is best in at least this share of resamples.
TIED_SHARE = 0.05
# ... or when it is at least as good as the best in this share of resamples.
PAIR_TIE_SHARE = 0.025
# Two-sided 95% bound used for the curve-scatter estimate.
Z95 = 1.96
# Phases of samples.csv that are not the measured load ("idle": the cards left idle at the
# answer's lock after the search, run.json's idle).
IDLE_PHASES = ("warmup", "settle", "ramp", "idle")

RESAMPLED = "resampled"
OWN = "own measurements"
TYPICAL = "typical repeatability (noise unknown)"
CURVE = "the curve's scatter"


@dataclass(frozen=True)
class Ties:
    """The points noise could make a pick, and how that was found: ``noise_source`` is
    ``own measurements``, ``resampled``, ``the curve's scatter`` or ``typical repeatability
    (noise unknown)``; the sweet spot's also says how (``bootstrap``, ``estimate``, each
    cap's own ``tps_per_w_u95_pct``), None where not that way."""

    tied_caps: list[float]
    noise_source: str
    bootstrap: Bootstrap | None = None
    estimate: NoiseEstimate | None = None
    tps_per_w_u95_pct: dict[str, float | None] | None = None

    @property
    def interval_w(self) -> list[float]:
        """The lowest and the highest tied cap."""
        return [min(self.tied_caps), max(self.tied_caps)]


def sweet_spot_noise(
    points: Sequence[CapPoint],
    best_cap_w: float,
    draws: Draws | None,
    own: Mapping[float, Reading] | None = None,
    curve: CurveNoise | None = None,
) -> Ties:
    """The caps tied with the sweet spot ``best_cap_w``, and how they were found.

    Args:
        points: Measured caps, sorted by cap (repeats of a cap already pooled).
        best_cap_w: The sweet spot (the highest TPS/W of ``points``).
        draws: The caps resampled within what was measured (:func:`resample`): runs written
            before each point stated its own precision.
        own: Each cap's own reading (:func:`own_readings`), which decides when the best and
            another cap have one.
        curve: The curve's own scatter (:func:`curve_noise`), for a bare curve (None: the
            typical repeatability alone).

    Returns:
        The ties, with the resampling (``bootstrap``), the curve's noise (``estimate``) or each
        cap's own half-width (``tps_per_w_u95_pct``) they came from.
    """
    if own and best_cap_w in own and len(own) >= 2:
        return _own_ties(points, best_cap_w, own)
    if draws is not None:
        return _bootstrap(points, best_cap_w, draws)
    return _curve_ties(points, best_cap_w, curve or estimate([]))


def own_readings(
    caps: pl.DataFrame, keys: Sequence[str], points: Sequence[tuple[Key, float]]
) -> dict[Key, Reading]:
    """Each measured point's own reading from caps.csv's precision columns, its repeats pooled
    around its pooled TPS/W (``points``: ``(key, tps_per_w)``); empty for runs written without
    them."""
    if "tps_per_w_stat_u95_pct" not in caps.columns or not set(keys) <= set(caps.columns):
        return {}
    ok = caps.filter(pl.col("status") == "ok") if "status" in caps.columns else caps
    by_key: dict[Key, list[Reading]] = {}
    for row in ok.iter_rows(named=True):
        by_key.setdefault(point_key([row[k] for k in keys]), []).append(Reading.of(row))
    out: dict[Key, Reading] = {}
    for key, tpw in points:
        pooled = Reading.pooled(by_key.get(key, []), tpw)
        if pooled.known:
            out[key] = pooled
    return out


def _own_ties(points: Sequence[CapPoint], best_cap_w: float, own: Mapping[float, Reading]) -> Ties:
    best = own[best_cap_w]
    tied = [
        p.cap_w
        for p in points
        if p.cap_w == best_cap_w or (p.cap_w in own and own[p.cap_w].tied_with(best))
    ]
    u95 = {str(cap): as_float(100.0 * r.u95_rel, None) for cap, r in own.items()}
    return Ties(tied, OWN, tps_per_w_u95_pct=u95)


def _curve_ties(points: Sequence[CapPoint], best_cap_w: float, curve: CurveNoise) -> Ties:
    """A bare curve's ties: two readings within the curve's own reading noise of each other."""
    best = next(p for p in points if p.cap_w == best_cap_w)
    best_tpw = best.tps / best.power_w
    tied = [
        p.cap_w for p in points if p.cap_w == best_cap_w or curve.tied(p.tps / p.power_w, best_tpw)
    ]
    return Ties(tied, TYPICAL if curve.from_floor else CURVE, estimate=curve_estimate(curve))


def curve_estimate(curve: CurveNoise) -> NoiseEstimate:
    """What analysis.json says of a bare curve's noise: one reading's 95% half-width and the
    scatter it came from."""
    return NoiseEstimate(
        reading_u95_pct=as_float(100.0 * curve.u95_rel(), None),
        tps_scatter_pct=_pct(curve.measured_tps_rel),
        power_scatter_pct=_pct(curve.measured_power_rel),
        dof=as_float(curve.dof, None),
    )


def _pct(value: float) -> float | None:
    return 100.0 * value if math.isfinite(value) else None


def curve_noise(
    caps: pl.DataFrame, metric: str, through: Mapping[str, float | None] | None = None
) -> CurveNoise:
    """The reading noise a curve's own scatter shows (:func:`~.curve_noise.estimate`) along
    each of its lines (its caps; a clock curve's locks), every reading that stands counted
    (repeats of a point too).

    ``through`` (a clock point's locks) keeps the lines through that point: a grid's tiers run
    in different regimes (a bandwidth-starved tier's readings at its lowest clocks are no sample
    of the noise at the peak), and the peak is compared with the readings of its own lines.
    """
    from powersweep.analysis.plausibility import curve_lines, standing_ok

    ok = standing_ok(caps).filter(pl.col(metric).is_finite() & (pl.col(metric) > 0))
    lines = []
    for axis, _, frame in curve_lines(ok):
        if through is not None and not _passes(frame, axis, through):
            continue
        by_x = frame.group_by(axis).agg(metric, "power_w").sort(axis)
        lines.append(
            Line(
                tuple(by_x[axis].to_list()),
                tuple(tuple(v) for v in by_x[metric].to_list()),
                tuple(tuple(v) for v in by_x["power_w"].to_list()),
            )
        )
    return estimate(lines)


def _passes(frame: pl.DataFrame, axis: str, point: Mapping[str, float | None]) -> bool:
    """The line (its rows) runs through the point: it shares every lock but its own axis'."""
    for column, value in point.items():
        if column == axis or column not in frame.columns:
            continue
        held = frame[column].drop_nulls().unique().to_list()
        if held != ([] if value is None or value != value else [value]):
            return False
    return True


Key = tuple[float | None, ...]
CAP_KEYS = ("cap_w",)


def point_key(values: Sequence[object]) -> Key:
    """A point's key from its column values: floats, missing (None or NaN) as None."""
    return tuple(as_float(v, None) for v in values)


def pooled_blocks(caps: pl.DataFrame, keys: Sequence[str] = CAP_KEYS) -> dict[Key, np.ndarray]:
    """Per point: ``(tokens, seconds)`` rows of every ok measurement's ``tps_blocks``, pooled."""
    if "tps_blocks" not in caps.columns or not set(keys) <= set(caps.columns):
        return {}
    out: dict[Key, list[tuple[float, float]]] = {}
    ok = caps.filter(pl.col("status") == "ok")
    for row in ok.iter_rows(named=True):
        text = row.get("tps_blocks")
        if not text or not isinstance(text, str):
            continue
        blocks = parse_blocks(text)
        if blocks:
            out.setdefault(point_key([row[k] for k in keys]), []).extend(blocks)
    return {key: np.asarray(b, dtype=float) for key, b in out.items()}


def parse_blocks(text: str) -> list[tuple[float, float]]:
    """``tokens:seconds`` pairs of a ``tps_blocks`` cell; malformed or non-positive ones dropped."""
    out: list[tuple[float, float]] = []
    for part in text.split():
        tok, _, sec = part.partition(":")
        try:
            t, s = float(tok), float(sec)
        except ValueError:
            continue
        if math.isfinite(t) and math.isfinite(s) and t >= 0 and s > 0:
            out.append((t, s))
    return out


@dataclass(frozen=True)
class Draws:
    """Resampled TPS and draw of every cap: ``(n_boot, n_caps)`` arrays.

    A cap without raw data for both figures keeps its point estimate in every resample.
    """

    tps: np.ndarray
    power_w: np.ndarray
    resampled: int
    tps_units: str
    seed: int


def resample(curve: Curve, points: Sequence[CapPoint], n_boot: int, seed: int) -> Draws | None:
    """Resample each cap's TPS units and load ticks within what was measured.

    TPS from the ``tps_blocks`` of ``caps.csv`` (or the per-request rates of ``requests.csv``),
    draw from the cap's load ticks in ``samples.csv``.

    Args:
        curve: The loaded curve.
        points: Measured caps, sorted by cap (repeats pooled).
        n_boot: Resamples.
        seed: Seed of the resampling.

    Returns:
        The resampled figures, or None without raw data for both figures at two caps or more.
    """
    return resample_points(
        curve, CAP_KEYS, [((p.cap_w,), p.tps, p.power_w) for p in points], n_boot, seed
    )


def resample_points(
    curve: Curve,
    keys: Sequence[str],
    points: Sequence[tuple[Key, float, float]],
    n_boot: int,
    seed: int,
) -> Draws | None:
    """Resample each point's TPS units and load ticks within what was measured.

    Args:
        curve: The loaded curve.
        keys: The columns that name a point in caps.csv, samples.csv and requests.csv (the
            cap; the locks of a clock point).
        points: ``(key, tps, power_w)`` of each measured point (repeats pooled).
        n_boot: Resamples.
        seed: Seed of the resampling.

    Returns:
        The resampled figures, or None without raw data for both figures at two points or more.
    """
    if n_boot <= 0 or curve.samples is None:
        return None
    blocks = pooled_blocks(curve.caps, keys)
    # A decode-concurrent cap's TPS is the aggregate of a window: one stream's rate is not a
    # unit of it, so runs without tps_blocks resample only its draw there.
    concurrent = curve.run is not None and curve.run.load_mode == "decode-concurrent"
    req_tps = (
        _request_tps(curve.requests, curve.metric, keys)
        if curve.requests is not None and not concurrent
        else {}
    )
    tick_power = _tick_power(curve.samples, _serving_gpus(curve.run), keys)
    rng = np.random.default_rng(seed)
    tps = np.empty((n_boot, len(points)))
    power_w = np.empty((n_boot, len(points)))
    resampled = 0
    for k, (key, p_tps, p_power) in enumerate(points):
        tps_rel = _tps_factor(rng, n_boot, blocks.get(key), req_tps.get(key))
        power = tick_power.get(key)
        power_rel = None
        if power is not None and len(power) >= 2 and np.median(power) > 0:
            pidx = rng.integers(0, len(power), size=(n_boot, len(power)))
            power_rel = np.median(power[pidx], axis=1) / np.median(power)
        if tps_rel is None or power_rel is None:
            tps[:, k], power_w[:, k] = p_tps, p_power
            continue
        resampled += 1
        # Relative resampled figures around the reported point (a point measured twice is
        # pooled in ``points``; its units here are pooled too).
        tps[:, k], power_w[:, k] = p_tps * tps_rel, p_power * power_rel
    if resampled < 2:
        return None
    return Draws(tps, power_w, resampled, "tps_blocks" if blocks else "requests", seed)


def tied_with_best(draws: Draws, best: int) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Which points the resamples tie with point ``best``: their indices, each point's share of
    resamples it wins, and its 95% interval of TPS/W (a ``(2, n)`` array)."""
    tpw = draws.tps / draws.power_w
    n_boot = len(tpw)
    winners = np.argmax(tpw, axis=1)
    share = np.bincount(winners, minlength=tpw.shape[1]) / n_boot
    ci = np.percentile(tpw, [2.5, 97.5], axis=0)
    # Tied: the point is at least as good as the best in a fair share of resamples (a one-sided
    # 2.5% test on the pair's difference, not overlapping intervals: one point's wide interval
    # must not tie it with a best it trails by far).
    as_good = (tpw >= tpw[:, [best]]).mean(axis=0)
    tied = [
        k
        for k in range(tpw.shape[1])
        if k == best or share[k] >= TIED_SHARE or as_good[k] >= PAIR_TIE_SHARE
    ]
    return tied, share, ci


def _bootstrap(points: Sequence[CapPoint], best_cap_w: float, resampled: Draws) -> Ties:
    """Count how often each cap wins the resamples, and which caps tie with the best."""
    best = next(k for k, p in enumerate(points) if p.cap_w == best_cap_w)
    tied_k, share, ci = tied_with_best(resampled, best)
    tied = [points[k].cap_w for k in tied_k]
    boot = Bootstrap(
        resamples=len(resampled.tps),
        seed=resampled.seed,
        caps_resampled=resampled.resampled,
        tps_units=resampled.tps_units,
        best_share={str(p.cap_w): float(share[k]) for k, p in enumerate(points)},
        tps_per_w_ci={
            str(p.cap_w): [float(ci[0, k]), float(ci[1, k])] for k, p in enumerate(points)
        },
    )
    return Ties(tied, RESAMPLED, bootstrap=boot)


def near_peak_noise(
    points: Sequence[CapPoint],
    groups: Sequence[tuple[int, int]],
    near_cap_w: float,
    max_loss_pct: float,
    draws: Draws | None,
    own: Mapping[float, Reading] | None = None,
    curve: CurveNoise | None = None,
) -> Ties:
    """The caps noise could make the near-peak cap.

    With each cap's own reading, the caps between the pick with the floor lowered by the TPS
    half-widths of the fastest cap and the pick (in quadrature) and the pick with it raised by
    as much; with raw data of an older run, every resample of the caps' TPS picks its own
    near-peak cap by the same rule (:func:`powersweep.analysis.near_peak.near_peak_index`) and
    the caps picked in at least ``TIED_SHARE`` of them are tied; a bare curve moves the floor by
    the typical repeatability of two readings.

    Args:
        points: Measured caps, sorted by cap (repeats pooled).
        groups: Index ranges of the plateaus and ceilings, judged together.
        near_cap_w: The near-peak cap the analysis reports.
        max_loss_pct: The TPS loss the near-peak cap may cost.
        draws: The caps resampled (:func:`resample`), or None.
        own: Each cap's own reading (:func:`own_readings`).
        curve: The curve's own scatter (:func:`curve_noise`), for a bare curve.

    Returns:
        The ties and how they were found.
    """
    fastest = max(points, key=lambda p: p.tps).cap_w
    if own and near_cap_w in own and fastest in own:
        # a tie of two points of one run: the between-run floor they share cancels
        us = [own[near_cap_w].tps_tie_u95_rel, own[fastest].tps_tie_u95_rel]
        if all(math.isfinite(u) for u in us):
            tied = _near_peak_moved(points, groups, near_cap_w, max_loss_pct, math.hypot(*us))
            return Ties(tied, OWN)
    if draws is not None:
        picks = [near_peak_index(list(row), groups, max_loss_pct) for row in draws.tps]
        share = np.bincount(picks, minlength=len(points)) / len(picks)
        tied = sorted(
            {p.cap_w for k, p in enumerate(points) if share[k] >= TIED_SHARE} | {near_cap_w}
        )
        return Ties(tied, RESAMPLED)
    curve = curve or estimate([])
    margin = math.sqrt(2.0) * curve.tps_u95_rel()
    tied = _near_peak_moved(points, groups, near_cap_w, max_loss_pct, margin)
    source = TYPICAL if not curve.measured_tps_rel > FLOOR_SIGMA_REL else CURVE
    return Ties(tied, source)


def _near_peak_moved(
    points: Sequence[CapPoint],
    groups: Sequence[tuple[int, int]],
    near_cap_w: float,
    max_loss_pct: float,
    margin: float,
) -> list[float]:
    """The caps between the near-peak pick with the floor lowered by ``margin`` (relative) and
    the pick with it raised by as much."""
    keep = 1.0 - max_loss_pct / 100.0
    tps = [p.tps for p in points]
    could = near_peak_index(tps, groups, 100.0 * (1.0 - keep * (1.0 - margin)))
    surely = near_peak_index(tps, groups, max(0.0, 100.0 * (1.0 - keep * (1.0 + margin))))
    lo = min(points[could].cap_w, near_cap_w)
    hi = max(points[surely].cap_w, near_cap_w)
    return [p.cap_w for p in points if lo <= p.cap_w <= hi]


def _tps_factor(
    rng: np.random.Generator,
    n_boot: int,
    blocks: np.ndarray | None,
    requests: tuple[np.ndarray, np.ndarray] | None,
) -> np.ndarray | None:
    """Resampled TPS over the cap's own TPS (1.0 centred), or None without two units."""
    if blocks is not None and len(blocks) >= 2:
        tok, sec = blocks[:, 0], blocks[:, 1]
        idx = rng.integers(0, len(tok), size=(n_boot, len(tok)))
        full = tok.sum() / sec.sum()
        return (tok[idx].sum(axis=1) / sec[idx].sum(axis=1)) / full if full > 0 else None
    if requests is not None and len(requests[0]) >= 2:
        rates, tokens = requests
        idx = rng.integers(0, len(rates), size=(n_boot, len(rates)))
        tok = tokens[idx]
        full = tokens.sum() / (tokens / rates).sum()
        # Token-weighted like caps.csv: total tokens over total decode time.
        return (tok.sum(axis=1) / (tok / rates[idx]).sum(axis=1)) / full
    return None


def _request_tps(
    requests: pl.DataFrame, metric: str, keys: Sequence[str] = CAP_KEYS
) -> dict[Key, tuple[np.ndarray, np.ndarray]]:
    """Per point: (per-request TPS, weights in tokens) of the requests that make the metric."""
    need = {*keys, "prompt_kind"}
    if not need <= set(requests.columns):
        return {}
    df = requests
    if "ok" in df.columns:
        df = df.filter(pl.col("ok").cast(pl.String).str.to_lowercase().is_in(["true", "1"]))
    if metric == "narr_tps":
        if "decode_tps" not in df.columns:
            return {}
        df = df.filter(pl.col("prompt_kind") == "narr").with_columns(
            pl.col("decode_tps").alias("_tps"),
            (
                (pl.col("completion_tokens") - 1).alias("_tok")
                if "completion_tokens" in df.columns
                else pl.lit(1.0).alias("_tok")
            ),
        )
    else:
        cols = {"prompt_tokens", "t_start_s", "t_first_token_s"}
        if not cols <= set(df.columns):
            return {}
        df = df.filter(pl.col("prompt_kind") == "prefill").with_columns(
            (pl.col("prompt_tokens") / (pl.col("t_first_token_s") - pl.col("t_start_s"))).alias(
                "_tps"
            ),
            pl.col("prompt_tokens").alias("_tok"),
        )
    df = df.filter(
        pl.col("_tps").is_finite()
        & (pl.col("_tps") > 0)
        & pl.col("_tok").is_finite()
        & pl.col("cap_w").is_not_null()
    ).with_columns(pl.col("_tok").clip(lower_bound=1.0))
    out: dict[Key, tuple[np.ndarray, np.ndarray]] = {}
    for key, group in df.group_by(list(keys), maintain_order=True):
        out[point_key(key)] = (group["_tps"].to_numpy(), group["_tok"].to_numpy())
    return out


def _serving_gpus(run: RunRecord | None) -> list[int] | None:
    """run.json's ``gpu_selection.serving``: the GPUs whose utilization marks a load tick."""
    selection = run.gpu_selection if run else None
    return (selection.serving if selection else None) or None


def _tick_power(
    samples: pl.DataFrame, serving: Sequence[int] | None = None, keys: Sequence[str] = CAP_KEYS
) -> Mapping[Key, np.ndarray]:
    """Per point: combined draw of every load tick (GPUs summed per tick), util > 50 % on the
    busiest serving GPU (every GPU when ``serving`` is unknown).

    Each card's draw is its instant reading where samples.csv has one, else ``power_w`` (the
    driver's average, and the only reading of runs older than the instant column), as the
    sweep's own figures take it."""
    if not {*keys, "cap_w", "power_w"} <= set(samples.columns):
        return {}
    if "power_instant_w" in samples.columns:
        instant = pl.col("power_instant_w")
        draw = pl.when(instant.is_finite()).then(instant).otherwise(pl.col("power_w"))
        samples = samples.with_columns(draw.alias("power_w"))
    # Ticks before the first cap was set (cap_w empty) belong to no cap.
    df = samples.filter(pl.col("power_w").is_finite() & pl.col("cap_w").is_not_null())
    if "phase" in df.columns:
        df = df.filter(~pl.col("phase").is_in(list(IDLE_PHASES)))
    tick = "tick" if "tick" in df.columns else "t_s"
    if tick not in df.columns:
        return {}
    by = [*keys, tick]
    aggs = [pl.col("power_w").sum().alias("p")]
    if "util_pct" in df.columns:
        # the busiest card: an idle card beside a loaded one must not hide the load
        util = pl.col("util_pct")
        if serving and "gpu_index" in df.columns:
            util = util.filter(pl.col("gpu_index").is_in([float(i) for i in serving]))
        aggs.append(util.max().alias("u"))
    ticks = df.group_by(by, maintain_order=True).agg(aggs)
    if "u" in ticks.columns:
        ticks = ticks.filter(pl.col("u").is_null() | (pl.col("u") > 50.0))
    out: dict[Key, np.ndarray] = {}
    for key, group in ticks.sort(by).group_by(list(keys), maintain_order=True):
        out[point_key(key)] = group["p"].to_numpy()
    return out


def sweet_spot_text(sweet: Pick) -> str:
    """A pick (sweet spot, near-peak) with its noise, as people paste it:
    ``290 W (280-300 W within noise)``."""
    text = f"{sweet.cap_w:g} W"
    interval = known(sweet.interval_w)
    tied = known(sweet.tied_caps) or []
    source = known(sweet.noise_source)
    if not interval or len(interval) != 2:
        return text
    lo, hi = interval
    how = {
        TYPICAL: ", noise unknown: a typical reading's",
        CURVE: ", noise from the curve's own scatter",
    }.get(str(source), "")
    if len(tied) > 1 and lo < hi:
        return f"{text} ({lo:g}-{hi:g} W within noise{how})"
    return f"{text} (no other cap within noise{how})"
