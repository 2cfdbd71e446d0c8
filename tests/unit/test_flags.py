"""powersweep.flags: an option declared once, on its group's field."""

from __future__ import annotations

import dataclasses
import math

import pytest

from powersweep.flags import Flag, flag, flag_of, flagged, out_of_bounds
from powersweep.sweep.options import MeasureOptions, SafetyOptions


@dataclasses.dataclass(frozen=True)
class _Group:
    low: float = flag(1.0, "--low", help="Low.", bounds=(0.5, 2.0))
    maybe: float | None = flag(None, "--maybe", help="Maybe.", bounds=(0.0, 1.0))
    plain: int = 3


def test_a_flag_is_named_by_its_first_declaration() -> None:
    spec = Flag(decls=("--load-mode",), help="Load.")
    assert spec.name == "--load-mode" and spec.param == "load_mode"
    assert Flag(decls=("--gpu", "--gpus")).param == "gpu"


def test_the_field_keeps_its_default_and_its_flag() -> None:
    assert _Group().low == 1.0 and _Group.low == 1.0
    assert flag_of(_Group, "low").bounds == (0.5, 2.0)
    assert [f.name for f, _ in flagged(_Group)] == ["low", "maybe"]
    with pytest.raises(KeyError, match=r"_Group\.plain has no flag"):
        flag_of(_Group, "plain")


@pytest.mark.parametrize(
    ("group", "message"),
    [
        (_Group(), None),
        (_Group(low=0.5, maybe=1.0), None),  # both ends allowed
        (_Group(maybe=None), None),  # not given: its default applies
        (_Group(low=0.4), "--low must be 0.5 or more and at most 2, got 0.4"),
        (_Group(low=math.inf), "--low must be 0.5 or more and at most 2, got inf"),
        (_Group(maybe=math.nan), "--maybe must be 0 or more and at most 1, got nan"),
    ],
)
def test_out_of_bounds_names_the_first_flag_outside(group: _Group, message: str | None) -> None:
    assert out_of_bounds(group) == message


def test_the_sweeps_bounds_sit_on_their_fields() -> None:
    assert flag_of(MeasureOptions, "thermal_wait_max_s").bounds == (0.0, 3600.0)
    assert flag_of(MeasureOptions, "thermal_wait_max_s").name == "--thermal-wait-seconds"
    assert out_of_bounds(SafetyOptions(max_failed_caps=0)) == (
        "--max-failed-caps must be 1 or more and at most 1000, got 0"
    )
