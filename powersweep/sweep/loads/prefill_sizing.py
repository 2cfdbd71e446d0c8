"""prefill-heavy's prompt sizing: the varied prompt bodies, and the time-to-first-token model
calibration sizes them by.

Pure (no client, no clock): :func:`make_prompt` builds a prompt of a given number of words that
no prefix cache can serve, :func:`fit_ttft` and :func:`tokens_for_ttft` turn calibration requests
into the prompt length whose prefill takes the target time.

The reasoning: docs/reference.md, "powersweep.sweep.loads.prefill_sizing".
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from powersweep.sweep.loads.prompts import with_nonce

_WORDS = [
    "voltage",
    "frequency",
    "thermal",
    "budget",
    "wattage",
    "silicon",
    "memory",
    "bandwidth",
    "tensor",
    "kernel",
    "scheduler",
    "batch",
    "cache",
    "token",
    "prompt",
    "decoder",
    "encoder",
    "matrix",
    "vector",
    "lattice",
    "river",
    "harbour",
    "mountain",
    "forest",
    "lantern",
    "copper",
    "winter",
    "summer",
    "signal",
    "archive",
    "ledger",
    "market",
    "orchard",
    "engine",
    "valley",
    "garden",
    "quarry",
    "meadow",
    "canyon",
    "glacier",
    "island",
    "compass",
    "anchor",
    "beacon",
    "circuit",
    "diode",
    "relay",
    "sensor",
    "turbine",
    "piston",
    "gauge",
    "spindle",
    "rotor",
    "magnet",
    "quartz",
    "basalt",
    "granite",
    "marble",
    "amber",
    "crimson",
    "violet",
    "indigo",
    "saffron",
    "cobalt",
    "emerald",
    "scarlet",
    "ochre",
    "teal",
    "umber",
]


def make_prompt(n_words: int, nonce: str, rng: random.Random) -> str:
    """A long prompt: nonce first, then a varied body of ``n_words`` words."""
    words = [rng.choice(_WORDS) for _ in range(max(1, n_words))]
    for i in range(11, len(words), 12):
        words[i] += rng.choice(".,;:")
    body = " ".join(words)
    return with_nonce(f"Summarise these notes in one sentence. Notes: {body}", nonce)


@dataclass(frozen=True)
class CalibrationStep:
    """One calibration request."""

    words: int
    prompt_tokens: int
    ttft_s: float


def fit_ttft(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Fit ``ttft = a * n + b * n^2`` (b >= 0) by least squares; returns (a, b)."""
    if len(points) == 1:
        n, t = points[0]
        return t / n, 0.0
    s11 = sum(n * n for n, _ in points)
    s12 = sum(n**3 for n, _ in points)
    s22 = sum(n**4 for n, _ in points)
    r1 = sum(n * t for n, t in points)
    r2 = sum(n * n * t for n, t in points)
    det = s11 * s22 - s12 * s12
    if det <= 0:
        return r1 / s11, 0.0
    a = (r1 * s22 - r2 * s12) / det
    b = (s11 * r2 - s12 * r1) / det
    if b < 0 or a <= 0:
        return r1 / s11, 0.0
    return a, b


def tokens_for_ttft(a: float, b: float, target_s: float) -> float:
    """Prompt length whose prefill takes ``target_s`` under the fitted model."""
    if b <= 1e-15:
        return target_s / a
    return (-a + math.sqrt(a * a + 4 * b * target_s)) / (2 * b)
