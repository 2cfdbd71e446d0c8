"""The order in which pytest-xdist hands the test files to its workers (``--dist loadfile``).

Whole files go to one worker (a module's fixture, a simulated sweep or a real server, is built
once). The files with the most heavy tests (slow end-to-end ones, and those against real servers)
go first, so the suite does not end on one worker running a long file while the other idles;
each file's tests keep their own order.
"""

from __future__ import annotations

from collections import Counter

import pytest


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _heavy(item: pytest.Item) -> bool:
    """A test that takes seconds: an end-to-end run, or one against a real server (which
    starts and measures in real time)."""
    return item.get_closest_marker("slow") is not None or (
        item.get_closest_marker("realserver") is not None
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    heavy = Counter(_module(it) for it in items if _heavy(it))
    items.sort(key=lambda it: -heavy[_module(it)])  # stable: each file's tests stay in order
