"""A rig of different cards in a fleet report: its cap as a share of each card's own default."""

from __future__ import annotations

import json
from pathlib import Path

from powersweep.analysis.fleet_answer import fleet_report
from powersweep.analysis.fleet_summary import render_fleet_summary

CARDS = [
    {"name": "NVIDIA GeForce RTX 3090", "default": 370.0, "min": 100.0, "max": 390.0},
    {"name": "NVIDIA GeForce RTX 4090", "default": 450.0, "min": 150.0, "max": 600.0},
]


def _mixed_run(root: Path, node: str, shift: float) -> None:
    run = root / node
    run.mkdir(parents=True)
    gpus = [
        {
            "index": i,
            "name": c["name"],
            "uuid": f"GPU-{node}-{i}",
            "default_limit_w": c["default"],
            "min_limit_w": c["min"],
            "max_limit_w": c["max"],
        }
        for i, c in enumerate(CARDS)
    ]
    meta = {
        "schema_version": 1,
        "status": "complete",
        "load_mode": "decode-single",
        "host": node,
        "server": {"model": "m"},
        "gpus": gpus,
    }
    (run / "run.json").write_text(json.dumps(meta))
    lines = ["cap_w,narr_tps,power_w,n_gpus"]
    for cap in range(150, 391, 10):
        # both cards follow the cap (combined draw twice it); TPS/W peaks near 260 W
        draw = 2 * cap - 2.0
        tps = 60.0 * (1 - ((cap - 260.0 - shift) / 400.0) ** 2) * cap / 260.0
        lines.append(f"{cap},{tps:.3f},{draw:.1f},2")
    (run / "caps.csv").write_text("\n".join(lines) + "\n")


def test_a_mixed_rigs_fleet_cap_is_a_share_of_each_cards_default(tmp_path: Path) -> None:
    for i, node in enumerate(("n1", "n2", "n3")):
        _mixed_run(tmp_path, node, shift=i - 1.0)
    typed = fleet_report([tmp_path])
    report = typed.to_json()
    (group,) = report["groups"]
    assert group["gpu_name"] == "NVIDIA GeForce RTX 3090 + NVIDIA GeForce RTX 4090"
    fleet_cap = group["fleet_cap"]
    cap = fleet_cap["cap_w"]
    # not the cap over the mean of two different defaults (410 W)
    assert fleet_cap["pct_of_default"] is None
    assert fleet_cap["pct_of_default_by_gpu"] == [
        {"gpu_name": CARDS[0]["name"], "default_w": 370.0, "pct_of_default": cap / 370 * 100},
        {"gpu_name": CARDS[1]["name"], "default_w": 450.0, "pct_of_default": cap / 450 * 100},
    ]
    md = render_fleet_summary(typed)
    assert f"{cap / 370 * 100:.0f}% of the NVIDIA GeForce RTX 3090's 370 W default" in md
    assert f"{cap / 450 * 100:.0f}% of the NVIDIA GeForce RTX 4090's 450 W default" in md


def test_a_rig_of_one_model_keeps_its_one_default(tmp_path: Path) -> None:
    for i, node in enumerate(("n1", "n2", "n3")):
        _mixed_run(tmp_path, node, shift=i - 1.0)
        meta = json.loads((tmp_path / node / "run.json").read_text())
        meta["gpus"][1].update(name=CARDS[0]["name"], default_limit_w=370.0, max_limit_w=390.0)
        (tmp_path / node / "run.json").write_text(json.dumps(meta))
    (group,) = fleet_report([tmp_path]).to_json()["groups"]
    fleet_cap = group["fleet_cap"]
    assert fleet_cap["pct_of_default_by_gpu"] is None
    assert fleet_cap["pct_of_default"] == fleet_cap["cap_w"] / 370 * 100
