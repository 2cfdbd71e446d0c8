"""The undervolt search's memory phase (``sweep/planning/memory_steps.py``): up from 0 while TPS
rises beyond both readings' noise, the best less the margin, soaked; bounded."""

from __future__ import annotations

import math

from powersweep.sweep.planning.memory_steps import (
    MEM_REFERENCE,
    MEM_SEARCH,
    MemoryPlan,
    MemorySearch,
    tps_from,
)
from powersweep.sweep.planning.points import SweepPoint

AT = SweepPoint(300.0, 1695.0, None, 150.0)


def _drive_memory_search(
    tps_at: dict[float, float], plan: MemoryPlan, soak_s: float = 60.0, fails: float = 1e9
):
    """Drive the phase: each offset's TPS from ``tps_at`` (+-0.3% stated), unstable from
    ``fails`` up."""
    status: dict[SweepPoint, str] = {}
    rows: dict[SweepPoint, tuple[float, float]] = {}
    search = MemorySearch(plan, AT, status.get, lambda p: rows.get(p, (math.nan, math.nan)), soak_s)
    asked = []
    while batch := search.next():
        for point, reason in batch:
            mhz = point.mem_offset_mhz or 0.0
            asked.append((mhz, reason))
            status[point] = "ok" if mhz < fails else "unstable"
            rows[point] = (tps_at.get(mhz, math.nan), 0.3)
    return search, asked


def test_the_phase_climbs_while_tps_rises_beyond_noise_and_backs_off_the_margin() -> None:
    # +2.4% a step to +1500, then flat: replays past the margin eat what the clock adds
    tps = {0.0: 40.0, 500.0: 41.0, 1000.0: 42.0, 1500.0: 43.0, 2000.0: 43.05}
    search, asked = _drive_memory_search(tps, MemoryPlan(500.0, 6000.0, 500.0))
    assert asked == [(0.0, MEM_REFERENCE)] + [(m, MEM_SEARCH) for m in (500, 1000, 1500, 2000)]
    assert search.best_mhz == 1500.0 and search.stopped_mhz == 2000.0
    assert "stopped rising" in search.ended
    soak = search.soak()
    assert soak == SweepPoint(300.0, 1695.0, None, 150.0, 1000.0)
    search.soaked("unstable")  # backs off by the margin
    assert search.soak() == SweepPoint(300.0, 1695.0, None, 150.0, 500.0)
    search.soaked("ok")
    assert search.soak() is None and search.chosen_mhz == 500.0
    record = search.record()
    assert record["best_mhz"] == 1500.0 and [s["status"] for s in record["soaks"]] == [
        "unstable",
        "ok",
    ]


def test_a_failed_step_ends_the_phase_and_the_bound_holds() -> None:
    tps = {m: 40.0 * (1 + m / 10000) for m in range(0, 7000, 500)}
    plan = MemoryPlan(500.0, 6000.0, 500.0)
    search, asked = _drive_memory_search(tps, plan, fails=2500.0)
    assert asked[-1] == (2500.0, MEM_SEARCH) and search.best_mhz == 2000.0
    assert "was unstable" in search.ended
    rising, asked = _drive_memory_search(tps, plan)
    assert "highest memory offset" in rising.ended and len(asked) == 1 + plan.max_steps
    assert plan.max_points >= len(asked) + plan.max_soaks


def test_readings_without_a_stated_noise_do_not_count_as_rising() -> None:
    search, _ = _drive_memory_search({0.0: 40.0}, MemoryPlan(500.0, 6000.0, 500.0))
    assert search.best_mhz == 0.0 and search.stopped_mhz == 500.0
    assert search.soak() is None and search.chosen_mhz == 0.0  # offset 0 needs no soak
    assert tps_from({"narr_tps": 40.0, "tps_u95_pct": 1.0}, "narr_tps") == (40.0, 1.0)
    assert all(math.isnan(v) for v in tps_from(None, "narr_tps"))
