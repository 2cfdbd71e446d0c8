"""Clock-sweep options (validated before anything is touched) and lock verification."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from powersweep.cli import main
from powersweep.errors import UsageError
from powersweep.sweep.locks import verify
from powersweep.sweep.options import Axis, PointOptions, SafetyOptions, SweepOptions
from powersweep.sweep.options_check import validate
from powersweep.sweep.planning.clock_points import SweepPoint


def _split_options(**kwargs: Any) -> SweepOptions:
    """Options with the axis-and-points fields in their group, the rest in the safety one."""
    names = {f.name for f in dataclasses.fields(PointOptions)}
    points = PointOptions(**{k: v for k, v in kwargs.items() if k in names})
    safety = SafetyOptions(**{k: v for k, v in kwargs.items() if k not in names})
    return SweepOptions(points=points, safety=safety)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"axis": "diagonal"}, "--axis must be one of"),
        ({"sm_clocks": (900.0,)}, "work only on a clock axis"),
        ({"hold_cap_w": 300.0}, "work only on a clock axis"),
        ({"axis": "grid", "caps": (300.0,)}, "use --cap W"),
        ({"axis": "sm-clock", "mem_clocks": (9751.0, 9501.0)}, "one memory lock"),
        ({"axis": "mem-clock", "sm_clocks": (900.0, 1200.0)}, "one SM lock"),
        ({"axis": "grid", "hold_cap_w": -5.0}, "--cap must be a positive"),
        ({"axis": "grid", "observe_only": True, "sm_clocks": (900.0,)}, "--observe-only"),
    ],
)
def test_bad_clock_options_are_one_line_usage_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        validate(_split_options(**kwargs))


def test_good_clock_options_pass() -> None:
    validate(_split_options(axis=Axis.GRID, sm_clocks=(900.0, 1200.0), hold_cap_w=300.0))
    validate(_split_options(axis=Axis.SM_CLOCK, mem_clocks=(9501.0,)))
    assert _split_options(axis=Axis.GRID).points.clock_axis and not SweepOptions().points.clock_axis


def test_cli_refuses_caps_on_a_clock_axis_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--simulate", "rtx3090-air", "--axis", "grid", "--caps", "300", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().startswith("error: ") and "--cap W" in err and "Traceback" not in err


def test_cli_rejects_bad_clock_lists(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--simulate", "rtx3090-air", "--axis", "sm-clock", "--sm-clocks", "fast"])
    assert code == 2 and "--sm-clocks" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("row", "ok"),
    [
        ({"sm_clock_mhz": 1410.0, "mem_clock_mhz": 9501.0}, True),
        ({"sm_clock_mhz": 1395.0, "mem_clock_mhz": 9501.0}, True),  # within a bin
        ({"sm_clock_mhz": 1800.0, "mem_clock_mhz": 9501.0}, False),  # ignored: kept boosting
        ({"sm_clock_mhz": 1200.0, "mem_clock_mhz": 9501.0}, False),  # clamped low, no reason
        ({"sm_clock_mhz": 1200.0, "pwr_throttle_pct": 90.0, "mem_clock_mhz": 9501.0}, True),
        ({"sm_clock_mhz": 1410.0, "mem_clock_mhz": 9751.0}, False),  # memory kept its tier
        ({"sm_clock_mhz": None, "mem_clock_mhz": None}, True),  # nothing read: cannot tell
    ],
)
def test_verify_reads_the_measured_clocks(row: dict, ok: bool) -> None:
    why = verify(SweepPoint(None, 1410.0, 9501.0), row)
    assert (why is None) == ok, why
