"""``apply`` through the restore journal: the cards' settings before the write (limits, clock
locks, SM and memory clock offsets) go to the journal first, so a SIGKILL (or a power cut) half way
through leaves what ``powersweep restore`` (or the Slurm epilog) needs to put every card back.

The reasoning: docs/apply.md, "powersweep.sweep.settings.journaled".
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime

from powersweep.errors import GpuError
from powersweep.runformat import JsonMap
from powersweep.sweep.records.journal import Journal, JournalEntry, JournalGpu, process_start
from powersweep.sweep.settings.applier import NOT_PUT_BACK, CapChange, CapResult, apply_all
from powersweep.sweep.settings.clock_locks import ClockChange, ClockResult
from powersweep.sweep.settings.clock_offsets import OffsetChange, OffsetResult
from powersweep.sweep.settings.targets import Target, Warn


def journal_entry(
    targets: Sequence[Target],
    caps: Sequence[CapChange],
    clocks: Sequence[ClockChange],
    backend: JsonMap,
    offsets: Sequence[OffsetChange] = (),
) -> JournalEntry:
    """What the journal holds for this apply: each target's limit, locks and offsets before it.

    Args:
        targets: The cards the apply sets.
        caps: Their planned limits (``before_w`` is the limit to put back).
        clocks: Their planned locks (``before`` the locks to put back, where readable).
        backend: How ``powersweep restore`` rebuilds the backend (the journal's ``backend``).
        offsets: Their planned SM and memory clock offsets (``before_mhz`` the offset to put
            back).
    """
    limits = {c.target.identity.uuid: c.before_w for c in caps}
    locks = {c.target.identity.uuid: c.before for c in clocks}
    shifts = {o.target.identity.uuid: o.before_mhz for o in offsets if o.clock == "sm"}
    mem_shifts = {o.target.identity.uuid: o.before_mhz for o in offsets if o.clock == "mem"}
    gpus = []
    for t in targets:
        uuid = t.identity.uuid
        before = limits.get(uuid)
        original = before if before is not None else t.gpu.envelope().current_w
        held = locks.get(uuid)
        gpus.append(
            JournalGpu(
                uuid=uuid,
                index=t.identity.index,
                name=t.identity.name,
                original_limit_w=original,
                clocks_locked=held is not None,
                original_sm_lock_mhz=held.sm_mhz if held is not None else None,
                original_sm_lock_min_mhz=held.sm_min_mhz if held is not None else None,
                original_mem_lock_mhz=held.mem_mhz if held is not None else None,
                locks_known=held.known if held is not None else True,
                offset_set=uuid in shifts,
                original_sm_offset_mhz=shifts.get(uuid),
                mem_offset_set=uuid in mem_shifts,
                original_mem_offset_mhz=mem_shifts.get(uuid),
            )
        )
    pid = os.getpid()
    return JournalEntry(
        backend=dict(backend),
        gpus=tuple(gpus),
        pid=pid,
        pid_start=process_start(pid),
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        run_dir=None,
    )


def apply_journaled(
    journal: Journal | None,
    entry: JournalEntry,
    caps: Sequence[CapChange],
    clocks: Sequence[ClockChange],
    warn: Warn,
) -> tuple[list[CapResult], list[ClockResult]]:
    """:func:`~powersweep.sweep.settings.applier.apply_settings` with the journal written first
    (:func:`apply_all_journaled` without offsets)."""
    caps_done, clocks_done, _ = apply_all_journaled(journal, entry, caps, clocks, (), warn)
    return caps_done, clocks_done


def apply_all_journaled(
    journal: Journal | None,
    entry: JournalEntry,
    caps: Sequence[CapChange],
    clocks: Sequence[ClockChange],
    offsets: Sequence[OffsetChange],
    warn: Warn,
) -> tuple[list[CapResult], list[ClockResult], list[OffsetResult]]:
    """:func:`~powersweep.sweep.settings.applier.apply_all` with the journal written first.

    Args:
        journal: Where the originals go before the first write (None: nothing outlives the
            process, e.g. a boot unit setting a card at boot).
        entry: What the journal holds (:func:`journal_entry`, given the same offsets).
        caps: The planned limits.
        clocks: The planned locks.
        offsets: The planned SM and memory clock offsets (written in the order
            :func:`~powersweep.sweep.settings.applier.apply_all` gives: those that shrink before
            the locks change, the memory one first; those that grow once the locks hold, the
            memory one last).
        warn: Where warnings go.

    Raises:
        UsageError: A sweep that still runs owns the journal (nothing was changed).
        PowersweepError: The journal cannot be written (nothing was changed).
        GpuError: A card refused a setting; the others were put back, and the journal removed
            unless one could not be.
        KeyboardInterrupt: After putting the changed settings back (the same).
    """
    if journal is not None:
        journal.claim(entry)
    try:
        results = apply_all(caps, clocks, offsets, warn)
    except (GpuError, KeyboardInterrupt) as exc:
        # a card that kept the new value keeps the journal, for `powersweep restore`
        said = [str(exc), *getattr(exc, "__notes__", [])]
        if journal is not None and not any(NOT_PUT_BACK in n for n in said):
            journal.remove()
        elif journal is not None:
            warn(f"the restore journal {journal.path} keeps the originals: `powersweep restore`")
        raise
    if journal is not None:
        journal.remove()
    return results
