"""Issue 5: charts of synthesised runs of every simulated profile and of the measured 3090 curve.

Each run directory is synthesised from the simulator's ground truth (with realistic noise and a
samples.csv for the timeline), then analysed and drawn through ``build_report`` as the CLI does.
What a person checks by eye is asserted from the artists: the callout points at the sweet spot,
plateaus and ceilings are shaded exactly where the analysis puts them, no label, callout or
legend overlaps another, leaves the axes or covers a curve point or marker.
"""

from __future__ import annotations

import itertools
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from PIL import Image

from powersweep.analysis.result_types import PowerAnalysis
from powersweep.analysis.synthetic import NoiseModel, synthesize_run
from powersweep.plots import efficiency_figure
from powersweep.report import build_report
from powersweep.sim.profiles import get_profile, profile_names
from powersweep.sim.sim_rig import ground_truth
from powersweep.sweep.gpu import PowerEnvelope
from powersweep.sweep.planning.caps import default_caps
from tests.chart_layout import plot_area_boxes

REPO = Path(__file__).resolve().parents[2]
MEASURED_3090 = REPO.parent / "shared" / "data" / "power-cap-3090-qwen36.csv"
# Fewer ticks than a real sweep keep the test fast; the layout does not depend on them.
NOISE = NoiseModel(load_ticks=10, settle_ticks=2)
CASES = [(name, "decode-single") for name in profile_names()] + [
    ("rtx5090-air", "prefill-heavy"),
    ("h100-sxm", "decode-concurrent"),
]


@cache
def _concurrent_truth(name: str, mode: str) -> dict[str, Any]:
    p = get_profile(name)
    env = PowerEnvelope(p.min_limit_w, p.default_limit_w, p.max_limit_w, p.user_limit_w)
    return ground_truth([p], mode, default_caps(env), concurrency=8).to_dict()


def _noisy_run(tmp_path: Path, name: str, mode: str) -> Path:
    p = get_profile(name)
    gpu = {
        "name": p.gpu_name,
        "min_limit_w": p.min_limit_w,
        "default_limit_w": p.default_limit_w,
        "max_limit_w": p.max_limit_w,
        "slowdown_temp_c": p.slowdown_temp_c,
        "mem_clock_mhz": p.mem_clock_mhz,
    }
    return synthesize_run(
        _concurrent_truth(name, mode), gpu, tmp_path / f"{name}-{mode}", seed=1, noise=NOISE
    )


def _marked_points_px(fig: Figure) -> np.ndarray:
    """Curve vertices, segment midpoints and the rims of the big markers, in pixels."""
    pts = []
    for ax in fig.axes:
        for line in ax.lines:
            gid = str(line.get_gid())
            if gid not in ("tps", "code_tps", "tps_per_w", "sweet-spot-marker", "near-peak-marker"):
                continue
            xy = np.column_stack([line.get_xdata(), line.get_ydata()]).astype(float)
            xy = xy[np.isfinite(xy).all(axis=1)]
            px = ax.transData.transform(np.vstack([xy, (xy[1:] + xy[:-1]) / 2]))
            if gid.endswith("marker"):
                # The tips of the marker (a star reaches its full radius straight up).
                r = line.get_markersize() * fig.dpi / 72 / 2
                ring = np.array([[r, 0], [-r, 0], [0, r], [0, -r]])
                px = np.vstack([px, (px[:, None, :] + ring[None]).reshape(-1, 2)])
            pts.append(px)
    return np.vstack(pts)


