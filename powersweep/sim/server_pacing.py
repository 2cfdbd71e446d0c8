"""The world's noise on the simulated server's pacing (``--sim-world``, :mod:`.world`).

The reasoning: docs/world-noise.md, "powersweep.sim.server_pacing".
"""

from __future__ import annotations

from powersweep.sim.world import Gaps, World, finish_s


class Pacing:
    """How long a request's work takes under the world's noise.

    Args:
        world: The models on.
    """

    def __init__(self, world: World) -> None:
        self._world = world
        self._gaps: list[Gaps] = [g for g in (world.bursts, world.hiccups) if g is not None]
        self._outliers: dict[int, bool] = {}

    def speed_factor(self, at_s: float) -> float:
        """What a step begun at ``at_s`` takes, as a multiple of the engine's step (ar-jitter
        and drift; 1.0 without them)."""
        world = self._world
        factor = 1.0
        if world.wander is not None:
            factor *= world.wander.at(at_s)
        if world.drift is not None:
            factor /= world.drift.at(at_s)
        return factor

    def prefill_end(self, start_s: float, work_s: float) -> float:
        """When a prefill of ``work_s`` engine seconds begun at ``start_s`` ends."""
        return self.finish(start_s, work_s * self.speed_factor(start_s))

    def decode_step(
        self, step_s: float, at_s: float, request_no: int, context_tokens: int
    ) -> float:
        """The work of one token whose engine step is ``step_s``, begun at ``at_s``, of the
        request numbered ``request_no`` with ``context_tokens`` already in its context."""
        world = self._world
        step = step_s * self.speed_factor(at_s) * (1.0 + world.context_per_token * context_tokens)
        if world.outlier_factor is not None and self._outlier(request_no):
            step /= world.outlier_factor
        return step

    def _outlier(self, request_no: int) -> bool:
        known = self._outliers.get(request_no)
        if known is None:
            known = self._outliers[request_no] = self._world.is_outlier(request_no)
        return known

    def finish(self, start_s: float, work_s: float) -> float:
        """When ``work_s`` seconds of work begun at ``start_s`` end, standing still in the gaps
        (bursty-draw's and the hiccups')."""
        if not self._gaps:
            return start_s + work_s
        return finish_s(start_s, work_s, self._gaps)
