"""The card's thermal time constant, fitted from every point's readings as the sweep goes.

The reasoning: docs/precision.md, "powersweep.sweep.measurement.thermal_fit".
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

from powersweep.analysis.precision import TAU_MAX_TICKS, ThermalModel, fit_thermal
from powersweep.sweep.sampling.sampler import SampleRow


class ThermalFit:
    """Ticks of the sweep so far (the hottest card's temperature, the combined draw), bounded
    to the last :data:`TAU_MAX_TICKS`, and the thermal model they fit."""

    def __init__(self) -> None:
        self._ticks: deque[tuple[float, float, float]] = deque(maxlen=TAU_MAX_TICKS)
        self._model: ThermalModel | None = None
        self._stale = True

    def add(self, rows: Iterable[SampleRow]) -> None:
        """Take a point's sample rows (every phase: settling excites the fit best)."""
        self._ticks.extend(_ticks(rows))
        self._stale = True

    def model_with(self, rows: Iterable[SampleRow]) -> ThermalModel | None:
        """The model the kept readings and ``rows`` (a point's ticks not yet taken: the first
        point's wait, heating from its warm-up) fit together; the kept ones stay as they are."""
        ticks = [*self._ticks, *_ticks(rows)][-TAU_MAX_TICKS:]
        if not ticks:
            return None
        t, temp, draw = zip(*ticks, strict=True)
        return fit_thermal(t, temp, draw)

    def recent(self, since_s: float) -> list[tuple[float, float]]:
        """The ``(run s, °C)`` readings kept from ``since_s`` on."""
        return [(t, c) for t, c, _ in self._ticks if t >= since_s]

    def model(self) -> ThermalModel | None:
        """The fitted model (None until the readings fit one)."""
        if self._stale:
            self._stale = False
            self._model = None
            if self._ticks:
                t, temp, draw = zip(*self._ticks, strict=True)
                self._model = fit_thermal(t, temp, draw)
        return self._model


def _ticks(rows: Iterable[SampleRow]) -> list[tuple[float, float, float]]:
    """``(run s, hottest °C, combined W)`` of each tick of ``rows`` with both readings."""
    by_tick: dict[int, list[SampleRow]] = {}
    for r in rows:
        by_tick.setdefault(r.tick, []).append(r)
    out = []
    for tick in sorted(by_tick):
        group = by_tick[tick]
        temps = [r.sample.temp_c for r in group if math.isfinite(r.sample.temp_c)]
        draw = math.fsum(r.sample.draw_w for r in group)
        if temps and math.isfinite(draw):
            out.append((group[0].t_s, max(temps), draw))
    return out
