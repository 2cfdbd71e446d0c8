"""powersweep.sim.engine: the fixed-rate engine (a test double and benchmark baseline) keeps count
of the requests in each phase and their peak, its rates do not depend on the load, and its cards'
stability and resets are what a test sets."""

from __future__ import annotations

from powersweep.clock import ManualClock
from powersweep.sim.engine import ConstantEngine


def test_rates_and_context_are_the_ones_given_whatever_the_load() -> None:
    clock = ManualClock()
    engine = ConstantEngine(clock, decode_tps=40.0, prefill_tps=1500.0, context_tokens=4096)
    assert engine.clock is clock
    assert engine.context_tokens == 4096
    for _ in range(3):
        engine.work_started("decode")
    assert engine.decode_rate_tps() == 40.0  # per stream, whatever the batch
    assert engine.prefill_rate_tps(10) == engine.prefill_rate_tps(100_000) == 1500.0


def test_defaults() -> None:
    engine = ConstantEngine(ManualClock())
    assert (engine.decode_rate_tps(), engine.prefill_rate_tps(1), engine.context_tokens) == (
        50.0,
        2000.0,
        32768,
    )


def test_active_and_peak_counts_follow_each_phase_separately() -> None:
    engine = ConstantEngine(ManualClock())
    engine.work_started("prefill")
    engine.work_finished("prefill")
    engine.work_started("decode")
    engine.work_started("decode")
    engine.work_started("prefill")
    engine.work_finished("decode")
    assert engine.active == {"decode": 1, "prefill": 1}
    assert engine.peak_active == {"decode": 2, "prefill": 1}
    engine.work_finished("decode")
    engine.work_finished("prefill")
    assert engine.active == {"decode": 0, "prefill": 0}
    assert engine.peak_active == {"decode": 2, "prefill": 1}


def test_the_cards_are_stable_and_on_the_bus_until_a_test_says_otherwise() -> None:
    engine = ConstantEngine(ManualClock())
    assert (engine.instability_mhz(), engine.reset_count(), engine.off_bus()) == (0.0, 0, False)
    engine.instability_mhz_now = 12.5
    engine.resets_so_far = 2
    engine.off_bus_now = True
    assert (engine.instability_mhz(), engine.reset_count(), engine.off_bus()) == (12.5, 2, True)
