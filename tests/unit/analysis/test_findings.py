"""A finding is typed once: built, written to analysis.json and read back alike everywhere."""

from __future__ import annotations

import pytest

from powersweep.analysis.findings import Finding, Severity, finding


def test_a_finding_round_trips_through_its_json() -> None:
    f = Finding(Severity.WARNING, "no_cap_binds", "no cap binds", "lock clocks")
    data = f.to_json()
    assert data == {
        "severity": "warning",
        "code": "no_cap_binds",
        "message": "no cap binds",
        "hint": "lock clocks",
    }
    assert Finding.from_json(data) == f
    assert finding("info", "sweet_spot", "290 W").to_json() == {
        "severity": "info",
        "code": "sweet_spot",
        "message": "290 W",
        "hint": None,
    }


def test_an_unknown_severity_is_a_bug_when_built_and_info_when_read() -> None:
    with pytest.raises(ValueError):
        finding("fatal", "x", "y")
    read = Finding.from_json({"severity": "fatal", "code": "x", "message": "y"})
    assert read.severity == Severity.INFO and read.hint is None
