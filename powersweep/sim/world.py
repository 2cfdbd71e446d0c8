"""The world's noise on the simulated rig: what real rigs do that the estimators do not assume.

Each model is off by default, switched on by ``--sim-world NAME[=PARAM]`` (repeatable) and seeded
by ``--seed``; :data:`MODELS` names them, their parameter and its default.

The reasoning: docs/world-noise.md, "powersweep.sim.world".
"""

from __future__ import annotations

import bisect
import math
import random
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from powersweep.errors import UsageError


@dataclass(frozen=True)
class ModelSpec:
    """One world-noise model's parameter.

    Attributes:
        param: What the parameter is (its key in ``run.json``'s ``simulation.world``).
        default: Its value when the flag gives none.
        low: Smallest value allowed (exclusive).
        high: Largest value allowed (inclusive).
        words: The parameter in words (the flag's help and errors).
    """

    param: str
    default: float
    low: float
    high: float
    words: str


MODELS: dict[str, ModelSpec] = {
    "bursty-draw": ModelSpec(
        "duty", 0.7, 0.05, 0.99, "share of the time the card works at its burst draw"
    ),
    "sensor-lag": ModelSpec("quantum_w", 5.0, 0.0, 50.0, "the power readings' step, W"),
    "ar-jitter": ModelSpec("sd_pct", 2.0, 0.0, 20.0, "SD of the slowly wandering speed, %"),
    "context-slowdown": ModelSpec(
        "pct_per_1k_tokens", 0.6, 0.0, 50.0, "decode step growth per 1000 context tokens, %"
    ),
    "hiccups": ModelSpec("period_s", 6.0, 1.0, 3600.0, "seconds between two 0.4 s stalls"),
    "drift": ModelSpec("amplitude_pct", 3.0, 0.0, 20.0, "amplitude of the speed's drift, %"),
    "outlier-window": ModelSpec(
        "factor", 1.36, 0.25, 4.0, "speed of an outlier request against its neighbours, x"
    ),
}

# bursty-draw: a burst and the gap after it last this long on average (each drawn within +-50%
# of its mean, so the sampler's ticks never lock onto one phase)
BURST_CYCLE_S = 0.5
# sensor-lag: both power readings average the true draw over this trailing window
SENSOR_LAG_WINDOW_S = 1.0
# ar-jitter: the speed factor's correlation time (an Ornstein-Uhlenbeck process) and its grid
AR_TAU_S = 5.0
AR_GRID_S = 0.05
# hiccups: each stall's length
HICCUP_S = 0.4
# drift: a sinusoid of this period, so +-amplitude within ten minutes
DRIFT_PERIOD_S = 600.0
# outlier-window: the share of requests that fall into a repetition loop
OUTLIER_REQUEST_SHARE = 0.03


def parse_world(values: Sequence[str]) -> tuple[str, ...]:
    """``--sim-world`` values (each ``NAME[=PARAM]``, or several separated by commas) as
    ``NAME=PARAM`` with every parameter given, in :data:`MODELS`' order.

    Raises:
        UsageError: An unknown model, a parameter out of its range, or a model named twice.
    """
    given: dict[str, float] = {}
    for value in values:
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            name, _, param = part.partition("=")
            name = name.strip()
            spec = MODELS.get(name)
            if spec is None:
                raise UsageError(f"--sim-world: unknown model {name!r}; one of {', '.join(MODELS)}")
            if name in given:
                raise UsageError(f"--sim-world: {name} given twice")
            given[name] = _param(name, spec, param.strip())
    return tuple(f"{name}={given[name]:g}" for name in MODELS if name in given)


def _param(name: str, spec: ModelSpec, text: str) -> float:
    if not text:
        return spec.default
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--sim-world {name}=X takes a number ({spec.words})") from None
    if not (math.isfinite(value) and spec.low < value <= spec.high):
        raise UsageError(
            f"--sim-world {name}: {spec.words} must be more than {spec.low:g} and at most "
            f"{spec.high:g}, got {value:g}"
        )
    if name == "outlier-window" and value == 1.0:
        raise UsageError("--sim-world outlier-window: a factor of 1 is no outlier")
    return value


