"""powersweep.plots.render: every chart of one run written into a folder, in chart then format
order, only the charts the data allows; a folder that cannot be made is one error line.
(test_plots.py checks the charts' content and byte-identical output.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from powersweep.analysis.result_types import PowerAnalysis
from powersweep.errors import PowersweepError, UsageError
from powersweep.plots.render import render_charts


def _clocks_or_not_analysis(clocks: bool) -> PowerAnalysis:
    doc: dict[str, Any] = {
        "run": {"gpu_name": "RTX 3090", "default_limit_w": 300.0},
        "caps": [
            {
                "cap_w": cap,
                "tps": cap / 10,
                "power_w": cap - 5,
                "sm_clock_mhz": 1000.0 + cap if clocks else None,
            }
            for cap in (200.0, 250.0, 300.0)
        ],
    }
    return PowerAnalysis.from_json(doc)


def test_charts_in_chart_then_format_order_without_a_timeline_for_empty_samples(
    tmp_path: Path,
) -> None:
    out = tmp_path / "deep" / "charts"
    empty = pl.DataFrame({"t_s": [], "cap_w": [], "power_w": []})
    paths = render_charts(
        _clocks_or_not_analysis(clocks=True), out, samples=empty, formats=("svg", "png")
    )
    assert [p.name for p in paths] == [
        "efficiency.svg",
        "efficiency.png",
        "power.svg",
        "power.png",
        "clocks.svg",
        "clocks.png",
    ]
    assert all(p.parent == out and p.stat().st_size > 1000 for p in paths)


def test_a_folder_that_cannot_be_made_is_one_error_before_any_drawing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(PowersweepError, match=r"cannot create chart folder .*file/charts"):
        render_charts(_clocks_or_not_analysis(clocks=False), blocker / "charts")


def test_nothing_to_plot_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no caps to plot"):
        render_charts(PowerAnalysis.from_json({"caps": []}), tmp_path / "charts")
    assert list((tmp_path / "charts").iterdir()) == []
