"""The memory phase's answer from caps.csv rows (``analysis/undervolt_memory.py``): the edge by
the sweep's own rule, or as run.json recorded it; the margin; the soaks; the comparisons."""

from __future__ import annotations

import pytest

from powersweep.analysis.run_record import MemorySearch, RunOptions
from powersweep.analysis.undervolt_memory import memory_answer, memory_findings, rose_beyond_noise
from powersweep.analysis.undervolt_result_types import OffsetStep


def _row(mem: float, tps: float, status: str = "ok", reason: str = "mem search") -> OffsetStep:
    power = 300.0 + mem / 500
    return OffsetStep.from_json(
        dict(
            sm_offset_mhz=150.0,
            sm_lock_mhz=1695.0,
            cap_w=300.0,
            reason=reason,
            status=status,
            tps=tps,
            power_w=power,
            tps_per_w=tps / power,
            tps_u95_pct=0.3,
            tps_per_w_u95_pct=0.4,
            mem_offset_mhz=mem,
        )
    )


ROWS = [
    _row(0.0, 40.0, reason="mem reference"),
    _row(500.0, 41.0),
    _row(1000.0, 42.0),
    _row(1500.0, 42.05),
    _row(500.0, 41.0, reason="soak"),
]
OPTIONS = RunOptions(mem_offset_step_mhz=500.0, mem_margin_mhz=None)


def test_the_edge_is_the_sweeps_rule_run_on_the_rows() -> None:
    answer = memory_answer(ROWS, OPTIONS, None, None)
    assert answer is not None
    assert (answer.best_mhz, answer.stopped_mhz, answer.margin_mhz) == (1000.0, 1500.0, 500.0)
    assert answer.chosen is not None and answer.chosen.reason == "soak"
    assert answer.chosen.mem_offset_mhz == 500.0
    assert answer.versus_sm is not None
    assert answer.versus_sm.tps_change_pct == pytest.approx(2.5)
    (stopped,) = [f for f in memory_findings(answer) if f.code == "memory_stopped"]
    assert "TPS no higher beyond noise than at +1000 MHz" in stopped.message


def test_the_recorded_edge_stands_where_the_rows_hold_it() -> None:
    # the sweep judged +1500 on its reading as taken; the run's end restated them all
    recorded = MemorySearch(best_mhz=1500.0, stopped_mhz=None)
    answer = memory_answer(ROWS, OPTIONS, None, None, recorded)
    assert answer is not None and answer.best_mhz == 1500.0 and answer.stopped_mhz is None
    unknown = memory_answer(ROWS, OPTIONS, None, None, MemorySearch(best_mhz=4000.0))
    assert unknown is not None and unknown.best_mhz == 1000.0  # not a step: the rule


def test_no_memory_rows_no_answer_and_noise_decides_a_rise() -> None:
    assert memory_answer([], OPTIONS, None, None) is None
    assert rose_beyond_noise(41.0, 0.3, 40.0, 0.3)
    assert not rose_beyond_noise(40.1, 0.3, 40.0, 0.3)
    assert not rose_beyond_noise(41.0, float("nan"), 40.0, 0.3)
