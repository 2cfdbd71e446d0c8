"""Several GPU backends as one (``sweep/gpu/combined.py``): global indices route to the part
that owns the card, an index no part has is a one-line error, and closing closes every part."""

from __future__ import annotations

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.amd import AmdsmiBackend
from powersweep.sweep.gpu.combined import CombinedBackend
from powersweep.sweep.gpu.nvml import NvmlBackend
from tests.fakes.fake_amdsmi import FakeAmdsmi, mi210, mi300x
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml


class _Part:
    """A backend of ``count`` cards; ``gpu`` returns ``(name, local index)``."""

    def __init__(self, name: str, count: int, *, fail_close: bool = False) -> None:
        self.name, self.count, self.fail_close = name, count, fail_close
        self.closed = 0
        self.counted = 0

    def device_count(self) -> int:
        self.counted += 1
        return self.count

    def gpu(self, index: int) -> tuple[str, int]:
        return (self.name, index)

    def close(self) -> None:
        self.closed += 1
        if self.fail_close:
            raise GpuError(f"{self.name} failed to close")


def test_global_indices_route_to_the_part_that_owns_them() -> None:
    a, empty, b = _Part("a", 2), _Part("empty", 0), _Part("b", 3)
    combined = CombinedBackend([a, empty, b])
    assert combined.device_count() == 5
    assert [combined.gpu(i) for i in range(5)] == [
        ("a", 0),
        ("a", 1),
        ("b", 0),
        ("b", 1),
        ("b", 2),
    ]
    # the parts are counted once, at construction
    assert (a.counted, empty.counted, b.counted) == (1, 1, 1)


@pytest.mark.parametrize("index", [5, 17, -1])
def test_an_index_no_part_has_is_a_usage_error_naming_the_range(index: int) -> None:
    combined = CombinedBackend([_Part("a", 2), _Part("b", 3)])
    with pytest.raises(UsageError, match=rf"^there is no GPU {index}: found 5 \(0-4\)$"):
        combined.gpu(index)


def test_close_closes_every_part_even_after_one_fails() -> None:
    a, b, c = _Part("a", 1), _Part("b", 1, fail_close=True), _Part("c", 1)
    with CombinedBackend([a, b, c]):
        pass
    assert (a.closed, b.closed, c.closed) == (1, 1, 1)


def test_nvidia_cards_come_first_then_the_amd_ones_with_their_global_index() -> None:
    nvml = NvmlBackend(nvml=FakeNvml([FakeDevice(uuid="GPU-a"), FakeDevice(uuid="GPU-b")]))
    amd = AmdsmiBackend(FakeAmdsmi([mi300x(), mi210()]), first_index=2)
    combined = CombinedBackend([nvml, amd])
    idents = [combined.gpu(i).identity() for i in range(combined.device_count())]
    assert [(i.index, i.vendor) for i in idents] == [
        (0, "nvidia"),
        (1, "nvidia"),
        (2, "amd"),
        (3, "amd"),
    ]
    assert idents[3].name == "AMD Instinct MI210"
    combined.close()
    with pytest.raises(GpuError, match="closed"):
        nvml.device_count()
    with pytest.raises(GpuError, match="closed"):
        amd.device_count()
