"""Which event loop a sweep runs on.

uvloop where it is installed: the sweep process spends its CPU on socket reads (one per token
and stream), and uvloop's are done in C. Measured on a 2-core VM, 64 streams at 3,000 tokens/s
from a server in another process: a bare asyncio protocol costs 0.028-0.030 CPU s per 1,000
tokens, the same on uvloop 0.013-0.020; the whole decode-concurrent window 0.040-0.041 on
asyncio's loop and 0.026-0.031 on uvloop's.
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
