"""Tests of powersweep.plots: what a chart must show, checked from its artists, not by eye."""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox

from powersweep.analysis.result_types import PowerAnalysis
from powersweep.errors import UsageError
from powersweep.plots import (
    clocks_figure,
    compare_figure,
    compare_labels,
    compare_table,
    efficiency_figure,
    power_figure,
    render_charts,
    render_compare,
    timeline_figure,
)
from powersweep.plots._layout import text_extent
from powersweep.plots.companions import per_tick
from tests.chart_layout import one_by_gid, plot_area_boxes
from tests.paths import SHARED_3090

Analysis = dict[str, Any]


# ---------------------------------------------------------------- fixtures (analysis dicts)


def _run_facts_json(
    gpu: str, n_gpus: int, default: float, lo: float, hi: float, mode: str
) -> dict[str, Any]:
    return {
        "gpu_name": gpu,
        "n_gpus": n_gpus,
        "cooling": "air",
        "load_mode": mode,
        "model": "Qwen3.6-27B",
        "engine": "llama.cpp",
        "date": "2025-11-02",
        "tool_version": "0.1.0",
        "default_limit_w": default,
        "min_limit_w": lo,
        "max_limit_w": hi,
    }


def _finish(caps: list[dict[str, Any]], run: dict[str, Any], plateaus: list[Any]) -> Analysis:
    """Adds sweet spot and near-peak (5% TPS loss) computed from the caps, like analysis does."""
    ok = [c for c in caps if c["status"] == "ok"]
    best = max(ok, key=lambda c: c["tps_per_w"])
    peak = max(c["tps"] for c in ok)
    near = min((c for c in ok if c["tps"] >= 0.95 * peak), key=lambda c: c["cap_w"])
    boundary = "low" if best is ok[0] else "high" if best is ok[-1] else None
    return {
        "schema_version": 1,
        "metric": "narr_tps",
        "run": run,
        "caps": caps,
        "sweet_spot": {
            "cap_w": best["cap_w"],
            "tps_per_w": best["tps_per_w"],
            "tps": best["tps"],
            "power_w": best["power_w"],
            "pct_of_default": best["cap_w"] / run["default_limit_w"] * 100,
            "at_boundary": boundary,
        },
        "near_peak": {
            "cap_w": near["cap_w"],
            "tps_loss_pct": (1 - near["tps"] / peak) * 100,
            "tps_per_w": near["tps_per_w"],
        },
        "plateaus": plateaus,
        "regimes": [],
        "findings": [],
    }


def analysis_3090() -> Analysis:
    """The real measured 3090 curve (skips when ../shared/data is not beside the repo)."""
    if not SHARED_3090.is_file():
        pytest.skip(f"measured curve not found at {SHARED_3090}")
    with SHARED_3090.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    caps = []
    for r in rows:
        tps, power = float(r["narr_tps"]), float(r["power_w"])
        caps.append(
            {
                "cap_w": float(r["cap_w"]),
                "tps": tps,
                "code_tps": float(r["code_tps"]),
                "power_w": power,
                "tps_per_w": tps / power,
                "sm_clock_mhz": float(r["sm_clock_mhz"]),
                "mem_clock_mhz": None,
                "temp_max_c": None,
                "status": "ok",
            }
        )
    run = _run_facts_json("NVIDIA GeForce RTX 3090", 1, 370.0, 100.0, 390.0, "decode-single")
    plateau = {"kind": "boost_plateau", "start_w": 340.0, "end_w": 370.0, "power_w": 334.0}
    return _finish(caps, run, [plateau])


def _synthetic(
    gpu: str,
    caps_w: Iterable[int],
    default: float,
    n_gpus: int,
    tps_max: float,
    ceiling_w: float | None,
    failed: set[int],
    plateaus: list[dict[str, Any]],
) -> Analysis:
    caps: list[dict[str, Any]] = []
    for cap in caps_w:
        draw = min(cap * 0.995, ceiling_w) if ceiling_w else cap * 0.995
        tps = tps_max * (1 - math.exp(-(draw - 0.3 * cap) / (0.4 * default)))
        bad = cap in failed
        caps.append(
            {
                "cap_w": float(cap),
                "tps": None if bad else tps,
                "code_tps": None if bad else tps * 1.04,
                "power_w": None if bad else draw * n_gpus,
                "tps_per_w": None if bad else tps / (draw * n_gpus),
                "sm_clock_mhz": None if bad else 600 + 2.2 * draw,
                "mem_clock_mhz": None if bad else 10501.0,
                "temp_max_c": None if bad else 40 + draw / 12,
                "status": "failed" if bad else "ok",
            }
        )
    lo, hi = min(c["cap_w"] for c in caps), max(c["cap_w"] for c in caps)
    return _finish(
        caps, _run_facts_json(gpu, n_gpus, default, lo, hi, "decode-concurrent"), plateaus
    )


