"""Sweep options as the axis tests build them."""

from __future__ import annotations

from typing import Any

from powersweep.sweep.options import PointOptions, SafetyOptions, SweepOptions


def point_options(observe: bool = False, **points: Any) -> SweepOptions:
    """Options with these axis-and-points fields (observe-only if ``observe``), the rest default."""
    return SweepOptions(points=PointOptions(**points), safety=SafetyOptions(observe_only=observe))
