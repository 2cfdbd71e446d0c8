"""Synthetic fleets: many run directories with known spread and planted outliers, fast.

A thousand real simulated sweeps would take hours; a fleet report test or benchmark needs only
what a sweep leaves behind.

The reasoning: docs/fleets.md, "powersweep.sim.synthetic_fleet".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powersweep.analysis.synthetic import NoiseModel, synthesize_run
from powersweep.sim.profiles import CardSpec, fleet_card, parse_card_spec
from powersweep.sim.sim_rig import ground_truth
from powersweep.sweep.gpu import PowerEnvelope
from powersweep.sweep.planning.caps import default_caps


@dataclass(frozen=True)
class FleetCard:
    """One synthetic card: where its run went and what the simulator says is true."""

    node: str
    spec: CardSpec
    run_dir: Path
    true_sweet_spot_w: float


def synthetic_fleet(
    root: Path,
    spec: str,
    n_cards: int,
    *,
    load_mode: str = "decode-single",
    outliers: Mapping[str, str] | None = None,
    seed: int = 0,
    step_w: float = 10.0,
    noise: NoiseModel | None = None,
    node_prefix: str = "node",
    raw_files: bool = False,
) -> list[FleetCard]:
    """Write ``n_cards`` run directories of one model under ``root/<node>/``.

    Args:
        root: Output folder (one subfolder per node).
        spec: The model and its spread, as ``--simulate`` takes it (``rtx4090-air~0.03``).
        n_cards: Cards in the fleet (nodes ``<prefix>000`` ...).
        load_mode: Load mode of every run.
        outliers: Node name to planted outlier (``{"node007": "hot"}``).
        seed: Noise seed of the first card (card k uses ``seed + k``).
        step_w: Cap step of each run's default grid.
        noise: Measurement noise (default :class:`NoiseModel`).
        node_prefix: Node names' prefix.
        raw_files: Whether to write samples.csv and requests.csv too (slower, bigger).

    Returns:
        The cards, in node order.
    """
    base = parse_card_spec(spec)
    planted = dict(outliers or {})
    cards: list[FleetCard] = []
    for k in range(n_cards):
        node = f"{node_prefix}{k:03d}"
        card_spec = CardSpec(base.profile, base.spread, planted.get(node, base.outlier))
        profile = fleet_card(card_spec, node)
        env = PowerEnvelope(
            profile.min_limit_w, profile.default_limit_w, profile.max_limit_w, profile.user_limit_w
        )
        caps = default_caps(env, step_w)
        truth = ground_truth([profile], load_mode, caps).to_dict()
        gpu = {
            "name": profile.gpu_name,
            "uuid": f"GPU-sim-{node}-0",
            "min_limit_w": profile.min_limit_w,
            "default_limit_w": profile.default_limit_w,
            "max_limit_w": profile.max_limit_w,
            "original_limit_w": profile.user_limit_w,
            "slowdown_temp_c": profile.slowdown_temp_c,
            "mem_clock_mhz": profile.mem_clock_mhz,
        }
        run_dir = synthesize_run(
            truth,
            gpu,
            root / node / f"20250101-000000-{profile.name}-{load_mode}",
            seed=seed + k,
            noise=noise,
            cooling=profile.thermal.cooling,
            model="sim-qwen3.6-27b",
            raw_files=raw_files,
        )
        _mark_node(run_dir, node, card_spec)
        cards.append(FleetCard(node, card_spec, run_dir, float(truth["sweet_spot"]["cap_w"])))
    return cards


def _mark_node(run_dir: Path, node: str, spec: CardSpec) -> None:
    """Record the node and the card spec in run.json, as a simulated sweep does."""
    path = run_dir / "run.json"
    run: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    run["host"] = node
    text = spec.profile + (f"~{spec.spread:g}" if spec.spread else "")
    text += f"~{spec.outlier}" if spec.outlier else ""
    run["simulation"] = {**run["simulation"], "profile": text, "node": node}
    path.write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
