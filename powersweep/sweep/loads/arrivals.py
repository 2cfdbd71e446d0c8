"""The serving load's open-loop arrival schedule: when each request is sent and how long its
prompt and answer are, a pure function of the seed and the options.

Inter-arrival times are exponential (``poisson``), fixed (``constant``) or Gamma with shape B
and scale 1/(R*B) (``gamma``, vLLM ``bench serve``'s ``--burstiness``: B = 1 is Poisson, B < 1
burstier). Lengths come from a profile's quantile table (the Azure LLM inference trace 2023)
or from a JSONL file of prompts. The reasoning and the tables' source: docs/serving.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import msgspec
import numpy as np

from powersweep.errors import UsageError


class ArrivalProcess(StrEnum):
    """How the gaps between two requests are drawn."""

    POISSON = "poisson"
    CONSTANT = "constant"
    GAMMA = "gamma"


class LengthProfile(StrEnum):
    """Which published trace the prompt and answer lengths are shaped like."""

    CONVERSATION = "conversation"
    CODE = "code"


# (percentile, tokens) of the Azure LLM inference trace 2023 (Azure/AzurePublicDataset,
# data/AzureLLMInferenceTrace_{conv,code}.csv at b469a11; 19,366 conversation and 8,819 code
# requests; ContextTokens and GeneratedTokens): docs/serving.md gives the script.
QUANTILES: dict[LengthProfile, tuple[tuple[tuple[float, int], ...], tuple[tuple[float, int], ...]]]
QUANTILES = {
    LengthProfile.CONVERSATION: (
        (
            (0, 2),
            (1, 29),
            (5, 181),
            (10, 207),
            (25, 396),
            (50, 1020),
            (75, 1189),
            (90, 2735),
            (95, 4083),
            (99, 4142),
            (100, 14050),
        ),
        (
            (0, 7),
            (1, 16),
            (5, 41),
            (10, 54),
            (25, 85),
            (50, 129),
            (75, 395),
            (90, 424),
            (95, 451),
            (99, 601),
            (100, 1000),
        ),
    ),
    LengthProfile.CODE: (
        (
            (0, 3),
            (1, 17),
            (5, 75),
            (10, 147),
            (25, 578),
            (50, 1469),
            (75, 2745),
            (90, 5194),
            (95, 7315),
            (99, 7436),
            (100, 7437),
        ),
        (
            (0, 6),
            (1, 6),
            (5, 6),
            (10, 7),
            (25, 9),
            (50, 13),
            (75, 24),
            (90, 55),
            (95, 90),
            (99, 252),
            (100, 1899),
        ),
    ),
}
# The fewest output tokens a request asks for: an answer of one token has no inter-token gap.
MIN_OUTPUT_TOKENS = 2
# The most prompts a prompts file may hold (a ShareGPT export has about 90,000).
MAX_PROMPTS = 200_000


@dataclass(frozen=True)
class Prompt:
    """One prompt of a prompts file: its text and, when the file gives it, its answer's
    length in tokens."""

    text: str
    output_tokens: int | None = None


@dataclass(frozen=True)
class Arrival:
    """One request of the schedule.

    Attributes:
        index: Its place in the sequence (0 first).
        t_s: When it is sent, seconds from the schedule's start.
        prompt_tokens: The prompt's length in tokens it is drawn for (None: a file's text).
        output_tokens: The answer's length it asks for (``max_tokens``).
        prompt: The file's prompt it sends (None: a generated body of ``prompt_tokens``).
    """

    index: int
    t_s: float
    prompt_tokens: int | None
    output_tokens: int
    prompt: str | None = None


@dataclass(frozen=True)
class ScheduleSpec:
    """What the schedule is a function of.

    Attributes:
        rate_rps: Mean requests per second.
        process: How the gaps are drawn.
        burstiness: The Gamma shape (``gamma`` only; 1 is Poisson).
        seed: The run's seed.
        profile: The length profile (unused for a prompt's length when ``prompts`` are given;
            an answer the file does not size is drawn from it).
        prompts: A prompts file's prompts (empty: generated prompts).
        max_prompt_tokens: The longest prompt drawn (None: no bound; the server's context).
    """

    rate_rps: float
    process: ArrivalProcess = ArrivalProcess.POISSON
    burstiness: float = 1.0
    seed: int = 0
    profile: LengthProfile = LengthProfile.CONVERSATION
    prompts: tuple[Prompt, ...] = ()
    max_prompt_tokens: int | None = None


def quantile_draw(table: Sequence[tuple[float, int]], u: float) -> int:
    """The length at quantile ``u`` (0..1) of a ``(percentile, tokens)`` table, linear between
    its rows (at least 1)."""
    qs = [q / 100.0 for q, _ in table]
    values = [float(v) for _, v in table]
    return max(1, round(float(np.interp(u, qs, values))))


def _gap_s(rng: np.random.Generator, spec: ScheduleSpec) -> float:
    if spec.process == ArrivalProcess.CONSTANT:
        return 1.0 / spec.rate_rps
    if spec.process == ArrivalProcess.GAMMA:
        shape = spec.burstiness
        return float(rng.gamma(shape, 1.0 / (spec.rate_rps * shape)))
    return float(rng.exponential(1.0 / spec.rate_rps))


def arrivals(spec: ScheduleSpec) -> Iterator[Arrival]:
    """The endless sequence of requests, in time order.

    Three generators seeded from ``(seed, stream)``: the gaps, the lengths and the prompts'
    choice each draw from their own, so the first n arrivals are the same whatever is asked
    of the rest, and a change of rate moves the times, never the lengths.
    """
    gaps, lengths, picks = (np.random.default_rng([spec.seed, 49, k]) for k in range(3))
    prompt_table, output_table = QUANTILES[LengthProfile(spec.profile)]
    t = 0.0
    index = 0
    while True:
        # the first request at the first gap: a constant schedule's first is at 1/R, not 0
        t += _gap_s(gaps, spec)
        output = quantile_draw(output_table, float(lengths.random()))
        prompt_tokens: int | None = quantile_draw(prompt_table, float(lengths.random()))
        text = None
        if spec.prompts:
            chosen = spec.prompts[int(picks.integers(len(spec.prompts)))]
            text, prompt_tokens = chosen.text, None
            output = chosen.output_tokens if chosen.output_tokens is not None else output
        elif spec.max_prompt_tokens is not None and prompt_tokens is not None:
            prompt_tokens = min(prompt_tokens, max(1, spec.max_prompt_tokens - output))
        yield Arrival(index, t, prompt_tokens, max(MIN_OUTPUT_TOKENS, output), text)
        index += 1


def schedule(spec: ScheduleSpec, start_s: float, end_s: float) -> list[Arrival]:
    """The requests sent in ``[start_s, end_s)`` seconds of the schedule."""
    out: list[Arrival] = []
    for a in arrivals(spec):
        if a.t_s >= end_s:
            return out
        if a.t_s >= start_s:
            out.append(a)
    return out  # pragma: no cover - the sequence is endless


class _Turn(msgspec.Struct):
    value: str
    speaker: str = msgspec.field(default="", name="from")


class _Line(msgspec.Struct):
    prompt: str | None = None
    conversations: list[_Turn] | None = None
    output_tokens: int | None = None


_LINE = msgspec.json.Decoder(_Line)


def read_prompts(path: Path) -> tuple[Prompt, ...]:
    """The prompts of a JSONL file: one object a line, ``{"prompt": ..., "output_tokens": N}``
    or a ShareGPT record (its first ``human`` turn is the prompt). Blank lines are skipped.

    Raises:
        UsageError: The file cannot be read, a line is not such an object, or it holds no
            prompt (one line naming the file and the line).
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--prompts-file {path}: {exc.strerror or exc}") from None
    out: list[Prompt] = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = _LINE.decode(line)
        except msgspec.DecodeError as exc:
            raise UsageError(f"--prompts-file {path} line {number}: {exc}") from None
        text = record.prompt
        if text is None and record.conversations:
            text = next((t.value for t in record.conversations if t.speaker == "human"), None)
        if not text or not text.strip():
            raise UsageError(
                f'--prompts-file {path} line {number}: no prompt (a "prompt" text or a '
                'ShareGPT "conversations" list with a human turn)'
            )
        if record.output_tokens is not None and record.output_tokens < 1:
            raise UsageError(
                f"--prompts-file {path} line {number}: output_tokens must be 1 or more"
            )
        out.append(Prompt(text, record.output_tokens))
        if len(out) > MAX_PROMPTS:
            raise UsageError(f"--prompts-file {path}: more than {MAX_PROMPTS} prompts")
    if not out:
        raise UsageError(f"--prompts-file {path} holds no prompt")
    return tuple(out)


def offered_rps(schedule_: Sequence[Arrival], seconds: float) -> float:
    """Requests the schedule sends per second over ``seconds`` (NaN over no time)."""
    return len(schedule_) / seconds if seconds > 0 else math.nan
