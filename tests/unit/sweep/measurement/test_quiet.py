"""The collector is held off inside a measured window and back on after it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from powersweep.sweep.measurement.quiet import collector_held


@pytest.fixture
def collections() -> Iterator[list[int]]:
    seen: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(note)
    yield seen
    gc.callbacks.remove(note)
    gc.enable()


def test_no_collection_inside_and_a_full_one_after(collections: list[int]) -> None:
    assert gc.isenabled()
    # a known start: which generation the first collection after the window takes depends on
    # the older generations' counts, which earlier tests in this process left anywhere
    gc.collect()
    collections.clear()
    with collector_held():
        assert not gc.isenabled()
        for _ in range(50_000):  # far past generation 0's threshold of allocations
            a: list[Any] = []
            a.append(a)  # cyclic garbage: only the collector frees it
        assert collections == []
    assert gc.isenabled()
    for _ in range(2_000):  # back on: the next allocations collect the young garbage
        b: list[Any] = []
        b.append(b)
    assert collections and collections[0] == 0


def test_an_exception_still_puts_the_collector_back(collections: list[int]) -> None:
    with pytest.raises(RuntimeError), collector_held():
        raise RuntimeError("window failed")
    assert gc.isenabled() and collections == []


def test_a_collector_already_off_is_left_off_and_nothing_collected(
    collections: list[int],
) -> None:
    gc.disable()
    with collector_held():
        with collector_held():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert not gc.isenabled() and collections == []
