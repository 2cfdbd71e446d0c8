"""decode-concurrent: N streams, aggregate TPS over a fixed measurement window.

Counting is by token arrival: a window ``[t0, t1]`` opens once the streams are running, and the
aggregate TPS is the number of tokens that *arrived* inside it divided by its length.

The reasoning: docs/reference.md, "powersweep.sweep.loads.concurrent".
"""

from __future__ import annotations

import asyncio
import itertools
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from powersweep.clock import Clock
from powersweep.sweep.loads.base import (
    BUSY_TOKENS,
    ChatApi,
    History,
    LoadRun,
    PhaseLabel,
    ignore_result,
    keep_busy,
)
from powersweep.sweep.loads.concurrent_window import (
    Window,
    _all_streams_running_s,
    spread_pct,
    tokens_in_window,
    tokens_per_chunk,
    window_blocks,
)
from powersweep.sweep.loads.pace import Pace
from powersweep.sweep.loads.prompts import DECODE_PROMPTS, with_nonce
from powersweep.sweep.sampling.consistency import (
    aggregate_stall_reason,
    ratio_reason,
    stall_reason,
    stuck_stream_reason,
)
from powersweep.sweep.sampling.measure import TPS_BLOCKS, format_blocks

PROBE_GAIN = 0.03
MAX_STREAM_FAILURES = 3
# A probe window whose draw the sampler missed (no tick inside it: the window shrank to where
# every stream ran, or a read failed) is measured again, longer, before the pick uses it.
PROBE_WINDOW_TRIES = 2
# Long enough that a server packing k tokens per event shows k (a short answer's last, partial
# event would bias the ratio), short enough to cost a few seconds.
SCHEDULING_CHECK_TOKENS = 64

# Streams ask for answers that outlast the window by this factor on the pace last measured, so
# that few of them restart inside it (a restart's prefill and round trip are time that stream
# does not decode) and the window's end cuts them.
STREAM_SLACK = 1.25
# A window whose requests failed more often than this measured a different load: not a figure.
MAX_FAILED_SHARE = 0.1

# Engines whose reported context is each request's own (vLLM's and SGLang's ``max_model_len``,
# Ollama's ``num_ctx``, allocated per parallel request): concurrent streams do not divide it.
# Elsewhere (llama.cpp's ``n_ctx`` is split among its slots or shared by them, and an engine not
# known) each stream asks for no more than its share.
PER_REQUEST_CONTEXT = frozenset({"vllm", "sglang", "ollama"})

SERVER_LIMIT_HINTS = {
    "llamacpp": "llama-server --parallel (-np)",
    "vllm": "vLLM --max-num-seqs",
    "sglang": "SGLang --max-running-requests",
    "ollama": "OLLAMA_NUM_PARALLEL",
    "lmstudio": "LM Studio's parallel requests setting",
    "openai-compatible": (
        "the server's parallel-request limit (llama-cpp-python: --interrupt_requests False)"
    ),
}


class StreamingApi(ChatApi, Protocol):
    """The client calls decode-concurrent uses (``ChatClient``)."""

    async def queued_requests(self) -> int | None:
        """Requests waiting in the server (None if unknown)."""
        ...


class PowerWindow(Protocol):
    """Median draw of a recent time window (the sampler)."""

    def median_power_w(self, t0_s: float, t1_s: float) -> float:
        """Median combined draw between two run times."""
        ...


@dataclass(frozen=True)
class ProbeRow:
    """One step of the auto-concurrency probe."""

    concurrency: int
    tps: float
    power_w: float
    failures: int
    queued: int | None


