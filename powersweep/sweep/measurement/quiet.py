"""No garbage-collection pause inside a measured window.

The client times each token as it reads it, and a collection of the older generations stops
every thread for tens of milliseconds: the collector is held off while a point's windows are
measured, so its collections fall between windows.

The reasoning: docs/reference.md, "powersweep.sweep.measurement.quiet".
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_held() -> Iterator[None]:
    """Hold off automatic garbage collection inside the block, and put it back after.

    Nested or with the collector already off (a caller's choice), it leaves the collector as it
    found it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
