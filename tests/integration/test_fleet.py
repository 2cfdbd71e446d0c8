"""Fleet report over simulated fleets with known spread and planted outliers, against truth."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest

from powersweep.analysis.fleet_answer import FleetOptions, discover_runs, fleet_report
from powersweep.analysis.fleet_result_types import FleetReport
from powersweep.analysis.fleet_summary import render_fleet_summary
from powersweep.analysis.summary import GITHUB_COMMENT_LIMIT
from powersweep.cli import main
from powersweep.errors import UsageError
from powersweep.sim.profiles import fleet_card, parse_card_spec
from powersweep.sim.sim_rig import ground_truth
from powersweep.sim.synthetic_fleet import FleetCard, synthetic_fleet
from tests.integration.conftest import read_json, sweep_run_dir

PLANTED = {"node007": "hot", "node042": "low-envelope", "node100": "throttling", "node150": "hot"}
CAUSE = {"hot": "hot", "low-envelope": "firmware_envelope", "throttling": "throttling"}
STEP_W = 10.0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[FleetCard]]:
    root = tmp_path_factory.mktemp("fleet")
    cards = synthetic_fleet(root, "rtx4090-air~0.03", 200, outliers=PLANTED, seed=11)
    return root, cards


@pytest.fixture(scope="module")
def report(fleet: tuple[Path, list[FleetCard]]) -> dict:
    """The report as fleet.json holds it."""
    return fleet_report([fleet[0]], FleetOptions(tariff_per_kwh=0.3)).to_json()


def test_200_cards_sweet_spot_median_and_fleet_cap_match_truth(
    fleet: tuple[Path, list[FleetCard]], report: dict
) -> None:
    _, cards = fleet
    (group,) = report["groups"]
    assert group["n_cards"] == 200
    truth = statistics.median(c.true_sweet_spot_w for c in cards)
    assert abs(group["sweet_spot_w"]["median"] - truth) <= STEP_W
    assert abs(group["fleet_cap"]["cap_w"] - truth) <= STEP_W
    # the spread is real: the cards' true sweet spots differ, and the report shows a spread
    assert len({c.true_sweet_spot_w for c in cards}) > 1
    assert group["sweet_spot_w"]["max"] > group["sweet_spot_w"]["min"]


def test_every_planted_outlier_is_named_with_its_cause_and_no_other(report: dict) -> None:
    (group,) = report["groups"]
    named = {o["label"]: [c["code"] for c in o["causes"]] for o in group["outliers"]}
    assert set(named) == set(PLANTED)
    for node, kind in PLANTED.items():
        assert named[node][0] == CAUSE[kind], (node, named[node])


def test_savings_follow_the_simulators_truth(
    fleet: tuple[Path, list[FleetCard]], report: dict
) -> None:
    _, cards = fleet
    (group,) = report["groups"]
    cap = group["fleet_cap"]["cap_w"]
    saved_w = 0.0
    for c in cards:
        profile = fleet_card(c.spec, c.node)
        default = profile.default_limit_w
        t = ground_truth([profile], "decode-single", [min(cap, profile.max_limit_w), default])
        saved_w += t.cap(default).power_w - t.cap(min(cap, profile.max_limit_w)).power_w
    savings = group["savings"]
    assert savings["n_cards"] == 200
    assert savings["kw_saved"] == pytest.approx(saved_w / 1000.0, rel=0.02)
    assert savings["mwh_per_year_saved"] == pytest.approx(savings["kw_saved"] * 8.76)
    assert savings["cost_per_mtok_fleet_cap"] == pytest.approx(
        savings["kwh_per_mtok_fleet_cap"] * 0.3
    )
    assert savings["cost_per_mtok_fleet_cap"] < savings["cost_per_mtok_default"]


def test_cli_writes_report_files_and_markdown_fits_a_comment(
    fleet: tuple[Path, list[FleetCard]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = fleet
    out = tmp_path / "report"
    assert main(["fleet", "report", str(root), "--out", str(out), "--tariff", "0.3"]) == 0
    md = (out / "fleet.md").read_text()
    assert capsys.readouterr().out.strip() == md.strip()
    assert len(md) < GITHUB_COMMENT_LIMIT
    assert "node007" in md and "hot card" in md and "firmware envelope" in md
    assert "MWh/year" in md and "cost per 1M tokens at 0.3/kWh" in md
    assert "The 10 cards the fleet cap costs most TPS/W" in md
    data = json.loads((out / "fleet.json").read_text())
    assert data["n_cards"] == 200
    for name in ("fleet-band.png", "fleet-sweet-spots.png"):
        assert (out / "charts" / name).stat().st_size > 10_000


def test_markdown_stays_under_the_limit_with_thousands_of_outliers(report: dict) -> None:
    (group,) = report["groups"]
    many = {**report, "groups": [{**group, "outliers": group["outliers"] * 1000}] * 30}
    many["incomplete"] = [{"label": "x" * 200, "status": "failed", "error": "e" * 300}] * 500
    text = render_fleet_summary(FleetReport.from_json(many))
    assert len(text) < GITHUB_COMMENT_LIMIT
    assert "and 2975 more" in text or "truncated" in text


def test_groups_by_model_and_reports_broken_and_failed_runs(tmp_path: Path) -> None:
    synthetic_fleet(tmp_path / "a", "rtx4090-air~0.02", 6, seed=1)
    synthetic_fleet(tmp_path / "b", "rtx3090-air~0.02", 5, seed=2, node_prefix="r")
    broken = tmp_path / "b" / "broken-run"
    broken.mkdir()
    (broken / "caps.csv").write_text("cap_w,power_w,narr_tps\n300,abc,20\n")
    failed = synthetic_fleet(tmp_path / "c", "rtx4090-air~0.02", 1, seed=3, node_prefix="f")[0]
    meta = read_json(failed.run_dir / "run.json")
    meta.update(status="failed", error="server went away")
    (failed.run_dir / "run.json").write_text(json.dumps(meta))
    typed = fleet_report([tmp_path])
    report = typed.to_json()
    names = sorted(g["gpu_name"] for g in report["groups"])
    assert names == ["NVIDIA GeForce RTX 3090 (simulated)", "NVIDIA GeForce RTX 4090 (simulated)"]
    assert {g["n_cards"] for g in report["groups"]} == {5, 7}
    assert [u["run_dir"] for u in report["unreadable"]] == [str(broken.resolve())]
    assert "not a number" in report["unreadable"][0]["error"]
    assert [(r["label"], r["status"]) for r in report["incomplete"]] == [("f000", "failed")]
    md = render_fleet_summary(typed)
    assert "server went away" in md and "left out" in md
    assert "Every card at the fleet cap" in md and "| f000 (failed) |" in md


def test_no_runs_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError):
        discover_runs([tmp_path])
    assert main(["fleet", "report", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no run directory" in capsys.readouterr().err


def test_fleet_card_spread_is_seeded_by_node_and_bounded() -> None:
    spec = parse_card_spec("rtx4090-air~0.03")
    a, b = fleet_card(spec, "node-a"), fleet_card(spec, "node-b")
    assert a == fleet_card(spec, "node-a")
    assert a != b
    base = fleet_card(parse_card_spec("rtx4090-air"), "node-a")
    for card in (a, b):
        assert abs(card.dyn_w_per_mhz_v2 / base.dyn_w_per_mhz_v2 - 1) <= 0.03 + 1e-9
        assert abs(card.thermal.ambient_c - base.thermal.ambient_c) <= 3.0 + 1e-9
    low = fleet_card(parse_card_spec("rtx4090-air~0.03~low-envelope"), "x")
    assert low.max_limit_w == low.default_limit_w < base.default_limit_w
    for bad in ("rtx4090-air~x", "rtx4090-air~0.9", "rtx4090-air~0.03~melting", "nope~0.1"):
        with pytest.raises(UsageError):
            parse_card_spec(bad)


NODE_SWEEP = (
    "--cooling", "air", "--load-mode", "decode-single", "--target-cap-seconds", "3", "--quiet",
    "--no-charts",
)  # fmt: skip


@pytest.mark.slow
def test_real_simulated_sweeps_join_a_synthetic_fleet_with_their_own_truth(tmp_path: Path) -> None:
    caps = "250,280,310,350,400,450"
    hot = sweep_run_dir(
        tmp_path / "rack3-node7", "--simulate", "rtx4090-air~0.03~hot", "--sim-node", "rack3-node7",
        "--caps", caps, *NODE_SWEEP,
    )  # fmt: skip
    plain = sweep_run_dir(
        tmp_path / "rack3-node8", "--simulate", "rtx4090-air~0.03", "--sim-node", "rack3-node8",
        "--caps", caps, *NODE_SWEEP,
    )  # fmt: skip
    meta = read_json(hot / "run.json")
    assert meta["simulation"]["node"] == "rack3-node7"
    assert meta["restored"][0]["ok"] is True
    truth = meta["simulation"]["ground_truth"]
    card = fleet_card(parse_card_spec("rtx4090-air~0.03~hot"), "rack3-node7")
    expected = ground_truth([card], "decode-single", [float(c) for c in caps.split(",")])
    for got, want in zip(truth["caps"], expected.to_dict()["caps"], strict=True):
        assert got["regime"] == want["regime"]
        assert (got["tps"], got["power_w"]) == pytest.approx((want["tps"], want["power_w"]))
    # the hot card is thermally limited at the top caps; its node's plain twin is not
    assert truth["caps"][-1]["regime"] == "thermal_limited"
    plain_truth = read_json(plain / "run.json")["simulation"]["ground_truth"]
    assert plain_truth["caps"][-1]["regime"] != "thermal_limited"

    synthetic_fleet(tmp_path / "synthetic", "rtx4090-air~0.03", 10, seed=9)
    (group,) = fleet_report([tmp_path]).to_json()["groups"]
    assert group["n_cards"] == 12
    named = {o["label"]: o["causes"][0]["code"] for o in group["outliers"]}
    assert named == {"rack3-node7": "hot"}


def test_compare_overlays_a_handful_and_draws_bands_past_eight_runs(
    fleet: tuple[Path, list[FleetCard]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cards = fleet
    few = [str(c.run_dir) for c in cards[:3]]
    assert main(["compare", *few, "--out", str(tmp_path / "few")]) == 0
    err = capsys.readouterr().err
    assert "band view" not in err and (tmp_path / "few" / "compare.png").stat().st_size > 10_000
    many = [str(c.run_dir) for c in cards[:40]]
    assert main(["compare", *many, "--out", str(tmp_path / "many")]) == 0
    captured = capsys.readouterr()
    assert "band view" in captured.err and "fleet report" in captured.err
    assert (tmp_path / "many" / "compare.png").stat().st_size > 10_000
    assert captured.out.count("\n| ") >= 40  # the table still lists every run


def test_fresh_analysis_json_is_reused_and_stale_one_is_not(tmp_path: Path) -> None:
    from powersweep import analysis

    cards = synthetic_fleet(tmp_path, "rtx4090-air~0.02", 3, seed=5)
    for c in cards:
        result = analysis.analyze(analysis.load_curve(c.run_dir), bootstrap=0).to_json()
        result["sweet_spot"]["cap_w"] = 555.0  # a marker: only a reused file says this
        (c.run_dir / "analysis.json").write_text(json.dumps(result))
    stale = cards[2].run_dir / "caps.csv"
    stale.write_text(stale.read_text())  # caps.csv now newer than its analysis.json
    later = (cards[2].run_dir / "analysis.json").stat().st_mtime + 5
    os.utime(stale, (later, later))

    def sweet(opts: FleetOptions) -> dict[str, float]:
        (group,) = fleet_report([tmp_path], opts).to_json()["groups"]
        return {c["label"]: c["sweet_spot_w"] for c in group["cards"]}

    assert sweet(FleetOptions()) == {"node000": 555.0, "node001": 555.0, "node002": 280.0}
    assert 555.0 not in sweet(FleetOptions(reanalyze=True)).values()
    assert 555.0 not in sweet(FleetOptions(max_tps_loss_pct=3.0)).values()


def test_fleet_cli_help_and_sim_node_needs_simulate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet"]) == 0
    assert "report" in capsys.readouterr().out
    assert main(["--sim-node", "n1", "--dry-run"]) == 2
    assert "--sim-* options work only with --simulate" in capsys.readouterr().err
    assert main(["--simulate", "rtx4090-air~0.5", "--dry-run"]) == 2
    assert "spread must be between 0 and 0.3" in capsys.readouterr().err


def test_a_card_whose_sweep_stopped_below_its_default_limit_is_not_priced(tmp_path: Path) -> None:
    import polars as pl

    cards = synthetic_fleet(tmp_path, "rtx4090-air~0.02", 5, seed=4)
    caps_csv = cards[0].run_dir / "caps.csv"
    pl.read_csv(caps_csv).filter(pl.col("cap_w") <= 400).write_csv(caps_csv)
    typed = fleet_report([tmp_path])
    (group,) = typed.to_json()["groups"]
    assert (group["savings"]["n_cards"], group["savings"]["n_cards_unpriced"]) == (4, 1)
    assert "1 card left out: the sweep did not measure the default limit" in (
        render_fleet_summary(typed)
    )
