"""Set power limits (and clock locks and SM clock offsets) on chosen GPUs: plan (clamped to each
envelope), write, verify, roll back.

Every value is checked before the first write, so bad input changes nothing.

The reasoning: docs/apply.md, "powersweep.sweep.settings.applier".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from powersweep.errors import GpuError, PowersweepError, UsageError
from powersweep.sweep.gpu import MAX_CARD_W
from powersweep.sweep.settings.clock_locks import (
    ClockChange,
    ClockKind,
    ClockResult,
    undo_clocks,
    write_clocks,
)
from powersweep.sweep.settings.clock_offsets import (
    OffsetChange,
    OffsetResult,
    coming_off,
    going_on,
    undo_offsets,
    write_offset,
)
from powersweep.sweep.settings.targets import Target, Warn

# A limit counts as unchanged (and as taken) within this distance, as the NVML backend judges.
TOLERANCE_W = 0.5
# How an undo's note says a card kept the new value (the restore journal must then stay).
NOT_PUT_BACK = "NOT put back"


@dataclass(frozen=True)
class CapChange:
    """The power limit one GPU is to get.

    Attributes:
        target: The GPU.
        before_w: Limit in force now.
        requested_w: What the run or the user asked for (the default for a reset).
        after_w: What will be set: the request clamped to ``[min_w, max_w]``.
        min_w: Lowest settable limit.
        default_w: The card's default limit.
        max_w: Highest settable limit.
    """

    target: Target
    before_w: float
    requested_w: float
    after_w: float
    min_w: float
    default_w: float
    max_w: float

    @property
    def clamped(self) -> bool:
        """The request was outside the card's range."""
        return abs(self.after_w - self.requested_w) > 1e-9

    @property
    def unchanged(self) -> bool:
        """The card already has this limit."""
        return abs(self.after_w - self.before_w) <= TOLERANCE_W


@dataclass(frozen=True)
class CapResult:
    """What one GPU reads back after the write.

    Attributes:
        change: The planned change.
        readback_w: The limit the card reports now.
        note: A caveat (another, lower limit is enforced), empty when none.
    """

    change: CapChange
    readback_w: float
    note: str = ""


def plan_caps(
    targets: Sequence[Target], cap_w: float | None, *, strict: bool, warn: Warn
) -> list[CapChange]:
    """The limit each target gets: ``cap_w`` clamped to its envelope, or its default (None).

    Args:
        targets: The GPUs.
        cap_w: The limit per GPU; None puts each card's default back.
        strict: Refuse a value outside a card's range instead of clamping it.
        warn: Where clamping warnings go.

    Raises:
        UsageError: ``cap_w`` is not a positive number, or outside a range with ``strict``.
        GpuError: A card's power limits cannot be read.
    """
    if cap_w is not None and not (math.isfinite(cap_w) and 0 < cap_w <= MAX_CARD_W):
        raise UsageError(
            f"a power limit must be a positive number of watts, at most {MAX_CARD_W:g}, "
            f"not {cap_w:g}"
        )
    plan = []
    for t in targets:
        env = t.gpu.envelope()
        requested = env.default_w if cap_w is None else cap_w
        after = min(max(requested, env.min_w), env.max_w)
        if abs(after - requested) > 1e-9:
            where = (
                f"{requested:g} W is outside the range of {t.label}, {env.min_w:g}-{env.max_w:g} W"
            )
            if strict:
                raise UsageError(f"{where} (--strict): nothing was changed")
            warn(f"{where}: clamped to {after:g} W")
        plan.append(
            CapChange(t, env.current_w, requested, after, env.min_w, env.default_w, env.max_w)
        )
    return plan


def apply_caps(plan: Sequence[CapChange], warn: Warn) -> list[CapResult]:
    """Set each planned limit and verify it by reading it back; all or nothing.

    Raises:
        GpuError: A card refused its limit or the write failed; the cards already changed were
            put back (the message says whether that worked).
        KeyboardInterrupt: After putting the changed cards back.
    """
    return apply_settings(plan, [], warn)[0]


def apply_settings(
    caps: Sequence[CapChange], clocks: Sequence[ClockChange], warn: Warn
) -> tuple[list[CapResult], list[ClockResult]]:
    """Set the power limits, then the clock locks, verifying each; all or nothing.

    Raises:
        GpuError: A card refused a setting or the write failed; every setting already changed
            (limits and locks, on every card) was put back (the message says whether that
            worked).
        KeyboardInterrupt: After putting the changed settings back.
    """
    caps_done, clocks_done, _ = apply_all(caps, clocks, (), warn)
    return caps_done, clocks_done


