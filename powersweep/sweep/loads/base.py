"""The measured loads: what runs against the server at each operating point.

Each load is time-bounded and labels the sampler with its phase, so the draw can be matched to
the work. A load is prepared once at the first point (probe, calibration), then measured at every
point; it reports its own TPS figures, since each mode defines them differently, and says whether
its own requests show a disturbance (:meth:`Load.check`).

**Time-bounded windows.** Each prompt's window ends ``window_s`` run seconds after it opened; no
request starts after that, and one that started inside it may run on for a margin
(:func:`window_margin_s`) before it is cut. Requests are sized so that they end near the window's
end with the server's own token count (``usage``): each asks for the tokens the rate measured at
the previous point (:class:`Pace`) produces in the time left. A request still streaming past the
margin is cut; its tokens count as token-bearing chunks times the server's tokens per chunk
(``token_source`` ``chunks`` or ``chunks-scaled``), so a server that ignores ``max_tokens`` costs
the window and the margin, never more.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from powersweep.clock import Clock
from powersweep.runformat import (
    CUT_FINISHES,
    WARN_IGNORED_MAX_TOKENS,
    WARN_NO_USAGE,
    WARN_PACKED_CHUNKS,
    WARN_SERVER_BUSY,
)

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
# A request asks for at least this many tokens (a rate needs a few intervals) ...
MIN_REQUEST_TOKENS = 16
# ... and at most this many (a fast card's minute-long window).
MAX_REQUEST_TOKENS = 32768
# Tokens of the first request of a kind whose rate is not known yet (it measures the rate).
PROBE_TOKENS = 48
# Room a request leaves in the server's context for its prompt and the chat template.
PROMPT_ROOM_TOKENS = 400
# Another request is sent only when the time left in the window is at least this many times
# the expected time to first token (and this share of the window): else its prefill would be
# most of it.
FOLLOW_UP_TTFT_FACTOR = 3.0
FOLLOW_UP_SHARE = 0.05
# Tokens a request that only keeps the card busy asks for while the pace is not known, and the
# run seconds it is sized for when it is (a longer wait sends several).
BUSY_TOKENS = 1000
BUSY_REQUEST_S = 30.0
# A request is sized to stream for this share of the time left in its window: one that ends a
# little early is followed by another, one that runs long is cut without its server count.
AIM_SHARE = 0.97
# The first request of a window is sized for this share of it from the rate expected at the
# point: the next, sized from the rate it measured, ends the window on time.
FIRST_SHARE = 0.6
# A server whose counts show this much more than one token per chunk packs tokens.
PACKED_SHARE = 0.1
# Token source of a cut request whose chunks were converted with the server's tokens per chunk.
CHUNKS_SCALED = "chunks-scaled"


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


def server_tokens_per_chunk(results: Iterable[Any]) -> float:
    """Median tokens per token-bearing chunk of the completed requests with a server count."""
    ratios = [
        float(r.completion_tokens) / float(r.chunk_tokens)
        for r in results
        if r.ok
        and r.finish_reason not in CUT_FINISHES
        and r.token_source in ("usage", "timings")
        and r.completion_tokens
        and r.chunk_tokens
    ]
    return statistics.median(ratios) if ratios else math.nan


class Pace:
    """The server's pace as last measured: per prompt kind, the decode rate of one stream and
    the time to first token; and the server's tokens per chunk. Requests are sized from it.

    Args:
        context_tokens: The server's context (None: unknown); a request asks for no more than
            fits in it.
    """

    def __init__(self, context_tokens: int | None = None) -> None:
        self.context_tokens = context_tokens
        self.decode_tps: dict[str, float] = {}
        self.ttft_s: dict[str, float] = {}
        # the server's tokens per token-bearing chunk, once its own counts showed it
        self.tokens_per_chunk: float | None = None
        # decode rate per kind at each point measured, by the point's position on its axis
        self._at: dict[str, dict[float, float]] = {}

    def remember(self, position: float) -> None:
        """Keep the rates just learned as those of the point at ``position`` (a cap, a lock)."""
        if not math.isfinite(position):
            return
        for kind, rate in self.decode_tps.items():
            self._at.setdefault(kind, {})[position] = rate

    def aim(self, position: float) -> None:
        """Expect the rates of the point at ``position`` before it is measured.

        The rate moves smoothly and monotonically with the cap (or the lock), and never faster
        than in proportion to it (a rate proportional to the draw is the steepest a card has,
        at its voltage floor): a line through the two measured points nearest to it predicts
        it, held between the nearest one's rate and that rate scaled by the positions' ratio.
        With one point measured, the bound on the slow side is taken: a request that ends
        early is followed by another, one that runs long is cut.
        """
        if not (math.isfinite(position) and position > 0):
            return
        for kind, known in self._at.items():
            near = sorted(known, key=lambda p: abs(p - position))[:2]
            p1 = near[0]
            r1 = known[p1]
            scaled = r1 * position / p1 if p1 > 0 else r1
            lo, hi = min(r1, scaled), max(r1, scaled)
            if len(near) < 2 or near[0] == near[1]:
                self.decode_tps[kind] = lo
                continue
            p2 = near[1]
            predicted = r1 + (known[p2] - r1) * (position - p1) / (p2 - p1)
            self.decode_tps[kind] = min(max(predicted, lo), hi)

    def learn(self, results: Iterable[Any], kind: str | None = None) -> None:
        """Take the rates the completed requests of one point (or warm-up) showed.

        Args:
            results: Request results.
            kind: The prompt kind of every result (None: each result's ``prompt_kind``).
        """
        results = list(results)
        tpc = server_tokens_per_chunk(results)
        if math.isfinite(tpc):
            self.tokens_per_chunk = tpc
        by_kind: dict[str, list[Any]] = {}
        for r in results:
            if r.ok:
                by_kind.setdefault(kind or r.prompt_kind, []).append(r)
        for kind, rs in by_kind.items():
            tokens = seconds = 0.0
            ttfts = []
            for r in rs:
                span = r.t_last_token_s - r.t_first_token_s
                if r.completion_tokens and r.completion_tokens >= 2 and span > 0:
                    tokens += r.completion_tokens - 1
                    seconds += span
                ttft = r.t_first_token_s - r.t_start_s
                if math.isfinite(ttft) and ttft >= 0:
                    ttfts.append(ttft)
            if seconds > 0:
                self.decode_tps[kind] = tokens / seconds
            if ttfts:
                self.ttft_s[kind] = statistics.median(ttfts)

    def knows(self, kind: str) -> bool:
        """True once a rate of this prompt kind was measured."""
        return kind in self.decode_tps

    def max_tokens(
        self,
        kind: str,
        seconds: float,
        *,
        streams: int = 1,
        slack: float = 1.0,
        unknown: int = PROBE_TOKENS,
    ) -> int:
        """Tokens a request of ``kind`` should ask for to stream for ``seconds`` run seconds.

        Args:
            kind: The prompt kind (its rate and time to first token).
            seconds: Run seconds the request should last, first token included.
            streams: Streams sharing the server's context.
            slack: Factor on the tokens (more than 1 outlasts the time: the window's end cuts).
            unknown: Tokens to ask for while the kind's rate is not known.
        """
        rate = self.decode_tps.get(kind)
        if rate is None:
            wanted = unknown
        else:
            decoding = max(0.0, AIM_SHARE * seconds - self.ttft_s.get(kind, 0.0))
            wanted = math.ceil(rate * decoding * slack)
        ceiling = MAX_REQUEST_TOKENS
        if self.context_tokens:
            share = self.context_tokens // max(1, streams) - PROMPT_ROOM_TOKENS
            ceiling = max(MIN_REQUEST_TOKENS, min(ceiling, share))
        return max(MIN_REQUEST_TOKENS, min(ceiling, wanted))

    def worth_another(self, kind: str, left_s: float, window_s: float) -> bool:
        """True when ``left_s`` of a window is worth another request of ``kind``."""
        ttft = self.ttft_s.get(kind, 0.0)
        return left_s > max(FOLLOW_UP_TTFT_FACTOR * ttft, FOLLOW_UP_SHARE * window_s)

    def snapshot(self) -> dict[str, Any]:
        """What ``run.json`` keeps of the pace (the warm-up's, for a resumed run)."""
        return {
            "decode_tps": dict(self.decode_tps),
            "ttft_s": dict(self.ttft_s),
            "tokens_per_chunk": self.tokens_per_chunk,
        }

    def restore(self, data: Any) -> None:
        """Take a pace :meth:`snapshot` wrote (a resumed run); ignores what it cannot read."""
        if not isinstance(data, dict):
            return
        for key in ("decode_tps", "ttft_s"):
            values = data.get(key)
            if isinstance(values, dict):
                getattr(self, key).update(
                    {
                        str(k): float(v)
                        for k, v in values.items()
                        if isinstance(v, int | float) and math.isfinite(v) and v > 0
                    }
                )
        tpc = data.get("tokens_per_chunk")
        if isinstance(tpc, int | float) and not isinstance(tpc, bool) and math.isfinite(tpc):
            self.tokens_per_chunk = float(tpc) if tpc > 0 else None


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
                    finite = [v for v in (value, out.extra[key]) if _finite(v)]
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


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


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
