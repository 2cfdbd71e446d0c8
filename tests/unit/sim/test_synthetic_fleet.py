"""powersweep.sim.synthetic_fleet: run directories of a simulated fleet written without sweeping,
one per node, each card perturbed by its node, planted outliers where asked, and run.json naming
the node, the card spec and the truth the simulator knows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from powersweep.errors import UsageError
from powersweep.sim.profiles import CardSpec, fleet_card
from powersweep.sim.sim_rig import ground_truth
from powersweep.sim.synthetic_fleet import synthetic_fleet


def _read_run_json(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "run.json").read_text(encoding="utf-8"))


def test_one_run_per_node_with_its_spec_and_truth(tmp_path: Path) -> None:
    cards = synthetic_fleet(
        tmp_path, "rtx4090-air~0.03", 3, outliers={"node001": "hot"}, seed=5, step_w=25.0
    )
    assert [c.node for c in cards] == ["node000", "node001", "node002"]
    assert [c.spec for c in cards] == [
        CardSpec("rtx4090-air", 0.03, None),
        CardSpec("rtx4090-air", 0.03, "hot"),
        CardSpec("rtx4090-air", 0.03, None),
    ]
    for c in cards:
        assert c.run_dir == tmp_path / c.node / "20250101-000000-rtx4090-air-decode-single"
        assert sorted(p.name for p in c.run_dir.iterdir()) == ["caps.csv", "run.json"]
        run = _read_run_json(c.run_dir)
        assert run["host"] == c.node
        assert run["simulation"]["node"] == c.node
        assert run["gpus"][0]["uuid"] == f"GPU-sim-{c.node}-0"
        truth = run["simulation"]["ground_truth"]
        assert truth["sweet_spot"]["cap_w"] == c.true_sweet_spot_w
        # the truth is that of the node's own perturbed card
        profile = fleet_card(c.spec, c.node)
        caps = [row["cap_w"] for row in truth["caps"]]
        assert ground_truth([profile], "decode-single", caps).sweet_spot_cap_w == (
            c.true_sweet_spot_w
        )
    profiles = [_read_run_json(c.run_dir)["simulation"]["profile"] for c in cards]
    assert profiles == ["rtx4090-air~0.03", "rtx4090-air~0.03~hot", "rtx4090-air~0.03"]
    # card k is measured with seed + k
    assert [_read_run_json(c.run_dir)["simulation"]["seed"] for c in cards] == [5, 6, 7]


def test_the_caps_csv_covers_the_default_grid_of_the_card(tmp_path: Path) -> None:
    (card,) = synthetic_fleet(tmp_path, "rtx4090-air", 1, step_w=50.0, node_prefix="gpu-")
    assert card.node == "gpu-000"
    caps = pl.read_csv(card.run_dir / "caps.csv")
    truth_caps = [
        c["cap_w"] for c in _read_run_json(card.run_dir)["simulation"]["ground_truth"]["caps"]
    ]
    assert sorted(caps["cap_w"].unique().to_list()) == sorted(truth_caps)
    assert truth_caps == sorted(truth_caps) and truth_caps[-1] == 600.0  # up to the max limit
    assert _read_run_json(card.run_dir)["simulation"]["profile"] == "rtx4090-air"  # no spread, no ~


def test_same_arguments_write_the_same_fleet(tmp_path: Path) -> None:
    a = synthetic_fleet(tmp_path / "a", "rtx4090-air~0.03", 2, seed=1, step_w=50.0)
    b = synthetic_fleet(tmp_path / "b", "rtx4090-air~0.03", 2, seed=1, step_w=50.0)
    for x, y in zip(a, b, strict=True):
        assert (x.run_dir / "caps.csv").read_bytes() == (y.run_dir / "caps.csv").read_bytes()


def test_a_bad_spec_is_a_usage_error_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown outlier"):
        synthetic_fleet(tmp_path, "rtx4090-air~0.03~melted", 2)
    assert list(tmp_path.iterdir()) == []
