"""The typed fleet report (analysis/fleet_result_types.py): every fleet.json the tool writes reads
back into the model and out again unchanged (no key lost, none added, an int kept an int), the
keys only some groups write stay unwritten, the properties read the group's own axis keys, a
wrong type is one UsageError, and a malformed analysis.json beside a run is analysed again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from msgspec import UNSET

from powersweep import analysis
from powersweep.analysis.fleet_answer import FleetOptions, fleet_report
from powersweep.analysis.fleet_result_types import FleetGroup, FleetReport
from powersweep.analysis.fleet_summary import write_fleet_outputs
from powersweep.errors import UsageError
from powersweep.sim.synthetic_fleet import synthetic_fleet
from powersweep.sweep.settings.fleet_targets import read_fleet
from tests.unit.analysis.test_mixed_rigs import _mixed_run

GPU = "Test GPU"
RTX4090 = "NVIDIA GeForce RTX 4090 (simulated)"
RTX3090 = "NVIDIA GeForce RTX 3090 (simulated)"
MIXED = "NVIDIA GeForce RTX 3090 + NVIDIA GeForce RTX 4090"
RUN_JSON = {
    "schema_version": 1,
    "status": "complete",
    "load_mode": "decode-single",
    "server": {"model": "m"},
    "gpus": [
        {
            "index": 0,
            "name": GPU,
            "uuid": "GPU-x",
            "default_limit_w": 400.0,
            "min_limit_w": 150.0,
            "max_limit_w": 450.0,
        }
    ],
}


def _run(root: Path, kind: str, node: str, shift: float) -> None:
    """One card's run: a power sweep, an SM-lock sweep or a grid of SM and memory locks."""
    run = root / kind / node
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({**RUN_JSON, "host": node}))
    if kind == "power":
        lines = ["cap_w,narr_tps,power_w"]
        for cap in range(200, 401, 25):
            tps = 40 * (1 - ((cap - 300 - shift) / 300) ** 2)
            lines.append(f"{cap},{tps:.3f},{cap - 5:.1f}")
    else:
        grid = kind == "grid"
        lines = [
            "sm_lock_mhz,mem_lock_mhz,narr_tps,power_w" if grid else "sm_lock_mhz,narr_tps,power_w"
        ]
        for mem in (9001, 10001) if grid else (None,):
            for sm in range(1200, 2101, 150):
                share = (mem or 10001) / 10001
                tps = 45 * share * (1 - ((sm - 1650 - shift * 5) / 1500) ** 2)
                locks = f"{sm},{mem}," if grid else f"{sm},"
                lines.append(f"{locks}{tps:.3f},{150 + sm * 0.12 * share:.1f}")
    (run / "caps.csv").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every kind of group: a power fleet with an outlier, a group of two (no noise known), a
    broken and a failed run, a rig of different cards, and the same cards on the power axis, an
    SM lock and a grid of locks (side by side)."""
    root = tmp_path_factory.mktemp("fleets")
    synthetic_fleet(root / "a", "rtx4090-air~0.02", 6, outliers={"node002": "hot"}, seed=1)
    synthetic_fleet(root / "b", "rtx3090-air~0.02", 2, seed=2, node_prefix="r")
    broken = root / "b" / "broken-run"
    broken.mkdir()
    (broken / "caps.csv").write_text("cap_w,power_w,narr_tps\n300,abc,20\n")
    failed = synthetic_fleet(root / "c", "rtx4090-air~0.02", 1, seed=3, node_prefix="f")[0]
    meta = json.loads((failed.run_dir / "run.json").read_text())
    meta.update(status="failed", error="server went away")
    (failed.run_dir / "run.json").write_text(json.dumps(meta))
    for i, node in enumerate(("m1", "m2", "m3")):
        _mixed_run(root / "mixed", node, 10.0 * i)
    for i in range(3):
        for kind in ("power", "sm", "grid"):
            _run(root / "same-cards", kind, f"n{i}", 3.0 * i)
    return root


@pytest.fixture(scope="module")
def report(fleet_dir: Path) -> FleetReport:
    return fleet_report([fleet_dir], FleetOptions(tariff_per_kwh=0.3, duty=0.5))


def _group(report: FleetReport, gpu: str, axis: str) -> FleetGroup:
    (group,) = [g for g in report.groups if g.gpu_name == gpu and g.axis_name == axis]
    return group


def test_every_kind_of_fleet_json_round_trips_byte_for_byte(
    report: FleetReport, tmp_path: Path
) -> None:
    doc = report.to_json()
    # the report covers what the model has to hold
    axes = {g.axis_name for g in report.groups}
    assert axes == {"power", "sm-clock", "grid"}
    assert report.unreadable and report.incomplete
    assert any(g.outliers for g in report.groups)
    assert any(g.versus_power is not UNSET for g in report.groups)
    assert any(g.sweet_spot_tier_mhz is not UNSET for g in report.groups)
    # whole dicts compared: msgspec would drop an unknown key without a word
    assert FleetReport.from_json(doc).to_json() == doc
    json_path, _ = write_fleet_outputs(report, tmp_path)
    text = json_path.read_text(encoding="utf-8")
    assert text == json.dumps(doc, indent=1, allow_nan=False) + "\n"
    again = FleetReport.from_json(json.loads(text))
    assert again == report
    assert json.dumps(again.to_json(), indent=1, allow_nan=False) + "\n" == text
    assert read_fleet(tmp_path) == report


def test_keys_only_some_groups_write_stay_unwritten(report: FleetReport) -> None:
    power = _group(report, RTX4090, "power")
    grid = _group(report, GPU, "grid")
    power_doc, grid_doc = power.to_json(), grid.to_json()
    assert {"fleet_cap", "step_w", "sweet_spot_w"} <= power_doc.keys()
    assert not {"fleet_lock", "step_mhz", "sweet_spot_mhz", "versus_power"} & power_doc.keys()
    assert {"fleet_lock", "sweet_spot_tier_mhz", "versus_power"} <= grid_doc.keys()
    assert "fleet_cap" not in grid_doc and "held_cap_w" in grid_doc["fleet_lock"]
    assert "pct_of_default" not in grid_doc["fleet_lock"]
    two = _group(report, RTX3090, "power")
    assert two.answer is not None and two.answer.within_noise is not None
    assert two.answer.within_noise.share is UNSET  # fewer than three cards: no resampling
    assert "share" not in two.to_json()["fleet_cap"]["within_noise"]
    (broken,) = report.unreadable  # no run.json says how its sweep ended
    assert broken.status is UNSET and "status" not in broken.to_json()


def test_the_properties_read_the_keys_of_the_groups_axis(report: FleetReport) -> None:
    power = _group(report, RTX4090, "power")
    assert power.fleet_axis.answer_key == "fleet_cap" and power.answer is power.fleet_cap
    assert power.step == power.step_w and power.sweet_spot is power.sweet_spot_w
    assert power.band is not None and power.band.settings == power.band.cap_w
    card = power.cards[0]
    assert card.sweet_spot == card.sweet_spot_w and card.runs_at == card.cap_at_fleet_cap_w
    (outlier,) = power.outliers
    assert outlier.label == "node002" and outlier.causes[0].code == "hot"
    assert outlier.curve is not None and outlier.curve.settings == outlier.curve.cap_w
    grid = _group(report, GPU, "grid")
    assert grid.fleet_axis.tier_key == "mem_lock_mhz" and grid.answer is grid.fleet_lock
    assert grid.answer is not None and grid.answer.setting == grid.answer.sm_lock_mhz
    assert grid.step == grid.step_mhz and grid.near_peak is grid.near_peak_mhz
    assert grid.cards[0].runs_at == grid.cards[0].lock_at_fleet_lock_mhz
    mixed = _group(report, MIXED, "power")
    assert mixed.answer is not None and mixed.answer.pct_of_default is None
    shares = mixed.answer.pct_of_default_by_gpu
    assert isinstance(shares, list) and [s.default_w for s in shares] == [370.0, 450.0]
    assert report.options.duty == 0.5 and report.options.tariff_per_kwh == 0.3


def test_an_old_report_without_axes_reads_as_the_power_cap() -> None:
    old = FleetReport.from_json({"groups": [{"gpu_name": "g", "fleet_cap": {"cap_w": 300.0}}]})
    (group,) = old.groups
    assert group.axis_name == "power" and group.fleet_axis.answer_key == "fleet_cap"
    assert group.answer is not None and group.answer.setting == 300.0
    written = group.to_json()
    assert "axis" not in written and written["fleet_cap"]["cap_w"] == 300.0


@pytest.mark.parametrize(
    "doc",
    [
        {"n_cards": "many"},
        {"groups": [{"n_cards": [3]}]},
        {"groups": [{"fleet_cap": {"cap_w": {"w": 300}}}]},
        {"groups": [{"cards": [{"outlier": "perhaps"}]}]},
        {"unreadable": [{"run_dir": 5}]},
    ],
)
def test_a_wrong_type_is_one_usage_error(doc: dict[str, object]) -> None:
    with pytest.raises(UsageError, match=r"fleet\.json does not follow its schema"):
        FleetReport.from_json(doc)


def test_fleet_apply_names_the_file_whose_value_has_the_wrong_type(tmp_path: Path) -> None:
    (tmp_path / "fleet.json").write_text(json.dumps({"groups": [{"n_gpus": "two"}]}))
    with pytest.raises(UsageError, match=r"fleet\.json: fleet\.json does not follow .*n_gpus"):
        read_fleet(tmp_path)


def test_a_malformed_analysis_json_is_analysed_again_as_a_stale_one_is(tmp_path: Path) -> None:
    cards = synthetic_fleet(tmp_path, "rtx4090-air~0.02", 3, seed=5)
    for c in cards:
        result = analysis.analyze(analysis.load_curve(c.run_dir), bootstrap=0).to_json()
        result["sweet_spot"]["cap_w"] = 555.0  # a marker: only a reused file says this
        (c.run_dir / "analysis.json").write_text(json.dumps(result))
    bad = json.loads((cards[1].run_dir / "analysis.json").read_text())
    bad["sweet_spot"]["cap_w"] = "high"
    (cards[1].run_dir / "analysis.json").write_text(json.dumps(bad))
    (group,) = fleet_report([tmp_path]).groups
    sweet = {c.label: c.sweet_spot for c in group.cards}
    assert sweet["node000"] == sweet["node002"] == 555.0
    assert sweet["node001"] not in (None, 555.0)
