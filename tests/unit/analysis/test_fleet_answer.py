"""powersweep.analysis.fleet_answer: a fleet of hand-made runs with a known answer: the options
checked, the runs grouped, the pooled fleet cap, what it costs each card against its own best,
the savings against the default limit, the runs left out or incomplete, and group titles.

(test_fleet_result_types.py and tests/integration/test_fleet*.py cover clock axes, outliers and
the simulated fleets.)"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from powersweep.analysis.fleet_answer import (
    HOURS_PER_YEAR,
    FleetOptions,
    check_options,
    fleet_report,
    group_title,
)
from powersweep.analysis.fleet_result_types import FleetGroup, FleetReport
from powersweep.errors import UsageError

CAPS = (200.0, 250.0, 300.0)
# TPS of each card at 200, 250 and 300 W; each draws a watt under its cap
CARDS = {"n0": (20.0, 28.0, 30.0), "n1": (21.0, 28.5, 31.0), "n2": (19.0, 27.0, 29.5)}


def _run(root: Path, node: str, tps: tuple[float, ...], **run: Any) -> Path:
    d = root / node
    d.mkdir(parents=True)
    meta = {
        "schema_version": 1,
        "status": "complete",
        "host": node,
        "load_mode": "decode-single",
        "server": {"model": "qwen"},
        "gpus": [
            {
                "index": 0,
                "name": "Test GPU",
                "uuid": f"GPU-{node}",
                "default_limit_w": 300.0,
                "min_limit_w": 150.0,
                "max_limit_w": 400.0,
            }
        ],
        **run,
    }
    (d / "run.json").write_text(json.dumps(meta))
    rows = [f"{c},{t},{c - 1}" for c, t in zip(CAPS, tps, strict=True)]
    (d / "caps.csv").write_text("cap_w,narr_tps,power_w\n" + "\n".join(rows) + "\n")
    return d


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    for node, tps in CARDS.items():
        _run(tmp_path / "fleet", node, tps)
    return tmp_path / "fleet"


@pytest.mark.parametrize(
    ("opts", "error"),
    [
        (FleetOptions(duty=0.0), "--duty must be more than 0 and at most 1, not 0"),
        (FleetOptions(duty=1.5), "--duty must be more than 0 and at most 1, not 1.5"),
        (FleetOptions(duty=math.nan), "--duty must be more than 0 and at most 1, not nan"),
        (
            FleetOptions(max_tps_loss_pct=100.0),
            "--max-tps-loss must be between 0 and 100 %, not 100",
        ),
        (FleetOptions(max_tps_loss_pct=-1.0), "--max-tps-loss must be between 0 and 100 %, not -1"),
        (FleetOptions(tariff_per_kwh=math.inf), "--tariff"),
    ],
)
def test_options_out_of_range_are_one_usage_error(opts: FleetOptions, error: str) -> None:
    with pytest.raises(UsageError) as exc:
        check_options(opts)
    assert str(exc.value).startswith(error)


def test_defaults_and_edges_are_accepted() -> None:
    check_options(FleetOptions())
    check_options(FleetOptions(tariff_per_kwh=0.3, duty=1.0, max_tps_loss_pct=0.0))


def test_the_fleet_cap_is_the_pooled_best_and_priced_against_the_default(fleet: Path) -> None:
    doc = fleet_report([fleet], FleetOptions(tariff_per_kwh=0.25, duty=0.5)).to_json()
    assert (doc["n_runs"], doc["n_cards"], doc["unreadable"], doc["incomplete"]) == (3, 3, [], [])
    assert doc["options"] == {"tariff_per_kwh": 0.25, "duty": 0.5, "max_tps_loss_pct": 5.0}
    (g,) = doc["groups"]
    assert (g["gpu_name"], g["n_gpus"], g["load_mode"], g["model"]) == (
        "Test GPU",
        1,
        "decode-single",
        "qwen",
    )
    assert g["n_cards"] == 3 and g["step_w"] == 50.0
    assert g["envelope_w"] == {"min": 150.0, "default": 300.0, "max": 400.0}
    assert g["sweet_spot_w"] == {
        "n": 3,
        "median": 250.0,
        "q1": 250.0,
        "q3": 250.0,
        "min": 250.0,
        "max": 250.0,
    }
    answer = g["fleet_cap"]
    assert answer["cap_w"] == 250.0  # pooled: 83.5 TPS over 747 W
    assert answer["fleet_tps_per_w"] == pytest.approx(83.5 / 747.0)
    assert answer["tps_per_card"] == pytest.approx(83.5 / 3)
    assert answer["fleet_tps_per_w_at_reference"] == pytest.approx(90.5 / 897.0)
    assert answer["fleet_tps_per_w_at_default"] == pytest.approx(90.5 / 897.0)
    assert answer["pct_of_default"] == pytest.approx(250 / 300 * 100)
    assert answer["pct_of_default_by_gpu"] is None and answer["excluded_outliers"] == 0
    assert answer["within_noise"]["x"] == [250.0] and answer["within_noise"]["resamples"] == 200
    assert answer["tps_vs_own_best_pct"]["median"] == 0.0  # every card's own best is 250 W
    sv = g["savings"]
    assert (sv["n_cards"], sv["n_cards_unpriced"]) == (3, 0)
    assert sv["kw_default"] == pytest.approx(0.897) and sv["kw_fleet_cap"] == pytest.approx(0.747)
    assert sv["kw_saved"] == pytest.approx(0.15)
    assert sv["mwh_per_year_saved"] == pytest.approx(0.15 * HOURS_PER_YEAR * 0.5 / 1000)
    assert sv["tps_change_pct"] == pytest.approx((83.5 / 90.5 - 1) * 100)
    kwh_default = 897.0 / 90.5 / 3.6
    assert sv["kwh_per_mtok_default"] == pytest.approx(kwh_default)
    assert sv["cost_per_mtok_default"] == pytest.approx(kwh_default * 0.25)
    assert sv["reference"] == "the default limit"
    assert doc["totals"]["kw_saved"] == pytest.approx(0.15)
    assert [c["label"] for c in g["cards"]] == ["n0", "n1", "n2"]
    n0 = g["cards"][0]
    assert n0["cap_at_fleet_cap_w"] == 250.0 and n0["tps_at_fleet_cap"] == 28.0
    assert n0["own_best"] == {"cap_w": 250.0} and n0["outlier"] is False
    assert g["band"]["cap_w"] == [200.0, 250.0, 300.0] and g["band"]["n"] == [3, 3, 3]
    assert g["outliers"] == []


def test_the_report_is_built_as_its_records_not_converted_from_a_dict(
    fleet: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report is typed where it is computed: no fleet.json-shaped dict is made and read
    back (FleetReport.from_json is for reading a written fleet.json), and what it writes reads
    back unchanged."""

    def refuse(cls: type, data: Any) -> None:
        raise AssertionError("the fleet report was converted from a dict")

    monkeypatch.setattr(FleetReport, "from_json", classmethod(refuse))
    report = fleet_report([fleet], FleetOptions(tariff_per_kwh=0.25))
    monkeypatch.undo()
    doc = json.loads(json.dumps(report.to_json()))
    assert FleetReport.from_json(doc).to_json() == doc


