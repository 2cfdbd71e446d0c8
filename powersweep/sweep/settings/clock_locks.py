"""Lock or unlock SM and memory clocks on chosen GPUs: plan (snapped to supported clocks),
write, verify where the backend can read locks back, undo.

Like power limits, every value is checked before the first write.

The reasoning: docs/clocks.md, "powersweep.sweep.settings.clock_locks".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from powersweep.errors import GpuError, PowersweepError, UsageError
from powersweep.sweep.gpu import MAX_CLOCK_MHZ, LockedClocks, SupportedClocks
from powersweep.sweep.gpu.lock_range import idle_floor_mhz, range_min_mhz
from powersweep.sweep.settings.targets import Target, Warn

# A lock reads back as taken within this distance (NVML takes whole MHz).
TOLERANCE_MHZ = 0.5

ClockKind = Literal["sm", "mem"]
_WHAT = {"sm": "SM", "mem": "memory"}
_KINDS: tuple[ClockKind, ...] = ("sm", "mem")


@dataclass(frozen=True)
class ClockChange:
    """The clock locks one GPU is to get.

    Attributes:
        target: The GPU.
        before: The locks in force now, as far as the backend can read them.
        sm_mhz: SM lock to set (snapped to a supported clock); None: leave the SM clock alone.
        mem_mhz: Memory lock to set; None: leave the memory clock alone.
        unlock: Remove both locks instead (``--reset``).
        sm_min_mhz: The SM lock's bottom (None: min = max).
    """

    target: Target
    before: LockedClocks
    sm_mhz: float | None = None
    mem_mhz: float | None = None
    unlock: bool = False
    sm_min_mhz: float | None = None

    def kinds(self) -> tuple[ClockKind, ...]:
        """The clocks this change touches."""
        if self.unlock:
            return _KINDS
        return tuple(k for k in _KINDS if self.after(k) is not None)

    def after(self, kind: ClockKind) -> float | None:
        """The lock asked for one clock (None: unlocked, or left alone)."""
        if self.unlock:
            return None
        return self.sm_mhz if kind == "sm" else self.mem_mhz


@dataclass(frozen=True)
class ClockResult:
    """What one GPU reports after its locks were written.

    Attributes:
        change: The planned change.
        readback: The locks the backend reads now (``known`` False on NVML).
    """

    change: ClockChange
    readback: LockedClocks

    @property
    def verified(self) -> bool:
        """The read-back shows the change (only where locks can be read)."""
        return self.readback.known


def check_clock(mhz: float | None, flag: str) -> None:
    """Refuse a clock that is not a positive number of MHz.

    Raises:
        UsageError: Zero, negative, NaN or infinite.
    """
    if mhz is not None and not (math.isfinite(mhz) and 0 < mhz <= MAX_CLOCK_MHZ):
        raise UsageError(
            f"{flag} takes a positive number of MHz, at most {MAX_CLOCK_MHZ:g}, not {mhz:g}"
        )


def plan_clocks(
    targets: Sequence[Target],
    sm_mhz: float | None,
    mem_mhz: float | None,
    *,
    strict: bool,
    warn: Warn,
    sm_min_mhz: float | None = None,
) -> list[ClockChange]:
    """The locks each target gets: each clock snapped to the nearest one the card supports.

    Args:
        targets: The GPUs.
        sm_mhz: SM lock (the range's top), MHz (None: leave the SM clock alone).
        mem_mhz: Memory lock, MHz (None: leave the memory clock alone).
        strict: Refuse a clock the card does not list instead of snapping it.
        warn: Where snapping warnings go.
        sm_min_mhz: The SM range's bottom (None: the card's idle floor); never above the top.

    Raises:
        UsageError: A clock that is not a positive number, or (``strict``) not supported.
    """
    check_clock(sm_mhz, "--sm-clock")
    check_clock(mem_mhz, "--mem-clock")
    check_clock(sm_min_mhz, "--sm-clock-min")
    if sm_mhz is None and mem_mhz is None:
        return []
    plan = []
    for t in targets:
        supported = _supported(t, strict, warn)
        mem = sm = low = None
        if mem_mhz is not None:
            listed = supported.mem_mhz if supported else ()
            mem = _snap(t, "mem", mem_mhz, listed, strict, warn)
        if sm_mhz is not None:
            listed = _sm_clocks(supported, mem) if supported else ()
            sm = _snap(t, "sm", sm_mhz, listed, strict, warn)
            low = range_min_mhz(sm, sm_min_mhz, idle_floor_mhz(supported))
        plan.append(ClockChange(t, t.gpu.locked_clocks(), sm, mem, sm_min_mhz=low))
    return plan


def plan_unlock(targets: Sequence[Target]) -> list[ClockChange]:
    """Both locks removed on every target (``--reset``)."""
    return [ClockChange(t, t.gpu.locked_clocks(), unlock=True) for t in targets]


def _supported(t: Target, strict: bool, warn: Warn) -> SupportedClocks | None:
    try:
        return t.gpu.supported_clocks()
    except GpuError as exc:
        if strict:
            raise UsageError(f"{exc} (--strict): nothing was changed") from exc
        warn(f"{exc}; the clocks are used as given (the driver checks them)")
        return None


def _sm_clocks(supported: SupportedClocks, mem_mhz: float | None) -> tuple[float, ...]:
    """The SM clocks valid with the memory lock, or with any memory clock when none is set."""
    if mem_mhz is not None and mem_mhz in supported.sm_mhz_by_mem:
        return supported.sm_mhz_by_mem[mem_mhz]
    return tuple(sorted({f for fs in supported.sm_mhz_by_mem.values() for f in fs}, reverse=True))


def _snap(
    t: Target,
    kind: ClockKind,
    mhz: float,
    listed: Sequence[float],
    strict: bool,
    warn: Warn,
) -> float:
    """``mhz``, or the nearest listed clock (the lower one on a tie: less draw)."""
    if not listed:
        return mhz
    nearest = min(listed, key=lambda f: (abs(f - mhz), f))
    if abs(nearest - mhz) <= TOLERANCE_MHZ:
        return float(nearest)
    where = (
        f"{mhz:g} MHz is not a supported {_WHAT[kind]} clock of {t.label} "
        f"({min(listed):g}-{max(listed):g} MHz)"
    )
    if strict:
        raise UsageError(f"{where} (--strict): nothing was changed")
    warn(f"{where}: snapped to {nearest:g} MHz")
    return float(nearest)


def write_clocks(change: ClockChange, touched: list[tuple[ClockChange, ClockKind]]) -> ClockResult:
    """Lock (or unlock) one GPU's clocks and read them back.

    Args:
        change: What to set.
        touched: Each clock written is appended, so the caller can undo it on a failure.

    Raises:
        GpuError: The driver refused a lock, or the read-back differs.
    """
    gpu, label = change.target.gpu, change.target.label
    if change.unlock:
        touched += [(change, "sm"), (change, "mem")]
        gpu.reset_clock_locks(sm=True, mem=True)
    # memory first: the SM clocks a card supports depend on its memory clock
    for kind in reversed(change.kinds()) if not change.unlock else ():
        mhz = change.after(kind)
        assert mhz is not None  # kinds() lists the clocks with a lock to set
        r = gpu.lock_mem_clock(mhz) if kind == "mem" else gpu.lock_sm_clock(mhz, change.sm_min_mhz)
        if not r.accepted:
            asked = _lock_text(mhz, change.sm_min_mhz if kind == "sm" else None)
            raise GpuError(r.message or f"{label} refused a {asked} {_WHAT[kind]} lock")
        touched.append((change, kind))
    readback = gpu.locked_clocks()
    if readback.known:
        for kind in change.kinds():
            want, got = change.after(kind), _read(readback, kind)
            want_low = change.sm_min_mhz if kind == "sm" and want is not None else None
            got_low = readback.sm_min_mhz if kind == "sm" else None
            # a bottom is checked where the read-back has one (a backend may read the top only)
            if _differ(want, got) or (got_low is not None and _differ(want_low or want, got_low)):
                raise GpuError(
                    f"{label} reads back {_lock_text(got, got_low)} for its {_WHAT[kind]} clock "
                    f"after {_lock_text(want, want_low)} was set"
                )
    return ClockResult(change, readback)


def undo_clocks(touched: Sequence[tuple[ClockChange, ClockKind]], warn: Warn) -> list[str]:
    """Put back the locks written so far, newest first (never raises).

    A lock that was in force before is locked again where it could be read; where it could not
    (NVML), the clock is left unlocked and counted as not put back.

    Returns:
        The clocks not put back, for the error message (empty when all were).
    """
    failed = []
    for change, kind in reversed(touched):
        gpu, before = change.target.gpu, change.before
        old = _read(before, kind) if before.known else None
        try:
            gpu.reset_clock_locks(sm=kind == "sm", mem=kind == "mem")
            if old is not None:
                low = before.sm_min_mhz if kind == "sm" else None
                r = gpu.lock_mem_clock(old) if kind == "mem" else gpu.lock_sm_clock(old, low)
                if not r.accepted:
                    raise PowersweepError(f"could not lock it back to {old:g} MHz")
        except PowersweepError as exc:
            warn(f"{change.target.label}: could not put back its {_WHAT[kind]} clock: {exc}")
            failed.append(f"GPU {change.target.identity.index} ({_WHAT[kind]} {_lock_text(old)})")
            continue
        if not before.known and before.user_clock_setting_active is not False:
            failed.append(
                f"GPU {change.target.identity.index} ({_WHAT[kind]} clock: the lock before "
                "could not be read, left unlocked)"
            )
    return failed


def _read(locks: LockedClocks, kind: ClockKind) -> float | None:
    return locks.sm_mhz if kind == "sm" else locks.mem_mhz


def _differ(want: float | None, got: float | None) -> bool:
    if want is None or got is None:
        return (want is None) != (got is None)
    return abs(want - got) > TOLERANCE_MHZ


def _lock_text(mhz: float | None, min_mhz: float | None = None) -> str:
    """``1410 MHz``, ``210-1410 MHz`` for a range, or ``unlocked``."""
    if mhz is None:
        return "unlocked"
    if min_mhz is None or abs(min_mhz - mhz) <= TOLERANCE_MHZ:
        return f"{mhz:g} MHz"
    return f"{min_mhz:g}-{mhz:g} MHz"


def describe_locks(locks: LockedClocks, kinds: Sequence[ClockKind] = _KINDS) -> str:
    """``SM 210-1410 MHz, memory unlocked``; ``unknown`` where NVML cannot read locks."""
    if not locks.known:
        return "unknown (NVML cannot read clock locks)"
    return ", ".join(
        f"{_WHAT[k]} {_lock_text(_read(locks, k), locks.sm_min_mhz if k == 'sm' else None)}"
        for k in kinds
    )


def describe_after(change: ClockChange) -> str:
    """What the change sets: ``SM 210-1410 MHz``, ``SM unlocked, memory unlocked``."""
    return ", ".join(
        f"{_WHAT[k]} {_lock_text(change.after(k), change.sm_min_mhz if k == 'sm' else None)}"
        for k in change.kinds()
    )


def clock_line(c: ClockChange, result: ClockResult | None = None) -> str:
    """``GPU 0 (...): clock locks SM unlocked -> SM 1410 MHz (verified: ...)``: one card's change,
    as ``apply`` says it (with the read-back once written)."""
    line = (
        f"{c.target.label}: clock locks {describe_locks(c.before, c.kinds())} -> "
        f"{describe_after(c)}"
    )
    if result is None:
        return line
    if result.verified:
        return f"{line} (verified: reads back {describe_locks(result.readback, c.kinds())})"
    return f"{line} (set; not verified: NVML cannot read clock locks back)"
