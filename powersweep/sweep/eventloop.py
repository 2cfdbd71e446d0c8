"""Which event loop a sweep runs on.

uvloop where it is installed: the sweep process spends its CPU on socket reads (one per token
and stream), and uvloop's are done in C.

The reasoning: docs/architecture.md, "powersweep.sweep.eventloop".
"""

from __future__ import annotations

from powersweep.clock import LoopFactory


def event_loop_factory() -> LoopFactory | None:
    """uvloop's loop factory when uvloop is installed, else None (asyncio's default loop)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