class Gaps:
    """Spans of run time in which the served work stands still, generated lazily forward from
    a seeded iterator of ``(start, end)`` spans in time order (thread-safe: the card and the
    server of a scaled-time run read them from two threads)."""

    def __init__(self, spans: Iterator[tuple[float, float]]) -> None:
        self._spans = spans
        self._starts: list[float] = []
        self._ends: list[float] = []
        self._lock = threading.Lock()

    def next_gap(self, t: float) -> tuple[float, float]:
        """The first gap that ends after ``t`` (it may have begun already)."""
        with self._lock:
            while not self._ends or self._ends[-1] <= t:
                start, end = next(self._spans)
                self._starts.append(start)
                self._ends.append(end)
            i = bisect.bisect_right(self._ends, t)
            return self._starts[i], self._ends[i]

    def segments(self, t0: float, t1: float) -> list[tuple[float, float, bool]]:
        """``[t0, t1]`` cut at the gaps' edges: ``(start, end, working)`` in time order."""
        out: list[tuple[float, float, bool]] = []
        t = t0
        while t < t1:
            start, end = self.next_gap(t)
            edge = min(start if start > t else end, t1)
            out.append((t, edge, start > t))
            t = edge
        return out


def finish_s(start_s: float, work_s: float, gaps: Sequence[Gaps]) -> float:
    """When ``work_s`` seconds of work begun at ``start_s`` end, the work standing still in
    every gap of ``gaps``."""
    t, work = start_s, work_s
    while True:
        spans = [g.next_gap(t) for g in gaps]
        inside = [end for start, end in spans if start <= t]
        if inside:
            t = max(inside)
            continue
        start = min(s for s, _ in spans)
        if t + work <= start:
            return t + work
        work -= start - t
        t = start


def _periodic(
    period_s: float, length_s: float, rng: random.Random
) -> Iterator[tuple[float, float]]:
    """Gaps of ``length_s`` every ``period_s``, on a seeded phase."""
    k = 0
    phase = rng.random() * period_s
    while True:
        start = phase + k * period_s
        yield start, start + length_s
        k += 1


def _bursts(duty: float, rng: random.Random) -> Iterator[tuple[float, float]]:
    """The gaps between bursts: each burst and each gap drawn within +-50% of its mean, so the
    long-run share of time at work is ``duty``; the first cycle begins on a seeded phase."""
    t = -rng.random() * BURST_CYCLE_S
    while True:
        t += duty * BURST_CYCLE_S * rng.uniform(0.5, 1.5)
        gap = (1.0 - duty) * BURST_CYCLE_S * rng.uniform(0.5, 1.5)
        yield t, t + gap
        t += gap


class Wander:
    """A speed factor ``1 + x(t)`` where ``x`` is an Ornstein-Uhlenbeck process of standard
    deviation ``sd`` and correlation time ``tau_s`` (exact transitions on a grid, linear
    between; stationary from the start, mean exactly 1)."""

    def __init__(self, sd: float, tau_s: float, rng: random.Random) -> None:
        self._rng = rng
        self._keep = math.exp(-AR_GRID_S / tau_s)
        self._fresh = sd * math.sqrt(1.0 - self._keep * self._keep)
        self._x = [rng.gauss(0.0, sd)]
        self._lock = threading.Lock()

    def at(self, t: float) -> float:
        """The factor at run time ``t`` (never under 0.5)."""
        pos = max(0.0, t) / AR_GRID_S
        i = int(pos)
        with self._lock:
            while len(self._x) < i + 2:
                self._x.append(self._x[-1] * self._keep + self._rng.gauss(0.0, self._fresh))
            a, b = self._x[i], self._x[i + 1]
        return max(0.5, 1.0 + a + (b - a) * (pos - i))


@dataclass(frozen=True)
class Drift:
    """The speed's slow drift: ``1 + amplitude * sin(2 pi t / period + phase)``."""

    amplitude: float
    period_s: float
    phase_rad: float

    def at(self, t: float) -> float:
        """The speed factor at run time ``t``."""
        return 1.0 + self.amplitude * math.sin(2.0 * math.pi * t / self.period_s + self.phase_rad)

    def mean(self, t0: float, t1: float) -> float:
        """The factor's mean over ``[t0, t1]`` (its value at ``t0`` for an empty span)."""
        if t1 <= t0:
            return self.at(t0)
        w = 2.0 * math.pi / self.period_s
        a0, a1 = w * t0 + self.phase_rad, w * t1 + self.phase_rad
        return 1.0 + self.amplitude * (math.cos(a0) - math.cos(a1)) / (w * (t1 - t0))