def analysis_5090() -> Analysis:
    """A 400-600 W card that stops drawing more than 555 W, with one failed cap."""
    ceiling = {"kind": "draw_ceiling", "start_w": 560.0, "end_w": 600.0, "power_w": 555.0}
    return _synthetic(
        "NVIDIA GeForce RTX 5090", range(400, 601, 10), 575.0, 1, 260.0, 555.0, {470}, [ceiling]
    )


def analysis_h100() -> Analysis:
    """Two 200-700 W cards with a boost plateau, a draw ceiling and one failed cap."""
    plateaus = [
        {"kind": "boost_plateau", "start_w": 550.0, "end_w": 600.0, "power_w": 1080.0},
        {"kind": "draw_ceiling", "start_w": 650.0, "end_w": 700.0, "power_w": 1220.0},
    ]
    return _synthetic(
        "NVIDIA H100 80GB HBM3", range(200, 701, 25), 700.0, 2, 2400.0, None, {300}, plateaus
    )


ENVELOPES: list[tuple[str, Callable[[], Analysis]]] = [
    ("3090", analysis_3090),
    ("5090", analysis_5090),
    ("h100", analysis_h100),
]


def samples_for(analysis: Analysis, n_gpus: int, ticks_per_cap: int = 8) -> pl.DataFrame:
    """A small samples.csv-like frame: one row per GPU per tick."""
    rows: list[dict[str, Any]] = []
    tick = 0
    for cap in analysis["caps"]:
        for _ in range(ticks_per_cap):
            for gpu in range(n_gpus):
                rows.append(
                    {
                        "t_s": tick * 0.5,
                        "tick": tick,
                        "cap_w": cap["cap_w"],
                        "phase": "narr",
                        "gpu_index": gpu,
                        "power_w": (cap["power_w"] or 80.0) / n_gpus,
                        "temp_c": 60.0 + gpu,
                        "sm_clock_mhz": cap["sm_clock_mhz"] or 210.0,
                    }
                )
            tick += 1
    return pl.DataFrame(rows)


# ---------------------------------------------------------------- helpers


def _typed_analysis(a: Analysis) -> PowerAnalysis:
    """The fixture as the charts take it: the typed analysis."""
    return PowerAnalysis.from_json(a)


def _typed_runs(runs: list[tuple[str, Analysis]]) -> list[tuple[str, PowerAnalysis]]:
    return [(label, _typed_analysis(a)) for label, a in runs]


def _axes_pair(fig: Figure) -> tuple[Axes, Axes]:
    """(TPS axes, TPS/W axes) of an efficiency figure."""
    ax, ax2 = fig.axes
    return ax, ax2


def _overlap(a: Bbox, b: Bbox) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _curve_points_px(fig: Figure) -> np.ndarray:
    """Vertices and segment midpoints of the data curves, in display coordinates."""
    pts = []
    for ax in fig.axes:
        for line in ax.lines:
            if line.get_gid() in ("tps", "code_tps", "tps_per_w"):
                xy = np.column_stack([line.get_xdata(), line.get_ydata()]).astype(float)
                mids = (xy[1:] + xy[:-1]) / 2
                both = np.vstack([xy, mids])
                px = ax.transData.transform(both[np.isfinite(both).all(axis=1)])
                pts.append(px)
    return np.vstack(pts)


# ---------------------------------------------------------------- efficiency chart


def test_3090_fixture_reproduces_the_published_reading() -> None:
    a = analysis_3090()
    assert len(a["caps"]) == 21
    assert a["sweet_spot"]["cap_w"] == 290.0
    assert a["sweet_spot"]["tps_per_w"] == pytest.approx(0.111, abs=0.0005)
    assert round(a["sweet_spot"]["pct_of_default"]) == 78
    plateau_caps = [c for c in a["caps"] if 340 <= c["cap_w"] <= 370]
    assert all(abs(c["power_w"] - 334.0) < 0.5 for c in plateau_caps)


