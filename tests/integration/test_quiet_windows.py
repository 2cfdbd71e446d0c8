"""A sweep's measured windows run without a garbage-collection pause (sweep/measurement/quiet)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from powersweep.cli.rigs import build_rig
from powersweep.sweep.loads.concurrent import DecodeConcurrent
from powersweep.sweep.loads.prefill import PrefillHeavy
from powersweep.sweep.loads.single import DecodeSingle
from powersweep.sweep.options import (
    Cooling,
    LoadMode,
    LoadOptions,
    MeasureOptions,
    OutputOptions,
    PointOptions,
    SettleMode,
    SweepOptions,
)
from powersweep.sweep.sampling.windows import WindowPolicy
from powersweep.sweep.session import run_session
from tests.integration.conftest import read_csv


@pytest.mark.parametrize("mode", ["decode-single", "decode-concurrent", "prefill-heavy"])
def test_no_collection_inside_a_window_of_any_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    windows: list[tuple[bool, int]] = []  # (collector on at the start, collections inside)
    inside = [0, 0]  # [measuring, collections]

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and inside[0]:
            inside[1] += 1

    for load in (DecodeSingle, DecodeConcurrent, PrefillHeavy):
        measure = load.measure

        async def held(self: Any, *args: Any, _measure: Any = measure, **kw: Any) -> Any:
            inside[:] = [1, 0]
            enabled = gc.isenabled()
            try:
                return await _measure(self, *args, **kw)
            finally:
                windows.append((enabled, inside[1]))
                inside[0] = 0

        monkeypatch.setattr(load, "measure", held)
    gc.callbacks.append(note)
    try:
        result = run_session(
            SweepOptions(
                load=LoadOptions(
                    mode=LoadMode(mode),
                    target_prefill_s=1.0,
                    concurrency=2 if mode == "decode-concurrent" else None,
                    warmup_requests=1,
                ),
                points=PointOptions(caps=(300.0, 280.0)),
                measure=MeasureOptions(
                    settle_s=0.5,
                    settle_mode=SettleMode.FIXED,
                    thermal_wait_max_s=0.0,
                    windows=WindowPolicy(max_s=3.0),
                ),
                output=OutputOptions(out=tmp_path, cooling=Cooling.AIR),
                simulate="rtx3090-air",
            ),
            build_rig,
        )
    finally:
        gc.callbacks.remove(note)
    assert result.outcome.status == "complete"
    assert len(windows) == len(read_csv(result.run_dir / "caps.csv")) >= 2
    # the collector off for every window, and on again between them
    assert windows == [(False, 0)] * len(windows)
    assert gc.isenabled()
