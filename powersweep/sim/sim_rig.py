"""The simulated rig: one or more simulated GPUs serving one model.

:class:`SimRig` is both the GPU backend a sweep drives (it enumerates :class:`SimGpu` cards) and
the :class:`~powersweep.sim.engine.SimEngine` the simulated server asks for token rates, so the
token rate follows the simulated clocks and the draw follows the served load.
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from powersweep.analysis.clock_curve import TIER_CAP_FRACTION
from powersweep.clock import Clock
from powersweep.errors import UsageError
from powersweep.sim.engine import WorkKind
from powersweep.sim.physics import (
    IDLE,
    Locks,
    OperatingPoint,
    Workload,
    mean_power_w,
    regime_of,
    steady_state,
)
from powersweep.sim.profiles import GpuProfile
from powersweep.sim.sim_gpu import LimitStore, SimGpu
from powersweep.sim.vf_stability import DEFAULT_RESET_BEYOND_MHZ
from powersweep.sim.world import World

MIN_PLATEAU_CAPS = 3
# Truth TPS/W this close (relative) is one value: the steady-state solve rounds at about 1e-9.
TIE_REL = 1e-6
# Prompts at least this long load the card as prefill; shorter ones ride along with decode.
LONG_PROMPT_TOKENS = 512


class SimRig:
    """Simulated GPUs plus the model they serve.

    Args:
        profiles: One profile per GPU.
        clock: Run clock shared with the server and the sweep.
        seed: Noise seed.
        state_file: Where the cards' power limits persist (None: in memory).
        serving: Indices of the cards the model is loaded on (tensor parallel across them);
            None: every card. The others stay idle whatever the server does.
        vf_reset_beyond_mhz: A serving card under load with its SM clock offset more than this
            past its stable margin resets (0: at any instability).
        world: The world's noise models on (None: none), shared with the simulated server.
    """

    def __init__(
        self,
        profiles: list[GpuProfile],
        clock: Clock,
        *,
        seed: int = 0,
        state_file: Path | None = None,
        serving: tuple[int, ...] | None = None,
        vf_reset_beyond_mhz: float = DEFAULT_RESET_BEYOND_MHZ,
        world: World | None = None,
    ) -> None:
        if not profiles:
            raise UsageError("a simulated rig needs at least one GPU profile")
        serving = tuple(range(len(profiles))) if serving is None else tuple(dict.fromkeys(serving))
        bad = [i for i in serving if not 0 <= i < len(profiles)]
        if bad or not serving:
            raise UsageError(
                f"--sim-serving-gpus: the rig has GPUs 0-{len(profiles) - 1}, not {bad or 'none'}"
            )
        self.profiles = profiles
        self.serving = serving
        self._clock = clock
        store = LimitStore(state_file) if state_file else None
        share = 1.0 / len(serving)
        self.vf_reset_beyond_mhz = vf_reset_beyond_mhz
        self._duty = world.duty if world is not None else 1.0
        self.gpus = [
            SimGpu(
                p,
                clock,
                index=i,
                seed=seed,
                store=store,
                share=share,
                serving=i in serving,
                vf_reset_beyond_mhz=vf_reset_beyond_mhz,
                world=world,
            )
            for i, p in enumerate(profiles)
        ]
        self._serving_gpus = [g for g in self.gpus if g.serving]
        self._lock = threading.Lock()
        self._decoding = 0
        self._prefilling = 0
        self._long_prefills = 0
        self._prompt_tokens = LONG_PROMPT_TOKENS

    # --- GpuBackend ---------------------------------------------------------------------------

    def device_count(self) -> int:
        """Number of simulated GPUs."""
        return len(self.gpus)

    def gpu(self, index: int) -> SimGpu:
        """The simulated GPU at ``index``."""
        if not 0 <= index < len(self.gpus):
            raise UsageError(f"GPU {index} does not exist (the rig has {len(self.gpus)})")
        return self.gpus[index]

    def close(self) -> None:
        """Nothing to release; present for the backend protocol."""

    # --- SimEngine ----------------------------------------------------------------------------

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def context_tokens(self) -> int:
        return min(p.context_tokens for p in self.profiles)

    def work_started(self, kind: WorkKind) -> None:
        with self._lock:
            if kind == "decode":
                self._decoding += 1
            else:
                self._prefilling += 1
            self._apply()

    def work_finished(self, kind: WorkKind) -> None:
        with self._lock:
            if kind == "decode":
                self._decoding = max(0, self._decoding - 1)
            else:
                self._prefilling = max(0, self._prefilling - 1)
                # loads never mix short and long prompts, so any prefill ending ends a long one
                self._long_prefills = min(self._long_prefills, self._prefilling)
            self._apply()

    def decode_rate_tps(self) -> float:
        with self._lock:
            batch = max(1, self._decoding)
        work = Workload("decode", batch=batch)
        return min(g.rate_tps(work) for g in self._serving_gpus) / batch

    def prefill_rate_tps(self, prompt_tokens: int) -> float:
        with self._lock:
            if prompt_tokens >= LONG_PROMPT_TOKENS:
                self._long_prefills += 1
                self._prompt_tokens = prompt_tokens
                self._apply()
            sharing = max(1, self._prefilling)
        work = Workload("prefill", prompt_tokens=prompt_tokens)
        return min(g.rate_tps(work) for g in self._serving_gpus) / sharing

    # Read without the cards' locks or advancing them (the server asks at every token): the
    # cards' state moves only on their own calls, so these reads change no figure.

    def instability_mhz(self) -> float:
        # an SM offset past its margin, or a memory offset past the point where errors escape
        # the replay: either turns greedy answers wrong
        return max(max(g.unstable_by_mhz, g.mem_corrupt_by_mhz) for g in self._serving_gpus)

    def reset_count(self) -> int:
        return sum(g.resets for g in self._serving_gpus)

    def off_bus(self) -> bool:
        return any(g.off_bus() for g in self._serving_gpus)

    def truth_stable_offsets_mhz(self) -> dict[int, float]:
        """Each serving card's true stable SM clock offset margin, MHz, by card index (the
        simulator's answer to an undervolt search)."""
        return {g.index: g.truth_stable_offset_mhz for g in self._serving_gpus}

    def truth_stable_mem_offsets_mhz(self) -> dict[int, float]:
        """Each serving card's true stable memory clock offset, MHz in NVML's unit, by card
        index (the simulator's answer to a memory offset search)."""
        return {g.index: g.truth_stable_mem_offset_mhz for g in self._serving_gpus}

    def preheat(self, load_mode: str, concurrency: int = 1, prompt_tokens: int = 8000) -> None:
        """Jump every card to its steady temperature for a load at its current limit.

        Tests and benchmarks use it to skip minutes of simulated warm-up.
        """
        work = workload_for(load_mode, concurrency, prompt_tokens)
        for g in self._serving_gpus:
            _, temp, _ = steady_state(g.profile, work, g.limit_w, duty=self._duty)
            g.set_temperature(temp)

    def _apply(self) -> None:
        # A long prompt's prefill dominates the card; a short one is batched with the decode
        # steps of the other streams (as llama.cpp and vLLM schedule it) and barely shows.
        if self._long_prefills:
            work = Workload("prefill", prompt_tokens=self._prompt_tokens)
        elif self._decoding:
            work = Workload("decode", batch=self._decoding)
        elif self._prefilling:
            work = Workload("prefill", prompt_tokens=LONG_PROMPT_TOKENS)
        else:
            work = IDLE
        for g in self._serving_gpus:
            g.set_workload(work)


