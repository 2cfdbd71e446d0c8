"""No garbage-collection pause inside a measured window.

The client times each token as it reads it. A collection of the interpreter's older generations
stops every thread of the process, for tens of milliseconds once a run's records have grown (57 ms
in a short simulated sweep, 1.6 ms for the middle generation, more than a dozen times), and a
pause at a request's end lands in its span; in decode-concurrent it moves arrivals across a
window's edge. So the collector is held off while a point's windows are measured; back on after
them, its next collections fall between windows, where a pause delays nothing that is counted.
No full collection is forced there: in a process holding much (a test runner, a program that
embeds the sweep) one takes hundreds of milliseconds, a stall of every thread however it is
placed. (On the simulated rig the server shares the interpreter and its run clock multiplies
each wall delay by the time scale.)
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
