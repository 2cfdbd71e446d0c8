"""How long a point waits for the temperature still to come to stop biasing it.

Every point, a step or a jump alike, waits when the drift would bias it beyond a share of what
``still_heating`` names (:func:`~powersweep.sweep.sampling.thermal.wait_trigger_rel`): by the
card's fitted thermal model, or by the slope of the trailing readings.

The reasoning: docs/reference.md, "powersweep.sweep.measurement.thermal_wait".
"""

from __future__ import annotations

import math

from powersweep.analysis.precision import DEFAULT_TAU_S, ThermalModel
from powersweep.clock import Clock
from powersweep.sweep.measurement.thermal_fit import ThermalFit
from powersweep.sweep.sampling.measure import DRIFT_TRAIL_S
from powersweep.sweep.sampling.sampler import Sampler
from powersweep.sweep.sampling.thermal import (
    LEVEL_TRAIL_S,
    ThermalWait,
    fitted_wait_s,
    level_c,
    slope_c_per_min,
    steady_slope_c_per_min,
    wait_drift,
    wait_trigger_rel,
)


class ThermalWaiter:
    """The wait of each point, from the sampler's readings and the card's fitted model.

    Args:
        sampler: The readings since the last point (not yet drained).
        clock: Run clock.
        thermal: The readings of the points before and the model they fit.
    """

    def __init__(self, sampler: Sampler, clock: Clock, thermal: ThermalFit) -> None:
        self.sampler = sampler
        self.clock = clock
        self.thermal = thermal

    async def wait(
        self,
        draw_w: float,
        sensitivity_per_c: float,
        goal_rel: float,
        *,
        bound: float,
        poll_s: float,
    ) -> ThermalWait:
        """Wait, at most ``bound`` run seconds, until the temperature still to come biases the
        point by no more than ``goal_rel`` (none when it would not be named).

        Args:
            draw_w: The point's settled combined draw.
            sensitivity_per_c: What a degree still to come is worth to its TPS/W (relative).
            goal_rel: The bias the wait aims under.
            bound: The most run seconds it waits.
            poll_s: Run seconds between looks (the sampler's interval).
        """  # fmt: skip
        model = self.thermal.model()
        if not self._needs_wait(model, draw_w, sensitivity_per_c):
            return ThermalWait(0.0, math.nan, True)
        waited = 0.0
        if model is not None:
            temp = self.temp_now_c()
            waited = fitted_wait_s(model, temp, draw_w, goal_rel, bound, sensitivity_per_c) or 0.0
            if waited > 0:
                await self.clock.asleep(waited)

        def steady_c_per_min() -> float:
            # before a model is fitted, one from the readings so far and the wait's own (the
            # first point heating from its warm-up fits one within seconds), else 60 s
            fitted = model or self.thermal.model_with(self.sampler.peek())
            tau = fitted.tau_s if fitted is not None else DEFAULT_TAU_S
            return steady_slope_c_per_min(goal_rel, sensitivity_per_c, tau)

        rest = await wait_drift(
            self.readings,
            self.clock,
            max_s=max(0.0, bound - waited),
            poll_s=poll_s,
            steady_c_per_min=steady_c_per_min,
            trail_s=DRIFT_TRAIL_S,
        )
        return ThermalWait(waited + rest.waited_s, rest.slope_c_per_min, rest.steady)

    def _needs_wait(self, model: ThermalModel | None, draw_w: float, sensitivity: float) -> bool:
        """Whether the temperature still to come would bias the point beyond the trigger: by
        the card's fitted model, or by the trailing readings' slope times its time constant
        (too few readings yet: yes; ticks without one, a card that reads no temperature: no)."""
        now = self.clock.now()
        tau = model.tau_s if model is not None else DEFAULT_TAU_S
        trailing = self.readings(now - DRIFT_TRAIL_S)
        if not trailing and any(r.t_s >= now - DRIFT_TRAIL_S for r in self.sampler.peek()):
            return False
        slope = slope_c_per_min(trailing)
        still = [abs(slope) / 60.0 * tau if math.isfinite(slope) else math.inf]
        if model is not None:
            still.append(abs(model.steady_c(draw_w) - self.temp_now_c()))
        return any(not math.isfinite(d) or sensitivity * d > wait_trigger_rel() for d in still)

    def readings(self, since_s: float) -> list[tuple[float, float]]:
        """The hottest card's ``(run s, °C)`` readings from ``since_s`` on: the points measured
        before (kept by the thermal fit) and the ticks since the last one."""
        hottest: dict[int, tuple[float, float]] = {}
        for r in self.sampler.peek():
            t = r.sample.temp_c
            if r.t_s >= since_s and math.isfinite(t):
                prev = hottest.get(r.tick)
                hottest[r.tick] = (r.t_s, max(t, prev[1]) if prev else t)
        return [*self.thermal.recent(since_s), *hottest.values()]

    def temp_now_c(self) -> float:
        """The hottest card's temperature now: the line through its readings of the trailing
        :data:`LEVEL_TRAIL_S`, else its last reading."""
        now = self.clock.now()
        readings = self.readings(now - LEVEL_TRAIL_S)
        level = level_c(readings, now)
        if math.isfinite(level):
            return level
        return readings[-1][1] if readings else math.nan
