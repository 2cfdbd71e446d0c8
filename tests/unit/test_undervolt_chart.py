"""The undervolt chart: drawn from the typed analysis, refused without steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from powersweep.analysis.undervolt_result_types import OffsetStep, UndervoltAnalysis
from powersweep.errors import UsageError
from powersweep.plots.undervolt_chart import render_undervolt_chart, undervolt_figure


def _analysis(steps: list[OffsetStep]) -> UndervoltAnalysis:
    return UndervoltAnalysis(
        sm_lock_mhz=1485.0,
        baseline=OffsetStep(cap_w=300.0, tps_per_w=0.110, sm_offset_mhz=0.0),
        steps=steps,
        chosen=steps[1] if len(steps) > 1 else None,
    )


STEPS = [
    OffsetStep(sm_offset_mhz=0.0, tps_per_w=0.110, power_w=300.0, status="ok"),
    OffsetStep(sm_offset_mhz=30.0, tps_per_w=0.112, power_w=295.0, status="ok"),
    OffsetStep(sm_offset_mhz=60.0, tps_per_w=None, power_w=None, status="unstable"),
]


def test_it_draws_stable_steps_the_unstable_one_the_cap_and_the_answer(tmp_path: Path) -> None:
    fig = undervolt_figure(_analysis(STEPS))
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert "TPS/W (stable steps)" in labels and "unstable" in labels
    assert "300 W cap, unlocked" in labels and "answer (soaked)" in labels
    paths = render_undervolt_chart(_analysis(STEPS), tmp_path / "charts", formats=("png",))
    assert paths == [tmp_path / "charts" / "undervolt.png"] and paths[0].stat().st_size > 1000


def test_nothing_to_draw_without_steps() -> None:
    with pytest.raises(UsageError, match="no offset step"):
        undervolt_figure(UndervoltAnalysis())