@pytest.mark.parametrize(("name", "make"), ENVELOPES)
def test_axes_ranges_cover_the_data(name: str, make: Callable[[], Analysis]) -> None:
    a = make()
    fig = efficiency_figure(_typed_analysis(a))
    ax, ax2 = _axes_pair(fig)
    caps = [c["cap_w"] for c in a["caps"]]
    x_lo, x_hi = ax.get_xlim()
    assert x_lo < min(caps) and x_hi > max(caps)
    assert x_lo < a["run"]["default_limit_w"] < x_hi
    tps = [v for c in a["caps"] for v in (c["tps"], c["code_tps"]) if v is not None]
    tpw = [c["tps_per_w"] for c in a["caps"] if c["tps_per_w"] is not None]
    assert ax.get_ylim()[0] <= min(tps) and ax.get_ylim()[1] > max(tps)
    assert ax2.get_ylim()[0] <= min(tpw) and ax2.get_ylim()[1] > max(tpw)


def test_callout_points_at_the_sweet_spot() -> None:
    a = analysis_3090()
    fig = efficiency_figure(_typed_analysis(a))
    _, ax2 = _axes_pair(fig)
    callout: Annotation = one_by_gid(ax2.texts, "sweet-spot-callout")
    spot = a["sweet_spot"]
    assert callout.xy == pytest.approx((spot["cap_w"], spot["tps_per_w"]))
    assert callout.arrow_patch is not None
    text = callout.get_text()
    assert "290 W" in text and "0.111 TPS/W" in text and "32.3 TPS" in text
    assert "78% of default limit" in text
    # The box sits away from the point it annotates.
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    box = text_extent(callout, renderer)
    anchor = ax2.transData.transform((spot["cap_w"], spot["tps_per_w"]))
    assert not box.contains(*anchor)


def test_callout_says_when_the_sweet_spot_is_at_the_sweep_edge() -> None:
    a = analysis_5090()
    assert a["sweet_spot"]["at_boundary"] == "low"
    _, ax2 = _axes_pair(efficiency_figure(_typed_analysis(a)))
    assert "lowest cap swept" in one_by_gid(ax2.texts, "sweet-spot-callout").get_text()


@pytest.mark.parametrize(("name", "make"), ENVELOPES)
def test_plateau_bands_equal_the_analysis_plateaus(name: str, make: Callable[[], Analysis]) -> None:
    a = make()
    ax, _ = _axes_pair(efficiency_figure(_typed_analysis(a)))
    spans = [p for p in ax.patches if str(p.get_gid()).startswith("plateau:")]
    got = sorted(
        (str(p.get_gid()), p.get_x(), p.get_x() + p.get_width())
        for p in spans
        if isinstance(p, Rectangle)
    )
    want = sorted((f"plateau:{p['kind']}", p["start_w"], p["end_w"]) for p in a["plateaus"])
    assert len(got) == len(spans) == len(want)
    for (g_kind, g_lo, g_hi), (w_kind, w_lo, w_hi) in zip(got, want, strict=True):
        assert g_kind == w_kind
        assert g_lo == pytest.approx(w_lo) and g_hi == pytest.approx(w_hi)
    # Boost plateaus and draw ceilings are told apart by their fill.
    kinds = {str(p.get_gid()): (p.get_facecolor(), p.get_hatch()) for p in spans}
    if len(kinds) == 2:
        assert kinds["plateau:boost_plateau"] != kinds["plateau:draw_ceiling"]


@pytest.mark.parametrize(("name", "make"), ENVELOPES)
def test_labels_legend_and_callout_do_not_collide(name: str, make: Callable[[], Analysis]) -> None:
    a = make()
    fig = efficiency_figure(_typed_analysis(a))
    boxes = plot_area_boxes(fig)
    gids = {gid for gid, _ in boxes}
    expected = {"sweet-spot-callout", "default-tdp-label", "legend"}
    expected |= {f"plateau-label:{p['kind']}" for p in a["plateaus"]}
    assert expected <= gids
    for (ga, ba), (gb, bb) in itertools.combinations(boxes, 2):
        assert not _overlap(ba, bb), f"{name}: {ga} overlaps {gb}"
    area = fig.axes[0].get_window_extent()
    pts = _curve_points_px(fig)
    for gid, box in boxes:
        assert area.x0 <= box.x0 and box.x1 <= area.x1, f"{name}: {gid} leaves the axes"
        assert area.y0 <= box.y0 and box.y1 <= area.y1, f"{name}: {gid} leaves the axes"
        inside = (
            (pts[:, 0] > box.x0)
            & (pts[:, 0] < box.x1)
            & (pts[:, 1] > box.y0)
            & (pts[:, 1] < box.y1)
        )
        assert not inside.any(), f"{name}: {gid} covers the curves"


