"""Issue 47: every chart kind, drawn from simulated runs of the shapes users meet, has no text or
legend over another, none outside the figure, no arrow through a label, and a legend entry for
everything it draws; each point's stated 95% interval is drawn.

The runs: the README's sweep (21 caps of the simulated RTX 3090, decode-single), an SM-clock
sweep, a grid sweep beside a power sweep of the same card (clocks-vs-power), an undervolt search,
and two curves made from the README's: one with a reading physics forbids (set aside as an
outlier) and one interrupted after six caps.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from matplotlib.figure import Figure

from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.analysis.undervolt_result_types import UndervoltAnalysis
from powersweep.plots import (
    clocks_figure,
    efficiency_by_clock_figure,
    efficiency_figure,
    pareto_figure,
    power_figure,
)
from powersweep.plots.undervolt_chart import undervolt_figure
from powersweep.report import build_report
from tests.chart_layout import layout_problems, unnamed_artists
from tests.integration.conftest import only_run_dir, powersweep, read_json

# five simulated sweeps built once: handed out among the first files (tests/conftest.py)
pytestmark = pytest.mark.slow

SWEEPS = {
    "readme": ("--simulate", "rtx3090-air", "--load-mode", "decode-single"),
    "sm-clock": ("--simulate", "h100-sxm", "--axis", "sm-clock"),
    "grid": ("--simulate", "rtx5090-air", "--axis", "grid"),
    "power-5090": ("--simulate", "rtx5090-air"),
    "undervolt": ("--simulate", "rtx4090-air", "--axis", "undervolt", "--cap", "350"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("layouts")
    out: dict[str, Path] = {}
    for name, args in SWEEPS.items():
        # the test draws every figure itself from the run's files: the sweep's own charts
        # would be drawn twice
        done = powersweep(*args, "--cooling", "air", "--no-charts", "--out", str(root / name))
        assert done.returncode == 0, done.stderr
        out[name] = only_run_dir(root / name)
    out["outlier"] = _planted_outlier(out["readme"], root / "outlier")
    out["interrupted"] = _interrupted(out["readme"], root / "interrupted", keep=6)
    return out


def _planted_outlier(run: Path, to: Path) -> Path:
    """The README's run with one cap's TPS 20% low: TPS falling as a binding cap rises."""
    shutil.copytree(run, to)
    caps = pl.read_csv(to / "caps.csv", infer_schema_length=None)
    low = pl.col("cap_w") == 250
    caps = caps.with_columns(pl.when(low).then(pl.col("narr_tps") * 0.8).otherwise("narr_tps"))
    caps = caps.with_columns(
        pl.when(low).then(pl.col("narr_tps") / pl.col("power_w")).otherwise("tps_per_w")
    )
    caps.write_csv(to / "caps.csv")
    build_report(to)
    return to


def _interrupted(run: Path, to: Path, keep: int) -> Path:
    """The README's run as if stopped after its first ``keep`` caps."""
    shutil.copytree(run, to)
    caps = pl.read_csv(to / "caps.csv", infer_schema_length=None).head(keep)
    caps.write_csv(to / "caps.csv")
    meta = json.loads((to / "run.json").read_text())
    meta["status"] = "interrupted"
    meta["caps_done"] = caps["cap_w"].to_list()
    (to / "run.json").write_text(json.dumps(meta))
    build_report(to)
    return to


def _analysis_json(run: Path) -> dict[str, Any]:
    """The run's analysis.json, checked to read back whole into its typed record (the stated
    half-widths each row now carries included)."""
    data: dict[str, Any] = read_json(run / "analysis.json")
    return data


def _power_analysis(run: Path) -> PowerAnalysis:
    return PowerAnalysis.from_json(_analysis_json(run))


def _clock_analysis(run: Path) -> ClockAnalysis:
    return ClockAnalysis.from_json(_analysis_json(run))


Chart = Callable[[dict[str, Path]], Figure]
CHARTS: dict[str, Chart] = {
    **{
        f"{kind} of {run}": (lambda r, f=draw, n=run: f(_power_analysis(r[n])))
        for run in ("readme", "outlier", "interrupted", "power-5090")
        for kind, draw in (
            ("efficiency", efficiency_figure),
            ("power", power_figure),
            ("clocks", clocks_figure),
        )
    },
    **{
        f"{kind} of {run}": (lambda r, f=draw, n=run: f(_clock_analysis(r[n])))
        for run in ("sm-clock", "grid")
        for kind, draw in (
            ("clock-efficiency", efficiency_by_clock_figure),
            ("clock-pareto", pareto_figure),
        )
    },
    "clocks-vs-power": lambda r: pareto_figure(
        _clock_analysis(r["grid"]), None, _power_analysis(r["power-5090"])
    ),
    "undervolt": lambda r: undervolt_figure(
        UndervoltAnalysis.from_json(_analysis_json(r["undervolt"]))
    ),
}


@pytest.mark.parametrize("chart", sorted(CHARTS))
def test_no_label_overlaps_and_every_drawn_kind_is_in_the_legend(
    runs: dict[str, Path], chart: str
) -> None:
    fig = CHARTS[chart](runs)
    assert layout_problems(fig) == [], chart
    # the default limit's line is named by its own label beside it
    assert unnamed_artists(fig, named_by_text=("default-tdp",)) == [], chart


def test_the_runs_are_the_shapes_named(runs: dict[str, Path]) -> None:
    readme = _analysis_json(runs["readme"])
    assert len([c for c in readme["caps"] if c["status"] == "ok"]) == 21
    assert [c["status"] for c in _analysis_json(runs["outlier"])["caps"]].count("outlier") == 1
    interrupted = _analysis_json(runs["interrupted"])
    assert len(interrupted["caps"]) == 6 and interrupted["answer"]["kind"] == "none"


@pytest.mark.parametrize(
    ("chart", "label"),
    [
        ("efficiency of readme", "TPS/W ±95%"),
        ("efficiency of readme", "narrative TPS ±95%"),
        ("clock-efficiency of sm-clock", "each point's stated 95% interval"),
        ("clock-pareto of grid", "each point's stated 95% interval"),
        ("undervolt", "draw (right axis) ±95%"),
    ],
)
def test_the_stated_intervals_are_drawn(runs: dict[str, Path], chart: str, label: str) -> None:
    fig = CHARTS[chart](runs)
    bars = [c for ax in fig.axes for c in ax.containers if c.get_label() == label]
    assert bars, f"{chart}: no {label!r}"
    drawn = [seg for c in bars for seg in c.lines[2][0].get_segments() if len(seg)]
    assert drawn and all(seg[1][1] > seg[0][1] for seg in drawn), chart