class World:
    """The world-noise models switched on for one rig, with their seeded processes (built once
    and shared by the cards and the server, so a burst's gap is the same for both).

    Args:
        specs: ``NAME=PARAM`` as :func:`parse_world` gives them.
        seed: The rig's seed.
    """

    def __init__(self, specs: Sequence[str], seed: int) -> None:
        self.params: dict[str, float] = {}
        for spec in parse_world(specs):
            name, _, value = spec.partition("=")
            self.params[name] = float(value)
        self.seed = seed

        def rng(name: str) -> random.Random:
            return random.Random(f"world:{name}:{seed}")

        duty = self.params.get("bursty-draw")
        self.duty = duty if duty is not None else 1.0
        self.bursts = Gaps(_bursts(duty, rng("bursty-draw"))) if duty is not None else None
        period = self.params.get("hiccups")
        self.hiccups = (
            Gaps(_periodic(period, HICCUP_S, rng("hiccups"))) if period is not None else None
        )
        quantum = self.params.get("sensor-lag")
        self.sensor_quantum_w = quantum
        sd = self.params.get("ar-jitter")
        self.wander = Wander(sd / 100.0, AR_TAU_S, rng("ar-jitter")) if sd is not None else None
        pct = self.params.get("context-slowdown")
        self.context_per_token = pct / 100.0 / 1000.0 if pct is not None else 0.0
        amplitude = self.params.get("drift")
        self.drift = (
            Drift(amplitude / 100.0, DRIFT_PERIOD_S, rng("drift").random() * 2.0 * math.pi)
            if amplitude is not None
            else None
        )
        self.outlier_factor = self.params.get("outlier-window")

    @classmethod
    def build(cls, specs: Sequence[str], seed: int) -> World | None:
        """The world for these models, None when none is on (the simulator's own noise only)."""
        return cls(specs, seed) if specs else None

    def has(self, name: str) -> bool:
        """Whether model ``name`` is on."""
        return name in self.params

    def paces_server(self) -> bool:
        """Whether a model on stretches the server's work (all but sensor-lag)."""
        return any(name != "sensor-lag" for name in self.params)

    def is_outlier(self, request_no: int) -> bool:
        """Whether the request of this number falls into a repetition loop (outlier-window)."""
        if self.outlier_factor is None:
            return False
        draw = random.Random(f"world:outlier-window:{self.seed}:{request_no}").random()
        return draw < OUTLIER_REQUEST_SHARE

    def tps_share(self) -> float:
        """The long-run share of the card's rate that reaches the client: the bursts' duty
        times the share of time outside the hiccups (1.0 without either)."""
        share = self.duty
        period = self.params.get("hiccups")
        if period is not None:
            share *= 1.0 - HICCUP_S / period
        return share

    def record(self) -> dict[str, Any]:
        """``run.json``'s ``simulation.world``: each model's parameters and seeded phase, what
        a reader needs to compute the truth a point is compared with (:mod:`.world_truth`)."""
        out: dict[str, Any] = {}
        for name, value in self.params.items():
            entry: dict[str, Any] = {MODELS[name].param: value}
            entry.update(_CONSTANTS.get(name, {}))
            if name == "drift" and self.drift is not None:
                entry["phase_rad"] = self.drift.phase_rad
            out[name] = entry
        return {"models": out, "tps_share": self.tps_share()}


_CONSTANTS: Mapping[str, Mapping[str, float]] = {
    "bursty-draw": {"cycle_s": BURST_CYCLE_S},
    "sensor-lag": {"window_s": SENSOR_LAG_WINDOW_S},
    "ar-jitter": {"tau_s": AR_TAU_S},
    "hiccups": {"stall_s": HICCUP_S},
    "drift": {"period_s": DRIFT_PERIOD_S},
    "outlier-window": {"request_share": OUTLIER_REQUEST_SHARE},
}