@dataclass(frozen=True)
class TruthCap:
    """Noise-free steady state at one cap."""

    cap_w: float
    tps: float
    power_w: float
    tps_per_w: float
    sm_clock_mhz: float
    temp_c: float
    regime: str
    # J per token of the measured figure (draw over rate) and one stream's mean gap between
    # tokens (decode modes; NaN in prefill-heavy): what the per-token columns should read.
    j_per_token: float = math.nan
    itl_ms: float = math.nan


@dataclass(frozen=True)
class GroundTruth:
    """The simulator's own answer for a sweep (what a perfect measurement would find)."""

    load_mode: str
    concurrency: int
    prompt_tokens: int | None
    caps: list[TruthCap]
    sweet_spot_cap_w: float
    sweet_spot_tps_per_w: float
    plateaus: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The form stored in ``run.json`` (``simulation.ground_truth``)."""
        return {
            "load_mode": self.load_mode,
            "concurrency": self.concurrency,
            "prompt_tokens": self.prompt_tokens,
            "caps": [asdict(c) for c in self.caps],
            "sweet_spot": {
                "cap_w": self.sweet_spot_cap_w,
                "tps_per_w": self.sweet_spot_tps_per_w,
            },
            "plateaus": self.plateaus,
        }

    def cap(self, cap_w: float) -> TruthCap:
        """The truth at one cap."""
        for c in self.caps:
            if abs(c.cap_w - cap_w) < 1e-6:
                return c
        raise KeyError(cap_w)


def workload_for(load_mode: str, concurrency: int = 1, prompt_tokens: int = 8000) -> Workload:
    """The steady workload a load mode puts on the GPUs."""
    if load_mode == "prefill-heavy":
        return Workload("prefill", prompt_tokens=prompt_tokens)
    if load_mode == "decode-concurrent":
        return Workload("decode", batch=max(1, concurrency))
    if load_mode == "decode-single":
        return Workload("decode", batch=1)
    raise UsageError(f"unknown load mode {load_mode!r}")


def ground_truth(
    profiles: list[GpuProfile],
    load_mode: str,
    caps_w: list[float],
    *,
    concurrency: int = 1,
    prompt_tokens: int = 8000,
    world: World | None = None,
) -> GroundTruth:
    """Noise-free steady state of the rig at each cap, the true sweet spot and plateaus.

    TPS is per stream for ``decode-single``, aggregate over streams for ``decode-concurrent``
    and prompt tokens per second for ``prefill-heavy``; draw is combined over the GPUs. With
    the world's noise (``world``) the truth is the long-run steady value: the bursts' mean
    draw and the share of the rate the bursts and hiccups leave (:meth:`World.tps_share`);
    docs/world-noise.md gives each model's truth.
    """
    work = workload_for(load_mode, concurrency, prompt_tokens)
    work = Workload(work.kind, work.batch, work.prompt_tokens, 1.0 / len(profiles))
    duty = world.duty if world is not None else 1.0
    rows: list[TruthCap] = []
    ops: list[list[OperatingPoint]] = []
    for cap in sorted(set(caps_w)):
        states = [steady_state(p, work, cap, duty=duty) for p in profiles]
        rate = min(op.rate_tps for op, _, _ in states)
        if work.kind == "prefill":
            # measured as prompt tokens over time to first token, which holds one decode step
            one_step = Workload("decode", batch=1, share=work.share)
            step_s = max(
                1.0 / steady_state(p, one_step, cap, duty=duty)[0].rate_tps for p in profiles
            )
            rate = prompt_tokens / (prompt_tokens / rate + step_s)
        if world is not None:
            rate *= world.tps_share()
        power = _mean_power(profiles, states, duty)
        first = states[0][0]
        regimes = {regime_of(op) for op, _, _ in states}
        regime = next(
            (r for r in ("thermal_limited", "draw_ceiling", "boost_plateau") if r in regimes),
            "power_limited",
        )
        rows.append(
            TruthCap(
                cap_w=cap,
                tps=rate,
                power_w=power,
                tps_per_w=rate / power,
                sm_clock_mhz=first.sm_clock_mhz,
                temp_c=max(t for _, t, _ in states),
                regime=regime,
                j_per_token=power / rate,
                itl_ms=1000.0 * work.batch / rate if work.kind == "decode" else math.nan,
            )
        )
        ops.append([op for op, _, _ in states])
    # Caps on one operating point (a draw ceiling: same clocks, same draw) tie exactly, up to the
    # solver's rounding; an exact tie goes to the lowest cap, as the analysis breaks it.
    top = max(r.tps_per_w for r in rows)
    best = min((r for r in rows if r.tps_per_w >= top * (1.0 - TIE_REL)), key=lambda r: r.cap_w)
    return GroundTruth(
        load_mode=load_mode,
        concurrency=work.batch if work.kind == "decode" else 1,
        prompt_tokens=prompt_tokens if work.kind == "prefill" else None,
        caps=rows,
        sweet_spot_cap_w=best.cap_w,
        sweet_spot_tps_per_w=best.tps_per_w,
        plateaus=_true_plateaus(rows),
    )


def _true_plateaus(rows: list[TruthCap]) -> list[dict[str, Any]]:
    """Runs of 3+ caps held at one clock below the cap: plateaus (escape above) or ceilings."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(rows):
        r = rows[i]
        if r.regime not in ("boost_plateau", "draw_ceiling"):
            i += 1
            continue
        j = i
        while (
            j + 1 < len(rows)
            and rows[j + 1].regime in ("boost_plateau", "draw_ceiling")
            and math.isclose(rows[j + 1].sm_clock_mhz, r.sm_clock_mhz)
        ):
            j += 1
        if j - i + 1 >= MIN_PLATEAU_CAPS:
            kind = "draw_ceiling" if j == len(rows) - 1 else "boost_plateau"
            power = sorted(x.power_w for x in rows[i : j + 1])[(j - i) // 2]
            out.append(
                {
                    "kind": kind,
                    "start_w": rows[i].cap_w,
                    "end_w": rows[j].cap_w,
                    "power_w": round(power, 2),
                }
            )
        i = j + 1
    return out


def clock_ground_truth(
    profiles: list[GpuProfile],
    load_mode: str,
    points: list[tuple[float | None, float | None]],
    cap_w: float,
    *,
    concurrency: int = 1,
    prompt_tokens: int = 8000,
    world: World | None = None,
) -> dict[str, Any]:
    """Noise-free steady state at each clock-lock point under a held limit (``--axis`` clocks).

    Each point is ``(sm_lock_mhz, mem_lock_mhz)`` (None: that clock unlocked). TPS is measured
    as :func:`ground_truth` measures it. Adds the true peak (best TPS/W), the Pareto front of
    (TPS up, W down), per memory tier its top TPS and whether it caps TPS, and the draw of the
    unlocked card at the default limit (whether a power cap could bind at all). With the
    world's noise, as :func:`ground_truth`.
    """
    work = workload_for(load_mode, concurrency, prompt_tokens)
    work = Workload(work.kind, work.batch, work.prompt_tokens, 1.0 / len(profiles))
    duty = world.duty if world is not None else 1.0
    rows: list[dict[str, Any]] = []
    for sm, mem in points:
        locks = [Locks(sm, _load_tier(p, mem)) for p in profiles]
        states = [
            steady_state(p, work, cap_w, lk, duty=duty)
            for p, lk in zip(profiles, locks, strict=True)
        ]
        rate = min(op.rate_tps for op, _, _ in states)
        if work.kind == "prefill":
            # measured as prompt tokens over time to first token, which holds one decode step
            one = Workload("decode", batch=1, share=work.share)
            step_s = max(
                1.0 / steady_state(p, one, cap_w, lk, duty=duty)[0].rate_tps
                for p, lk in zip(profiles, locks, strict=True)
            )
            rate = prompt_tokens / (prompt_tokens / rate + step_s)
        if world is not None:
            rate *= world.tps_share()
        power = _mean_power(profiles, states, duty, [lk.mem_mhz for lk in locks])
        rows.append(
            {
                "sm_lock_mhz": sm,
                "mem_lock_mhz": mem,
                "cap_w": cap_w,
                "tps": rate,
                "power_w": power,
                "tps_per_w": rate / power,
                "sm_clock_mhz": states[0][0].sm_clock_mhz,
                "regime": regime_of(states[0][0]),
                "j_per_token": power / rate,
                "itl_ms": 1000.0 * work.batch / rate if work.kind == "decode" else None,
            }
        )
    peak = max(rows, key=lambda r: r["tps_per_w"])
    front = [
        r
        for r in rows
        if not any(
            o["tps"] >= r["tps"]
            and o["power_w"] <= r["power_w"]
            and o is not r
            and (o["tps"] > r["tps"] or o["power_w"] < r["power_w"])
            for o in rows
        )
    ]
    tier_tps: dict[float | None, float] = {}
    for r in rows:
        tier_tps[r["mem_lock_mhz"]] = max(tier_tps.get(r["mem_lock_mhz"], 0.0), r["tps"])
    best_tier_tps = max(tier_tps.values())
    unlocked = [steady_state(p, work, p.default_limit_w, duty=duty) for p in profiles]
    return {
        "axis": "clocks",
        "load_mode": load_mode,
        "concurrency": work.batch if work.kind == "decode" else 1,
        "prompt_tokens": prompt_tokens if work.kind == "prefill" else None,
        "cap_w": cap_w,
        "points": rows,
        "peak": {
            k: peak[k] for k in ("sm_lock_mhz", "mem_lock_mhz", "tps", "power_w", "tps_per_w")
        },
        "pareto": [
            {k: r[k] for k in ("sm_lock_mhz", "mem_lock_mhz", "tps", "power_w")}
            for r in sorted(front, key=lambda r: r["power_w"])
        ],
        "tiers": [
            {
                "mem_lock_mhz": mem,
                "top_tps": tps,
                "caps_tps": tps < (1.0 - TIER_CAP_FRACTION) * best_tier_tps,
            }
            for mem, tps in sorted(tier_tps.items(), key=lambda kv: -(kv[0] or 0.0))
        ],
        "unlocked_power_w": _mean_power(profiles, unlocked, duty),
        "default_limit_w": sum(p.default_limit_w for p in profiles),
    }


def _mean_power(
    profiles: list[GpuProfile],
    states: list[tuple[OperatingPoint, float, bool]],
    duty: float,
    mems: list[float | None] | None = None,
) -> float:
    """The combined draw of the cards' steady states, averaged over bursts and gaps (their
    burst draw when ``duty`` is 1)."""
    mems = mems or [None] * len(profiles)
    return sum(
        mean_power_w(p, op.power_w, temp, duty, mem)
        for p, (op, temp, _), mem in zip(profiles, states, mems, strict=True)
    )


def _load_tier(profile: GpuProfile, mem_mhz: float | None) -> float | None:
    """The load memory tier a memory lock runs at (the nearest one), None when unlocked."""
    if mem_mhz is None:
        return None
    tiers = profile.mem_tiers_mhz or (profile.mem_clock_mhz,)
    return min(tiers, key=lambda t: abs(t - mem_mhz))
