"""Putting back what a restore journal holds: each card's original limit, clock locks and clock
offsets (SM and memory)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from powersweep.errors import PowersweepError
from powersweep.sweep.gpu import Gpu, GpuBackend

if TYPE_CHECKING:
    from powersweep.sweep.records.entry import JournalEntry, JournalGpu


@dataclass(frozen=True)
class RestoreResult:
    """What ``restore`` did for one GPU of the journal (``clocks``: what happened to its
    clock locks, empty when the sweep locked none; ``offset``: to its memory and SM clock offsets,
    empty when the sweep set none)."""

    uuid: str
    index: int | None
    limit_w: float
    ok: bool
    message: str
    clocks: str = ""
    offset: str = ""


def put_back_locks(
    gpu: Gpu,
    sm_mhz: float | None,
    mem_mhz: float | None,
    known: bool = True,
    sm_min_mhz: float | None = None,
) -> str:
    """Reset a GPU's clock locks, then relock the ones it had before the sweep.

    Returns:
        What was done, for the user (``clocks unlocked``, ``clocks locked back to ...``).

    Raises:
        PowersweepError: The driver refused (the caller reports it and keeps the journal).
    """
    gpu.reset_clock_locks(sm=True, mem=True)
    if not known:
        return "clocks unlocked (the locks before the sweep could not be read)"
    back = []
    if sm_mhz is not None:
        r = gpu.lock_sm_clock(sm_mhz, sm_min_mhz)
        what = f"{sm_mhz:g}" if sm_min_mhz is None else f"{sm_min_mhz:g}-{sm_mhz:g}"
        if not r.accepted:
            raise PowersweepError(f"could not lock SM back to {what} MHz: {r.message}")
        back.append(f"SM {what} MHz")
    if mem_mhz is not None:
        r = gpu.lock_mem_clock(mem_mhz)
        if not r.accepted:
            raise PowersweepError(f"could not lock memory back to {mem_mhz:g} MHz: {r.message}")
        back.append(f"memory {mem_mhz:g} MHz")
    return "clocks locked back to " + " / ".join(back) if back else "clocks unlocked"


def put_back_offset(
    gpu: Gpu, original_mhz: float | None, clock: Literal["sm", "mem"] = "sm"
) -> str:
    """Put a GPU's SM (or memory) clock offset back to what it was (0 when that was unknown).

    Returns:
        What was done, for the user.

    Raises:
        PowersweepError: The driver refused (the caller reports it and keeps the journal).
    """
    target = 0.0 if original_mhz is None else original_mhz
    what = "memory" if clock == "mem" else "SM"
    setter = gpu.set_mem_clock_offset if clock == "mem" else gpu.set_sm_clock_offset
    r = setter(target)
    if not r.accepted:
        raise PowersweepError(
            f"could not put the {what} clock offset back to {target:g} MHz: {r.message}"
        )
    return f"{what} clock offset put back to {target:g} MHz"


def _put_back_offsets(gpu: Gpu, g: JournalGpu) -> str:
    """Put back the memory offset, then the SM one, that a journal holds; what was done, one
    line (`` NOT put back`` in it when one failed), empty when it holds neither."""
    notes = []
    if g.mem_offset_set:
        try:
            notes.append(put_back_offset(gpu, g.original_mem_offset_mhz, "mem"))
        except PowersweepError as exc:
            notes.append(f"memory clock offset NOT put back: {exc}")
    if g.offset_set:
        try:
            notes.append(put_back_offset(gpu, g.original_sm_offset_mhz))
        except PowersweepError as exc:
            notes.append(f"SM clock offset NOT put back: {exc}")
    return "; ".join(notes)


def restore_gpus(
    entry: JournalEntry, backend: GpuBackend, warn: Callable[[str], None] = lambda _m: None
) -> list[RestoreResult]:
    """Put back every journalled limit on the backend's GPUs, found by UUID.

    Never raises for one GPU: a failure is a result with ``ok`` False, so the others still get
    their limit back.
    """
    by_uuid: dict[str, Gpu] = {}
    for i in range(backend.device_count()):
        try:
            gpu = backend.gpu(i)
            by_uuid[gpu.identity().uuid] = gpu
        except PowersweepError as exc:
            warn(f"cannot open GPU {i}: {exc}")
    results = []
    for g in entry.gpus:
        found = by_uuid.get(g.uuid)
        if found is None:
            results.append(RestoreResult(g.uuid, None, g.original_limit_w, False, "GPU not found"))
            continue
        # the offsets first: an unstable one can reset the card under whatever runs next
        offset = _put_back_offsets(found, g)
        clocks = ""
        if g.clocks_locked:
            # clocks first: a lock left in place would skew whatever runs next
            try:
                clocks = put_back_locks(
                    found,
                    g.original_sm_lock_mhz,
                    g.original_mem_lock_mhz,
                    g.locks_known,
                    g.original_sm_lock_min_mhz,
                )
            except PowersweepError as exc:
                clocks = f"clock locks NOT put back: {exc}"
        try:
            r = found.set_power_limit(g.original_limit_w)
            ok, message = r.accepted, r.message
        except PowersweepError as exc:
            ok, message = False, str(exc)
        ok = ok and not clocks.startswith("clock locks NOT") and " NOT put back" not in offset
        results.append(
            RestoreResult(g.uuid, found.index, g.original_limit_w, ok, message, clocks, offset)
        )
    return results
