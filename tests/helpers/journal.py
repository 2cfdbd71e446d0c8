"""Restore journal entries as the tests write them."""

from __future__ import annotations

from powersweep.sweep.records.entry import JournalEntry, JournalGpu


def sim_journal_entry(*gpus: JournalGpu) -> JournalEntry:
    """A simulated rig's journal entry for ``gpus``, written by PID 1."""
    return JournalEntry({"kind": "sim"}, gpus, 1, "2026-12-02T00:00:00Z")
