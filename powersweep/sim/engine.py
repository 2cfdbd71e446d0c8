"""What the simulated server needs from the simulated rig: token rates that follow the GPU.

The server registers each request's work with the engine while it runs (so the GPUs draw power
and heat up) and asks the engine, before every token, how fast tokens flow *now*.

The reasoning: docs/simulated-rig.md, "powersweep.sim.engine".
"""

from __future__ import annotations

from typing import Literal, Protocol

from powersweep.clock import Clock

WorkKind = Literal["decode", "prefill"]


class SimEngine(Protocol):
    """Token rates of the simulated rig at this instant (they follow the simulated clocks)."""

    @property
    def clock(self) -> Clock:
        """The run clock every pacing sleep must use."""
        ...

    @property
    def context_tokens(self) -> int:
        """Context length the simulated model was loaded with."""
        ...

    def work_started(self, kind: WorkKind) -> None:
        """A request entered a phase (``prefill`` or ``decode``) and now loads the GPUs."""
        ...

    def work_finished(self, kind: WorkKind) -> None:
        """A request left a phase."""
        ...

    def decode_rate_tps(self) -> float:
        """Tokens per run second *per stream* right now, given the streams decoding now."""
        ...

    def prefill_rate_tps(self, prompt_tokens: int) -> float:
        """Prompt tokens per run second for a prompt of this length right now."""
        ...

    def instability_mhz(self) -> float:
        """How far the serving cards' SM clock offsets go beyond their stable margin right now,
        MHz (the worst card; 0.0 when stable): past it they compute wrong results."""
        ...

    def reset_count(self) -> int:
        """How many times a serving card has reset so far (work in flight on it was lost)."""
        ...

    def off_bus(self) -> bool:
        """Whether a serving card is off the bus now, recovering from a reset (no work runs)."""
        ...


class ConstantEngine:
    """A :class:`SimEngine` with fixed rates: a test double and a benchmark baseline.

    Args:
        clock: Run clock.
        decode_tps: Per-stream decode rate (tokens per run second), whatever the batch.
        prefill_tps: Prompt tokens per run second.
        context_tokens: Context length reported by the server.

    Attributes:
        instability_mhz_now: What :meth:`instability_mhz` reports (a test sets it).
        resets_so_far: What :meth:`reset_count` reports (a test sets it).
        off_bus_now: What :meth:`off_bus` reports (a test sets it).
    """

    def __init__(
        self,
        clock: Clock,
        decode_tps: float = 50.0,
        prefill_tps: float = 2000.0,
        context_tokens: int = 32768,
    ) -> None:
        self._clock = clock
        self._decode_tps = decode_tps
        self._prefill_tps = prefill_tps
        self._context_tokens = context_tokens
        self.active: dict[str, int] = {"decode": 0, "prefill": 0}
        self.peak_active: dict[str, int] = {"decode": 0, "prefill": 0}
        self.instability_mhz_now = 0.0
        self.resets_so_far = 0
        self.off_bus_now = False

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def context_tokens(self) -> int:
        return self._context_tokens

    def work_started(self, kind: WorkKind) -> None:
        self.active[kind] += 1
        self.peak_active[kind] = max(self.peak_active[kind], self.active[kind])

    def work_finished(self, kind: WorkKind) -> None:
        self.active[kind] -= 1

    def decode_rate_tps(self) -> float:
        return self._decode_tps

    def prefill_rate_tps(self, prompt_tokens: int) -> float:
        return self._prefill_tps

    def instability_mhz(self) -> float:
        return self.instability_mhz_now

    def reset_count(self) -> int:
        return self.resets_so_far

    def off_bus(self) -> bool:
        return self.off_bus_now
