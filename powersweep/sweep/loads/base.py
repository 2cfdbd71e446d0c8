"""The measured loads: what runs against the server at each operating point.

Each load is time-bounded and labels the sampler with its phase, so the draw can be matched to
the work.

The reasoning: docs/reference.md, "powersweep.sweep.loads.base".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from powersweep.clock import Clock
from powersweep.runformat import (
    CUT_FINISHES,
    WARN_IGNORED_MAX_TOKENS,
    WARN_NO_USAGE,
    WARN_PACKED_CHUNKS,
    WARN_SERVER_BUSY,
    as_float,
)
from powersweep.sweep.loads.pace import Pace, server_tokens_per_chunk

MAX_CONSECUTIVE_FAILURES = 3
# The margin a request started inside a window may run past it: at most this many run seconds
# over all prompts of a point ...
MARGIN_MAX_S = 1.5
# ... and at most this share of one prompt's window.
MARGIN_SHARE = 0.1
# Requests without a window of their own (probes, calibration) are cut this long past the
# longest window they serve.
REQUEST_MARGIN_S = 30.0
TOO_SLOW = "too slow for the window"
# Tokens a request that only keeps the card busy asks for while the pace is not known, and the
# run seconds it is sized for when it is (a longer wait sends several).
BUSY_TOKENS = 1000
BUSY_REQUEST_S = 30.0
# The first request of a window is sized for this share of it from the rate expected at the
# point: the next, sized from the rate it measured, ends the window on time.
FIRST_SHARE = 0.6
# A server whose counts show this much more than one token per chunk packs tokens.
PACKED_SHARE = 0.1
# Token source of a cut request whose chunks were converted with the server's tokens per chunk.
CHUNKS_SCALED = "chunks-scaled"


# A prompt's figure stands when requests that completed (or were cut by a reset after tokens)
# streamed for at least this share of its window: the failed rest, the card idle, moves the
# point's median draw by little. decode-single and prefill-heavy judge their failed requests by
# it; decode-concurrent, whose streams overlap, by their count (at most 10% failed).
MIN_MEASURED_SHARE = 0.9


def measured_share(
    requests: Sequence[Any], windows: Sequence[tuple[str, float, float]], kind: str
) -> float:
    """The share of ``kind``'s windows its usable requests streamed in (0 without a window)."""
    total = sum(t1 - t0 for k, t0, t1 in windows if k == kind)
    if not total > 0:
        return 0.0
    covered = 0.0
    for k, t0, t1 in windows:
        if k != kind:
            continue
        for r in requests:
            if r.ok and math.isfinite(r.t_start_s) and math.isfinite(r.t_end_s):
                covered += max(0.0, min(r.t_end_s, t1) - max(r.t_start_s, t0))
    return min(1.0, covered / total)


def window_margin_s(window_s: float, prompts: int = 1) -> float:
    """Run seconds a request started inside a ``window_s`` window may run past it.

    At most :data:`MARGIN_SHARE` of the window, and :data:`MARGIN_MAX_S` over the point's
    ``prompts`` windows together.
    """
    return min(MARGIN_MAX_S / max(1, prompts), MARGIN_SHARE * window_s)


def request_budget_s(window_s: float) -> float:
    """Run seconds a request with no window of its own (probe, calibration) may take."""
    return window_s + REQUEST_MARGIN_S


def judge_cut(result: Any, budget_s: float) -> Any:
    """A request cut at its deadline before any token arrived is a failure that says why."""
    if (
        not result.ok
        or getattr(result, "finish_reason", None) != "deadline"
        or result.chunk_tokens > 0
    ):
        return result
    busy = WARN_SERVER_BUSY in getattr(result, "warnings", ())
    why = "it answered busy (HTTP 429/503) until then" if busy else f"the server is {TOO_SLOW}"
    return dataclasses.replace(
        result,
        ok=False,
        error=(
            f"no token arrived within {budget_s:.3g} s: {why} (or stuck); use a longer "
            "--target-cap-seconds or a lighter load"
        ),
    )


