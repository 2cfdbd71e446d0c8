"""Several GPU backends as one: the NVIDIA and the AMD cards of one machine.

The cards are numbered in order, NVIDIA's (NVML's indices) first, then AMD's, so an NVIDIA-only
or AMD-only machine keeps its vendor's own indices. Each part gives its cards their global
index itself (``AmdsmiBackend(first_index=...)``); this only routes the calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from powersweep.errors import PowersweepError, UsageError
from powersweep.sweep.gpu.protocol import Gpu, GpuBackend


class CombinedBackend:
    """The GPUs of several backends, one after the other (implements ``GpuBackend``).

    Args:
        parts: The backends, in index order; each must number its cards from the sum of the
            counts before it.
    """

    def __init__(self, parts: Sequence[GpuBackend]) -> None:
        self.parts = list(parts)
        self._counts = [p.device_count() for p in self.parts]

    def __enter__(self) -> CombinedBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def device_count(self) -> int:
        """The cards of every part."""
        return sum(self._counts)

    def gpu(self, index: int) -> Gpu:
        """The card at global ``index``.

        Raises:
            UsageError: No GPU has that index.
        """
        offset = 0
        for part, count in zip(self.parts, self._counts, strict=True):
            if offset <= index < offset + count:
                return part.gpu(index - offset)
            offset += count
        total = self.device_count()
        raise UsageError(f"there is no GPU {index}: found {total} (0-{total - 1})")

    def close(self) -> None:
        """Close every part (a failing one does not keep the others open)."""
        for part in self.parts:
            with contextlib.suppress(PowersweepError):
                part.close()
