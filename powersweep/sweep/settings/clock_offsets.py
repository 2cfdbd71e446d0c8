"""Set or put back the SM clock offset (an undervolt run's answer) or the memory clock offset
(issue 45) on chosen GPUs: plan, write, verify, undo.

The reasoning: docs/undervolt.md, "powersweep.sweep.settings.clock_offsets".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from powersweep.errors import GpuError, PowersweepError, UsageError
from powersweep.sweep.gpu import MAX_CLOCK_MHZ, OFFSET_GRID_MHZ, ClockOffset, Gpu, LockResult
from powersweep.sweep.settings.targets import Target, Warn

# An offset reads back as taken within this distance (the driver takes whole MHz).
TOLERANCE_MHZ = 0.5

# Which clock's offset: the SM clock's voltage/frequency curve, or the memory clock.
OffsetClock = Literal["sm", "mem"]
_WHAT: dict[OffsetClock, str] = {"sm": "SM clock offset", "mem": "memory clock offset"}
FLAGS: dict[OffsetClock, str] = {"sm": "--sm-offset", "mem": "--mem-offset"}
_CLOCKS: tuple[OffsetClock, ...] = ("sm", "mem")


def read_offset(gpu: Gpu, clock: OffsetClock = "sm") -> ClockOffset:
    """The card's offset of ``clock`` in force and its range (never raises, as the GPU's)."""
    return gpu.mem_clock_offset() if clock == "mem" else gpu.sm_clock_offset()


def _set_offset(gpu: Gpu, clock: OffsetClock, mhz: float) -> LockResult:
    return gpu.set_mem_clock_offset(mhz) if clock == "mem" else gpu.set_sm_clock_offset(mhz)


@dataclass(frozen=True)
class OffsetChange:
    """The SM (or memory) clock offset one GPU is to get.

    Attributes:
        target: The GPU.
        before_mhz: The offset in force now (what a failure puts back).
        after_mhz: The offset to set.
        clock: ``sm`` or ``mem``: which clock's offset.
    """

    target: Target
    before_mhz: float
    after_mhz: float
    clock: OffsetClock = "sm"

    @property
    def what(self) -> str:
        """``SM clock offset`` or ``memory clock offset``, for messages."""
        return _WHAT[self.clock]

    @property
    def unchanged(self) -> bool:
        """The card already has this offset."""
        return abs(self.after_mhz - self.before_mhz) <= TOLERANCE_MHZ

    @property
    def raises(self) -> bool:
        """The offset grows: written after the clock lock, put back before it.

        An offset shifts the whole voltage/frequency curve: on an unlocked clock a larger one
        lets the card boost past its stock clocks, so it goes on only once the lock holds, and
        comes off (or shrinks) before a lock is removed. A memory offset follows the same order
        (on after the SM one, off before it): what shrinks comes off before the locks change,
        what grows goes on once they hold.
        """
        return abs(self.after_mhz) > abs(self.before_mhz) + TOLERANCE_MHZ


def coming_off(offsets: Sequence[OffsetChange]) -> list[OffsetChange]:
    """The offsets that shrink, in the order written (before the locks change): the memory
    offset first, then the SM one (the reverse of :func:`going_on`)."""
    return sorted((o for o in offsets if not o.raises), key=lambda o: o.clock != "mem")


def going_on(offsets: Sequence[OffsetChange]) -> list[OffsetChange]:
    """The offsets that grow, in the order written (once the locks hold): the SM offset first,
    then the memory one."""
    return sorted((o for o in offsets if o.raises), key=lambda o: o.clock == "mem")


@dataclass(frozen=True)
class OffsetResult:
    """What one GPU reads back after its offset was written.

    Attributes:
        change: The planned change.
        readback_mhz: The offset the card reports now (None: unreadable, so not verified).
    """

    change: OffsetChange
    readback_mhz: float | None

    @property
    def verified(self) -> bool:
        """The read-back shows the change."""
        return self.readback_mhz is not None


def check_offset(mhz: float | None, flag: str) -> None:
    """Refuse an offset that is not a finite number of MHz within any card's reach.

    Raises:
        UsageError: NaN, infinite, or beyond the largest clock.
    """
    if mhz is not None and not (math.isfinite(mhz) and abs(mhz) <= MAX_CLOCK_MHZ):
        raise UsageError(f"{flag} takes a number of MHz, at most {MAX_CLOCK_MHZ:g}, not {mhz:g}")


def plan_offsets(
    targets: Sequence[Target], mhz: float | None, clock: OffsetClock = "sm"
) -> list[OffsetChange]:
    """The offset each target gets, each card's support and range checked first.

    Args:
        targets: The GPUs.
        mhz: The offset, MHz (None: leave the offset alone); a memory one in the driver's unit.
        clock: ``sm`` or ``mem``: which clock's offset.

    Raises:
        UsageError: A card without an offset to set, one whose offset in force cannot be read
            (a failure could not put it back), or an offset outside a card's range; one line,
            nothing was changed.
    """
    check_offset(mhz, FLAGS[clock])
    if mhz is None:
        return []
    what = _WHAT[clock]
    plan = []
    for t in targets:
        offset = read_offset(t.gpu, clock)
        if not offset.supported:
            why = offset.message or f"{t.label} has no {what} to set"
            raise UsageError(
                f"{why}: the {mhz:+g} MHz {what} cannot be applied; nothing was changed"
            )
        if offset.offset_mhz is None:
            raise UsageError(
                f"the {what} in force on {t.label} cannot be read "
                f"({offset.message or 'unreadable'}), so a failure could not put it back; "
                "nothing was changed"
            )
        lo, hi = offset.min_mhz, offset.max_mhz
        if (lo is not None and mhz < lo) or (hi is not None and mhz > hi):
            raise UsageError(
                f"{mhz:+g} MHz is outside the {what}s of {t.label} "
                f"({_range_text(lo, hi)}); nothing was changed"
            )
        plan.append(OffsetChange(t, offset.offset_mhz, float(mhz), clock))
    return plan


def plan_offset_reset(targets: Sequence[Target], warn: Warn) -> list[OffsetChange]:
    """``--reset``: offset 0, SM and memory, on every card that holds another one (cards without
    that offset, or already at 0, are left out; one whose offset cannot be read is left alone,
    with a warning)."""
    plan = []
    for clock in _CLOCKS:
        for t in targets:
            offset = read_offset(t.gpu, clock)
            if not offset.supported:
                continue
            if offset.offset_mhz is None:
                warn(
                    f"{t.label}: its {_WHAT[clock]} cannot be read "
                    f"({offset.message or 'unreadable'}): left alone"
                )
                continue
            if abs(offset.offset_mhz) > TOLERANCE_MHZ:
                plan.append(OffsetChange(t, offset.offset_mhz, 0.0, clock))
    return plan


def write_offset(change: OffsetChange, touched: list[OffsetChange]) -> OffsetResult:
    """Set one GPU's offset and read it back.

    Args:
        change: What to set.
        touched: The change is appended before the write (a failed call may still have changed
            the card), so the caller can undo it.

    Raises:
        GpuError: The driver refused the offset, or the read-back differs.
    """
    gpu, label = change.target.gpu, change.target.label
    touched.append(change)
    r = _set_offset(gpu, change.clock, change.after_mhz)
    if not r.accepted:
        raise GpuError(r.message or f"{label} refused a {change.after_mhz:+g} MHz {change.what}")
    got = read_offset(gpu, change.clock).offset_mhz
    # the driver's rounding to its grid is the offset set, and the read-back is what applies
    if got is not None and abs(got - change.after_mhz) >= OFFSET_GRID_MHZ:
        raise GpuError(
            f"{label} reads back {_article(change.what)} {change.what} of {got:+g} MHz after "
            f"{change.after_mhz:+g} MHz was set"
        )
    return OffsetResult(change, got)


def undo_offsets(touched: Sequence[OffsetChange], warn: Warn) -> list[str]:
    """Put back the offsets written so far, newest first (never raises).

    Returns:
        The offsets not put back, for the error message (empty when all were).
    """
    failed = []
    for change in reversed(touched):
        try:
            r = _set_offset(change.target.gpu, change.clock, change.before_mhz)
            if not r.accepted:
                raise PowersweepError(r.message or "refused")
        except PowersweepError as exc:
            warn(
                f"{change.target.label}: could not put back its {change.what} "
                f"{change.before_mhz:+g} MHz: {exc}"
            )
            failed.append(
                f"GPU {change.target.identity.index} ({change.what} {change.before_mhz:+g} MHz)"
            )
    return failed


def offset_line(change: OffsetChange, result: OffsetResult | None = None) -> str:
    """``GPU 0 (...): SM clock offset +0 MHz -> +180 MHz (verified: reads back +180 MHz)`` (or
    ``memory clock offset``)."""
    line = (
        f"{change.target.label}: {change.what} {change.before_mhz:+g} MHz -> "
        f"{change.after_mhz:+g} MHz"
    )
    if result is None:
        return line
    if result.readback_mhz is not None:
        return f"{line} (verified: reads back {result.readback_mhz:+g} MHz)"
    return f"{line} (set; not verified: the offset cannot be read back)"


def _range_text(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"{lo:+g} to {hi:+g} MHz"
    return f"at least {lo:+g} MHz" if lo is not None else f"at most {hi:+g} MHz"


def _article(what: str) -> str:
    return "an" if what.startswith("SM") else "a"
