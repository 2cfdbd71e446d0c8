"""powersweep.plots.efficiency: the main chart, read from its artists. TPS/W printed to three
significant digits; the sweet spot's callout (cap, TPS/W, TPS, share of the default or of each
card's, the near-peak cap when it is the same, the sweep's edge); the near-peak label with its TPS
loss; the axes' labels, limits and legend; the code TPS line only where it was measured. (The
layout, plateau bands and failed caps are in ``test_plots.py``.)"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from powersweep.analysis.result_types import PowerAnalysis
from powersweep.plots._data import parse_analysis
from powersweep.plots.efficiency import (
    NEAR_PEAK_GID,
    SWEET_GID,
    efficiency_figure,
    fmt_tpw,
    sweet_spot_text,
)

CAPS = [
    {"cap_w": 200, "tps": 20.0, "code_tps": 19.0, "power_w": 195.0, "tps_per_w": 0.1026},
    {"cap_w": 250, "tps": 27.5, "code_tps": 26.0, "power_w": 240.0, "tps_per_w": 0.1146},
    {"cap_w": 300, "tps": 30.0, "code_tps": 29.0, "power_w": 290.0, "tps_per_w": 0.1034},
]


def _efficiency_analysis(**changes: Any) -> PowerAnalysis:
    base: dict[str, Any] = {
        "run": {"gpu_name": "RTX 3090", "n_gpus": 1, "default_limit_w": 350.0},
        "caps": CAPS,
        "sweet_spot": {"cap_w": 250, "tps_per_w": 0.1146, "tps": 27.5, "pct_of_default": 71.4},
        "near_peak": {"cap_w": 300, "tps_per_w": 0.1034, "tps_loss_pct": 0.0},
    }
    return PowerAnalysis.from_json({**base, **changes})


def _two_axes(fig: Figure) -> tuple[Axes, Axes]:
    ax, ax2 = fig.axes
    return ax, ax2


def _text_by_gid(ax2: Axes, gid: str) -> str:
    (found,) = [t for t in ax2.texts if t.get_gid() == gid]
    return found.get_text()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.24, "0.240"),  # significant trailing zeros kept
        (0.1146, "0.115"),
        (1.0, "1.00"),
        (12.34, "12.3"),
        (123.4, "123"),  # no bare trailing point
        (0.001, "0.00100"),
        (0.0009, "9.00e-04"),  # too small for three digits after the point
        (math.nan, "nan"),
    ],
)
def test_tps_per_w_has_three_significant_digits(value: float, text: str) -> None:
    assert fmt_tpw(value) == text


def test_the_callout_names_the_cap_its_figures_and_its_share_of_the_default() -> None:
    text = sweet_spot_text(parse_analysis(_efficiency_analysis()))
    assert text == "Sweet spot: 250 W\n0.115 TPS/W  ·  27.5 TPS\n71% of default limit"


@pytest.mark.parametrize(
    ("spot", "last"),
    [
        ({"pct_of_default_by_gpu": [81.0, 67.0]}, "81% / 67% of each card's default"),
        ({"at_boundary": "low"}, "lowest cap swept: try lower"),
        ({"at_boundary": "high"}, "highest cap swept: try higher"),
    ],
)
def test_the_callout_says_each_cards_share_and_the_sweeps_edge(
    spot: dict[str, Any], last: str
) -> None:
    base = {"cap_w": 250, "tps_per_w": 0.1146, "tps": 27.5, "pct_of_default": 71.4}
    text = sweet_spot_text(parse_analysis(_efficiency_analysis(sweet_spot={**base, **spot})))
    assert text.splitlines()[-1] == last
    if "pct_of_default_by_gpu" in spot:
        assert "of default limit" not in text  # each card's share replaces the rig's


def test_the_callout_leaves_out_what_is_unknown_and_names_a_shared_near_peak() -> None:
    spot = {"cap_w": 262.5, "tps_per_w": 0.1146}
    near = {"cap_w": 262.5, "tps_per_w": 0.1146}
    text = sweet_spot_text(parse_analysis(_efficiency_analysis(sweet_spot=spot, near_peak=near)))
    assert text == "Sweet spot: 262.5 W\n0.115 TPS/W\nalso the near-peak cap"


def test_the_chart_marks_the_sweet_spot_and_labels_the_near_peak_with_its_loss() -> None:
    near = {"cap_w": 300, "tps_per_w": 0.1034, "tps_loss_pct": 2.345}
    fig = efficiency_figure(_efficiency_analysis(near_peak=near))
    _, ax2 = _two_axes(fig)
    gids = {str(line.get_gid()) for line in ax2.lines}
    assert {"sweet-spot-marker", "near-peak-marker", "tps_per_w"} <= gids
    assert _text_by_gid(ax2, NEAR_PEAK_GID) == "near peak: 300 W\n2.3% below peak TPS"
    assert _text_by_gid(ax2, SWEET_GID).startswith("Sweet spot: 250 W")
    near_unknown = efficiency_figure(
        _efficiency_analysis(near_peak={"cap_w": 300, "tps_per_w": 0.1034})
    )
    assert _text_by_gid(_two_axes(near_unknown)[1], NEAR_PEAK_GID) == "near peak: 300 W"


def test_a_near_peak_at_the_sweet_spot_gets_no_marker_of_its_own() -> None:
    near = {"cap_w": 250, "tps_per_w": 0.1146, "tps_loss_pct": 0.0}
    _, ax2 = _two_axes(efficiency_figure(_efficiency_analysis(near_peak=near)))
    assert "near-peak-marker" not in {line.get_gid() for line in ax2.lines}
    assert NEAR_PEAK_GID not in {t.get_gid() for t in ax2.texts}
    assert _text_by_gid(ax2, SWEET_GID).endswith("also the near-peak cap")


def test_the_axes_leave_headroom_above_the_highest_point() -> None:
    ax, ax2 = _two_axes(efficiency_figure(_efficiency_analysis()))
    assert ax.get_ylim() == pytest.approx((0.0, 30.0 * 1.32))
    assert ax2.get_ylim() == pytest.approx((0.0, 0.1146 * 1.32))
    assert ax.get_ylabel() == "decode TPS (tokens/s)"
    assert ax2.get_ylabel() == "TPS/W (narrative tokens/s per W)"
    assert ax.get_xlabel() == "power cap (W)"


def test_the_legend_lists_the_curves_and_marks() -> None:
    _, ax2 = _two_axes(efficiency_figure(_efficiency_analysis()))
    legend = ax2.get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == [
        "narrative TPS",
        "code TPS",
        "TPS/W",
        "sweet spot",
        "near-peak cap",
    ]


def test_code_tps_is_drawn_only_where_it_was_measured() -> None:
    caps = [{k: v for k, v in c.items() if k != "code_tps"} for c in CAPS]
    ax, _ = _two_axes(efficiency_figure(_efficiency_analysis(caps=caps)))
    assert "code_tps" not in {line.get_gid() for line in ax.lines}
    tps = next(line for line in ax.lines if line.get_gid() == "tps")
    assert np.asarray(tps.get_ydata(), dtype=float).tolist() == [20.0, 27.5, 30.0]


def test_a_rig_names_its_cards_and_the_cap_per_gpu_and_a_title_replaces_the_name() -> None:
    run = {"gpu_name": "RTX 3090", "n_gpus": 2, "default_limit_w": 350.0}
    fig = efficiency_figure(_efficiency_analysis(run=run))
    assert fig.get_suptitle() == "2x RTX 3090: tokens per watt vs power cap"
    assert _two_axes(fig)[0].get_xlabel() == "power cap (W per GPU)"
    titled = efficiency_figure(_efficiency_analysis(), title="my card")
    assert titled.get_suptitle() == "my card"


def test_without_a_sweet_spot_there_is_no_callout() -> None:
    _, ax2 = _two_axes(efficiency_figure(_efficiency_analysis(sweet_spot=None, near_peak=None)))
    assert {t.get_gid() for t in ax2.texts}.isdisjoint({SWEET_GID, NEAR_PEAK_GID})
    assert "sweet-spot-marker" not in {line.get_gid() for line in ax2.lines}


def test_a_run_without_an_answer_draws_its_best_reading_hollow_and_names_it() -> None:
    from powersweep.analysis.result_types import Answer, CapRow, Pick, PowerAnalysis
    from powersweep.plots.efficiency import efficiency_figure

    caps = [
        CapRow.from_json(dict(cap_w=c, tps=t, power_w=c - 1, tps_per_w=t / (c - 1), status="ok"))
        for c, t in ((200.0, 20.0), (220.0, 23.0), (240.0, 24.0))
    ]
    best = Pick(cap_w=220.0, tps_per_w=23.0 / 219.0, tps=23.0, power_w=219.0)
    analysis = PowerAnalysis(
        caps=caps,
        answer=Answer(kind="none", why="interrupted after 3 of 21 caps"),
        sweet_spot=best,
        near_peak=best,
    )
    fig = efficiency_figure(analysis)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any(t.startswith("Best measured: 220 W") and "no answer" in t for t in texts), texts
    (star,) = [ln for ax in fig.axes for ln in ax.lines if ln.get_gid() == "sweet-spot-marker"]
    assert star.get_markerfacecolor() == "none" and star.get_label() == "best measured (no answer)"
    assert not [ln for ax in fig.axes for ln in ax.lines if ln.get_gid() == "near-peak-marker"]


def test_each_point_carries_its_stated_95_interval_as_an_error_bar() -> None:
    stated = [
        {**row, "tps_u95_pct": u_tps, "tps_per_w_u95_pct": u_tpw}
        for row, u_tps, u_tpw in zip(CAPS, [1.0, 2.0, 4.0], [1.5, 3.0, 6.0], strict=True)
    ]
    ax, ax2 = _two_axes(efficiency_figure(_efficiency_analysis(caps=stated)))
    for axes, key, value_key, label in (
        (ax, "tps_u95_pct", "tps", "narrative TPS ±95%"),
        (ax2, "tps_per_w_u95_pct", "tps_per_w", "TPS/W ±95%"),
    ):
        (bars,) = [c for c in axes.containers if c.get_label() == label]
        segments = bars.lines[2][0].get_segments()
        halves = [(seg[1][1] - seg[0][1]) / 2 for seg in segments]
        want = [row[value_key] * row[key] / 100 for row in stated]
        assert halves == pytest.approx(want)
    legend = ax2.get_legend()
    assert legend is not None
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts[:3] == ["narrative TPS ±95%", "code TPS", "TPS/W ±95%"]


def test_an_older_analysis_reads_each_caps_tps_per_w_interval_from_the_sweet_spot() -> None:
    spot = {
        "cap_w": 250,
        "tps_per_w": 0.1146,
        "tps": 27.5,
        "tps_per_w_u95_pct": {"200.0": 2.0, "250.0": 1.0, "300.0": None},
    }
    _, ax2 = _two_axes(efficiency_figure(_efficiency_analysis(sweet_spot=spot)))
    (bars,) = [c for c in ax2.containers if c.get_label() == "TPS/W ±95%"]
    segments = [seg for seg in bars.lines[2][0].get_segments() if len(seg)]
    halves = [(seg[1][1] - seg[0][1]) / 2 for seg in segments]
    # the cap that states none gets no bar, never a zero-width one
    assert halves == pytest.approx([0.1026 * 0.02, 0.1146 * 0.01])
    assert [seg[0][0] for seg in segments] == [200, 250]