def count_cut(result: Any, tokens_per_chunk: float | None) -> Any:
    """A request cut at its deadline (or by a reset) counts its chunks times the server's tokens
    per chunk.

    A cut request has no server count; its chunks are converted with the tokens per chunk the
    server's own counts showed on completed requests (``token_source`` ``chunks-scaled`` when
    that is not one token per chunk), and it carries the warnings a completed request would:
    ``packed_chunks`` when the server packs tokens, ``ignored_max_tokens`` when it streamed more
    than it was asked for. Without any server count (``tokens_per_chunk`` None) the chunks are
    the count, and ``no_usage`` says so.
    """
    if not (
        result.ok
        and result.finish_reason in CUT_FINISHES
        and result.token_source == "chunks"
        and result.chunk_tokens > 0
    ):
        return result
    warnings = list(result.warnings)
    if tokens_per_chunk is None or not (math.isfinite(tokens_per_chunk) and tokens_per_chunk > 0):
        count, source = result.chunk_tokens, "chunks"
        warnings.append(WARN_NO_USAGE)
    elif abs(tokens_per_chunk - 1.0) < 1e-9:
        count, source = result.chunk_tokens, "chunks"
    else:
        count, source = round(result.chunk_tokens * tokens_per_chunk), CHUNKS_SCALED
        if tokens_per_chunk > 1.0 + PACKED_SHARE:
            warnings.append(WARN_PACKED_CHUNKS)
    limit = getattr(result, "max_tokens", None)
    if limit is not None and count > limit:
        warnings.append(WARN_IGNORED_MAX_TOKENS)
    return dataclasses.replace(
        result,
        completion_tokens=count,
        token_source=source,
        warnings=tuple(dict.fromkeys(warnings)),
    )


class ChatApi(Protocol):
    """The part of the client the loads use (``powersweep.sweep.server.client.ChatClient``)."""

    async def chat(
        self,
        prompt: str,
        *,
        max_tokens: int,
        prompt_kind: str,
        stream_index: int = 0,
        stream: bool = True,
        record_token_times: bool = False,
        extra_body: dict[str, Any] | None = None,
        deadline_s: float | None = None,
    ) -> Any:
        """Send one chat request and return its result (never raises for server errors)."""
        ...


class PhaseLabel(Protocol):
    """Where the load says what it is doing (the sampler)."""

    def label(self, cap_w: float, phase: str) -> None:
        """Label the following samples."""
        ...


