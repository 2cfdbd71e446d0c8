"""Synthetic measured runs: a noise-free curve plus realistic, seeded measurement noise.

Tests, benchmarks and chart checks need run directories whose true answer is known.

The reasoning: docs/fleets.md, "powersweep.analysis.synthetic".
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import msgspec
import numpy as np
import polars as pl

from powersweep.analysis.load import write_caps_csv
from powersweep.errors import PowersweepError, UsageError
from powersweep.runformat import JsonMap

T = TypeVar("T")

_THERMAL_REGIMES = ("thermal_limited",)
_POWER_THROTTLE_REGIMES = ("power_limited", "boost_plateau")


@dataclass(frozen=True)
class NoiseModel:
    """Measurement noise of a synthetic run.

    Attributes:
        power_rel: Relative 1-sigma noise of one draw reading (NVML's ~0.3%).
        tps_rel: Relative 1-sigma noise of a cap's TPS (request-to-request spread averaged).
        request_tps_rel: Relative 1-sigma spread of one request's TPS around the cap's TPS.
        clock_bin_mhz: SM clock bin width; readings sit on bins, dithering between two.
        temp_sd_c: 1-sigma noise of a temperature reading before rounding to whole degrees.
        load_ticks: Sampler ticks of measured load per cap (the draw median is over these).
        settle_ticks: Ticks of settling per cap before the load (phase ``settle``).
        tick_s: Sampler interval, run seconds.
        requests_per_cap: Requests per prompt kind per cap.
    """

    power_rel: float = 0.003
    tps_rel: float = 0.005
    request_tps_rel: float = 0.01
    clock_bin_mhz: float = 15.0
    temp_sd_c: float = 0.2
    load_ticks: int = 20
    settle_ticks: int = 6
    tick_s: float = 0.5
    requests_per_cap: int = 3


@dataclass(frozen=True)
class _TruthCap:
    """One cap of the noise-free curve, as run.json's ``simulation.ground_truth`` holds it
    (``regime`` None: power-limited)."""

    cap_w: float
    tps: float
    power_w: float
    sm_clock_mhz: float = math.nan
    temp_c: float = 60.0
    regime: str | None = None


@dataclass(frozen=True)
class _Truth:
    """What the synthetic run takes of the ground truth (the rest is written as given)."""

    caps: list[_TruthCap] | None = None
    load_mode: str | None = None
    prompt_tokens: int | None = None
    concurrency: int | None = None


@dataclass(frozen=True)
class _Gpu:
    """What the readings take of the card (run.json's ``gpus`` entry; the rest is written as
    given): its memory clock written as given, an int or a float."""

    index: int = 0
    mem_clock_mhz: int | float | None = None


def _read(data: JsonMap, record: type[T], what: str) -> T:
    """``data`` as ``record``.

    Raises:
        UsageError: A value of the wrong type (named).
    """
    try:
        return msgspec.convert(data, type=record, strict=False)
    except msgspec.ValidationError as exc:
        raise UsageError(f"synthetic run: the {what}: {exc}") from None


def synthesize_run(
    truth: JsonMap,
    gpu: JsonMap,
    out_dir: Path,
    *,
    seed: int,
    noise: NoiseModel | None = None,
    cooling: str = "air",
    model: str = "synthetic-model",
    raw_files: bool = True,
) -> Path:
    """Write a run directory measured, with noise, from a noise-free curve.

    Args:
        truth: Ground truth as stored in run.json (``simulation.ground_truth``): ``load_mode``,
            ``caps`` (each ``cap_w``, ``tps``, ``power_w``, ``sm_clock_mhz``, ``temp_c``,
            ``regime``), optionally ``concurrency``, ``prompt_tokens``, ``sweet_spot`` and
            ``plateaus``.
        gpu: The run.json ``gpus`` entry: ``name``, ``min_limit_w``, ``default_limit_w``,
            ``max_limit_w``, ``slowdown_temp_c`` (others optional).
        out_dir: The run directory to create (existing files are replaced).
        seed: Noise seed; the same seed gives the same files.
        noise: The noise model (defaults: see :class:`NoiseModel`).
        cooling: run.json ``cooling``.
        model: run.json ``server.model``.
        raw_files: Whether to write samples.csv and requests.csv (caps.csv is derived from the
            same readings either way, so the figures do not change).

    Returns:
        ``out_dir``.

    Raises:
        UsageError: The truth has no caps or an unknown load mode, or a value of the truth or
            the card of the wrong type.
        PowersweepError: The files cannot be written.
    """
    nm = noise or NoiseModel()
    given = _read(truth, _Truth, "ground truth")
    card = _read(gpu, _Gpu, "card")
    caps = sorted(given.caps or [], key=lambda c: c.cap_w)
    if not caps:
        raise UsageError("synthetic run: the ground truth has no caps")
    mode = given.load_mode or "decode-single"
    if mode not in ("decode-single", "decode-concurrent", "prefill-heavy"):
        raise UsageError(f"synthetic run: unknown load mode {mode!r}")
    rng = np.random.default_rng(seed)
    prompt_tokens = given.prompt_tokens or 8000
    streams = (given.concurrency or 1) if mode == "decode-concurrent" else 1
    phases = {"decode-single": ("narr", "code"), "decode-concurrent": ("concurrent",)}.get(
        mode, ("prefill",)
    )

    # rows as the CSVs will hold them: column to cell
    sample_rows: list[dict[str, object]] = []
    request_rows: list[dict[str, object]] = []
    cap_rows: list[dict[str, object]] = []
    clock = _SynthClock()
    for cap in caps:
        t_cap = round(clock.t_s, 3)  # the cap's first sample's time
        samples, load = _synth_samples(cap, card, phases, nm, rng, clock)
        sample_rows += samples
        tps = cap.tps * (1.0 + rng.normal(0.0, nm.tps_rel))
        request_rows += _requests(
            cap.cap_w, tps, mode, prompt_tokens, streams, t_cap, load.window_s, nm, rng
        )
        cap_rows.append(_cap_row(cap, card, mode, tps, load, len(phases), nm))
    run = _run_json(truth, gpu, caps, mode, seed, cooling, model)
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "run.json").write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
        if raw_files:
            pl.DataFrame(sample_rows, infer_schema_length=None).write_csv(out_dir / "samples.csv")
            pl.DataFrame(request_rows, infer_schema_length=None).write_csv(out_dir / "requests.csv")
    except OSError as exc:
        raise PowersweepError(f"cannot write the synthetic run {out_dir}: {exc}") from exc
    write_caps_csv(pl.DataFrame(cap_rows, infer_schema_length=None), out_dir / "caps.csv")
    return out_dir


@dataclass
class _SynthClock:
    """Run time, sampler tick and the energy counter, carried from one cap to the next."""

    t_s: float = 0.0
    tick: int = 0
    energy_mj: float = 0.0


@dataclass(frozen=True)
class _LoadReadings:
    """The readings of one cap's load window."""

    power_w: list[float]
    temps_c: list[float]
    clocks_mhz: list[float]
    n_settle: int
    tick_s: float

    @property
    def window_s(self) -> float:
        return len(self.power_w) * self.tick_s


def _synth_samples(
    cap: _TruthCap,
    gpu: _Gpu,
    phases: tuple[str, ...],
    nm: NoiseModel,
    rng: np.random.Generator,
    clock: _SynthClock,
) -> tuple[list[dict[str, object]], _LoadReadings]:
    """One cap's samples.csv rows (settle, then the load phases) and its load-window readings."""
    cap_w = cap.cap_w
    power_true = cap.power_w
    regime = cap.regime or "power_limited"
    thermal = regime in _THERMAL_REGIMES
    pwr_throttle = regime in _POWER_THROTTLE_REGIMES
    rows: list[dict[str, object]] = []
    load = _LoadReadings([], [], [], nm.settle_ticks, nm.tick_s)
    n_settle, n_load = nm.settle_ticks, max(nm.load_ticks, 1)
    for k in range(n_settle + n_load):
        phase = "settle" if k < n_settle else phases[(k - n_settle) * len(phases) // n_load]
        power = round(power_true * (1.0 + rng.normal(0.0, nm.power_rel)), 2)
        temp = float(round(cap.temp_c + rng.normal(0.0, nm.temp_sd_c)))
        sm = _clock_reading(cap.sm_clock_mhz, nm.clock_bin_mhz, rng)
        clock.energy_mj += power * nm.tick_s * 1000.0
        rows.append(
            {
                "t_s": round(clock.t_s, 3),
                "tick": clock.tick,
                "cap_w": cap_w,
                "phase": phase,
                "gpu_index": gpu.index,
                "power_w": power,
                "energy_mj": math.floor(clock.energy_mj),
                "temp_c": temp,
                "sm_clock_mhz": sm,
                "mem_clock_mhz": gpu.mem_clock_mhz,
                "util_pct": 100.0,
                "pstate": 2,
                "throttle_power": pwr_throttle and not thermal,
                "throttle_thermal": thermal,
                "clock_event_bits": 32 if thermal else (4 if pwr_throttle else 0),
            }
        )
        if k >= n_settle:
            load.power_w.append(power)
            load.temps_c.append(temp)
            load.clocks_mhz.append(sm)
        clock.t_s += nm.tick_s
        clock.tick += 1
    return rows, load


def _cap_row(
    cap: _TruthCap,
    gpu: _Gpu,
    mode: str,
    tps: float,
    load: _LoadReadings,
    n_phases: int,
    nm: NoiseModel,
) -> dict[str, object]:
    """One caps.csv row, made from the cap's load-window readings as the sweep would."""
    regime = cap.regime or "power_limited"
    thermal = regime in _THERMAL_REGIMES
    pwr_throttle = regime in _POWER_THROTTLE_REGIMES
    draw = float(np.median(load.power_w))
    return {
        "cap_w": cap.cap_w,
        "narr_tps": None if mode == "prefill-heavy" else tps,
        "code_tps": tps * 0.985 if mode == "decode-single" else None,
        "prefill_tps": tps if mode == "prefill-heavy" else None,
        "power_w": draw,
        "energy_j": sum(load.power_w) * nm.tick_s,
        "energy_sampled_j": float(np.trapezoid(load.power_w, dx=nm.tick_s)) + draw * nm.tick_s,
        "tps_per_w": tps / draw,
        "temp_max_c": max(load.temps_c),
        "sm_clock_mhz": float(np.median(load.clocks_mhz)),
        "mem_clock_mhz": gpu.mem_clock_mhz,
        "util_pct": 100.0,
        "pwr_throttle_pct": 100.0 if pwr_throttle and not thermal else 0.0,
        "thermal_throttle_pct": 100.0 if thermal else 0.0,
        "pstate": 2.0,
        "n_samples": len(load.power_w),
        "n_requests": n_phases * nm.requests_per_cap,
        "n_gpus": 1,
        "settle_s": load.n_settle * nm.tick_s,
        "window_s": load.window_s,
        "status": "ok",
        "error": None,
    }


def _run_json(
    truth: JsonMap,
    gpu: JsonMap,
    caps: list[_TruthCap],
    mode: str,
    seed: int,
    cooling: str,
    model: str,
) -> dict[str, object]:
    """The run.json the synthetic run writes (its ground truth embedded as given)."""
    return {
        "schema_version": 1,
        "tool": {"name": "powersweep", "version": "synthetic"},
        "started_at": "2025-01-01T00:00:00Z",
        "ended_at": "2025-01-01T01:00:00Z",
        "status": "complete",
        "error": None,
        "gpus": [{"index": 0, "power_source": "simulated", **dict(gpu)}],
        "cooling": cooling,
        "load_mode": mode,
        "options": {"synthetic_seed": seed},
        "server": {"url": None, "model": model, "engine": "synthetic", "context_tokens": None},
        "simulation": {"profile": None, "seed": seed, "time_scale": None, "ground_truth": truth},
        "caps_planned": [c.cap_w for c in caps],
        "caps_done": [c.cap_w for c in caps],
        "restored": [],
        "read_errors": 0,
        "observe_only": False,
    }


def _clock_reading(clock_mhz: float, bin_mhz: float, rng: np.random.Generator) -> float:
    """One SM clock reading: the firmware dithers between the two bins around the mean clock."""
    if not math.isfinite(clock_mhz):
        return math.nan
    low = math.floor(clock_mhz / bin_mhz + 1e-9) * bin_mhz
    high_share = (clock_mhz - low) / bin_mhz
    return low + bin_mhz if rng.random() < high_share else low


def _requests(
    cap_w: float,
    tps: float,
    mode: str,
    prompt_tokens: int,
    streams: int,
    t0: float,
    window_s: float,
    nm: NoiseModel,
    rng: np.random.Generator,
) -> list[dict[str, object]]:
    """Requests whose token-weighted TPS is about the cap's TPS."""
    out: list[dict[str, object]] = []
    kinds: Sequence[str] = {"decode-single": ("narr", "code"), "prefill-heavy": ("prefill",)}.get(
        mode, ("narr",)
    )
    n = nm.requests_per_cap
    slot = window_s / (len(kinds) * n)
    for j, kind in enumerate(kinds):
        for i in range(n):
            start = t0 + (j * n + i) * slot
            rate = tps * (1.0 + rng.normal(0.0, nm.request_tps_rel))
            if kind == "prefill":
                ttft = prompt_tokens / rate
                prompt, completion, per_req = prompt_tokens, 2, None
                first, last = start + ttft, start + ttft + 0.05
            else:
                # Aggregate TPS over streams; each stream decodes at its share.
                per_req = rate / streams
                completion = max(2, round(per_req * (slot - 0.2)))
                prompt = 500 if kind == "narr" else 400
                first = start + 0.1
                last = first + (completion - 1) / per_req
            out.append(
                {
                    "cap_w": cap_w,
                    "prompt_kind": kind,
                    "stream": i % streams,
                    "t_start_s": round(start, 4),
                    "t_first_token_s": round(first, 4),
                    "t_last_token_s": round(last, 4),
                    "t_end_s": round(last + 0.01, 4),
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "token_source": "usage",
                    "chunk_tokens": completion,
                    "decode_tps": per_req * streams if per_req is not None else None,
                    "finish_reason": "length",
                    "ok": True,
                    "error": None,
                }
            )
    return out