class DecodeConcurrent:
    """N streams of narrative, then code requests; aggregate TPS per direction.

    Args:
        client: Server client (one per sweep, pool sized to the streams).
        clock: Run clock.
        sampler: Phase labels and window draw.
        target_s: Run seconds of each measurement window.
        concurrency: Streams; None picks by probing (``--concurrency auto``).
        bench_runs: Windows per direction per cap (median reported, spread recorded).
        max_probe: Highest N the probe tries.
        load_target: Stop probing once draw reaches this fraction of the cap.
        stretch: Streams added to the probe's pick.
        engine: Server engine (for hints naming its concurrency limit).
        total_slots: Requests the server runs at once, when it says (llama.cpp ``/props``).
        context_tokens: The server's context; where streams share it (llama.cpp's slots or
            unified cache, not :data:`PER_REQUEST_CONTEXT`'s engines) each asks for no more than
            its share.
        warn: Where warnings go.
        pace: The server's pace (shared with the warm-up), which sizes the requests.
    """

    mode = "decode-concurrent"
    prompts = len(DECODE_PROMPTS)
    min_window_s = 0.0

    def __init__(
        self,
        client: StreamingApi,
        clock: Clock,
        sampler: Any,
        target_s: float,
        *,
        concurrency: int | None = None,
        bench_runs: int = 1,
        max_probe: int = 16,
        load_target: float | None = None,
        stretch: int = 0,
        engine: str = "openai-compatible",
        total_slots: int | None = None,
        context_tokens: int | None = None,
        warn: Callable[[str], None] = lambda _m: None,
        pace: Pace | None = None,
    ) -> None:
        self.client = client
        self.pace = pace or Pace(context_tokens)
        self.context_tokens = context_tokens
        self.clock = clock
        self.sampler: PhaseLabel = sampler
        self.power: PowerWindow = sampler
        self.target_s = target_s
        self.concurrency = concurrency
        self.bench_runs = max(1, bench_runs)
        self.max_probe = max(1, max_probe)
        self.load_target = load_target
        self.stretch = max(0, stretch)
        self.engine = engine
        self.total_slots = total_slots
        self.warn = warn
        self.n = concurrency or 1
        self.ramp_s = 1.0
        self.per_chunk = 1.0
        self._nonce = itertools.count()

    def sharing(self, n: int) -> int:
        """Streams that share the server's context when ``n`` run (1: each request has its own).

        Dividing a vLLM server's per-request ``max_model_len`` among 256 streams would cap each
        request at a few tokens: every stream would restart every second, paying a request's
        round trip, prefill and client overhead per handful of tokens.
        """
        return 1 if self.engine in PER_REQUEST_CONTEXT else n

    # --- preparation ------------------------------------------------------------------------

    async def prepare(self, cap_w: float) -> dict[str, Any]:
        """Scheduling check, then (for ``auto``) the concurrency probe at this cap."""
        check_n = self.concurrency or self.max_probe
        if self.concurrency is None and self.total_slots is not None:
            check_n = min(check_n, self.total_slots)  # the probe will not go past the slots
        check = await self.scheduling_check(check_n)
        probe: list[ProbeRow] = []
        reason = "given"
        if self.concurrency is None:
            pick, probe, reason = await self.probe(cap_w)
            self.n = pick + self.stretch
        else:
            self.n = self.concurrency
        if self.total_slots is not None and self.n > self.total_slots:
            self.warn(
                f"{self.n} streams but the server runs {self.total_slots} at once: the rest "
                f"queue; raise {SERVER_LIMIT_HINTS.get(self.engine, 'its parallel limit')}"
            )
        return {
            "concurrency": self.n,
            "concurrency_auto": self.concurrency is None,
            "concurrency_stretch": self.stretch if self.concurrency is None else 0,
            "pick_reason": reason,
            "probe": [asdict(p) for p in probe],
            "scheduling_check": check,
            "tokens_per_chunk": self.per_chunk,
            "ramp_s": self.ramp_s,
            "effective_concurrency": min(self.n, self.total_slots or self.n),
        }

    def apply(self, prepared: dict[str, Any]) -> dict[str, Any]:
        """Re-use an earlier run's concurrency, ramp and tokens per chunk (``--resume``)."""
        self.n = int(prepared.get("concurrency") or self.n)
        self.ramp_s = float(prepared.get("ramp_s") or self.ramp_s)
        self.per_chunk = float(prepared.get("tokens_per_chunk") or self.per_chunk)
        return dict(prepared)

    async def scheduling_check(self, n: int) -> dict[str, Any]:
        """N tiny concurrent requests must all succeed; learns ramp time and tokens per chunk."""
        results = await asyncio.gather(
            *(
                self.client.chat(
                    with_nonce("Say hello.", f"check-{i}"),
                    max_tokens=SCHEDULING_CHECK_TOKENS,
                    prompt_kind="check",
                    stream_index=i,
                )
                for i in range(n)
            )
        )
        ok = [r for r in results if r.ok]
        ratios = [tokens_per_chunk(r, math.nan) for r in ok]
        ratios = [x for x in ratios if math.isfinite(x)]
        if ratios:
            self.per_chunk = statistics.median(ratios)
        ttfts = [r.t_first_token_s - r.t_start_s for r in ok]
        ttfts = [t for t in ttfts if math.isfinite(t)]
        if ttfts:
            self.ramp_s = min(10.0, max(0.5, 2.0 * max(ttfts)))
        failed = len(results) - len(ok)
        if failed:
            first = next((r.error for r in results if not r.ok and r.error), "failed")
            hint = SERVER_LIMIT_HINTS.get(self.engine, "the server's parallel-request limit")
            self.warn(
                f"{failed} of {n} concurrent requests failed ({first}); raise {hint} to at "
                f"least {n}"
            )
        return {"requests": n, "failed": failed, "tokens_per_chunk": self.per_chunk}

    async def probe(self, cap_w: float) -> tuple[int, list[ProbeRow], str]:
        """Try N = 1, 2, 4, ... and pick where more streams stop paying."""
        kind, prompt = DECODE_PROMPTS[0]
        length = max(2.0, self.target_s / 3.0)
        rows: list[ProbeRow] = []
        best: ProbeRow | None = None
        reason = f"reached --max-concurrency-probe {self.max_probe}"
        n = 1
        while n <= self.max_probe:
            if self.total_slots is not None and n > self.total_slots:
                reason = f"the server runs {self.total_slots} requests at once"
                break
            for attempt in range(PROBE_WINDOW_TRIES):
                w, _ = await self.window(
                    cap_w, kind, prompt, n, length * (attempt + 1), phase="probe"
                )
                power = self.power.median_power_w(w.t0_s, w.t1_s)
                if math.isfinite(power) or w.failures:
                    break
            row = ProbeRow(n, w.tps, power, w.failures, w.queued)
            rows.append(row)
            if w.failures:
                reason = f"requests failed at {n} streams"
                break
            if w.queued:
                reason = f"the server queued requests at {n} streams"
                break
            if best is None or _gained(row, best):
                best = row
            else:
                reason = f"TPS and draw gained less than {PROBE_GAIN:.0%} at {n} streams"
                break
            if self.load_target is not None and power >= self.load_target * cap_w:
                reason = f"draw reached {self.load_target:.0%} of the cap at {n} streams"
                break
            n *= 2
        return (best.concurrency if best else 1), rows, reason

    # --- measurement ------------------------------------------------------------------------

    async def measure(
        self, cap_w: float, *, metric_only: bool = False, window_s: float | None = None
    ) -> LoadRun:
        run = LoadRun()
        length = self.target_s if window_s is None else window_s
        blocks: list[tuple[float, float]] = []
        for kind, prompt in DECODE_PROMPTS[:1] if metric_only else DECODE_PROMPTS:
            values = []
            for _ in range(self.bench_runs):
                w, results = await self.window(cap_w, kind, prompt, self.n, length, "concurrent")
                run.requests.extend(results)
                run.windows.append((kind, w.t0_s, w.t1_s))
                # the draw is the median of exactly the ticks of the window the TPS counts
                run.power_windows.append((w.t0_s, w.t1_s))
                if w.failures > MAX_FAILED_SHARE * len(results):
                    first = next((r.error for r in results if not r.ok and r.error), "failed")
                    run.errors.append(
                        f"{w.failures} of {len(results)} {kind} requests failed ({first}): the "
                        f"server did not serve {self.n} streams"
                    )
                    values.append(math.nan)
                    break
                values.append(w.tps if w.tokens > 0 else math.nan)
                if kind == "narr" and w.tokens > 0:
                    blocks += window_blocks(results, w.t0_s, w.t1_s, self.per_chunk, TPS_BLOCKS)
            finite = [v for v in values if math.isfinite(v)]
            run.tps[f"{kind}_tps"] = statistics.median(finite) if finite else math.nan
            run.extra[f"{kind}_tps_spread_pct"] = spread_pct(values)
        run.tps["prefill_tps"] = math.nan
        run.extra["concurrency"] = self.n
        run.extra["tps_blocks"] = format_blocks(blocks)
        return run

    async def keep_busy(
        self, cap_w: float, seconds: float, on_result: Callable[[Any], None] = ignore_result
    ) -> None:
        """The point's N streams of the narrative prompt for ``seconds`` (or until cancelled)."""
        kind, prompt = DECODE_PROMPTS[0]
        await asyncio.gather(
            *(
                keep_busy(
                    self.client,
                    self.clock,
                    with_nonce(prompt, f"busy-{cap_w:g}-{i}-{next(self._nonce)}"),
                    kind,
                    self.pace,
                    seconds,
                    stream_index=i,
                    streams=self.sharing(self.n),
                    on_result=on_result,
                )
                for i in range(self.n)
            )
        )

    def check(self, run: LoadRun, history: History) -> str:
        """Per-stream token gaps, a stream stuck through a window, every stream paused at once
        (the aggregate arrivals), and the narrative/code ratio against the other points."""
        reason = stall_reason(run.requests)
        # every stream served at once: each should get its share of a window
        served = self.total_slots is None or self.total_slots >= self.n
        for kind, t0, t1 in run.windows:
            reason = reason or aggregate_stall_reason(run.requests, t0, t1, kind)
            if served:
                reason = reason or stuck_stream_reason(run.requests, t0, t1, kind, self.n)
        return reason or ratio_reason(
            run.tps.get("narr_tps", math.nan), run.tps.get("code_tps", math.nan), history.ratios
        )

    async def window(
        self,
        cap_w: float,
        kind: str,
        prompt: str,
        n: int,
        length_s: float,
        phase: str,
    ) -> tuple[Window, list[Any]]:
        """Run ``n`` streams through one window; the count of tokens that arrived, and the
        requests."""
        clock = self.clock
        t0 = clock.now() + self.ramp_s
        t1 = t0 + length_s
        results: list[Any] = []
        failures = 0
        queued: list[int | None] = []

        async def stream(i: int) -> None:
            nonlocal failures
            failed_in_a_row = 0
            while clock.now() < t1 and failed_in_a_row < MAX_STREAM_FAILURES:
                r = await self.client.chat(
                    with_nonce(prompt, f"{cap_w:g}-{i}-{next(self._nonce)}"),
                    max_tokens=self.pace.max_tokens(
                        kind,
                        t1 - clock.now(),
                        streams=self.sharing(n),
                        slack=STREAM_SLACK,
                        unknown=BUSY_TOKENS,
                    ),
                    prompt_kind=kind,
                    stream_index=i,
                    record_token_times=True,
                    deadline_s=t1,
                )
                results.append(r)
                if r.ok:
                    failed_in_a_row = 0
                else:
                    failures += 1
                    failed_in_a_row += 1

        async def labels() -> None:
            await clock.asleep(t0 - clock.now())
            self.sampler.label(cap_w, phase)
            # Asked twice: a server can hold the previous window's cut-off requests a moment
            # after the client hung up, and only a queue that persists is real.
            for at in (0.5, 0.75):
                await clock.asleep(t0 + at * (t1 - t0) - clock.now())
                queued.append(await self.client.queued_requests())
            await clock.asleep(t1 - clock.now())
            self.sampler.label(cap_w, "settle")

        await asyncio.gather(labels(), *(stream(i) for i in range(n)))
        # The ramp learned from the scheduling check's tiny prompts can be shorter than the
        # measured prompts' staggered prefills: counting from before the last stream's first
        # token would average fewer streams than N and read low. Open the window once all run.
        # That stream's first token marks the start, so it is not counted in the window (as a
        # request's decode rate counts n - 1 tokens between its first and last).
        running = _all_streams_running_s(results)
        if running is not None and t0 < running < t1:
            t0 = math.nextafter(running, math.inf)
        tokens = tokens_in_window(results, t0, t1, self.per_chunk)
        self.pace.learn(results)
        known = [q for q in queued if q is not None]
        window = Window(
            n, t0, t1, tokens, tokens / (t1 - t0), failures, min(known) if known else None
        )
        return window, results


def _gained(row: ProbeRow, best: ProbeRow) -> bool:
    """More streams paid: TPS or draw rose by over ``PROBE_GAIN``.

    A draw the sampler could not read (NaN on either side) is no evidence either way, so TPS
    alone decides then.
    """
    if row.tps > best.tps * (1 + PROBE_GAIN):
        return True
    return bool(row.power_w > best.power_w * (1 + PROBE_GAIN))