def test_two_cards_take_the_median_of_their_own_bests(tmp_path: Path) -> None:
    root = tmp_path / "f"
    _run(root, "a", (20.0, 24.0, 31.0))  # best at 300 W
    _run(root, "b", (21.0, 28.5, 29.0))  # best at 250 W
    (g,) = fleet_report([root]).to_json()["groups"]
    answer = g["fleet_cap"]
    assert answer["within_noise"] == {"x": [answer["cap_w"]], "tier": None, "resamples": 0}
    # the grid point nearest the median (275 W) of 300 and 250 W; equidistant: the lower
    assert answer["cap_w"] == 250.0
    costs = {c["label"]: c["tps_per_w_vs_own_best_pct"] for c in g["cards"]}
    own = {"a": (31.0 / 299.0), "b": (28.5 / 249.0)}
    at = {
        "a": {250.0: 24.0 / 249.0, 300.0: 31.0 / 299.0},
        "b": {250.0: 28.5 / 249.0, 300.0: 29.0 / 299.0},
    }
    for label, pct in costs.items():
        assert pct == pytest.approx((at[label][answer["cap_w"]] / own[label] - 1) * 100)


def test_runs_left_out_and_incomplete_are_listed(fleet: Path) -> None:
    _run(fleet, "late", (20.0, 28.0, 30.0), status="partial", error="ctrl-c")
    dead = fleet / "dead"
    dead.mkdir()
    (dead / "caps.csv").write_text("cap_w,narr_tps,power_w,status\n200,,,failed\n")
    (dead / "run.json").write_text(json.dumps({"status": "failed", "error": "server died"}))
    broken = fleet / "broken"
    broken.mkdir()
    (broken / "caps.csv").write_text("cap_w,narr_tps,power_w\n200,fast,199\n")
    doc = fleet_report([fleet]).to_json()
    assert (doc["n_runs"], doc["n_cards"]) == (6, 4)
    assert doc["incomplete"] == [
        {
            "label": "late",
            "run_dir": str((fleet / "late").resolve()),
            "status": "partial",
            "error": "ctrl-c",
        }
    ]
    left = {Path(u["run_dir"]).name: u for u in doc["unreadable"]}
    assert left["broken"]["error"].endswith("caps.csv line 2: narr_tps 'fast' is not a number")
    assert left["dead"] == {
        "run_dir": str(dead.resolve()),
        "error": "server died",
        "status": "failed",
    }


def test_an_undervolt_search_is_listed_not_pooled(fleet: Path) -> None:
    uv = fleet / "undervolt"
    uv.mkdir()
    (uv / "caps.csv").write_text(
        "cap_w,narr_tps,power_w,sm_lock_mhz,sm_offset_mhz,reason\n"
        "300,30,299,,0,baseline\n300,30,290,1500,0,reference\n300,30,280,1500,30,search\n"
    )
    doc = fleet_report([fleet]).to_json()
    assert (doc["n_runs"], doc["n_cards"]) == (4, 3)
    (left,) = doc["unreadable"]
    assert Path(left["run_dir"]).name == "undervolt"
    assert left["error"].startswith("an undervolt search: not pooled across a fleet")


def test_no_readable_run_is_one_usage_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "caps.csv").write_text("cap_w,narr_tps,power_w\n200,fast,199\n")
    with pytest.raises(UsageError) as exc:
        fleet_report([tmp_path])
    assert str(exc.value).startswith("no run could be read (1 failed): ")
    assert str(exc.value).endswith("narr_tps 'fast' is not a number")


def test_group_title_names_count_load_model_and_a_clock_axis() -> None:
    power = FleetGroup.from_json(
        {"gpu_name": "RTX 3090", "n_gpus": 2, "load_mode": "decode-single", "model": "qwen"}
    )
    assert group_title(power) == "2 x RTX 3090 · decode-single · qwen"
    grid = FleetGroup.from_json(
        {"n_gpus": 1, "load_mode": "prefill-heavy", "model": "m", "axis": {"name": "grid"}}
    )
    assert group_title(grid) == "unknown GPU · prefill-heavy · m · grid"
