"""The undervolt chart: drawn from the typed analysis, refused without steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from powersweep.analysis.undervolt_result_types import OffsetStep, UndervoltAnalysis
from powersweep.errors import UsageError
from powersweep.plots.undervolt_chart import render_undervolt_chart, undervolt_figure
from tests.chart_layout import layout_problems, legend_labels, unnamed_artists


def _undervolt_analysis(steps: list[OffsetStep]) -> UndervoltAnalysis:
    return UndervoltAnalysis(
        sm_lock_mhz=1485.0,
        baseline=OffsetStep.from_json(dict(cap_w=300.0, tps_per_w=0.110, sm_offset_mhz=0.0)),
        steps=steps,
        chosen=steps[1] if len(steps) > 1 else None,
    )


STEPS = [
    OffsetStep.from_json(dict(sm_offset_mhz=0.0, tps_per_w=0.110, power_w=300.0, status="ok")),
    OffsetStep.from_json(dict(sm_offset_mhz=30.0, tps_per_w=0.112, power_w=295.0, status="ok")),
    OffsetStep.from_json(dict(sm_offset_mhz=60.0, tps_per_w=None, power_w=None, status="unstable")),
]


def test_it_draws_stable_steps_the_unstable_one_the_cap_and_the_answer(tmp_path: Path) -> None:
    fig = undervolt_figure(_undervolt_analysis(STEPS))
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert "TPS/W (stable steps)" in labels and "unstable" in labels
    assert "300 W cap, unlocked" in labels and "answer (soaked)" in labels
    paths = render_undervolt_chart(
        _undervolt_analysis(STEPS), tmp_path / "charts", formats=("png",)
    )
    assert paths == [tmp_path / "charts" / "undervolt.png"] and paths[0].stat().st_size > 1000


def test_nothing_to_draw_without_steps() -> None:
    with pytest.raises(UsageError, match="no offset step"):
        undervolt_figure(UndervoltAnalysis())


def test_each_step_carries_its_stated_interval_and_the_draw_is_in_the_legend() -> None:
    stated = [
        OffsetStep.from_json(
            dict(
                sm_offset_mhz=float(offset),
                tps_per_w=0.110 + 0.001 * i,
                power_w=300.0 - 5 * i,
                tps_per_w_u95_pct=1.0 + i,
                power_u95_pct=0.5,
                status="ok",
            )
        )
        for i, offset in enumerate((0, 30, 60))
    ]
    stated.append(
        OffsetStep.from_json(dict(sm_offset_mhz=90.0, tps_per_w=0.114, status="unstable"))
    )
    fig = undervolt_figure(_undervolt_analysis(stated))
    ax, right = fig.axes
    (tpw,) = [c for c in ax.containers if c.get_label() == "TPS/W (stable steps) ±95%"]
    halves = [(seg[1][1] - seg[0][1]) / 2 for seg in tpw.lines[2][0].get_segments()]
    assert halves == pytest.approx(
        [s.figures.tps_per_w * (1.0 + i) / 100 for i, s in enumerate(stated[:3])]
    )
    (draw,) = [c for c in right.containers if c.get_label() == "draw (right axis) ±95%"]
    halves = [(seg[1][1] - seg[0][1]) / 2 for seg in draw.lines[2][0].get_segments()]
    assert halves == pytest.approx([s.figures.power_w * 0.005 for s in stated[:3]])
    assert "draw (right axis) ±95%" in legend_labels(fig)
    assert not unnamed_artists(fig) and not layout_problems(fig)
