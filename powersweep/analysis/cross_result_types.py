"""The cross-mode result, typed: what ``cross-mode.json`` holds, as frozen dataclasses.

The same rules as :mod:`powersweep.analysis.result_types`: one ``to_json``/``from_json`` per
record (msgspec), a null is ``None``, so ``CrossModeResult.from_json(doc).to_json() == doc``;
the fields are in the order the file writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from powersweep.analysis.result_types import JsonRecord, Num


class CrossRecord(JsonRecord):
    """A record of ``cross-mode.json`` (its schema errors name that file)."""

    FILE: ClassVar[str] = "cross-mode.json"


@dataclass(frozen=True)
class ModeAtCap(CrossRecord):
    """One load mode's run: its own sweet spot, and what the shared cap gives it."""

    label: str = ""
    load_mode: str | None = None
    metric: str | None = None
    source: str = ""
    sweet_spot_cap_w: Num = None
    sweet_spot_tps_per_w: Num = None
    sweet_spot_tps: Num = None
    tps_per_w: Num = None
    tps_per_w_loss_pct: Num = None
    tps: Num = None
    tps_change_vs_sweet_pct: Num = None


@dataclass(frozen=True)
class SharedCap(CrossRecord):
    """A cap every run measured, and the worst TPS/W loss over the modes there."""

    cap_w: Num = None
    worst_loss_pct: Num = None


@dataclass(frozen=True)
class CrossModeResult(CrossRecord):
    """The cap that serves every load mode best (minimax TPS/W loss), per mode and per cap."""

    cap_w: Num = None
    worst_loss_pct: Num = None
    modes: list[ModeAtCap] = field(default_factory=list)
    caps: list[SharedCap] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
