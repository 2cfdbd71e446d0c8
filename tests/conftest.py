"""How the suite is shared between pytest-xdist workers (``--dist loadgroup`` in pyproject).

Each test goes to whichever worker is free, except tests that share an expensive module- or
session-scoped fixture (a module's simulated sweep, the real servers): those form one group and
run on one worker, so the fixture is built once. The modules of slow end-to-end tests are handed
out first, so the suite does not end on one worker running a long test while the other idles.
"""

from __future__ import annotations

import pytest

SHARED_SCOPES = ("module", "package", "session")


def _group(item: pytest.Item) -> str | None:
    """The group of tests sharing this test's widest-scoped fixture (None: it shares none)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    groups = []
    for name in info.names_closure:
        for fixdef in info.name2fixturedefs.get(name, ()):
            if fixdef.scope not in SHARED_SCOPES or fixdef.baseid == "":
                continue  # function-scoped, or a plugin's own (no file builds it)
            if fixdef.scope == "module":
                groups.append(item.nodeid.split("::", 1)[0])
            else:
                groups.append(fixdef.baseid or "session")
    # a session fixture's group (a directory) holds its modules' groups too
    return min(groups, key=len) if groups else None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    # Modules with slow tests first, each module's tests kept together in their own order (a
    # module fixture is torn down when the next test is another module's: split, it would be
    # built twice).
    slow = {it.nodeid.split("::", 1)[0] for it in items if it.get_closest_marker("slow")}
    items.sort(key=lambda it: it.nodeid.split("::", 1)[0] not in slow)  # stable
