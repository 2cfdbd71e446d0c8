"""The card's thermal time constant fitted as the sweep goes (``sweep/measurement/thermal_fit.py``):
ticks of the hottest card's temperature and the combined draw, bounded, and the model they fit."""

from __future__ import annotations

import math

import pytest

from powersweep.analysis.precision import TAU_MAX_TICKS
from powersweep.sweep.gpu import GpuSample
from powersweep.sweep.measurement.thermal_fit import ThermalFit
from powersweep.sweep.sampling.sampler import SampleRow

TAU_S, AMBIENT_C, R_C_PER_W = 40.0, 30.0, 0.1
DT_S = 0.5


def _drawing_sample(index: int, temp_c: float, draw_w: float) -> GpuSample:
    return GpuSample(index, draw_w, math.nan, temp_c, 1800.0, 9501.0, 95.0, 0, 0)


def _sample_rows(
    seconds: float, start_s: float = 0.0, temp_c: float = AMBIENT_C
) -> list[SampleRow]:
    """Two cards sharing the draw (stepping 400/200 W every 100 s), the first the hotter,
    following a first-order model exactly (tick by tick)."""
    rows = []
    for k in range(int(seconds / DT_S)):
        t = start_s + k * DT_S
        draw = 400.0 if int(t // 100.0) % 2 == 0 else 200.0
        rows.append(SampleRow(t, k, 300.0, "narr", _drawing_sample(0, temp_c, draw / 2)))
        rows.append(SampleRow(t, k, 300.0, "narr", _drawing_sample(1, temp_c - 5.0, draw / 2)))
        steady = AMBIENT_C + R_C_PER_W * draw
        temp_c = steady + (temp_c - steady) * math.exp(-DT_S / TAU_S)
    return rows


def test_the_fit_recovers_the_cards_time_constant_from_the_combined_draw() -> None:
    fit = ThermalFit()
    assert fit.model() is None
    fit.add(_sample_rows(400.0))
    model = fit.model()
    assert model is not None
    assert model.tau_s == pytest.approx(TAU_S, rel=0.03)
    assert model.steady_c(400.0) == pytest.approx(AMBIENT_C + R_C_PER_W * 400.0, abs=0.5)


def test_too_few_ticks_fit_no_model() -> None:
    fit = ThermalFit()
    fit.add(_sample_rows(20.0))  # 40 ticks
    assert fit.model() is None


def test_recent_readings_are_the_hottest_cards_per_tick() -> None:
    fit = ThermalFit()
    fit.add(_sample_rows(2.0))
    assert fit.recent(0.0) == [(0.0, AMBIENT_C), (0.5, pytest.approx(AMBIENT_C + 0.497, abs=1e-3)),
                               (1.0, pytest.approx(AMBIENT_C + 0.988, abs=1e-3)),
                               (1.5, pytest.approx(AMBIENT_C + 1.473, abs=1e-3))]  # fmt: skip
    assert [t for t, _ in fit.recent(1.0)] == [1.0, 1.5]


def test_ticks_without_a_temperature_or_a_draw_are_left_out() -> None:
    fit = ThermalFit()
    fit.add(
        [
            SampleRow(0.0, 0, 300.0, "narr", _drawing_sample(0, math.nan, 200.0)),
            SampleRow(0.5, 1, 300.0, "narr", _drawing_sample(0, 60.0, math.nan)),
            SampleRow(1.0, 2, 300.0, "narr", _drawing_sample(0, math.nan, 100.0)),
            SampleRow(1.0, 2, 300.0, "narr", _drawing_sample(1, 61.0, 100.0)),
        ]
    )
    assert fit.recent(0.0) == [(1.0, 61.0)]


def test_the_ticks_are_bounded_and_the_model_is_fitted_again_only_after_new_ones() -> None:
    fit = ThermalFit()
    fit.add(_sample_rows(2100.0))  # 4200 ticks
    recent = fit.recent(0.0)
    assert len(recent) == TAU_MAX_TICKS
    assert recent[0][0] == pytest.approx(2100.0 - TAU_MAX_TICKS * DT_S)
    model = fit.model()
    assert model is not None and fit.model() is model
    fit.add(_sample_rows(10.0, start_s=2100.0, temp_c=recent[-1][1]))
    again = fit.model()
    assert again is not None and again is not model
