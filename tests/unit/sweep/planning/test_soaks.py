"""The soak ladder both offset searches end with (``sweep/planning/soaks.py``)."""

from __future__ import annotations

from powersweep.sweep.planning.soaks import SoakLadder


def test_a_failed_soak_backs_off_until_one_holds_or_offset_zero() -> None:
    ladder = SoakLadder(30.0, lambda mhz: (mhz // 15) * 15)
    assert ladder.next(125.0, lambda _o: True, 300.0) == 120.0  # on the grid
    assert ladder.next(125.0, lambda _o: True, 300.0) == 120.0  # asked again: the same soak
    ladder.took("unstable")
    assert ladder.next(125.0, lambda _o: True, 300.0) == 90.0
    ladder.took("ok")
    assert ladder.next(125.0, lambda _o: True, 300.0) is None and ladder.chosen_mhz == 90.0
    assert ladder.soaks == [(120.0, "unstable"), (90.0, "ok")]
    down = SoakLadder(500.0)
    assert down.next(400.0, lambda _o: False, 60.0) == 400.0
    down.took("failed")
    assert down.next(400.0, lambda _o: False, 60.0) is None and down.chosen_mhz == 0.0


def test_without_a_soak_a_measured_offset_is_chosen_and_another_is_measured() -> None:
    measured = SoakLadder(30.0)
    assert measured.next(90.0, lambda o: o == 90.0, 0.0) is None and measured.chosen_mhz == 90.0
    unmeasured = SoakLadder(30.0)
    assert unmeasured.next(75.0, lambda o: o == 90.0, 0.0) == 75.0
