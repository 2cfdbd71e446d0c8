"""An operating point of a sweep (``sweep/planning/points.py``): its label, its key, where it sits
on its axis, and its ``run.json`` form."""

from __future__ import annotations

import math

import pytest

from powersweep.sweep.planning.points import SweepPoint


@pytest.mark.parametrize(
    ("point", "label"),
    [
        (SweepPoint(250.0), "250 W"),
        (SweepPoint(252.5), "252.5 W"),
        (SweepPoint(), "limit in force"),
        (SweepPoint(300.0, 1410.0), "SM 1410 MHz"),
        (SweepPoint(None, None, 9001.0), "mem 9001 MHz"),
        (SweepPoint(300.0, 1410.0, 9001.0), "SM 1410 MHz / mem 9001 MHz"),
    ],
)
def test_the_label_names_the_locks_or_else_the_cap(point: SweepPoint, label: str) -> None:
    assert point.label() == label


def test_only_a_point_with_a_lock_locks_clocks() -> None:
    assert not SweepPoint(250.0).locks_clocks
    assert SweepPoint(None, 1410.0).locks_clocks
    assert SweepPoint(None, None, 9001.0).locks_clocks


def test_the_position_is_the_sm_lock_then_the_memory_lock_then_the_cap() -> None:
    assert SweepPoint(300.0, 1410.0, 9001.0).position == 1410.0
    assert SweepPoint(300.0, None, 9001.0).position == 9001.0
    assert SweepPoint(300.0).position == 300.0
    assert math.isnan(SweepPoint().position)


def test_points_are_values_keyed_by_cap_and_locks() -> None:
    a, b = SweepPoint(300.0, 1410.0), SweepPoint(300.0, 1410.0)
    assert a == b and hash(a) == hash(b) and a.key == (300.0, 1410.0, None)
    assert SweepPoint(300.0) != SweepPoint(300.0, 1410.0)


def test_the_run_json_form_roundtrips_and_ignores_what_is_not_a_number() -> None:
    point = SweepPoint(300.0, 1410.0, None)
    assert point.to_dict() == {"cap_w": 300.0, "sm_lock_mhz": 1410.0, "mem_lock_mhz": None}
    assert SweepPoint.from_dict(point.to_dict()) == point
    assert SweepPoint.from_dict({"cap_w": 250, "sm_lock_mhz": "fast", "extra": 1}) == SweepPoint(
        250.0
    )
    assert SweepPoint.from_dict({}) == SweepPoint()
