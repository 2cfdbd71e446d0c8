"""The order in which pytest-xdist hands the test files to its workers (``--dist loadfile``).

Whole files go to one worker (a module's fixture, a simulated sweep or a real server, is built
once). The files with the most slow end-to-end tests go first, so the suite does not end on one
worker running a long file while the other idles; each file's tests keep their own order. The
tests against real servers (tests/realservers/, not marked slow) measure in real time: they come
after the simulated sweeps, which run flat out on virtual time and would take the CPU the real
servers' rates depend on; the longest of them first, so that none starts when the others are
done.
"""

from __future__ import annotations

from collections import Counter

import pytest

REAL_SERVERS = "tests/realservers/"


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow = Counter(_module(it) for it in items if it.get_closest_marker("slow"))
    real = Counter(_module(it) for it in items if _module(it).startswith(REAL_SERVERS))

    def order(it: pytest.Item) -> tuple[int, int]:
        # the real servers' files right after the slow ones, the longest first: the last of
        # them began when the others were done and the suite ended on it alone (20-30 s of
        # one worker, measured on two cores)
        module = _module(it)
        return (-slow[module], -real[module]) if slow[module] else (0, -real[module])

    items.sort(key=order)  # stable: each file's tests stay in order


@pytest.fixture(autouse=True)
def _own_card_locks(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Each test its own machine-wide card-lock directory: two workers' fake cards share UUIDs,
    and a card lock held by one worker's test must not refuse the other's."""
    monkeypatch.setenv("POWERSWEEP_LOCK_DIR", str(tmp_path_factory.mktemp("card-locks")))
