"""What a restore journal holds (``sweep/records/entry.py``): its JSON form both ways, the lock
fields only for cards whose clocks were locked, and a damaged journal as one actionable error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from powersweep.errors import PowersweepError
from powersweep.sweep.records.entry import JOURNAL_VERSION, JournalEntry, JournalGpu

SOURCE = Path("/var/lib/powersweep/journal.json")


def _two_card_entry(**kw: Any) -> JournalEntry:
    base: dict[str, Any] = dict(
        backend={"kind": "nvml"},
        gpus=(
            JournalGpu("GPU-a", 0, "NVIDIA GeForce RTX 3090", 350.0),
            JournalGpu(
                "GPU-b",
                1,
                "NVIDIA GeForce RTX 3090",
                300.0,
                clocks_locked=True,
                original_sm_lock_mhz=1410.0,
                original_mem_lock_mhz=None,
                locks_known=False,
            ),
        ),
        pid=4242,
        created_at="2026-05-01T10:00:00Z",
        run_dir="/runs/r1",
        pid_start="123456",
    )
    return JournalEntry(**{**base, **kw})


def test_the_json_form_roundtrips() -> None:
    entry = _two_card_entry(outcome={"status": "complete"})
    data = entry.to_dict()
    assert data["version"] == JOURNAL_VERSION
    assert JournalEntry.from_dict(data, SOURCE) == entry


def test_lock_fields_are_written_only_for_cards_whose_clocks_were_locked() -> None:
    gpus = _two_card_entry().to_dict()["gpus"]
    assert gpus[0] == {
        "uuid": "GPU-a",
        "index": 0,
        "name": "NVIDIA GeForce RTX 3090",
        "original_limit_w": 350.0,
    }
    assert gpus[1]["clocks_locked"] is True
    assert (gpus[1]["original_sm_lock_mhz"], gpus[1]["locks_known"]) == (1410.0, False)
    assert _two_card_entry().holds_clock_locks
    assert not _two_card_entry(gpus=(JournalGpu("GPU-a", 0, "x", 350.0),)).holds_clock_locks


def test_an_older_journal_reads_with_the_defaults() -> None:
    data = {
        "version": JOURNAL_VERSION,
        "backend": {"kind": "sim", "profiles": ["rtx3090-air"]},
        "gpus": [{"uuid": "GPU-a", "index": "0", "original_limit_w": "350"}],
        "pid_start": "",
        "outcome": "not a mapping",
    }
    entry = JournalEntry.from_dict(data, SOURCE)
    (gpu,) = entry.gpus
    assert (gpu.index, gpu.name, gpu.original_limit_w) == (0, "", 350.0)
    assert (gpu.clocks_locked, gpu.locks_known) == (False, True)
    assert (entry.pid, entry.created_at, entry.run_dir) == (0, "", None)
    assert entry.pid_start is None and entry.outcome is None


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ([], "unknown journal version"),
        ({"version": 99}, "unknown journal version"),
        ({"version": JOURNAL_VERSION, "backend": {"kind": "cuda"}}, "unknown backend"),
        ({"version": JOURNAL_VERSION, "backend": {"kind": "nvml"}}, "'gpus'"),
        (
            {"version": JOURNAL_VERSION, "backend": {"kind": "nvml"}, "gpus": [{"index": 0}]},
            "'uuid'",
        ),
        (
            {
                "version": JOURNAL_VERSION,
                "backend": {"kind": "amdsmi"},
                "gpus": [
                    {
                        "uuid": "u",
                        "index": 0,
                        "original_limit_w": 300,
                        "original_sm_lock_mhz": True,
                    }
                ],
            },
            "bad clock setting True",
        ),
    ],
)
def test_a_damaged_journal_is_one_error_that_says_how_to_restore_by_hand(
    data: Any, why: str
) -> None:
    with pytest.raises(PowersweepError) as info:
        JournalEntry.from_dict(data, SOURCE)
    message = str(info.value)
    assert message.startswith(f"the restore journal {SOURCE} is damaged (")
    assert why in message
    assert "sudo nvidia-smi -i N -pl WATTS, or sudo amd-smi set -g N -o WATTS" in message
    assert "\n" not in message