def apply_all(
    caps: Sequence[CapChange],
    clocks: Sequence[ClockChange],
    offsets: Sequence[OffsetChange],
    warn: Warn,
) -> tuple[list[CapResult], list[ClockResult], list[OffsetResult]]:
    """Set the power limits, the clock locks and the SM and memory clock offsets, verifying
    each; all or nothing.

    The order keeps a card from boosting past its stock clocks with a larger offset at any
    moment: limits first, then offsets that shrink (``--reset``; the memory one before the SM
    one), then the locks, then offsets that grow (an undervolt run's, once its lock holds; the
    SM one before the memory one). A failure undoes them in reverse.

    Raises:
        GpuError: A card refused a setting or the write failed; every setting already changed
            (on every card) was put back (the message says whether that worked).
        KeyboardInterrupt: After putting the changed settings back.
    """
    cap_results: list[CapResult] = []
    clock_results: list[ClockResult] = []
    offset_results: list[OffsetResult] = []
    touched: list[tuple[ClockChange, ClockKind]] = []
    shrunk: list[OffsetChange] = []
    grown: list[OffsetChange] = []
    try:
        for change in caps:
            r = change.target.gpu.set_power_limit(change.after_w)
            if not r.accepted:
                raise GpuError(
                    r.message or f"{change.target.label} did not take {change.after_w:g} W"
                )
            cap_results.append(CapResult(change, r.readback_w, r.message))
        for offset in coming_off(offsets):
            offset_results.append(write_offset(offset, shrunk))
        for clock in clocks:
            clock_results.append(write_clocks(clock, touched))
        for offset in going_on(offsets):
            offset_results.append(write_offset(offset, grown))
    except (PowersweepError, KeyboardInterrupt) as exc:
        undone = _undo_all([r.change for r in cap_results], touched, shrunk, grown, warn)
        if isinstance(exc, KeyboardInterrupt):
            exc.add_note(undone)  # whether everything was put back, for the journal's keeper
            raise
        raise GpuError(f"{exc}{undone}") from exc
    return cap_results, clock_results, offset_results


def _undo_all(
    caps: Sequence[CapChange],
    clocks: Sequence[tuple[ClockChange, ClockKind]],
    shrunk: Sequence[OffsetChange],
    grown: Sequence[OffsetChange],
    warn: Warn,
) -> str:
    """Put back what :func:`apply_all` wrote, in reverse (never raises); the note for the
    message, as :func:`undo` gives it."""
    failed = undo_offsets(grown, warn)
    failed += undo_clocks(clocks, warn)
    failed += undo_offsets(shrunk, warn)
    return undo(caps, warn, bool(clocks or shrunk or grown), failed)


def undo(
    changed: Sequence[CapChange],
    warn: Warn,
    clocks_touched: bool = False,
    clocks_failed: Sequence[str] = (),
) -> str:
    """Put back the limits of the cards already changed (never raises).

    Args:
        changed: The limits already set.
        warn: Where warnings go.
        clocks_touched: Clock locks or offsets were changed too (and put back by the caller).
        clocks_failed: The locks and offsets the caller could not put back.

    Returns:
        A note for the error message that made it necessary: ``; nothing was changed``, ``; the
        GPUs already changed were put back`` or which ones were not.
    """
    if not changed and not clocks_touched:
        return "; nothing was changed"
    failed = []
    for c in reversed(changed):
        try:
            ok = c.target.gpu.set_power_limit(c.before_w).accepted
        except PowersweepError as exc:
            ok = False
            warn(f"{c.target.label}: could not put back {c.before_w:g} W: {exc}")
        if not ok:
            failed.append(f"GPU {c.target.identity.index} ({c.before_w:g} W)")
    if failed or clocks_failed:
        # nvidia-smi has no option for an offset: the kept restore journal puts it back
        how = (
            "; `powersweep restore` puts back the offset"
            if any("clock offset" in f for f in clocks_failed)
            else ""
        )
        return (
            f"; {NOT_PUT_BACK}: "
            + ", ".join([*failed, *clocks_failed])
            + f" (set them with nvidia-smi -pl / -lgc / -lmc{how})"
        )
    return "; the GPUs already changed were put back"


def enable_persistence(
    targets: Sequence[Target], warn: Warn
) -> list[tuple[Target, bool | None, bool | None]]:
    """Turn persistence mode on where it is off; (target, before, after) for each GPU.

    Without persistence mode the driver may tear a card's state down when no process uses it,
    and the limit with it. A card that cannot do it gets a warning, not an error: the limit is
    set all the same.
    """
    out = []
    for t in targets:
        before = t.gpu.persistence_mode()
        after = before
        if before is not True:
            try:
                after = t.gpu.set_persistence_mode(True)
            except PowersweepError as exc:
                warn(f"{t.label}: persistence mode stays off: {exc}")
        out.append((t, before, after))
    return out


def undo_settings(
    caps: Sequence[CapResult],
    clocks: Sequence[ClockResult],
    warn: Warn,
    offsets: Sequence[OffsetResult] = (),
) -> str:
    """Put back every limit, lock and offset an apply set (never raises), e.g. when the boot
    unit cannot be written; the note for the error message, as :func:`undo` gives it."""
    touched = [(r.change, kind) for r in clocks for kind in r.change.kinds()]
    shrunk = coming_off([r.change for r in offsets])
    grown = going_on([r.change for r in offsets])
    return _undo_all([r.change for r in caps], touched, shrunk, grown, warn)
