"""The settings commands' inputs as the tests build them."""

from __future__ import annotations

from powersweep.sweep.settings.targets import Target
from tests.fakes.fake_gpu import FakeGpu


def named_target(gpu: FakeGpu) -> Target:
    """``gpu`` as a target the user named, with no measured run behind it."""
    return Target(gpu, gpu.identity(), None, "named")  # type: ignore[arg-type]
