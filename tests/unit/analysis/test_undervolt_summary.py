"""summary.md and the closing headline of an undervolt search, from its typed analysis."""

from __future__ import annotations

from pathlib import Path

from powersweep.analysis.result_types import known
from powersweep.analysis.summary_frame import answer_banner
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


def test_a_search_cut_short_says_so_first_as_every_axis_does(tmp_path: Path) -> None:
    # the banner the power and clock summaries carry (summary_frame.answer_banner): an
    # interrupted search's summary leads with why it has no answer, and does not blame the card
    run = {
        "status": "interrupted",
        "options": {"axis": "undervolt", "offset_step_mhz": 30.0, "margin_mhz": 30.0},
        "points_done": list(range(7)),
        "points_planned": [0],
    }
    curve = _curve(tmp_path, _search(150.0), run)
    a = analyze_undervolt(curve)
    text = render_undervolt_summary(curve, a)
    (banner, blank) = answer_banner(known(a.answer))
    assert banner.startswith("**No answer: interrupted after 7 steps") and blank == ""
    assert text.index(banner) < text.index("### Findings")
    assert "No answer: the search did not finish (see above)." in text
    assert "No stable offset was found" not in text and "Apply it:" not in text
    # a finished search has no banner
    done = _curve(tmp_path, _search(150.0), {**run, "status": "complete"})
    assert "**No answer" not in render_undervolt_summary(done, analyze_undervolt(done))
