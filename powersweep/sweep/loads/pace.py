"""The server's pace: how fast it decodes one stream and answers a first token, per prompt kind,
and how many tokens it packs into a chunk, as last measured; every request is sized from it.

The reasoning: docs/reference.md, "powersweep.sweep.loads.pace".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

from powersweep.runformat import CUT_FINISHES

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
# A request is sized to stream for this share of the time left in its window: one that ends a
# little early is followed by another, one that runs long is cut without its server count.
AIM_SHARE = 0.97


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