@dataclass
class LoadRun:
    """What a load did at one point.

    Attributes:
        requests: Every request result, in order.
        windows: ``(phase, t_start_s, t_end_s)`` of each measured phase.
        tps: The point's figures by ``caps.csv`` column (``narr_tps``, ``code_tps``,
            ``prefill_tps``); NaN where not measured.
        extra: More ``caps.csv`` columns the mode adds (spreads, counts).
        errors: Why measured figures were rejected (truncated prompts, cache hits...).
        power_windows: ``(t_start_s, t_end_s)`` spans the draw median must use exactly, when
            the TPS was counted inside them (decode-concurrent); empty: every load tick.
    """

    requests: list[Any] = field(default_factory=list)
    windows: list[tuple[str, float, float]] = field(default_factory=list)
    tps: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    power_windows: list[tuple[float, float]] = field(default_factory=list)

    @property
    def window_s(self) -> float:
        """Total measured seconds."""
        return sum(t1 - t0 for _, t0, t1 in self.windows)

    def kind_s(self, kind: str) -> float:
        """Measured seconds of the windows of one prompt kind."""
        return sum(t1 - t0 for k, t0, t1 in self.windows if k == kind)

    @classmethod
    def merged(cls, runs: Sequence[LoadRun]) -> LoadRun:
        """One point measured in several rounds, as one run.

        Requests, windows and errors are pooled; each TPS figure is the rounds' figures
        weighted by the seconds of their windows of that kind (the pooled rate of equal-rate
        windows); ``tps_blocks`` are pooled, a spread is the largest of the rounds', and any
        other column is the first round's (later rounds measure the metric's prompt only).
        """
        if len(runs) == 1:
            return runs[0]
        out = LoadRun()
        for run in runs:
            out.requests += run.requests
            out.windows += run.windows
            out.errors += run.errors
            out.power_windows += run.power_windows
        for column in dict.fromkeys(c for run in runs for c in run.tps):
            out.tps[column] = _weighted(runs, lambda r: r.tps, column)
        for run in reversed(runs):
            for key, value in run.extra.items():
                if key == "tps_blocks" or key in WEIGHTED_EXTRA:
                    continue
                if key.endswith("_spread_pct") and key in out.extra:
                    finite = [v for v in (value, out.extra[key]) if as_float(v, None) is not None]
                    out.extra[key] = max(finite) if finite else value
                    continue
                out.extra[key] = value
        for key in WEIGHTED_EXTRA:
            if any(key in run.extra for run in runs):
                out.extra[key] = _weighted(runs, lambda r: r.extra, key)
        blocks = " ".join(str(run.extra.get("tps_blocks") or "") for run in runs).split()
        if any("tps_blocks" in run.extra for run in runs):
            out.extra["tps_blocks"] = " ".join(blocks)
        return out


# Rate columns a load adds beside its TPS figures, and the prompt kind whose windows weigh them.
WEIGHTED_EXTRA = {"prefill_wall_tps": "prefill"}


def _weighted(
    runs: Sequence[LoadRun], table: Callable[[LoadRun], dict[str, Any]], column: str
) -> float:
    """A rate column of several rounds: weighted by the seconds of its kind's windows; NaN when
    a round that measured that kind has no figure (its requests failed)."""
    kind = WEIGHTED_EXTRA.get(column, column.removesuffix("_tps"))
    pairs = [(float(table(r)[column]), r.kind_s(kind)) for r in runs if column in table(r)]
    measured = [(v, w) for v, w in pairs if w > 0]
    if not measured:
        return pairs[0][0] if pairs else math.nan
    if not all(math.isfinite(v) for v, _ in measured):
        return math.nan
    return sum(v * w for v, w in measured) / sum(w for _, w in measured)


@dataclass(frozen=True)
class History:
    """What the other points measured so far showed, for a load's consistency checks.

    Attributes:
        ratios: code/narrative rate ratio of each other point measured ok.
        prefill_s_per_token: Time to first token per prompt token of each other point (by the
            point's position: its cap, or its SM lock on a clock axis).
        position: The position of the point being checked, in the same units.
        prefill_by_rank: Per other point, the time to first token per prompt token of the k-th
            prefill prompt of its windows, by k (a difference between prompts that every point
            shows is systematic, not a pause).
    """

    ratios: tuple[float, ...] = ()
    prefill_s_per_token: dict[float, float] = field(default_factory=dict)
    position: float = math.nan
    prefill_by_rank: dict[float, dict[int, float]] = field(default_factory=dict)


def ignore_result(result: Any) -> None:
    """The default sink of the keep-busy load's results: nothing counts them."""