def test_failed_cap_is_a_gap_not_a_zero() -> None:
    a = analysis_5090()
    ax, ax2 = _axes_pair(efficiency_figure(_typed_analysis(a)))
    for axes, gid in ((ax, "tps"), (ax, "code_tps"), (ax2, "tps_per_w")):
        line = one_by_gid(axes.lines, gid)
        xs = np.asarray(line.get_xdata(), dtype=float)
        ys = np.asarray(line.get_ydata(), dtype=float)
        assert math.isnan(ys[xs == 470.0][0])
        assert np.isfinite(ys[xs != 470.0]).all()
        assert (ys[np.isfinite(ys)] > 0).all()
    failed = one_by_gid(ax.lines, "failed")
    assert list(failed.get_xdata()) == [470.0]


def test_tolerates_nulls_and_missing_keys() -> None:
    a = analysis_5090()
    a["run"] = {"gpu_name": None, "default_limit_w": None}
    a["sweet_spot"] = None
    del a["near_peak"]
    a["plateaus"] = [{"kind": "boost_plateau", "start_w": None, "end_w": 500}]
    with pytest.raises(UsageError, match=r"\$\.plateaus\[0\]\.start_w"):
        _typed_analysis(a)  # the schema refuses a plateau without a start before any chart
    a["plateaus"] = [{"kind": "boost_plateau", "start_w": math.nan, "end_w": 500}]
    for cap in a["caps"]:
        cap["tps_per_w"] = None  # derived from tps / power_w when missing
    fig = efficiency_figure(_typed_analysis(a))
    ax, ax2 = _axes_pair(fig)
    assert not ax2.texts or all(t.get_gid() != "sweet-spot-callout" for t in ax2.texts)
    assert not [p for p in ax.patches if str(p.get_gid()).startswith("plateau:")]
    tpw = np.asarray(one_by_gid(ax2.lines, "tps_per_w").get_ydata(), dtype=float)
    assert np.nanmax(tpw) == pytest.approx(a["caps"][0]["tps"] / a["caps"][0]["power_w"])


def test_prefill_metric_draws_prefill_tps_only() -> None:
    a = analysis_5090()
    a["metric"] = "prefill_tps"
    ax, _ = _axes_pair(efficiency_figure(_typed_analysis(a)))
    assert [line.get_label() for line in ax.lines if line.get_gid() == "tps"] == ["prefill TPS"]
    assert not [line for line in ax.lines if line.get_gid() == "code_tps"]
    assert "prefill" in ax.get_ylabel()


def test_an_analysis_without_caps_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no caps"):
        efficiency_figure(_typed_analysis({"metric": "narr_tps", "caps": []}))


# ---------------------------------------------------------------- companion charts and files


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_render_charts_writes_every_chart_identically_in_png_and_svg(tmp_path: Path) -> None:
    a = analysis_h100()
    samples = samples_for(a, 2)
    first = render_charts(
        _typed_analysis(a), tmp_path / "a", samples=samples, formats=("png", "svg")
    )
    names = sorted(p.name for p in first)
    assert names == sorted(
        f"{chart}.{fmt}"
        for chart in ("efficiency", "power", "clocks", "timeline")
        for fmt in ("png", "svg")
    )
    for path in first:
        assert path.is_file() and path.stat().st_size > 1000
        if path.suffix == ".svg":
            assert path.read_text()[:200].lstrip().startswith("<?xml")
    width, height = _png_size(tmp_path / "a" / "efficiency.png")
    assert width == 1600 and 800 <= height <= 1100
    # Same inputs, fresh figures: byte-identical files (no dates, versions or random ids).
    second = render_charts(
        _typed_analysis(a), tmp_path / "b", samples=samples, formats=("png", "svg")
    )
    for p, q in zip(first, second, strict=True):
        assert p.name == q.name
        assert p.read_bytes() == q.read_bytes(), p.name


def test_render_charts_leaves_out_clocks_and_timeline_without_data(tmp_path: Path) -> None:
    a = analysis_5090()
    for cap in a["caps"]:
        cap["sm_clock_mhz"] = cap["mem_clock_mhz"] = None
    paths = render_charts(_typed_analysis(a), tmp_path)
    assert sorted(p.name for p in paths) == ["efficiency.png", "power.png"]
    with pytest.raises(UsageError, match="no clock"):
        clocks_figure(_typed_analysis(a))


