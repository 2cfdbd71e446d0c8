"""The order in which pytest-xdist hands the test files to its workers (``--dist loadfile``).

Whole files go to one worker (a module's fixture, a simulated sweep or a real server, is built
once). The files with the most slow end-to-end tests go first, so the suite does not end on one
worker running a long file while the other idles; each file's tests keep their own order. The
tests against real servers (tests/realservers/, not marked slow) measure in real time: they come
after the simulated sweeps, which run flat out on virtual time and would take the CPU the real
servers' rates depend on.
"""

from __future__ import annotations

from collections import Counter

import pytest


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow = Counter(_module(it) for it in items if it.get_closest_marker("slow"))
    items.sort(key=lambda it: -slow[_module(it)])  # stable: each file's tests stay in order


@pytest.fixture(autouse=True)
def _own_card_locks(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Each test its own machine-wide card-lock directory: two workers' fake cards share UUIDs,
    and a card lock held by one worker's test must not refuse the other's."""
    monkeypatch.setenv("POWERSWEEP_LOCK_DIR", str(tmp_path_factory.mktemp("card-locks")))