class Load(Protocol):
    """A load mode."""

    mode: str
    # Measured windows per point (two prompts in the decode modes, one in prefill-heavy).
    prompts: int

    @property
    def min_window_s(self) -> float:
        """The shortest window a point may measure, run seconds (prefill-heavy: two prompts)."""
        ...

    async def prepare(self, cap_w: float) -> dict[str, Any]:
        """Probe or calibrate at the first point, before the sweep; returns facts for run.json."""
        ...

    async def measure(
        self, cap_w: float, *, metric_only: bool = False, window_s: float | None = None
    ) -> LoadRun:
        """Run the measured load at one point.

        Args:
            cap_w: The point's limit (labels the samples).
            metric_only: Only the prompt whose figure decides the sweet spot (the narrative
                one in the decode modes): a point measured on, and the confirm phase.
            window_s: Run seconds of each prompt's window (None: the load's target).
        """
        ...

    def apply(self, prepared: dict[str, Any]) -> dict[str, Any]:
        """Take a set-up from an earlier :meth:`prepare` (a resumed run) instead of probing."""
        ...

    def check(self, run: LoadRun, history: History) -> str:
        """Why the point's own requests show a disturbance (empty when they do not)."""
        ...

    async def keep_busy(
        self, cap_w: float, seconds: float, on_result: Callable[[Any], None] = ignore_result
    ) -> None:
        """Load the card as the point's measurement will, for ``seconds`` or until cancelled
        (while the card settles at a new point, and while the next points are planned);
        ``on_result`` gets each request's result, so the faults it met are counted."""
        ...


async def run_prompts(
    client: ChatApi,
    clock: Clock,
    sampler: PhaseLabel,
    cap_w: float,
    prompts: Sequence[tuple[str, str]],
    target_s: float,
    pace: Pace,
) -> LoadRun:
    """Each prompt for one time-bounded window of ``target_s`` run seconds.

    The first request of a window is sized from ``pace`` (the rate expected at this point) for
    :data:`FIRST_SHARE` of it, the next ones from the rate it just measured here, to end with the
    window: a rate misjudged by less than the rest of the window still ends on time, with the
    server's own count. A prompt stops early after three consecutive failed requests, so a dead
    server costs a few requests per point, not a hang.
    """
    run = LoadRun()
    margin = window_margin_s(target_s, len(prompts))
    for kind, prompt in prompts:
        sampler.label(cap_w, kind)
        t0 = clock.now()
        end, deadline = t0 + target_s, t0 + target_s + margin
        failures = 0
        results: list[Any] = []
        while True:
            left = end - clock.now()
            share = 1.0 if results else FIRST_SHARE
            result = await client.chat(
                prompt,
                max_tokens=pace.max_tokens(kind, share * left),
                prompt_kind=kind,
                record_token_times=True,
                deadline_s=deadline,
            )
            results.append(judge_cut(result, deadline - result.t_start_s))
            failures = 0 if result.ok else failures + 1
            pace.learn(results[-1:])  # the next request is sized from this point's own rate
            left = end - clock.now()
            if failures >= MAX_CONSECUTIVE_FAILURES or not pace.worth_another(kind, left, target_s):
                break
        run.windows.append((kind, t0, clock.now()))
        tpc = server_tokens_per_chunk(results)
        per_chunk = tpc if math.isfinite(tpc) else pace.tokens_per_chunk
        run.requests += [count_cut(r, per_chunk) for r in results]
    pace.learn(run.requests)
    return run


async def keep_busy(
    client: ChatApi,
    clock: Clock,
    prompt: str,
    kind: str,
    pace: Pace,
    seconds: float,
    *,
    stream_index: int = 0,
    streams: int = 1,
    on_result: Callable[[Any], None] = ignore_result,
) -> None:
    """Keep one stream of ``kind`` requests running for ``seconds`` (the caller may cancel it
    sooner): the card stays at the point's load while nothing is measured (settle, planning).
    Each result goes to ``on_result`` (the faults a server shows here are faults too)."""
    end = clock.now() + seconds
    failures = 0
    while clock.now() < end and failures < MAX_CONSECUTIVE_FAILURES:
        each = min(end - clock.now(), BUSY_REQUEST_S)
        r = await client.chat(
            prompt,
            max_tokens=pace.max_tokens(kind, each, streams=streams, slack=1.5, unknown=BUSY_TOKENS),
            prompt_kind="settle",
            stream_index=stream_index,
            deadline_s=end,
        )
        on_result(r)
        failures = 0 if r.ok else failures + 1
