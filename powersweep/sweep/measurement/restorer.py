"""Everything a sweep changes goes through the restore journal first and is put back on every
exit path: the user's own limit (not the default TDP), clock locks and clock offsets.

The reasoning: docs/reference.md, "powersweep.sweep.measurement.restorer".
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from powersweep.clock import Clock
from powersweep.errors import PowersweepError
from powersweep.sweep.gpu import Gpu
from powersweep.sweep.locks import ClockLocker
from powersweep.sweep.offsets import ClockOffsetter
from powersweep.sweep.records.journal import (
    Journal,
    JournalEntry,
    JournalGpu,
    JournalLost,
    process_start,
)
from powersweep.sweep.records.writer import utc_now_iso

# Run seconds between two checks that the journal is still this sweep's, whatever the sweep is
# doing: a card left at a sweep's cap is never long without a journal to put it back.
JOURNAL_CHECK_S = 2.0


class Restorer:
    """The journal and the restore of one sweep's GPU set.

    Args:
        gpus: The GPU set.
        originals: Limit to put back per GPU index (the user's own).
        journal: Where the originals are written before the first change (None: nothing
            outlives the process, e.g. a simulated rig without ``--sim-state``).
        backend: How ``powersweep restore`` rebuilds the backend (journal ``backend``).
        locker: The clock locks (None on the power axis).
        offsetter: The SM clock offsets (None unless the sweep sets them).
        mem_offsetter: The memory clock offsets (None unless the sweep sets them, issue 45).
        no_reset: Leave the last settings in force.
        warn: Where warnings go.
    """

    def __init__(
        self,
        gpus: Sequence[Gpu],
        originals: Mapping[int, float],
        *,
        journal: Journal | None,
        backend: Mapping[str, Any],
        locker: ClockLocker | None,
        no_reset: bool,
        warn: Callable[[str], None],
        offsetter: ClockOffsetter | None = None,
        mem_offsetter: ClockOffsetter | None = None,
    ) -> None:
        self.gpus = list(gpus)
        self.originals = dict(originals)
        self.journal = journal
        self.backend = dict(backend)
        self.locker = locker
        self.offsetter = offsetter
        self.mem_offsetter = mem_offsetter
        self.no_reset = no_reset
        self.warn = warn
        self.written = False
        # why the watch stopped the sweep (None: it did not)
        self.lost: JournalLost | None = None

    def write_journal(self, run_dir: str) -> None:
        """Record the original settings before the first change (raises: nothing changes)."""
        if self.journal is None:
            return
        entry = JournalEntry(
            backend=self.backend,
            gpus=tuple(
                JournalGpu(
                    uuid=g.identity().uuid,
                    index=g.index,
                    name=g.identity().name,
                    original_limit_w=self.originals[g.index],
                    **self._locks(g.index),
                    **self._offset(g.index),
                )
                for g in self.gpus
            ),
            pid=os.getpid(),
            pid_start=process_start(os.getpid()),
            created_at=utc_now_iso(),
            run_dir=run_dir,
        )
        self.journal.claim(entry)
        self.written = True

    def ensure_owned(self) -> None:
        """Before any change: the journal is still this sweep's (a no-op without one).

        Raises:
            JournalLost: It was removed or replaced: nothing could put the cards back after a
                crash, so the sweep stops and restores what it set.
        """
        if self.journal is not None and self.written:
            self.journal.ensure_owned()

    async def watch(self, clock: Clock, sweep: asyncio.Task[Any]) -> None:
        """Check the journal every :data:`JOURNAL_CHECK_S` run seconds while ``sweep`` runs;
        on a loss remember why (:attr:`lost`) and cancel it, so the cards are put back within
        seconds rather than at the next change (a point may measure for many minutes)."""
        while True:
            await clock.asleep(JOURNAL_CHECK_S)
            try:
                self.ensure_owned()
            except JournalLost as exc:
                self.lost = exc
                sweep.cancel()
                return

    def _locks(self, index: int) -> dict[str, Any]:
        if self.locker is None:
            return {}
        orig = self.locker.originals[index]
        return {
            "clocks_locked": True,
            "original_sm_lock_mhz": orig.sm_mhz,
            "original_sm_lock_min_mhz": orig.sm_min_mhz,
            "original_mem_lock_mhz": orig.mem_mhz,
            "locks_known": orig.known,
        }

    def _offset(self, index: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.offsetter is not None:
            out.update(
                offset_set=True,
                original_sm_offset_mhz=self.offsetter.originals[index].offset_mhz,
            )
        if self.mem_offsetter is not None:
            out.update(
                mem_offset_set=True,
                original_mem_offset_mhz=self.mem_offsetter.originals[index].offset_mhz,
            )
        return out

    def _put_back_offsets(self) -> dict[int, tuple[bool, str]]:
        """Put back the memory offsets, then the SM ones; per card (ok, what was done)."""
        out: dict[int, tuple[bool, str]] = {}
        for offsetter in (self.mem_offsetter, self.offsetter):
            if offsetter is None:
                continue
            for i, (ok, note) in offsetter.put_back().items():
                was_ok, was = out.get(i, (True, ""))
                out[i] = (was_ok and ok, f"{was}; {note}" if was else note)
        return out

    def restore(self, touched: set[int]) -> list[dict[str, Any]]:
        """Put back every offset first (an unstable one can reset the card), then every lock,
        then the limit of every card in ``touched``; what was done. ``no_reset`` leaves the
        limit and the locks, never an offset: the last one a search set is the one that failed."""
        if self.no_reset:
            offsets = self._put_back_offsets()
            return [
                {"gpu_index": i, "limit_w": None, "ok": ok, "message": "", "offset": note}
                for i, (ok, note) in offsets.items()
            ]
        offsets = self._put_back_offsets()
        clocks = self.locker.put_back() if self.locker is not None else {}
        restored: list[dict[str, Any]] = [
            {"gpu_index": i, "limit_w": None, "ok": ok, "message": "", "clocks": note}
            for i, (ok, note) in clocks.items()
            if i not in touched
        ]
        restored += [
            {"gpu_index": i, "limit_w": None, "ok": ok, "message": "", "offset": note}
            for i, (ok, note) in offsets.items()
            if i not in touched and i not in clocks
        ]
        for g in self.gpus:
            if g.index not in touched:
                continue
            limit = self.originals[g.index]
            try:
                result = g.set_power_limit(limit)
                ok, message = result.accepted, result.message
            except Exception as exc:  # keep restoring the other cards
                ok, message = False, str(exc)
            if not ok:
                self.warn(
                    f"could not restore GPU {g.index} to {limit:g} W: {message}; "
                    f"run: sudo nvidia-smi -i {g.index} -pl {limit:g}"
                )
            entry = {"gpu_index": g.index, "limit_w": limit, "ok": ok, "message": message}
            if g.index in clocks:
                entry.update(ok=ok and clocks[g.index][0], clocks=clocks[g.index][1])
            if g.index in offsets:
                entry.update(ok=entry["ok"] and offsets[g.index][0], offset=offsets[g.index][1])
            restored.append(entry)
        return restored

    def close_journal(
        self,
        restored: Sequence[Mapping[str, Any]],
        outcome: Mapping[str, Any],
        record_error: str | None = None,
    ) -> None:
        """Remove the journal once nothing is left to restore; keep it when a restore failed.

        When the final run.json could not be written, the journal stays with the outcome in it:
        it is then the only record that the limits came back.
        """
        if self.journal is None or not self.written:
            return
        failed = [r for r in restored if not r["ok"]]
        if record_error and not failed:
            try:
                self.journal.record_outcome(
                    {**outcome, "restored": list(restored), "record_error": record_error}
                )
                self.warn(
                    f"{record_error}; the outcome is kept in {self.journal.path} (the limits "
                    "were restored)"
                )
                return
            except PowersweepError as exc:
                self.warn(str(exc))
        if failed:
            self.warn(
                f"the original limits stay in {self.journal.path}: `powersweep restore` "
                "retries putting them back"
            )
            return
        try:
            self.journal.remove()
        except PowersweepError as exc:
            self.warn(str(exc))
