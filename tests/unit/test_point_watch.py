"""The journal is checked while a point settles and is measured (issue 33: continuous check)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from powersweep.errors import PowersweepError
from powersweep.sweep.measurement import point as point_module
from powersweep.sweep.measurement.point import PointMeasurer


def test_a_journal_lost_mid_point_stops_the_point_within_a_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(point_module, "JOURNAL_CHECK_S", 0.01)
    checks: list[float] = []
    cancelled: list[bool] = []

    def before_change() -> None:
        checks.append(asyncio.get_running_loop().time())
        if len(checks) >= 3:
            raise PowersweepError("the restore journal was removed while this sweep ran")

    async def long_point() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "measured"

    async def main() -> None:
        measurer = SimpleNamespace(before_change=before_change)
        start = asyncio.get_running_loop().time()
        with pytest.raises(PowersweepError, match="journal was removed"):
            await PointMeasurer._watched(measurer, long_point())  # type: ignore[arg-type]
        # three checks a hundredth of a second apart, not the point's minute
        assert asyncio.get_running_loop().time() - start < 1.0

    asyncio.run(main())
    assert len(checks) == 3 and cancelled == [True]


def test_a_point_that_ends_first_is_returned_and_checked_meanwhile() -> None:
    calls: list[int] = []

    async def quick() -> str:
        await asyncio.sleep(0)
        return "row"

    async def main() -> str:
        measurer = SimpleNamespace(before_change=lambda: calls.append(1))
        return await PointMeasurer._watched(measurer, quick())  # type: ignore[arg-type]

    assert asyncio.run(main()) == "row"
