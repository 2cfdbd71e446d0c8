"""What a fleet report (``fleet.json``) asks of this node's cards, for ``powersweep fleet apply``.

The reasoning: docs/fleets.md, "powersweep.sweep.settings.fleet_targets".
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from msgspec import UnsetType

from powersweep.analysis.fleet_result_types import (
    FleetAnswer,
    FleetGroup,
    FleetReport,
    Outlier,
    Setting,
    WithinNoise,
)
from powersweep.errors import UsageError
from powersweep.runformat import JsonObject, as_float
from powersweep.sweep.settings.targets import Target

FLEET_JSON = "fleet.json"


@dataclass(frozen=True)
class FleetSetting:
    """What one card of this node gets from the report.

    Attributes:
        target: The card.
        group_title: The report's group it belongs to, in words.
        axis: ``power``, ``sm-clock``, ``mem-clock`` or ``grid``.
        source: ``fleet`` (the group's answer) or ``own_best`` (an outlier's own best).
        cap_w: The power limit to set, W (None: leave it; a clock group that held no cap).
        sm_lock_mhz: The SM lock to set, MHz (None: leave the SM clock alone).
        mem_lock_mhz: The memory lock to set, MHz (None: leave it alone).
        why: Why this value (an outlier's causes, or the group's noise), for the record.
    """

    target: Target
    group_title: str
    axis: str
    source: str
    cap_w: float | None
    sm_lock_mhz: float | None
    mem_lock_mhz: float | None
    why: str

    def describe(self) -> str:
        """``280 W`` / ``SM 1425 MHz`` / ``SM 1410 MHz at 500 W``."""
        locks = [
            f"{name} {v:g} MHz"
            for name, v in (("SM", self.sm_lock_mhz), ("memory", self.mem_lock_mhz))
            if v is not None
        ]
        if not locks:
            return f"{self.cap_w:g} W"
        held = f" at {self.cap_w:g} W" if self.cap_w is not None else ""
        return " / ".join(locks) + held

    def to_dict(self) -> JsonObject:
        """The card's line in the per-node record."""
        ident = self.target.identity
        return {
            "index": ident.index,
            "uuid": ident.uuid,
            "name": ident.name,
            "group": self.group_title,
            "axis": self.axis,
            "source": self.source,
            "cap_w": self.cap_w,
            "sm_lock_mhz": self.sm_lock_mhz,
            "mem_lock_mhz": self.mem_lock_mhz,
            "why": self.why,
        }


def read_fleet(report: Path) -> FleetReport:
    """``fleet.json`` from a report folder (or the file itself), typed.

    Raises:
        UsageError: No such folder or file, not a fleet report with groups, or a value of the
            wrong type.
    """
    path = report / FLEET_JSON if report.is_dir() else report
    if not report.exists():
        raise UsageError(f"{report}: no such fleet report folder (make one with `fleet report`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(
            f"{report}: no {FLEET_JSON} in it (make one with `fleet report`)"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable fleet report ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("groups"), list):
        raise UsageError(f"{path}: not a fleet report (no groups)")
    if not data["groups"]:
        raise UsageError(f"{path}: the fleet report has no group with an answer to apply")
    try:
        return FleetReport.from_json(data)
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None


def same_host(a: str | None, b: str | None) -> bool:
    """Two host names of one machine (a run records the full name, Slurm the short one)."""
    return bool(a) and bool(b) and str(a).split(".")[0] == str(b).split(".")[0]


def choose_settings(
    fleet: FleetReport,
    targets: Sequence[Target],
    node: str,
    *,
    axis: str | None = None,
    load_mode: str | None = None,
    model: str | None = None,
) -> tuple[list[FleetSetting], list[Target]]:
    """Each card's setting from the report, and the cards no group matches.

    Args:
        fleet: The report.
        targets: This node's cards.
        node: This node's name as the report names its cards (host, or simulated node).
        axis: Only groups swept on this axis (default: where a card has a power and a clock
            group, the one with the more tokens per joule across the fleet).
        load_mode: Only groups of this load mode.
        model: Only groups of this served model.

    Raises:
        UsageError: A card matches groups that differ by load mode or model (name one).
    """
    chosen: list[FleetSetting] = []
    unmatched: list[Target] = []
    for t in targets:
        groups = [
            g
            for g in fleet.groups
            if _same_model(g, t.identity.name)
            and (axis is None or g.fleet_axis.name == axis)
            and (load_mode is None or g.load_mode == load_mode)
            and (model is None or g.model == model)
        ]
        if not groups:
            unmatched.append(t)
            continue
        chosen.append(_setting(_pick(groups, t), t, node))
    return chosen, unmatched


def _same_model(group: FleetGroup, name: str) -> bool:
    if group.gpu_name == name:
        return True
    # a rig of different cards: its group names the rig; its cards name each GPU
    return any(g.name == name for c in group.cards for g in c.gpus)


def _title(g: FleetGroup) -> str:
    return f"{g.gpu_name} · {g.load_mode} · {g.model} · {g.fleet_axis.name}"


def _pick(groups: Sequence[FleetGroup], t: Target) -> FleetGroup:
    """One group: the only one, or the better axis of one load mode and model."""
    workloads = {(g.load_mode, g.model) for g in groups}
    if len(workloads) > 1:
        names = "; ".join(sorted(_title(g) for g in groups))
        raise UsageError(
            f"{t.label}: the report has groups of several workloads for this GPU ({names}): "
            "pick one with --load-mode and/or --model"
        )

    def fleet_tpw(g: FleetGroup) -> float:
        v = g.answer.fleet_tps_per_w if g.answer is not None else None
        return float(v) if isinstance(v, int | float) and math.isfinite(v) else -math.inf

    return max(groups, key=fleet_tpw)


def _setting(g: FleetGroup, t: Target, node: str) -> FleetSetting:
    axis = g.fleet_axis
    answer = g.answer or FleetAnswer()
    outlier = next((o for o in g.outliers if _is_this_card(o, t, node)), None)
    values: Setting | FleetAnswer
    if outlier is not None and outlier.apply == "own_best":
        values = outlier.own_best or Setting()
        causes = "; ".join(str(c.message) for c in outlier.causes)
        source, why = "own_best", f"outlier: {causes}"
    else:
        values = answer
        noise = [x for x in (answer.within_noise or WithinNoise()).x if x is not None]
        source = "fleet"
        why = f"the group's {axis.answer_key.replace('_', ' ')}" + (
            f" ({min(noise):g}-{max(noise):g} within noise)" if len(noise) > 1 else ""
        )
    if axis.name == "power":
        cap, sm, mem = _positive(values.cap_w), None, None
    else:
        cap = _positive(answer.held_cap_w)
        sm, mem = _positive(values.sm_lock_mhz), _positive(values.mem_lock_mhz)
    if cap is None and sm is None and mem is None:
        raise UsageError(f"{t.label}: the report's group {_title(g)} has no answer to apply")
    return FleetSetting(t, _title(g), axis.name, source, cap, sm, mem, why)


def _is_this_card(outlier: Outlier, t: Target, node: str) -> bool:
    uuids = {g.uuid for g in outlier.gpus}
    if t.identity.uuid not in uuids:
        return False
    host = outlier.host or outlier.label
    return same_host(str(host) if host else None, node)


def _positive(value: float | UnsetType | None) -> float | None:
    """A setting to apply: a positive number, else None (a zero or negative one is no answer)."""
    given = as_float(value, None)
    return given if given is not None and given > 0 else None