def test_render_charts_rejects_unknown_formats(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unsupported chart format 'jpg'"):
        render_charts(_typed_analysis(analysis_5090()), tmp_path, formats=("png", "jpg"))
    assert not list(tmp_path.iterdir())


def test_power_chart_has_the_draw_equals_cap_line() -> None:
    a = analysis_h100()
    fig = power_figure(_typed_analysis(a))
    ax = fig.axes[0]
    ideal = one_by_gid(ax.lines, "draw-equals-cap")
    xs = np.asarray(ideal.get_xdata(), dtype=float)
    ys = np.asarray(ideal.get_ydata(), dtype=float)
    # Draw is summed over the two GPUs while the cap is per GPU.
    assert ys == pytest.approx(xs * 2)
    draw = one_by_gid(ax.lines, "power")
    assert np.asarray(draw.get_ydata(), dtype=float)[0] == pytest.approx(a["caps"][0]["power_w"])
    y_lo, y_hi = ax.get_ylim()
    finite = [c["power_w"] for c in a["caps"] if c["power_w"] is not None]
    assert y_lo <= min(finite) and y_hi >= max(finite)
    for (ga, ba), (gb, bb) in itertools.combinations(plot_area_boxes(fig), 2):
        assert not _overlap(ba, bb), f"{ga} overlaps {gb}"


def test_clocks_chart_draws_sm_and_memory_clocks_with_plateaus() -> None:
    a = analysis_h100()
    fig = clocks_figure(_typed_analysis(a))
    sm = one_by_gid(fig.axes[0].lines, "sm_clock")
    mem = one_by_gid(fig.axes[1].lines, "mem_clock")
    assert np.nanmax(np.asarray(sm.get_ydata(), dtype=float)) == pytest.approx(
        600 + 2.2 * 700 * 0.995
    )
    assert np.nanmax(np.asarray(mem.get_ydata(), dtype=float)) == 10501.0
    spans = [p for p in fig.axes[0].patches if str(p.get_gid()).startswith("plateau:")]
    assert len(spans) == 2


def test_per_tick_sums_draw_over_gpus_and_keeps_failed_reads_unknown() -> None:
    samples = pl.DataFrame(
        {
            "t_s": [0.0, 0.0, 0.5, 0.5],
            "tick": [0, 0, 1, 1],
            "cap_w": [300.0, 300.0, 300.0, 300.0],
            "gpu_index": [0, 1, 0, 1],
            "power_w": [250.0, 240.0, 260.0, None],
            "temp_c": [60.0, 71.0, 61.0, 70.0],
            "sm_clock_mhz": [1500.0, 1400.0, 1510.0, 1410.0],
        }
    )
    ticks = per_tick(samples)
    assert ticks.get_column("power_w").to_list() == [490.0, None]
    assert ticks.get_column("temp_c").to_list() == [71.0, 70.0]
    assert ticks.get_column("sm_clock_mhz").to_list() == [1500.0, 1510.0]
    assert ticks.get_column("n_gpus").to_list() == [2, 2]


def test_timeline_draws_summed_draw_and_the_cap_steps() -> None:
    a = analysis_h100()
    samples = samples_for(a, 2, ticks_per_cap=4)
    fig = timeline_figure(samples, _typed_analysis(a))
    ax_p = fig.axes[0]
    cap = np.asarray(one_by_gid(ax_p.lines, "cap").get_ydata(), dtype=float)
    draw = np.asarray(one_by_gid(ax_p.lines, "power").get_ydata(), dtype=float)
    assert cap[0] == 400.0 and cap[-1] == 1400.0  # per-GPU cap x 2 GPUs
    assert draw[0] == pytest.approx(a["caps"][0]["power_w"])
    steps = one_by_gid(ax_p.collections, "cap-steps")
    assert len(steps.get_segments()) == len(a["caps"]) - 1


def test_timeline_without_t_s_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="t_s"):
        timeline_figure(pl.DataFrame({"power_w": [1.0]}))


# ---------------------------------------------------------------- compare


def _labelled_analyses() -> list[tuple[str, Analysis]]:
    return [("5090 | water", analysis_5090()), ("H100 pair", analysis_h100())]


