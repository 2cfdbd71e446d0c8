"""summary.md and the closing headline of an undervolt search, from its typed analysis."""

from __future__ import annotations

from pathlib import Path

from powersweep.analysis.undervolt import analyze_undervolt
from powersweep.analysis.undervolt_result_types import OffsetStep
from powersweep.analysis.undervolt_summary import headline, point_name, render_undervolt_summary
from tests.unit.analysis.test_undervolt import _curve, _search


def test_points_are_named_by_their_lock_and_offset_the_baseline_by_its_cap() -> None:
    assert point_name(OffsetStep.from_json(dict(cap_w=300.0))) == "300 W cap"
    assert point_name(OffsetStep.from_json(dict(sm_lock_mhz=1485.0, sm_offset_mhz=90.0))) == (
        "SM 1485 MHz +90 MHz offset"
    )


def test_the_summary_and_headline_show_the_answer_beside_the_cap(tmp_path: Path) -> None:
    curve = _curve(tmp_path, _search(150.0, soaks=((90.0, "ok"),)))
    a = analyze_undervolt(curve)
    text = render_undervolt_summary(curve, a)
    assert "### Answer beside the best cap" in text and "| 300 W cap |" in text
    assert "SM 1485 MHz +90 MHz offset" in text and "unstable: answers differ" in text
    line = headline(a)
    assert line is not None and line.startswith("undervolt: SM 1485 MHz +90 MHz offset")
    assert "vs the 300 W cap" in line
    # issue 47: the header table every summary carries, and how to apply the answer
    assert "| Cooling | unknown |" in text and "| Tool version |" in text
    assert f"Apply it: `sudo powersweep apply {curve.source}`" in text