def _check_layout(fig: Figure, analysis: dict[str, Any], where: str) -> None:
    fig.canvas.draw()
    ax, ax2 = fig.axes
    boxes = plot_area_boxes(fig)
    gids = {g for g, _ in boxes}
    assert {"sweet-spot-callout", "legend"} <= gids, where
    assert {f"plateau-label:{p['kind']}" for p in analysis["plateaus"]} <= gids, where
    for (ga, a), (gb, b) in itertools.combinations(boxes, 2):
        overlap = a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1
        assert not overlap, f"{where}: {ga} overlaps {gb}"
    area = ax.get_window_extent()
    pts = _marked_points_px(fig)
    for gid, box in boxes:
        assert area.x0 <= box.x0 and box.x1 <= area.x1 + 0.5, f"{where}: {gid} leaves the axes"
        assert area.y0 <= box.y0 and box.y1 <= area.y1 + 0.5, f"{where}: {gid} leaves the axes"
        inside = (
            (pts[:, 0] > box.x0)
            & (pts[:, 0] < box.x1)
            & (pts[:, 1] > box.y0)
            & (pts[:, 1] < box.y1)
        )
        assert not inside.any(), f"{where}: {gid} covers a curve or marker"
    # The callout points at the sweet spot.
    spot = analysis["sweet_spot"]
    (callout,) = [t for t in ax2.texts if t.get_gid() == "sweet-spot-callout"]
    assert callout.xy == pytest.approx((spot["cap_w"], spot["tps_per_w"])), where  # type: ignore[attr-defined]
    # Shading equals the analysis' plateaus and ceilings.
    spans = sorted(
        (str(p.get_gid()), p.get_x(), p.get_x() + p.get_width())
        for p in ax.patches
        if isinstance(p, Rectangle) and str(p.get_gid()).startswith("plateau:")
    )
    want = sorted((f"plateau:{p['kind']}", p["start_w"], p["end_w"]) for p in analysis["plateaus"])
    assert [s[0] for s in spans] == [w[0] for w in want], where
    for s, w in zip(spans, want, strict=True):
        assert s[1:] == pytest.approx(w[1:]), where


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_charts_of_every_profile(tmp_path: Path, name: str, mode: str) -> None:
    run = _noisy_run(tmp_path, name, mode)
    report = build_report(run)
    charts = run / "charts"
    expected = {"efficiency.png", "power.png", "clocks.png", "timeline.png"}
    assert {p.name for p in charts.iterdir()} == expected
    for png in expected:
        with Image.open(charts / png) as img:
            assert img.size[0] >= 1200 and img.size[1] >= 700
    where = f"{name} {mode}"
    analysis = report.result.to_json()
    if name.startswith("rtx3090") and mode == "decode-single":
        assert any(p["kind"] == "boost_plateau" for p in analysis["plateaus"]), where
    if mode == "decode-single" and name in ("rtx4090-air", "h100-sxm", "rtx5090-air"):
        assert any(p["kind"] == "draw_ceiling" for p in analysis["plateaus"]), where
    _check_layout(efficiency_figure(PowerAnalysis.from_json(analysis)), analysis, where)


def test_charts_of_the_measured_3090_curve(tmp_path: Path) -> None:
    if not MEASURED_3090.is_file():
        pytest.skip(f"measured curve not found at {MEASURED_3090}")
    report = build_report(MEASURED_3090, out_dir=tmp_path)
    assert (tmp_path / "charts" / "efficiency.png").is_file()
    analysis = report.result.to_json()
    assert analysis["sweet_spot"]["cap_w"] == 290.0
    typed = PowerAnalysis.from_json(analysis)
    _check_layout(efficiency_figure(typed), analysis, "measured 3090")


def test_near_peak_at_the_sweet_spot_is_said_not_drawn_over_the_star(tmp_path: Path) -> None:
    analysis = build_report(
        _noisy_run(tmp_path, "rtx5090-air", "prefill-heavy"), charts=False, write_analysis=False
    ).result.to_json()
    analysis = {**analysis, "near_peak": {**analysis["near_peak"]}}
    analysis["near_peak"]["cap_w"] = analysis["sweet_spot"]["cap_w"]
    fig = efficiency_figure(PowerAnalysis.from_json(analysis))
    _, ax2 = fig.axes
    assert not [line for line in ax2.lines if line.get_gid() == "near-peak-marker"]
    (callout,) = [t for t in ax2.texts if t.get_gid() == "sweet-spot-callout"]
    assert "also the near-peak cap" in callout.get_text()
