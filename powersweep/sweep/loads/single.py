"""decode-single: one stream, the narrative prompt then the code prompt, each time-bounded."""

from __future__ import annotations

import math
from typing import Any

from powersweep.clock import Clock
from powersweep.sweep.loads.base import ChatApi, LoadRun, PhaseLabel, run_prompts
from powersweep.sweep.loads.prompts import DECODE_PROMPTS
from powersweep.sweep.sampling.measure import decode_tps


class DecodeSingle:
    """One stream: the narrative prompt, then the code prompt, each for the target seconds.

    Args:
        client: Server client.
        clock: Run clock.
        sampler: Phase labels.
        target_s: Run seconds each prompt must cover per cap.
    """

    mode = "decode-single"

    def __init__(self, client: ChatApi, clock: Clock, sampler: PhaseLabel, target_s: float):
        self.client = client
        self.clock = clock
        self.sampler = sampler
        self.target_s = target_s

    async def prepare(self, cap_w: float) -> dict[str, Any]:
        return {}

    def apply(self, prepared: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def measure(self, cap_w: float) -> LoadRun:
        run = await run_prompts(
            self.client, self.clock, self.sampler, cap_w, DECODE_PROMPTS, self.target_s
        )
        run.tps = {
            "narr_tps": decode_tps(run.requests, "narr"),
            "code_tps": decode_tps(run.requests, "code"),
            "prefill_tps": math.nan,
        }
        return run
