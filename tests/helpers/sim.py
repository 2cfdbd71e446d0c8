"""Simulated cards and their ground truth as the tests take them."""

from __future__ import annotations

from dataclasses import replace

from powersweep.sim.profiles import GpuProfile, get_profile


def quiet_profile(name: str) -> GpuProfile:
    """The profile ``name`` with no noise on its power readings."""
    return replace(get_profile(name), power_noise_pct=0.0)
