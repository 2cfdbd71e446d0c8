"""decode-single: one stream, the narrative prompt then the code prompt, each time-bounded."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from powersweep.clock import Clock
from powersweep.sweep.loads.base import (
    MIN_MEASURED_SHARE,
    ChatApi,
    History,
    LoadRun,
    PhaseLabel,
    ignore_result,
    keep_busy,
    measured_share,
    run_prompts,
)
from powersweep.sweep.loads.pace import Pace
from powersweep.sweep.loads.prompts import DECODE_PROMPTS
from powersweep.sweep.sampling.consistency import ratio_reason, stall_reason
from powersweep.sweep.sampling.stream_rate import decode_tps


class DecodeSingle:
    """One stream: the narrative prompt, then the code prompt, each for the target seconds.

    Args:
        client: Server client.
        clock: Run clock.
        sampler: Phase labels.
        target_s: Run seconds of each prompt's window per point.
        pace: The server's pace, which sizes the requests (shared with the warm-up).
    """

    mode = "decode-single"
    prompts = len(DECODE_PROMPTS)
    min_window_s = 0.0

    def __init__(
        self,
        client: ChatApi,
        clock: Clock,
        sampler: PhaseLabel,
        target_s: float,
        pace: Pace | None = None,
    ):
        self.client = client
        self.clock = clock
        self.sampler = sampler
        self.target_s = target_s
        self.pace = pace or Pace()

    async def prepare(self, cap_w: float) -> dict[str, Any]:
        return {}

    def apply(self, prepared: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def measure(
        self, cap_w: float, *, metric_only: bool = False, window_s: float | None = None
    ) -> LoadRun:
        prompts = DECODE_PROMPTS[:1] if metric_only else DECODE_PROMPTS
        length = self.target_s if window_s is None else window_s
        run = await run_prompts(
            self.client, self.clock, self.sampler, cap_w, prompts, length, self.pace
        )
        run.tps = {"narr_tps": math.nan, "code_tps": math.nan, "prefill_tps": math.nan}
        for kind, _ in prompts:
            mine = [r for r in run.requests if r.prompt_kind == kind]
            failed = [r for r in mine if not r.ok]
            share = measured_share(mine, run.windows, kind)
            if failed and share < MIN_MEASURED_SHARE:
                # too much of the window the server did not serve the load: its figure describes
                # no steady load (measured once more at the end)
                run.errors.append(
                    f"{len(failed)} of {len(mine)} {kind} requests failed ({failed[0].error}); "
                    f"{share:.0%} of the window was measured"
                )
                continue
            # a failure that cost little of the window is a counted fault, and the requests
            # that streamed around it measured the rate
            run.tps[f"{kind}_tps"] = decode_tps(run.requests, kind)
        return run

    async def keep_busy(
        self, cap_w: float, seconds: float, on_result: Callable[[Any], None] = ignore_result
    ) -> None:
        """One stream of the narrative prompt for ``seconds`` (or until cancelled)."""
        kind, prompt = DECODE_PROMPTS[0]
        await keep_busy(
            self.client, self.clock, prompt, kind, self.pace, seconds, on_result=on_result
        )

    def check(self, run: LoadRun, history: History) -> str:
        """Token gaps of each request, and the narrative/code ratio against the other points."""
        return stall_reason(run.requests) or ratio_reason(
            run.tps.get("narr_tps", math.nan), run.tps.get("code_tps", math.nan), history.ratios
        )
