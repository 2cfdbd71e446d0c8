"""Set or put back the SM clock offset (an undervolt run's answer) on chosen GPUs: plan, write,
verify, undo.

Like limits and locks, every card is checked before the first write: one without an offset to
set, or whose offset in force cannot be read (so could not be put back), is refused and nothing
changes. ``nvidia-smi`` has no option for the offset; it goes through the driver's API alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from powersweep.errors import GpuError, PowersweepError, UsageError
from powersweep.sweep.gpu import MAX_CLOCK_MHZ, OFFSET_GRID_MHZ
from powersweep.sweep.settings.targets import Target, Warn

# An offset reads back as taken within this distance (the driver takes whole MHz).
TOLERANCE_MHZ = 0.5


@dataclass(frozen=True)
class OffsetChange:
    """The SM clock offset one GPU is to get.

    Attributes:
        target: The GPU.
        before_mhz: The offset in force now (what a failure puts back).
        after_mhz: The offset to set.
    """

    target: Target
    before_mhz: float
    after_mhz: float

    @property
    def unchanged(self) -> bool:
        """The card already has this offset."""
        return abs(self.after_mhz - self.before_mhz) <= TOLERANCE_MHZ

    @property
    def raises(self) -> bool:
        """The offset grows: written after the clock lock, put back before it.

        An offset shifts the whole voltage/frequency curve: on an unlocked clock a larger one
        lets the card boost past its stock clocks, so it goes on only once the lock holds, and
        comes off (or shrinks) before a lock is removed.
        """
        return abs(self.after_mhz) > abs(self.before_mhz) + TOLERANCE_MHZ


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


def plan_offsets(targets: Sequence[Target], mhz: float | None) -> list[OffsetChange]:
    """The offset each target gets, each card's support and range checked first.

    Args:
        targets: The GPUs.
        mhz: The SM clock offset, MHz (None: leave the offset alone).

    Raises:
        UsageError: A card without an offset to set, one whose offset in force cannot be read
            (a failure could not put it back), or an offset outside a card's range; one line,
            nothing was changed.
    """
    check_offset(mhz, "--sm-offset")
    if mhz is None:
        return []
    plan = []
    for t in targets:
        offset = t.gpu.sm_clock_offset()
        if not offset.supported:
            why = offset.message or f"{t.label} has no SM clock offset to set"
            raise UsageError(
                f"{why}: the {mhz:+g} MHz SM clock offset cannot be applied; nothing was changed"
            )
        if offset.sm_offset_mhz is None:
            raise UsageError(
                f"the SM clock offset in force on {t.label} cannot be read "
                f"({offset.message or 'unreadable'}), so a failure could not put it back; "
                "nothing was changed"
            )
        lo, hi = offset.min_mhz, offset.max_mhz
        if (lo is not None and mhz < lo) or (hi is not None and mhz > hi):
            raise UsageError(
                f"{mhz:+g} MHz is outside the SM clock offsets of {t.label} "
                f"({_range_text(lo, hi)}); nothing was changed"
            )
        plan.append(OffsetChange(t, offset.sm_offset_mhz, float(mhz)))
    return plan


def plan_offset_reset(targets: Sequence[Target], warn: Warn) -> list[OffsetChange]:
    """``--reset``: offset 0 on every card that holds another one (cards without offsets, or
    already at 0, are left out; one whose offset cannot be read is left alone, with a warning)."""
    plan = []
    for t in targets:
        offset = t.gpu.sm_clock_offset()
        if not offset.supported:
            continue
        if offset.sm_offset_mhz is None:
            warn(
                f"{t.label}: its SM clock offset cannot be read "
                f"({offset.message or 'unreadable'}): left alone"
            )
            continue
        if abs(offset.sm_offset_mhz) > TOLERANCE_MHZ:
            plan.append(OffsetChange(t, offset.sm_offset_mhz, 0.0))
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
    r = gpu.set_sm_clock_offset(change.after_mhz)
    if not r.accepted:
        raise GpuError(r.message or f"{label} refused a {change.after_mhz:+g} MHz SM clock offset")
    got = gpu.sm_clock_offset().sm_offset_mhz
    # the driver's rounding to its grid is the offset set, and the read-back is what applies
    if got is not None and abs(got - change.after_mhz) >= OFFSET_GRID_MHZ:
        raise GpuError(
            f"{label} reads back an SM clock offset of {got:+g} MHz after "
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
            r = change.target.gpu.set_sm_clock_offset(change.before_mhz)
            if not r.accepted:
                raise PowersweepError(r.message or "refused")
        except PowersweepError as exc:
            warn(
                f"{change.target.label}: could not put back its SM clock offset "
                f"{change.before_mhz:+g} MHz: {exc}"
            )
            failed.append(
                f"GPU {change.target.identity.index} (SM clock offset {change.before_mhz:+g} MHz)"
            )
    return failed


def offset_line(change: OffsetChange, result: OffsetResult | None = None) -> str:
    """``GPU 0 (...): SM clock offset +0 MHz -> +180 MHz (verified: reads back +180 MHz)``."""
    line = (
        f"{change.target.label}: SM clock offset {change.before_mhz:+g} MHz -> "
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
