"""SM clock offsets during a sweep (the undervolt search, issue 36), or memory clock offsets
(issue 45): what each card had before, the offset of each point, and putting every card back.

The reasoning: docs/undervolt.md, "powersweep.sweep.offsets".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from powersweep.errors import PowersweepError, UsageError
from powersweep.sweep.gpu import ClockOffset, Gpu
from powersweep.sweep.records.put_back import put_back_offset


class ClockOffsetter:
    """The SM (or memory) clock offsets of a sweep's GPUs.

    Args:
        gpus: The GPU set.
        warn: Where warnings go.
        clock: ``sm`` (the default) or ``mem``: which clock's offset it sets.
    """

    def __init__(
        self,
        gpus: Sequence[Gpu],
        warn: Callable[[str], None],
        clock: Literal["sm", "mem"] = "sm",
    ) -> None:
        self.gpus = list(gpus)
        self.warn = warn
        self.clock: Literal["sm", "mem"] = clock
        self.what = "memory clock offset" if clock == "mem" else "clock offset"
        self.originals: dict[int, ClockOffset] = {
            g.index: g.mem_clock_offset() if clock == "mem" else g.sm_clock_offset()
            for g in self.gpus
        }
        self.touched: set[int] = set()

    def check_supported(self) -> None:
        """Refuse a card that does not report an offset it can set, or whose offset in force
        cannot be read (it could not be put back).

        Raises:
            UsageError: One line naming each such card and why.
        """
        problems = []
        for index, offset in sorted(self.originals.items()):
            if not offset.supported:
                problems.append(
                    f"GPU {index} has no {self.what} ({offset.message or 'unsupported'})"
                )
            elif offset.sm_offset_mhz is None:
                why = offset.message or "unreadable"
                problems.append(f"GPU {index}'s {self.what} in force cannot be read ({why})")
        if problems:
            needs = "an offset" if self.clock == "sm" else "a memory clock offset"
            raise UsageError(
                "; ".join(problems) + f": an undervolt search needs {needs} it can read and set"
            )

    def range_mhz(self) -> tuple[float, float] | None:
        """The offsets every card accepts (None: a card does not say its range)."""
        ranges = [(o.min_mhz, o.max_mhz) for o in self.originals.values()]
        lows = [lo for lo, _ in ranges if lo is not None]
        highs = [hi for _, hi in ranges if hi is not None]
        if not ranges or len(lows) < len(ranges) or len(highs) < len(ranges):
            return None
        return max(lows), min(highs)

    def apply(self, mhz: float) -> list[str]:
        """Set ``mhz`` on every card; the refusals, one line each (empty: every card took it).

        Raises:
            GpuError: No permission, or the driver failed (the caller restores).
        """
        refused = []
        for g in self.gpus:
            self.touched.add(g.index)  # a failed call may still have changed the card
            set_offset = g.set_mem_clock_offset if self.clock == "mem" else g.set_sm_clock_offset
            result = set_offset(mhz)
            if not result.accepted:
                refused.append(f"GPU {g.index}: {result.message}")
        return refused

    def put_back(self) -> dict[int, tuple[bool, str]]:
        """Put back the offset every touched card had (0 where it was unknown).

        Never raises: ``{gpu index: (ok, what was done or why not)}``.
        """
        out: dict[int, tuple[bool, str]] = {}
        for g in self.gpus:
            if g.index not in self.touched:
                continue
            original = self.originals[g.index].sm_offset_mhz
            try:
                out[g.index] = (True, put_back_offset(g, original, self.clock))
            except Exception as exc:  # keep putting the other cards back
                if not isinstance(exc, PowersweepError):
                    exc = PowersweepError(f"{type(exc).__name__}: {exc}")
                self.warn(
                    f"could not put back the {self.what} of GPU {g.index}: {exc}; run "
                    "`powersweep restore`, or reboot to clear it"
                )
                out[g.index] = (False, str(exc))
        return out
