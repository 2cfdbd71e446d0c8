"""powersweep.plots.fleet_charts: the fleet report's charts, readable at one run or a thousand. The
band chart (median, IQR, min-max, the fleet cap, numbered outlier curves listed beside it), the
histogram of each card's own best setting, clock-axis groups named as such, and what is left out
past a few groups."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from matplotlib.patches import Rectangle

from powersweep.analysis.fleet_result_types import FleetReport
from powersweep.errors import PowersweepError, UsageError
from powersweep.plots.fleet_charts import (
    MAX_GROUPS,
    MAX_OUTLIER_LINES,
    band_figure,
    histogram_figure,
    render_band,
    render_fleet_charts,
)

CAPS = [200.0, 250.0, 300.0, 350.0]


def _band_group(n_outliers: int = 2, **changes: Any) -> dict[str, Any]:
    group: dict[str, Any] = {
        "gpu_name": "NVIDIA GeForce RTX 4090",
        "n_gpus": 1,
        "load_mode": "decode-single",
        "model": "qwen",
        "n_cards": 12,
        "metric": "narr_tps",
        "band": {
            "cap_w": CAPS,
            "min": [0.10, 0.11, 0.10, 0.09],
            "q1": [0.11, 0.12, 0.11, 0.10],
            "median": [0.115, 0.125, 0.115, 0.105],
            "q3": [0.12, 0.13, 0.12, 0.11],
            "max": [0.13, 0.14, 0.13, None],
        },
        "fleet_cap": {"cap_w": 250.0, "within_noise": {"x": [250.0, 300.0]}},
        "envelope_w": {"default": 450.0},
        "outliers": [
            {
                "label": f"rack-1/node-{i:03d}-long-name",
                "causes": [{"code": "hot_card"}],
                "curve": {"cap_w": CAPS, "tps_per_w": [0.08, 0.09, 0.085, 0.08]},
            }
            for i in range(n_outliers)
        ],
        "cards": [
            {"sweet_spot_w": 250.0 + 50.0 * (i % 2), "near_peak_w": 300.0} for i in range(12)
        ],
        "step_w": 50.0,
    }
    group.update(changes)
    return group


def _report_of(*groups: dict[str, Any]) -> FleetReport:
    """A report of these groups, typed as the charts take it."""
    return FleetReport.from_json({"groups": list(groups)})


def _texts(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_the_band_chart_draws_each_groups_band_cap_and_outliers() -> None:
    fig = band_figure(_report_of(_band_group()))
    band, side = fig.axes
    assert fig.get_suptitle() == "Fleet: tokens per watt against the power cap"
    assert band.get_title(loc="left") == "GeForce RTX 4090 · decode-single · qwen (12 cards)"
    labels = [line.get_label() for line in band.lines]
    assert "median card" in labels and "fleet cap" in labels and "default" in labels
    # the fleet cap named at its value, each outlier curve numbered at its end
    assert _texts(band) == ["1", "2", "fleet cap 250 W"]
    assert band.get_ylabel() == "TPS/W"
    assert _texts(side) == [
        "Outliers: 2 of 12",
        "1. …ode-000-long-name: hot card",
        "2. …ode-001-long-name: hot card",
    ]


def test_many_outliers_are_listed_up_to_a_limit_and_the_rest_counted() -> None:
    fig = band_figure(_report_of(_band_group(n_outliers=MAX_OUTLIER_LINES + 3)))
    side = fig.axes[1]
    texts = _texts(side)
    assert texts[0] == f"Outliers: {MAX_OUTLIER_LINES + 3} of 12"
    assert texts[-1] == "... and 3 more (fleet.md)"
    assert texts[9].startswith("   ")  # past the drawn curves: listed without a number


@pytest.mark.parametrize(("cards", "text"), [(12, "none"), (3, "(needs 5+ cards)")])
def test_no_outliers_says_whether_the_group_could_have_any(cards: int, text: str) -> None:
    side = band_figure(_report_of(_band_group(n_outliers=0, n_cards=cards))).axes[1]
    assert _texts(side)[1] == text


def test_a_clock_axis_group_names_its_setting_and_lock() -> None:
    axis = {
        "name": "sm-clock",
        "setting_key": "sm_lock_mhz",
        "unit": "MHz",
        "noun": "SM lock",
        "answer_key": "fleet_lock",
        "suffix": "mhz",
    }
    group = _band_group(n_outliers=0, axis=axis, fleet_lock={"sm_lock_mhz": 1500.0})
    group["band"]["sm_lock_mhz"] = [1200.0, 1500.0, 1800.0, 2100.0]
    group["cards"] = [{"sweet_spot_mhz": 1500.0, "near_peak_mhz": 1800.0}] * 3
    group["step_mhz"] = 300.0
    fig = band_figure(_report_of(group))
    band = fig.axes[0]
    assert fig.get_suptitle() == "Fleet: tokens per watt against the setting swept"
    assert band.get_title(loc="left").endswith("· sm-clock (12 cards)")
    assert band.get_xlabel() == "SM lock (MHz)"
    assert "fleet lock 1500 MHz" in _texts(band)
    assert "default" not in [line.get_label() for line in band.lines]  # a cap's default only
    hist = histogram_figure(_report_of(group)).axes[0]
    assert {t.get_text() for t in hist.get_legend().get_texts()} == {
        "fleet lock 1500 MHz",
        "efficiency peak",
        "near-peak SM lock",
    }


def test_the_histogram_counts_each_cards_sweet_spot_per_step() -> None:
    fig = histogram_figure(_report_of(_band_group()))
    ax = fig.axes[0]
    bars = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_height() > 0]
    by_edge = {round(b.get_x()): b.get_height() for b in bars}
    assert by_edge == {225: 6.0, 275: 6.0}  # six cards at 250 W, six at 300 W, bins of 50 W
    assert ax.get_ylabel() == "cards"


def test_a_group_without_card_values_draws_an_empty_panel() -> None:
    fig = histogram_figure(_report_of(_band_group(cards=[{"sweet_spot_w": None}])))
    assert not fig.axes[0].axison


def test_groups_past_the_limit_are_named_in_a_note() -> None:
    groups = [_band_group(model=f"m{i}") for i in range(MAX_GROUPS + 2)]
    fig = band_figure(_report_of(*groups))
    assert len(fig.axes) == 2 * MAX_GROUPS
    assert [t.get_text() for t in fig.texts if t.get_text() != fig.get_suptitle()] == [
        "2 more group(s) not drawn; see fleet.json / fleet.md"
    ]


def test_a_report_without_a_usable_group_is_a_usage_error() -> None:
    empty = _band_group()
    empty["band"] = {"cap_w": []}
    for fleet in (FleetReport.from_json({}), _report_of(), _report_of(empty)):
        with pytest.raises(UsageError, match="no group with a usable curve"):
            band_figure(fleet)
        with pytest.raises(UsageError, match="no group with a usable curve"):
            histogram_figure(fleet)


def test_render_writes_the_band_and_the_histogram(tmp_path: Path) -> None:
    fleet = _report_of(_band_group())
    paths = render_fleet_charts(copy.deepcopy(fleet), tmp_path / "charts", formats=("svg",))
    assert [p.name for p in paths] == ["fleet-band.svg", "fleet-sweet-spots.svg"]
    (band,) = render_band(fleet, tmp_path / "new" / "compare", formats=("svg",))
    assert band == tmp_path / "new" / "compare.svg" and band.is_file()


def test_a_folder_that_cannot_be_made_is_a_powersweep_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(PowersweepError, match="cannot create chart folder"):
        render_fleet_charts(_report_of(_band_group()), blocker / "charts", formats=("svg",))
    with pytest.raises(PowersweepError, match="cannot create chart folder"):
        render_band(_report_of(_band_group()), blocker / "band" / "compare", formats=("svg",))