def test_compare_in_percent_of_tdp_with_normalisation() -> None:
    runs = _labelled_analyses()
    fig = compare_figure(_typed_runs(runs), x="pct-tdp", normalize=True)
    ax = fig.axes[0]
    for i, (_, a) in enumerate(runs):
        line = one_by_gid(ax.lines, f"run:{i}")
        xs = np.asarray(line.get_xdata(), dtype=float)
        ys = np.asarray(line.get_ydata(), dtype=float)
        caps = np.array([c["cap_w"] for c in a["caps"]])
        assert xs == pytest.approx(caps / a["run"]["default_limit_w"] * 100)
        assert np.nanmax(ys) == pytest.approx(1.0)
        star = one_by_gid(ax.lines, f"sweet-spot:{i}")
        spot = a["sweet_spot"]
        assert star.get_xdata()[0] == pytest.approx(spot["pct_of_default"])
        assert star.get_ydata()[0] == pytest.approx(1.0)


def test_compare_in_watts_keeps_raw_tps_per_w(tmp_path: Path) -> None:
    runs = _labelled_analyses()
    ax = compare_figure(_typed_runs(runs)).axes[0]
    star = one_by_gid(ax.lines, "sweet-spot:1")
    assert star.get_xdata()[0] == runs[1][1]["sweet_spot"]["cap_w"]
    assert star.get_ydata()[0] == pytest.approx(runs[1][1]["sweet_spot"]["tps_per_w"])
    paths = render_compare(_typed_runs(runs), tmp_path / "cmp" / "compare", formats=("png", "svg"))
    assert [p.name for p in paths] == ["compare.png", "compare.svg"]
    assert all(p.is_file() for p in paths)


def test_compare_rejects_bad_input() -> None:
    runs = _labelled_analyses()
    runs[1][1]["run"]["default_limit_w"] = None
    with pytest.raises(UsageError, match=r"H100 pair.*--x watts"):
        compare_figure(_typed_runs(runs), x="pct-tdp")
    with pytest.raises(UsageError, match="unknown x axis"):
        compare_figure(_typed_runs(runs), x="volts")
    with pytest.raises(UsageError, match="at least one run"):
        compare_figure([])


def test_compare_table_lists_each_sweet_spot() -> None:
    runs = _labelled_analyses()
    runs[1][1]["sweet_spot"] = None
    table = compare_table(_typed_runs(runs))
    lines = table.strip().splitlines()
    # the run's label names its GPU and load (compare_labels): no columns of their own
    assert lines[0].startswith("| run | sweet spot |")
    assert len(lines) == 4
    spot = runs[0][1]["sweet_spot"]
    first = [c.strip() for c in lines[2].strip("|").split(" | ")]
    assert first[0] == "5090 \\| water"
    assert first[1] == "400 W"
    assert first[2] == f"{spot['pct_of_default']:.0f}%" == "70%"
    assert first[3] == f"{spot['tps_per_w']:#.3g}"
    assert first[6] == f"{runs[0][1]['near_peak']['cap_w']:.0f} W"
    second = [c.strip() for c in lines[3].strip("|").split(" | ")]
    assert second[1:6] == ["—"] * 5


def test_charts_leave_global_matplotlib_state_alone() -> None:
    import matplotlib

    before = dict(matplotlib.rcParams)
    efficiency_figure(_typed_analysis(analysis_5090()))
    assert dict(matplotlib.rcParams) == before


def test_a_rig_of_different_cards_shows_each_cards_default() -> None:
    a = analysis_3090()
    a["run"].update(
        gpu_label="RTX 3090 + RTX 4090",
        gpu_names=["NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090"],
        default_limits_w=[370.0, 450.0],
        default_limit_w=410.0,
        n_gpus=2,
    )
    a["sweet_spot"]["pct_of_default_by_gpu"] = [290 / 370 * 100, 290 / 450 * 100]
    fig = efficiency_figure(_typed_analysis(a))
    ax, ax2 = _axes_pair(fig)
    lines = [ln for ln in ax.lines if ln.get_gid() == "default-tdp"]
    assert sorted(ln.get_xdata()[0] for ln in lines) == [370.0, 450.0]  # not the 410 W mean
    labels = sorted(t.get_text() for t in ax2.texts if t.get_gid() == "default-tdp-label")
    assert labels == ["RTX 3090 default 370 W", "RTX 4090 default 450 W"]
    assert (
        "78% / 64% of each card's default" in one_by_gid(ax2.texts, "sweet-spot-callout").get_text()
    )
    assert fig.get_suptitle().startswith("RTX 3090 + RTX 4090:")
    typed = _typed_analysis(a)
    (label,) = compare_labels([("mixed", typed.run, "power")])
    assert label.startswith("RTX 3090 + RTX 4090, ")
    assert "| 78% / 64% |" in compare_table([(label, typed)])
